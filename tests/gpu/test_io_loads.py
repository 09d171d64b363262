"""Partition inputs loaded straight from the I/O buffer by their one reader (gpu/io_loads.py,
common.glsl IN_IO): the convert_in dispatch goes, the outputs are the ones with it bit for bit
(the load rounds as the tensor's storage would), and every path that reads tensors back
(preserve_all_tensors, debug_nonfinite, a warm start) still sees the input."""
import numpy as np
import pytest

from gles_delegate import GpuDelegate, Interpreter
from gles_delegate.graph import Graph
from gles_delegate.tflite import read_model
from gles_delegate.gpu import io_loads, runtime
from gles_delegate.gpu.serialization import validate
from gles_delegate.gpu.serialization.entry import EntryError
from tests.gpu.gpulib import PRECISIONS, invoked_keeping_every_tensor
from tests.gpu.test_io_paths import IO_PATHS, check_io_path, use_io_path
from tests.gpu.transforms.rulelib import Chain, check_gpu, random
from tests.oplib import VALID, run_ours

# 7 channels (the second slice padded); 40 x 64 x 7 float32 is 70 KiB of input: more I/O than
# DIRECT_IO_MAX_BYTES (io_loads.MIN_IO_BYTES), so it goes through device memory, where the loads apply.
SHAPE = (1, 40, 64, 7)


def reader_model(kind, shape=SHAPE):
    """x -> one node of `kind` reading it -> ABS (the output); "conv output": the convolution
    stores the output itself (OUT_IO beside IN_IO, one I/O buffer)."""
    c = Chain(shape)
    if kind == "conv output":
        return c.build(c.conv(c.x, 5))
    if kind == "conv":
        y = c.conv(c.x, 5, stride=2)
    elif kind == "depthwise":
        y = c.depthwise(c.x)
    elif kind == "elementwise":
        y = c.op("ADD", c.x, c.const(random(shape[-1:], 4)))
    else:
        n, h, w, ch = shape
        y = c.op("AVERAGE_POOL_2D", c.x, shape=(n, h // 2, w // 2, ch), padding=VALID, stride_w=2, stride_h=2,
                 filter_width=2, filter_height=2, fused_activation_function=0)
    return c.build(c.op("ABS", y))


def run(model, values, precision="fp32", enabled=True, **options):
    """(outputs, the one partition's plan) with the loads on or off."""
    saved, io_loads.ENABLED = io_loads.ENABLED, enabled
    try:
        with GpuDelegate(precision=precision, **options) as delegate:
            outputs = run_ours(model, values, experimental_delegates=[delegate])
            return outputs, delegate.partitions[0].plan
    finally:
        io_loads.ENABLED = saved


def assert_same_as_converted(model, values, precision):
    """The loads apply (no convert_in, the reader's program defines IN_IO) and give the outputs
    of the plan with convert_in bit for bit; returns the plan."""
    loaded, plan = run(model, values, precision)
    converted, plain = run(model, values, precision, enabled=False)
    assert "convert_in" not in plan.templates and plain.templates[0] == "convert_in"
    assert len(plan.steps) == len(plain.steps) - 1
    assert sum("#define IN_IO 1" in s for s in plan.sources) == 1
    for a, b in zip(loaded, converted):
        np.testing.assert_array_equal(a, b)
    return plan


@pytest.mark.parametrize("precision", PRECISIONS + ("auto",))
@pytest.mark.parametrize("kind", ["conv", "conv output", "depthwise", "elementwise", "pool"])
def test_the_reader_loads_the_input_as_convert_in_stored_it(kind, precision):
    """In half storage convert_in rounds the input to halves: the load must round as it did (the
    random inputs are no halves, so a load without the rounding changes the outputs)."""
    model, values = reader_model(kind), [random(SHAPE, 2)]
    if precision != "auto":
        check_gpu(model, values, precision)
    plan = assert_same_as_converted(model, values, precision)
    assert list(plan.io_loads) == [0] and plan.io_loads[0][1:] == ((7, 7 * 64, 1, 7 * 64 * 40), SHAPE)


@pytest.mark.parametrize("path", IO_PATHS)
def test_every_io_path_gives_the_loads_the_input(path, monkeypatch):
    """The loads were planned for device memory; the runtime may still move the I/O otherwise
    (its DIRECT_IO_MAX_BYTES set higher, a context that cannot map persistently)."""
    model, values = reader_model("conv"), [random(SHAPE, 9)]
    converted, _ = run(model, values, enabled=False)
    with GpuDelegate() as delegate:
        use_io_path(monkeypatch, delegate, path)
        interpreter = Interpreter(model_content=model, experimental_delegates=[delegate])
        interpreter.allocate_tensors()
        interpreter.set_tensor(interpreter.get_input_details()[0]["index"], values[0])
        interpreter.invoke()
        partition = delegate.partitions[0]
        assert partition.plan.io_loads
        check_io_path(partition, path)
        np.testing.assert_array_equal(interpreter.get_tensor(interpreter.get_output_details()[0]["index"]), converted[0])


def nchw_model(shape=(1, 7, 40, 64), also_output=False):
    """A PyTorch model's image: TRANSPOSE to NHWC (converted straight into its output by
    compiler.permute_on_input), then a convolution; also_output: the TRANSPOSE's output a graph
    output too."""
    c = Chain(shape)
    nhwc = c.op("TRANSPOSE", c.x, c.const([0, 2, 3, 1], np.int32), shape=(1, shape[2], shape[3], shape[1]))
    return c.build(c.conv(nhwc, 6, seed=3), *([nhwc] if also_output else [])), nhwc


@pytest.mark.parametrize("precision", PRECISIONS)
def test_a_permuted_input_is_loaded_with_its_strides(precision):
    model, transposed = nchw_model()
    plan = assert_same_as_converted(model, [random((1, 7, 40, 64), 5)], precision)
    [(index, (_, strides, shape))] = plan.io_loads.items()
    assert shape == (1, 40, 64, 7) and strides == (1, 64, 40 * 64, 7 * 40 * 64)  # w, h, c, b of NCHW


def test_the_loads_start_where_the_kernels_stop_reading_host_memory():
    assert io_loads.MIN_IO_BYTES == runtime.DIRECT_IO_MAX_BYTES


def two_readers():
    c = Chain(SHAPE)
    return c.build(c.conv(c.x, 4), c.op("ABS", c.x))


@pytest.mark.parametrize("case", ["two readers", "direct I/O", "a reshape's alias", "an output", "off"])
def test_the_convert_stays(case, monkeypatch):
    """An input read by two dispatches, or small enough that the kernels read the mapped host
    buffer itself (each element once by convert_in, not once per tap over PCIe), or read under
    another name too, or a partition output as well (the permutation of an NCHW input, which a
    convert_out reads from its storage: 4.0 off before the check), or the pass off: convert_in
    stays, the outputs match the reference."""
    model = reader_model("conv")
    if case == "an output":
        model, _ = nchw_model(SHAPE[:1] + SHAPE[3:] + SHAPE[1:3], also_output=True)
    elif case == "two readers":
        model = two_readers()
    elif case == "direct I/O":
        monkeypatch.setattr(io_loads, "MIN_IO_BYTES", 1 << 20)
    elif case == "a reshape's alias":
        c = Chain((1, 40, 64, 8))  # 8 channels: [2560, 8] rows have the input's layout
        rows = c.op("RESHAPE", c.x, c.const([-1, 8], np.int32), shape=(2560, 8))
        model = c.build(c.conv(c.x, 4), c.op("FULLY_CONNECTED", rows, c.const(random((3, 8), 4)), c.const(random(3, 5)),
                                             shape=(2560, 3), keep_num_dims=False))
    elif case == "off":
        monkeypatch.setattr(io_loads, "ENABLED", False)
    shape = {"a reshape's alias": (1, 40, 64, 8), "an output": (1, 7, 40, 64)}.get(case, SHAPE)
    values = [random(shape, 3)]
    check_gpu(model, values)
    _, plan = run(model, values, enabled=io_loads.ENABLED)
    assert plan.templates[0] == "convert_in" and plan.io_loads == {}


def test_preserve_all_tensors_and_debug_nonfinite_see_the_loaded_tensor():
    """The TRANSPOSE's output is never in the arena: a capture takes it from the input."""
    model, transposed = nchw_model()
    x = random((1, 7, 40, 64), 6)
    x[0, 3, 5, 9] = np.inf
    for options in ({}, {"debug_nonfinite": True}):
        with GpuDelegate(**options) as delegate:
            interp = invoked_keeping_every_tensor(model, delegate, x)
            assert delegate.partitions[0].plan.io_loads
            np.testing.assert_array_equal(interp.get_tensor(transposed), np.transpose(x, (0, 2, 3, 1)))
            if options:
                assert delegate.summary()["first_nonfinite"]["index"] == interp.get_input_details()[0]["index"]


def test_a_warm_start_keeps_the_loads(tmp_path):
    model, values = reader_model("conv"), [random(SHAPE, 8)]
    starts = []
    for _ in range(2):
        with GpuDelegate(serialization_dir=str(tmp_path), model_token="io-loads") as delegate:
            outputs = run_ours(model, values, experimental_delegates=[delegate])
            starts.append((outputs, delegate.partitions[0].plan.io_loads, delegate.summary()["cache_hit"]))
    (cold, cold_loads, cold_hit), (warm, warm_loads, warm_hit) = starts
    assert (cold_hit, warm_hit) == (False, True) and warm_loads == cold_loads == {0: cold_loads[0]}
    np.testing.assert_array_equal(cold[0], warm[0])


@pytest.mark.parametrize("change", ["offset", "stride", "shape", "index"])
def test_an_entry_s_loads_outside_the_inputs_are_refused(change):
    """A tampered cache entry must not make a capture read past an input (strided_value)."""
    model, values = reader_model("conv"), [random(SHAPE, 8)]
    with GpuDelegate() as delegate:
        run_ours(model, values, experimental_delegates=[delegate])
        plan = delegate.partitions[0].plan
    graph = Graph.from_model(read_model(model))
    offset, strides, shape = plan.io_loads[0]
    plan.io_loads = {"offset": {0: (offset + 7, strides, shape)},
                     "stride": {0: (offset, (strides[0], strides[1] * 2) + strides[2:], shape)},
                     "shape": {0: (offset, strides, (1, 40, 64, 8))},
                     "index": {10 ** 6: (offset, strides, shape)}}[change]

    def fail(what):
        raise EntryError(what)
    with pytest.raises(EntryError, match="io_loads"):
        validate.check_io_loads(plan, graph, fail)
