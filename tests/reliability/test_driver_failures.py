"""What the delegate does when the driver lets it down: a kernel that does not compile or link
runs on the CPU (the rest stays on the GPU); a partition over a device limit runs on the CPU; a
buffer the driver will not allocate is a GpuError saying which and how large; and the
debug_nonfinite option names the first node that produced a NaN or Inf."""
import logging
import re
import sys

import moderngl
import numpy as np
import pytest

from gles_delegate import GpuDelegate, GpuDelegateOptions, GpuError, Interpreter
from gles_delegate import delegate as delegate_module
from gles_delegate.gpu import context as gl
from gles_delegate.gpu import kernels, runtime, shader
from gles_delegate.gpu.runtime import GpuPartition
from gles_delegate.delegate import parse_plugin_options
from gles_delegate.graph import Node, Tensor
from gles_delegate.tflite import ModelBuilder
from tests.oplib import assert_close
from tests.reliability.conftest import assert_same, invoke, live_gl_objects, pending_gl_error

pytestmark = pytest.mark.usefixtures("gpu_available")
LOGGER = "gles_delegate"


def pool_model(seed=0):
    """x [1, 8, 8, 3] -> #0 CONV_2D 3x3 -> #1 MAX_POOL_2D 2x2 (the only user of the 'pool'
    template) -> #2 CONV_2D 3x3 -> #3 MEAN over H, W: outputs the second conv and the mean."""
    rng = np.random.default_rng(seed)
    b = ModelBuilder()
    x = b.input("x", (1, 8, 8, 3))
    conv_options = dict(padding=0, stride_w=1, stride_h=1, fused_activation_function=0)
    w0 = b.const("w0", rng.uniform(-1, 1, (4, 3, 3, 3)).astype(np.float32))
    a = b.tensor("conv0", (1, 8, 8, 4))
    b.op("CONV_2D", [x, w0, -1], [a], **conv_options)
    p = b.tensor("pool", (1, 8, 8, 4))
    b.op("MAX_POOL_2D", [a], [p], padding=0, stride_w=1, stride_h=1, filter_width=2, filter_height=2,
         fused_activation_function=0)
    w2 = b.const("w2", rng.uniform(-1, 1, (4, 3, 3, 4)).astype(np.float32))
    c = b.tensor("conv2", (1, 8, 8, 4))
    b.op("CONV_2D", [p, w2, -1], [c], **conv_options)
    axes = b.const("axes", np.array([1, 2], np.int32))
    m = b.tensor("mean", (1, 1, 1, 4))
    b.op("MEAN", [c, axes], [m], keep_dims=True)
    b.output(c)
    b.output(m)
    return b.build()


X = np.random.default_rng(7).uniform(-1, 1, (1, 8, 8, 3)).astype(np.float32)


def reference(model, x=X):
    it = Interpreter(model_content=model)
    it.allocate_tensors()
    return invoke(it, x)


def gpu_interpreter(model, **options):
    delegate = GpuDelegate(**options)
    it = Interpreter(model_content=model, experimental_delegates=[delegate])
    it.allocate_tensors()
    return it, delegate


# -- kernels that do not compile or link --------------------------------------------------------
def broken(name, how):
    """shader.template with kernels_glsl/<name>.glsl made to fail: 'compile' adds a statement
    using an undeclared identifier; 'link' makes main() use 256 KiB of shared memory, which
    compiles and then fails to link (Mesa checks GL_MAX_COMPUTE_SHARED_MEMORY_SIZE there)."""
    original = shader.template

    def template(template_name):
        text = original(template_name)
        if template_name != name:
            return text
        if how == "compile":
            return text + "\nvoid gles_test_broken() { undeclared_identifier_in_test = 1; }\n"
        return ("shared float gles_test_big[65536];\n" + text.replace("void main()", "void gles_test_main()")
                + "\nvoid main() {\n  uint i = gl_LocalInvocationIndex;\n  gles_test_big[i] = float(i);\n"
                  "  barrier();\n  if (gles_test_big[65535u - i] < 0.0) return;\n  gles_test_main();\n}\n")
    return template


@pytest.fixture
def compile_errors(monkeypatch):
    """The GpuErrors GlContext.program raised during the test (the driver's logs)."""
    seen, original = [], gl.GlContext.program

    def program(self, source, binary=None):
        try:
            return original(self, source, binary)
        except GpuError as exc:
            seen.append(str(exc))
            raise
    monkeypatch.setattr(gl.GlContext, "program", program)
    return seen


def warnings_of(caplog):
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno >= logging.WARNING]


@pytest.mark.parametrize("how", ["compile", "link"])
def test_a_kernel_that_fails_runs_on_the_cpu(monkeypatch, caplog, compile_errors, how):
    model = pool_model()
    expected = reference(model)
    monkeypatch.setattr(shader, "template", broken("pool", how))
    caplog.set_level(logging.INFO, LOGGER)
    it, delegate = gpu_interpreter(model)
    with delegate:
        assert_same(invoke(it, X), expected)
        summary = delegate.summary()
        # #1 moved to the CPU; the largest run left (#2, #3) is the one GPU partition kept.
        assert [n.label for p in delegate.partitions for n in p.nodes] == ["#2 (CONV_2D)", "#3 (MEAN)"]
        assert (summary["gpu_nodes"], summary["cpu_nodes"], summary["partitions"]) == (2, 2, 1)
        assert list(summary["fallbacks"]) == ["#1 (MAX_POOL_2D)"]
        assert pending_gl_error(delegate.context) == "GL_NO_ERROR"
    assert compile_errors, "the broken template was never compiled"
    driver_log = compile_errors[0].split("\n", 1)[1].strip()
    # The driver's own words name the cause: Mesa's link log "Too much shared memory", NVIDIA's
    # compute info the array "too large for semantic SHARED0".
    causes = ("shared memory", "gles_test_big") if how == "link" else ("undeclared_identifier_in_test",)
    assert any(cause in driver_log.lower() for cause in causes), driver_log
    messages = warnings_of(caplog)
    failure = [m for m in messages if "failed to compile" in m and "'pool'" in m]
    assert len(failure) == 1, messages
    assert "#1 (MAX_POOL_2D)" in failure[0] and driver_log in failure[0]
    assert ("(link)" in failure[0]) == (how == "link")
    # The partitioner's line for the node (as TFLite logs it) gives the reason, once.
    node_lines = [m for m in messages if m.startswith("op code #1 (MAX_POOL_2D) cannot be handled")]
    assert len(node_lines) == 1 and "failed to compile" in node_lines[0]
    assert any("max_delegated_partitions=1 keeps the largest 1" in m for m in messages), messages
    infos = [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.INFO
             and "will run on the GPU" in r.getMessage()]
    assert infos == ["2 operations will run on the GPU, and the remaining 2 operations will run on the CPU."]


def test_both_sides_of_a_failed_kernel_stay_on_the_gpu(monkeypatch):
    model = pool_model()
    expected = reference(model)
    monkeypatch.setattr(shader, "template", broken("pool", "compile"))
    it, delegate = gpu_interpreter(model, max_delegated_partitions=0)
    with delegate:
        assert_same(invoke(it, X), expected)
        assert [[n.index for n in p.nodes] for p in delegate.partitions] == [[0], [2, 3]]
        assert delegate.summary()["gpu_nodes"] == 3


def test_a_failed_conversion_kernel_moves_the_whole_partition(monkeypatch, caplog):
    """convert_in belongs to no node: the partition it serves runs on the CPU."""
    model = pool_model()
    expected = reference(model)
    monkeypatch.setattr(shader, "template", broken("convert_in", "compile"))
    caplog.set_level(logging.WARNING, LOGGER)
    it, delegate = gpu_interpreter(model)
    with delegate:
        assert_same(invoke(it, X), expected)
        assert delegate.summary()["gpu_nodes"] == 0
        assert len(delegate.summary()["fallbacks"]) == 4
    assert any("'convert_in'" in m and "whole partition" in m for m in warnings_of(caplog))


def test_a_failing_kernel_recovers_after_the_driver_is_fixed(monkeypatch):
    """Nothing about the failure sticks: the next allocate compiles the kernel again."""
    model = pool_model()
    expected = reference(model)
    with GpuDelegate() as delegate:
        it = Interpreter(model_content=model, experimental_delegates=[delegate])
        with monkeypatch.context() as patch:
            patch.setattr(shader, "template", broken("pool", "compile"))
            it.allocate_tensors()
            assert delegate.summary()["gpu_nodes"] == 2
        it.allocate_tensors()
        assert delegate.summary()["gpu_nodes"] == 4 and delegate.summary()["fallbacks"] == {}
        assert_same(invoke(it, X), expected)


# -- device limits and out of memory ------------------------------------------------------------
def test_partition_over_the_storage_block_limit_runs_on_the_cpu(monkeypatch, caplog):
    model = pool_model()
    expected = reference(model)
    caplog.set_level(logging.WARNING, LOGGER)
    with GpuDelegate() as delegate:
        monkeypatch.setitem(delegate.context.limits, "max_ssbo_bytes", 256)
        it = Interpreter(model_content=model, experimental_delegates=[delegate])
        it.allocate_tensors()
        assert_same(invoke(it, X), expected)
        assert delegate.summary()["gpu_nodes"] == 0
        fallbacks = delegate.summary()["fallbacks"]
        assert len(fallbacks) == 4
        assert all("GL_MAX_SHADER_STORAGE_BLOCK_SIZE 256 bytes" in why for why in fallbacks.values())
    message = [m for m in warnings_of(caplog) if m.startswith("GPU partition of 4 node(s)")]
    assert len(message) == 1
    assert re.search(r"arena \(intermediate tensors\) [\d,]+ bytes", message[0]), message[0]
    assert "its nodes run on the CPU" in message[0]


def test_dispatch_over_the_workgroup_count_limit_moves_its_node(monkeypatch, caplog):
    """MAX_POOL_2D's kernel made to ask for 2^30 invocations along z: more workgroups than the
    device allows (GL_MAX_COMPUTE_WORK_GROUP_COUNT), so that node runs on the CPU and its
    neighbours on the GPU."""
    model = pool_model()
    expected = reference(model)
    build = kernels.BUILD["MAX_POOL_2D"]

    def huge_grid(node, env):
        dispatches = build(node, env)
        for d in dispatches:
            d.grid = (d.grid[0], d.grid[1], 1 << 30)
        return dispatches
    monkeypatch.setitem(kernels.BUILD, "MAX_POOL_2D", huge_grid)
    caplog.set_level(logging.WARNING, LOGGER)
    it, delegate = gpu_interpreter(model, max_delegated_partitions=0)
    with delegate:
        assert_same(invoke(it, X), expected)
        assert [[n.index for n in p.nodes] for p in delegate.partitions] == [[0], [2, 3]]
        fallbacks = delegate.summary()["fallbacks"]
        assert list(fallbacks) == ["#1 (MAX_POOL_2D)"]
        limit = tuple(delegate.context.limits["max_workgroup_count"])
        assert f"more than the device's GL_MAX_COMPUTE_WORK_GROUP_COUNT {limit}" in fallbacks["#1 (MAX_POOL_2D)"]
    assert any("moving #1 (MAX_POOL_2D) to the CPU" in m for m in warnings_of(caplog))


@pytest.mark.parametrize("failing, mapped", [("arena", True), ("constants", True), ("params", True), ("I/O", True),
                                             ("I/O", False)])
def test_buffer_the_driver_refuses_is_a_clear_error(monkeypatch, failing, mapped):
    """moderngl raising for one buffer: a GpuError naming that buffer and its size, and the
    buffers made before it are freed. mapped: the context's own I/O path (persistently mapped
    where it has glBufferStorage), else the I/O buffer written and read through moderngl."""
    model = pool_model()
    order = ["arena", "constants", "params", "I/O"]
    calls, whats, original = [], [], moderngl.Context.buffer

    def buffer(self, data=None, reserve=0, dynamic=False):
        calls.append(reserve or len(bytes(data)))
        # Which buffer the caller meant (runtime.create_buffer's `what`): the failure message
        # below lists them, should a run ever make other buffers first (an H100 run once did not
        # raise for 'arena' / 'constants' in a -n 14 run, and did alone).
        whats.append(sys._getframe(1).f_locals.get("what", "?"))
        if len(calls) == order.index(failing) + 1:
            raise moderngl.Error("out of memory (test)")
        return original(self, data, reserve, dynamic)
    with GpuDelegate() as delegate:
        it = Interpreter(model_content=model, experimental_delegates=[delegate])
        if not mapped:
            monkeypatch.setattr(delegate.context, "persistent_mapping", False)
        monkeypatch.setattr(runtime, "DIRECT_IO_MAX_BYTES", 0)  # the I/O in device memory, a buffer of its own
        before = live_gl_objects(delegate.context, names=4096)["buffers"]
        monkeypatch.setattr(moderngl.Context, "buffer", buffer)
        try:
            it.allocate_tensors()
        except GpuError as exc:
            message = str(exc)
        else:
            pytest.fail(f"allocate_tensors() made its buffers without a GpuError; moderngl buffers made: "
                        f"{list(zip(whats, calls))}, partitions {[len(p.nodes) for p in delegate.partitions]}")
        finally:
            monkeypatch.undo()
        assert f"could not allocate the partition's {failing} buffer of {calls[-1]:,} bytes" in message
        assert "Error: out of memory (test)" in message
        assert f"largest shader storage block {delegate.context.limits['max_ssbo_bytes']:,} bytes" in message
        assert live_gl_objects(delegate.context, names=4096)["buffers"] == before
        assert pending_gl_error(delegate.context) == "GL_NO_ERROR"
        it.allocate_tensors()  # the driver recovered: everything on the GPU again
        assert delegate.summary()["gpu_nodes"] == 4
        assert_same(invoke(it, X), reference(model))


def test_gl_out_of_memory_is_a_clear_error(monkeypatch):
    """A real GL_OUT_OF_MEMORY from the driver: an arena of 2^62 bytes (the storage block limit
    raised so that the compiler lets it through). moderngl before 5.13 refuses the size itself
    ("missing data or reserve") before the driver sees it: the same clear error then."""
    model = pool_model()
    original = delegate_module.compile_plan

    def huge_arena(*args, **kwargs):
        plan = original(*args, **kwargs)
        plan.arena_elements = 1 << 58
        return plan
    with GpuDelegate() as delegate:
        it = Interpreter(model_content=model, experimental_delegates=[delegate])
        before = live_gl_objects(delegate.context, names=4096)["buffers"]
        monkeypatch.setattr(delegate_module, "compile_plan", huge_arena)
        with pytest.raises(GpuError, match=r"could not allocate the partition's arena buffer of "
                                           r"4,611,686,018,427,387,904 bytes on .* \((GL_OUT_OF_MEMORY|Error: missing data or reserve)\)"):
            it.allocate_tensors()
        assert live_gl_objects(delegate.context, names=4096)["buffers"] == before
        assert pending_gl_error(delegate.context) == "GL_NO_ERROR"


def test_io_buffer_out_of_memory_is_a_clear_error(monkeypatch):
    """The I/O buffer asked at 2^62 bytes: a real GL_OUT_OF_MEMORY from glBufferStorage (the
    persistently mapped path) or glBufferData (moderngl's), named with its size; the arena,
    constants and params buffers made before it are freed."""
    model = pool_model()
    with GpuDelegate() as delegate:
        it = Interpreter(model_content=model, experimental_delegates=[delegate])
        before = live_gl_objects(delegate.context, names=4096)["buffers"]
        huge = 1 << 62
        if delegate.context.persistent_mapping:
            storage = delegate.context.gl.buffer_storage
            monkeypatch.setattr(delegate.context.gl, "buffer_storage",
                                lambda target, size, data, flags: storage(target, huge, data, flags))
        else:  # the fourth buffer a partition makes is its I/O buffer
            original, calls = moderngl.Context.buffer, []

            def buffer(self, data=None, reserve=0, dynamic=False):
                calls.append(reserve)
                return original(self, data, huge if len(calls) == 4 else reserve, dynamic)
            monkeypatch.setattr(moderngl.Context, "buffer", buffer)
        with pytest.raises(GpuError, match=r"could not allocate the partition's I/O (staging )?buffer of "
                                           r"[\d,]+ bytes .*GL_OUT_OF_MEMORY"):
            it.allocate_tensors()
        monkeypatch.undo()
        assert live_gl_objects(delegate.context, names=4096)["buffers"] == before
        assert pending_gl_error(delegate.context) == "GL_NO_ERROR"


def test_out_of_memory_in_a_later_partition_frees_the_earlier_ones(monkeypatch):
    """Two partitions (the broken pool kernel splits the model); the second one's buffers fail:
    the first one's are freed, nothing is left bound to the delegate."""
    model = pool_model()
    made = []
    original_init = GpuPartition.__init__

    def init(self, *args, **kwargs):
        if made:
            raise GpuError("out of memory (test)")
        original_init(self, *args, **kwargs)
        made.append(self)
    monkeypatch.setattr(shader, "template", broken("pool", "compile"))
    with GpuDelegate(max_delegated_partitions=0) as delegate:
        it = Interpreter(model_content=model, experimental_delegates=[delegate])
        before = live_gl_objects(delegate.context, names=4096)["buffers"]
        monkeypatch.setattr(GpuPartition, "__init__", init)
        with pytest.raises(GpuError, match="out of memory"):
            it.allocate_tensors()
        assert len(made) == 1 and made[0].steps == [] and made[0].arena is None
        assert delegate.partitions == []
        assert live_gl_objects(delegate.context, names=4096)["buffers"] == before


# -- debugging NaN and Inf ----------------------------------------------------------------------
def exp_model():
    """x [1, 4, 4, 3] -> #0 CONV_2D 1x1 (x 40 per channel) -> #1 EXP (overflows past e^88) ->
    #2 MEAN over H, W; outputs the exponentials and the mean."""
    b = ModelBuilder()
    x = b.input("x", (1, 4, 4, 3))
    w = b.const("w", np.full((4, 1, 1, 3), 40.0, np.float32))
    c = b.tensor("conv_out", (1, 4, 4, 4))
    b.op("CONV_2D", [x, w, -1], [c], padding=0, stride_w=1, stride_h=1, fused_activation_function=0)
    e = b.tensor("exp_out", (1, 4, 4, 4))
    b.op("EXP", [c], [e])
    axes = b.const("axes", np.array([1, 2], np.int32))
    m = b.tensor("mean", (1, 1, 1, 4))
    b.op("MEAN", [e, axes], [m], keep_dims=True)
    b.output(e)
    b.output(m)
    return b.build()


SMALL = np.full((1, 4, 4, 3), 0.01, np.float32)   # conv 1.2 -> exp finite
LARGE = SMALL.copy()
LARGE[0, 2, 1, :] = 1.0                            # conv 120 at (2, 1) -> exp inf there, and the mean


@pytest.mark.parametrize("rewrite_rules", [True, False], ids=["rewritten", "as_stated"])
def test_debug_nonfinite_names_the_first_producer(caplog, rewrite_rules):
    """EXP, downstream of a finite CONV_2D and upstream of a MEAN that carries its Inf on, is
    the node named. With the rewrite rules EXP runs in the conv's epilogue (one dispatch
    writing EXP's output): the report names that dispatch and still the EXP node."""
    caplog.set_level(logging.WARNING, LOGGER)
    it, delegate = gpu_interpreter(exp_model(), debug_nonfinite=True, rewrite_rules=rewrite_rules)
    with delegate:
        invoke(it, SMALL)
        assert delegate.summary()["first_nonfinite"] is None
        got = invoke(it, LARGE)
        assert_same(got, reference(exp_model(), LARGE))  # the invoke itself still completes
        report = delegate.summary()["first_nonfinite"]
        assert report["dispatch"] == ("#0 (CONV_2D)" if rewrite_rules else "#1 (EXP)")
        assert (report["node"], report["tensor"]) == ("#1 (EXP)", "exp_out")
        assert report["index"] == [d for d in it.get_tensor_details() if d["name"] == report["tensor"]][0]["index"]
        assert (report["inf"], report["nan"], report["element"]) == (4, 0, (0, 2, 1, 0))
        invoke(it, LARGE)  # reported once: the first stays
        assert delegate.summary()["first_nonfinite"] == report
    lines = [m for m in warnings_of(caplog) if m.startswith("debug_nonfinite")]
    assert len(lines) == 1 and report["node"] in lines[0] and repr(report["tensor"]) in lines[0]


def test_debug_nonfinite_with_a_nonfinite_input_and_preserved_tensors():
    """An Inf the GPU partition receives is reported as its input (no GPU node made it); with
    experimental_preserve_all_tensors the intermediates are still captured."""
    delegate = GpuDelegate(debug_nonfinite=True, rewrite_rules=False)
    it = Interpreter(model_content=exp_model(), experimental_delegates=[delegate],
                     experimental_preserve_all_tensors=True)
    it.allocate_tensors()
    with delegate:
        x = SMALL.copy()
        x[0, 0, 0, 0] = np.inf
        invoke(it, x)
        report = delegate.summary()["first_nonfinite"]
        assert (report["node"], report["tensor"], report["dispatch"], report["element"]) == \
            (None, "x", None, (0, 0, 0, 0))
        names = {d["name"]: d["index"] for d in it.get_tensor_details()}
        assert_close(it.get_tensor(names["conv_out"])[0, 1, 1], np.full(4, 1.2, np.float32))


def test_debug_nonfinite_is_off_by_default_and_parsed():
    assert GpuDelegateOptions().debug_nonfinite is False
    assert parse_plugin_options({"debug_nonfinite": "1"}).debug_nonfinite is True
    assert parse_plugin_options({"debug_nonfinite": "off"}).debug_nonfinite is False
    with pytest.raises(ValueError, match="debug_nonfinite"):
        GpuDelegateOptions(debug_nonfinite="yes")
    it, delegate = gpu_interpreter(exp_model())
    with delegate:
        invoke(it, LARGE)
        assert delegate.summary()["first_nonfinite"] is None
        assert all(p.nonfinite is None for p in delegate.partitions)


# -- malformed nodes in the GPU kernel registry -------------------------------------------------
def _tensor(index, shape=(1, 4, 4, 4), data=None):
    return Tensor(index, f"t{index}", shape, np.dtype(np.float32), data=data)


MALFORMED = [
    ("ADD", [_tensor(0), None], "ADD input 1 is omitted"),
    ("ADD", [_tensor(0)], "ADD takes 2 inputs, got 1"),
    ("CONV_2D", [_tensor(0)], "CONV_2D takes 2 or 3 inputs, got 1"),
    ("CONV_2D", [_tensor(0), None, None], "CONV_2D input 1 is omitted"),
    ("RESHAPE", [], "RESHAPE takes 1 or 2 inputs, got 0"),
    ("CONCATENATION", [_tensor(0), None], "CONCATENATION needs at least one input and no omitted input"),
    ("LSTM", [], "LSTM lacks its first input"),
    ("STRIDED_SLICE", [_tensor(0), None, None, None], "STRIDED_SLICE input 1 is omitted"),
]


@pytest.mark.parametrize("op, inputs, reason", MALFORMED, ids=[f"{m[0]}-{len(m[1])}" for m in MALFORMED])
def test_malformed_nodes_get_a_reason_from_the_gpu_registry(op, inputs, reason):
    node = Node(0, op, inputs, [_tensor(9)])
    assert kernels.unsupported_reason(node).startswith(reason)
    assert kernels.unsupported_reason(Node(0, op, inputs, [])) == f"{op} has no outputs"


def test_every_gpu_op_has_an_arity():
    unlisted = {op for op in kernels.SUPPORT if kernels.facts(op).arity is None}
    # CONCATENATION and PACK take any count of inputs (kernels.arity_reason's own case)
    assert unlisted == {"CONCATENATION", "PACK", "LSTM", "UNIDIRECTIONAL_SEQUENCE_LSTM"}, \
        "state the input / output counts of a new GPU op in its kernel module's FACTS (OpFacts.arity)"


def test_a_warm_start_repeats_the_fallback_warnings(monkeypatch, caplog, tmp_path):
    """The serialization cache stores what the failed build kept and replays its warnings."""
    model = pool_model()
    monkeypatch.setattr(shader, "template", broken("pool", "compile"))
    caplog.set_level(logging.WARNING, LOGGER)
    for start in ("cold", "warm"):
        caplog.clear()
        it, delegate = gpu_interpreter(model, serialization_dir=str(tmp_path))
        with delegate:
            assert delegate.summary()["cache_hit"] == (start == "warm")
            assert delegate.summary()["gpu_nodes"] == 2
            assert_same(invoke(it, X), reference(model))
        messages = warnings_of(caplog)
        assert any("failed to compile" in m and "'pool'" in m for m in messages), (start, messages)
        assert any(m.startswith("op code #1 (MAX_POOL_2D) cannot be handled") for m in messages), (start, messages)
