"""GpuDelegate inside LiteRT's own Interpreter (ai_edge_litert): claims, I/O, resize, sharing,
threads, errors, lifetime."""
import ctypes
import logging
import subprocess
import sys
import threading

import numpy as np
import pytest

from gles_delegate import GpuDelegate
from gles_delegate.errors import ModelError
from gles_delegate.gpu.runtime import GpuPartition
from gles_delegate.litert import abi
from gles_delegate.litert import plan as plan_module
from gles_delegate.litert.native import _LIVE, native_delegates
from tests.gpu.test_float_view import masked_model
from tests.litert_delegate.models import add_model, batch_div8_model, mixed_model, unpack_fc_model
from tests.oplib import assert_close, run_ours

LiteRT = pytest.importorskip("ai_edge_litert.interpreter").Interpreter
EPS32 = np.finfo(np.float32).eps


def run(interp, x):
    interp.set_tensor(interp.get_input_details()[0]["index"], x)
    interp.invoke()
    return interp.get_tensor(interp.get_output_details()[0]["index"])


def litert_alone(data, x):
    interp = LiteRT(model_content=data)
    interp.allocate_tensors()
    return run(interp, x)


def replaced(delegate):
    """{kernel label: operator indices LiteRT replaced by that kernel} of the delegate's interpreters."""
    return {k.label: k.nodes for n in native_delegates(delegate) for k in n.kernels.values()}


def claimed_run(data, x):
    """(output, sorted operator indices the delegate claimed) of one run of `data` on x through
    LiteRT's Interpreter with a GpuDelegate that delegates any number of partitions."""
    with GpuDelegate(max_delegated_partitions=0) as delegate:
        interp = LiteRT(model_content=data, experimental_delegates=[delegate])
        interp.allocate_tensors()
        out = run(interp, x)
        claimed = sorted(i for nodes in replaced(delegate).values() for i in nodes)
        del interp
    return out, claimed


@pytest.fixture
def x8():
    return np.random.default_rng(0).standard_normal((1, 8, 8, 4)).astype(np.float32)


@pytest.mark.parametrize("limit, gpu", [(1, [0, 1]), (0, [0, 1, 4])])
def test_ops_the_gpu_cannot_run_stay_on_litert(x8, limit, gpu):
    data = mixed_model()
    with GpuDelegate(max_delegated_partitions=limit) as delegate:
        interp = LiteRT(model_content=data, experimental_delegates=[delegate])
        interp.allocate_tensors()
        out = run(interp, x8)
        assert sorted(i for nodes in replaced(delegate).values() for i in nodes) == gpu
        assert delegate.summary()["gpu_nodes"] == len(gpu) and delegate.summary()["cpu_nodes"] == 5 - len(gpu)
        ref = litert_alone(data, x8)
        assert np.abs(out - ref).max() <= 1e-4 * np.abs(ref).max()


def test_resize_replans(x8):
    data = add_model()
    with GpuDelegate() as delegate:
        interp = LiteRT(model_content=data, experimental_delegates=[delegate])
        interp.allocate_tensors()
        x = np.linspace(-1, 1, 48, dtype=np.float32).reshape(1, 4, 4, 3)
        np.testing.assert_allclose(run(interp, x), np.maximum(x + 0.5, 0))
        interp.resize_tensor_input(0, [3, 4, 4, 3])
        interp.allocate_tensors()
        x3 = np.linspace(-2, 2, 144, dtype=np.float32).reshape(3, 4, 4, 3)
        np.testing.assert_allclose(run(interp, x3), np.maximum(x3 + 0.5, 0))
        (native,) = native_delegates(delegate)
        (kernel,) = native.kernels.values()
        assert kernel.partitions[0].plan.inputs[0].shape == (3, 4, 4, 3)


def test_a_batch_resized_to_zero_runs_and_resizes_back():
    """LiteRT resizes a batch to 0 (empty tensors, which it gives no memory): the delegate's
    kernel gives the empty outputs, then runs the GPU again at batch 3."""
    data = add_model()
    with GpuDelegate() as delegate:
        interp = LiteRT(model_content=data, experimental_delegates=[delegate])
        for batch in (0, 3, 0):
            x = np.linspace(-2, 2, batch * 48, dtype=np.float32).reshape(batch, 4, 4, 3)
            interp.resize_tensor_input(0, list(x.shape))
            interp.allocate_tensors()
            out = run(interp, x)
            assert out.shape == x.shape
            np.testing.assert_allclose(out, np.maximum(x + 0.5, 0))


@pytest.mark.parametrize("runtime", ["gles", "litert"])
def test_an_empty_batch_logs_one_line_per_layer_not_per_node(runtime, caplog):
    """Every node's tensors are empty at batch 0: the partitioner says so in one line, and
    inside LiteRT the delegate kernel in one more (its nodes run on the reference), where each
    logged every node."""
    from gles_delegate import Interpreter
    from tools.bench_invoke import conv10_model
    interpreter_class = Interpreter if runtime == "gles" else LiteRT
    with GpuDelegate() as delegate:
        interp = interpreter_class(model_content=conv10_model(layers=4, size=6, channels=4),
                                   experimental_delegates=[delegate])
        interp.allocate_tensors()
        interp.resize_tensor_input(0, [0, 6, 6, 4])
        with caplog.at_level(logging.WARNING, logger="gles_delegate"):
            interp.allocate_tensors()
        assert run(interp, np.zeros((0, 6, 6, 4), np.float32)).shape == (0, 6, 6, 4)
    lines = [r.getMessage() for r in caplog.records if r.name == "gles_delegate"]
    assert len(lines) == (1 if runtime == "gles" else 2), lines
    assert all("4 operations, op codes #0 (CONV_2D) .. #3 (CONV_2D)" in line for line in lines), lines


def test_preserve_all_tensors_gives_every_node_a_kernel_that_runs_on_the_gpu(x8):
    """LiteRT's experimental_preserve_all_tensors hands the delegate one kernel per node (each
    node's outputs kept): each kernel compiles its node alone, where it made the Interpreter
    fail ("LiteRT split the GPU partition"); every intermediate is LiteRT's."""
    data = mixed_model()
    theirs = LiteRT(model_content=data, experimental_preserve_all_tensors=True)
    theirs.allocate_tensors()
    with GpuDelegate() as delegate:
        ours = LiteRT(model_content=data, experimental_delegates=[delegate], experimental_preserve_all_tensors=True)
        ours.allocate_tensors()
        kernels = [k for n in native_delegates(delegate) for k in n.kernels.values()]
        assert len(kernels) > 1 and all(k.partitions and len(k.nodes) == 1 for k in kernels)
        run(ours, x8)
        run(theirs, x8)
        for detail in theirs.get_tensor_details():
            want = theirs.get_tensor(detail["index"])
            if want.dtype == np.float32 and want.size:
                assert_close(ours.get_tensor(detail["index"]), want, what=detail["name"])


def test_two_interpreters_share_one_delegate(x8):
    data = mixed_model()
    ref = litert_alone(data, x8)
    with GpuDelegate() as delegate:
        first = LiteRT(model_content=data, experimental_delegates=[delegate])
        second = LiteRT(model_content=data, experimental_delegates=[delegate])
        for interp in (first, second):
            interp.allocate_tensors()
        np.testing.assert_allclose(run(first, x8), ref, atol=1e-4 * np.abs(ref).max())
        del first
        np.testing.assert_allclose(run(second, x8), ref, atol=1e-4 * np.abs(ref).max())
        assert len(native_delegates(delegate)) == 1


def test_invoke_from_another_thread(x8):
    data = mixed_model()
    with GpuDelegate() as delegate:
        interp = LiteRT(model_content=data, experimental_delegates=[delegate])
        interp.allocate_tensors()
        result = {}
        worker = threading.Thread(target=lambda: result.setdefault("out", run(interp, x8)))
        worker.start()
        worker.join()
        ref = litert_alone(data, x8)
        assert np.abs(result["out"] - ref).max() <= 1e-4 * np.abs(ref).max()


def test_an_exception_in_invoke_is_a_runtime_error_naming_the_node(x8, monkeypatch):
    with GpuDelegate() as delegate:
        interp = LiteRT(model_content=mixed_model(), experimental_delegates=[delegate])
        interp.allocate_tensors()

        def fail(self, storage, capture=None):
            raise ValueError("boom in the kernel")
        monkeypatch.setattr(GpuPartition, "run", fail)
        with pytest.raises(RuntimeError, match=r"#0 \(CONV_2D\) .. #1 \(LOGISTIC\).*boom in the kernel"):
            run(interp, x8)
        monkeypatch.undo()
        assert np.isfinite(run(interp, x8)).all()  # the interpreter still works


def test_closed_delegate_makes_invoke_fail_cleanly(x8):
    delegate = GpuDelegate()
    interp = LiteRT(model_content=mixed_model(), experimental_delegates=[delegate])
    interp.allocate_tensors()
    delegate.close()
    with pytest.raises(RuntimeError, match="GpuDelegate was closed"):
        run(interp, x8)


def test_callbacks_live_until_the_interpreter_is_gone(x8):
    delegate = GpuDelegate()
    interp = LiteRT(model_content=mixed_model(), experimental_delegates=[delegate])
    (native,) = native_delegates(delegate)
    del delegate  # the interpreter keeps the GpuDelegate (and LiteRT its list) alive
    interp.allocate_tensors()
    assert np.isfinite(run(interp, x8)).all()
    del interp
    assert native.address not in _LIVE and native.kernels == {} and native.plans == {}


DELETE_ORDERS = """
import gc, numpy as np
from ai_edge_litert.interpreter import Interpreter
from gles_delegate import GpuDelegate
from tests.litert_delegate.models import mixed_model
x = np.ones((1, 8, 8, 4), np.float32)
def make(d):
    it = Interpreter(model_content=mixed_model(), experimental_delegates=[d]); it.allocate_tensors()
    it.set_tensor(0, x); it.invoke(); return it
d = GpuDelegate(); it = make(d); del d; gc.collect(); it.invoke(); del it; gc.collect()   # delegate first
d = GpuDelegate(); it = make(d); del it; gc.collect(); d.close(); del d; gc.collect()    # interpreter first
d = GpuDelegate(); it = make(d); d.close(); del d; gc.collect(); del it; gc.collect()    # closed first
d = GpuDelegate(); a, b = make(d), make(d); cycle = [a]; cycle.append(cycle); a.cycle = cycle
del a, cycle; gc.collect(); b.invoke(); del b, d; gc.collect()                           # via the collector
print("survived")
"""


def test_any_delete_order_survives():
    """In a child process: a wrong order would crash it (a freed callback called by LiteRT)."""
    done = subprocess.run([sys.executable, "-c", DELETE_ORDERS], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "survived" in done.stdout, done.stderr[-2000:]


def test_needs_a_litert_interpreter_calling():
    with GpuDelegate() as delegate:
        with pytest.raises(RuntimeError, match="no such interpreter"):
            delegate._get_native_delegate_pointer()


@pytest.mark.parametrize("package, version", [("ai_edge_litert", "3.0.0"), ("ai_edge_litert", "1.2.0"),
                                              ("tflite_runtime", "2.13.0"), ("onnxruntime", "1.0"),
                                              ("ai_edge_litert", "?")])
def test_unsupported_runtimes_are_refused(package, version):
    with pytest.raises(RuntimeError, match="not supported|does not know"):
        abi.check_runtime(package, version)


def test_struct_sizes_match_the_header():
    """Sizes of the LP64 layouts common.h gives (field by field in abi.py)."""
    if ctypes.sizeof(ctypes.c_void_p) != 8:
        pytest.skip("LP64 only")
    assert [ctypes.sizeof(s) for s in (abi.TfLiteTensor, abi.TfLiteNode, abi.TfLiteRegistration,
                                       abi.TfLiteDelegate, abi.TfLiteDelegateParams)] == [112, 80, 88, 56, 32]
    assert abi.TfLiteContext.ReplaceNodeSubsetsWithDelegateKernels.offset == 64
    assert abi.TfLiteContext.PreviewDelegatePartitioning.offset == 152


@pytest.mark.parametrize("module", ["tflite_runtime.interpreter", "tensorflow.lite.python.interpreter"])
def test_other_runtimes(module, x8):
    runtime = pytest.importorskip(module)
    data = mixed_model()
    with GpuDelegate() as delegate:
        interp = runtime.Interpreter(model_content=data, experimental_delegates=[delegate])
        interp.allocate_tensors()
        out = run(interp, x8)
        assert sum(len(n) for n in replaced(delegate).values()) == 2
    ref = litert_alone(data, x8)
    assert np.abs(out - ref).max() <= 1e-4 * np.abs(ref).max()


def test_resize_sizes_outputs_that_cpu_nodes_read():
    """After a resize, the first kernel's outputs feed LiteRT's CPU nodes (the CASTs through int64):
    the kernel's prepare gives them their new shape before LiteRT prepares those nodes."""
    data = mixed_model()
    x = np.random.default_rng(2).standard_normal((2, 8, 8, 4)).astype(np.float32)
    with GpuDelegate(max_delegated_partitions=0) as delegate:
        interp = LiteRT(model_content=data, experimental_delegates=[delegate])
        interp.resize_tensor_input(0, [2, 8, 8, 4])
        interp.allocate_tensors()
        out = run(interp, x)
    alone = LiteRT(model_content=data)
    alone.resize_tensor_input(0, [2, 8, 8, 4])
    alone.allocate_tensors()
    ref = run(alone, x)
    assert out.shape == (2, 8, 8, 4) and np.abs(out - ref).max() <= 1e-4 * np.abs(ref).max()


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_bool_and_int32_tensors_through_litert(index_dtype):
    """A mask (comparisons, LOGICAL_AND, SELECT_V2) and an ARG_MAX between float ops: the float
    view's nodes are claimed in LiteRT too, and its bool / int32 buffers are read and written in
    their own types (our interpreter's run is the oracle; the masks and indices exactly). int64
    indices (gpu/index_view.py) are widened into LiteRT's int64 tensor."""
    shape = (1, 3, 4, 10)
    model = masked_model(shape, index_dtype)
    x = np.random.default_rng(11).uniform(-2, 2, shape).astype(np.float32)
    expected = run_ours(model, [x])
    with GpuDelegate() as delegate:
        interp = LiteRT(model_content=model, experimental_delegates=[delegate])
        interp.allocate_tensors()
        interp.set_tensor(interp.get_input_details()[0]["index"], x)
        interp.invoke()
        ours = [interp.get_tensor(d["index"]) for d in interp.get_output_details()]
        assert delegate.summary()["gpu_nodes"] == 7 and delegate.summary()["cpu_nodes"] == 0
        del interp
    np.testing.assert_allclose(ours[0], expected[0], atol=1e-5 * np.abs(expected[0]).max())
    for got, want in zip(ours[1:], expected[1:]):
        assert got.dtype == want.dtype and np.array_equal(got, want)


@pytest.mark.parametrize("make, claimed_nodes", [("readers_model", list(range(8))),
                                                 ("across_partitions_model", [0, 2, 3])])
def test_readers_of_int64_indices_through_litert(make, claimed_nodes):
    """ARG_MAX's int64 indices and their readers (GATHER, ONE_HOT, CAST, RESHAPE, EQUAL: the
    index view, tests/gpu/test_index_view.py) claimed in LiteRT; an int64 ADD, which may leave
    int32, stays on LiteRT's kernels and reads the widened indices; a second kernel reads them
    from LiteRT's int64 tensor, narrowed. Every output as LiteRT's alone, exactly."""
    from tests.gpu import test_index_view
    shape = (2, 3, 3000)
    model, x = getattr(test_index_view, make)(shape), test_index_view.peaked(shape, 4)

    def outputs(delegates):
        interp = LiteRT(model_content=model, experimental_delegates=delegates)
        interp.allocate_tensors()
        interp.set_tensor(interp.get_input_details()[0]["index"], x)
        interp.invoke()
        claimed = sorted(n for d in delegates for nodes in replaced(d).values() for n in nodes)
        return [interp.get_tensor(d["index"]) for d in interp.get_output_details()], claimed
    with GpuDelegate(max_delegated_partitions=0) as delegate:
        ours, claimed = outputs([delegate])
    assert claimed == claimed_nodes
    for got, want in zip(ours, outputs([])[0]):
        assert got.dtype == want.dtype and np.array_equal(got, want)


def test_a_keras_gate_is_claimed_whole_and_follows_a_resize():
    """The SHAPE -> STRIDED_SLICE -> PACK chain of a dynamic-batch Keras RESHAPE folds
    (fold_constants.fold_shapes): the delegate claims every operator, and a resize plans it
    again with the new batch."""
    from tests.test_fold_constants import expected_gate, keras_gate_model
    with GpuDelegate() as delegate:
        interp = LiteRT(model_content=keras_gate_model(), experimental_delegates=[delegate])
        interp.allocate_tensors()
        x = np.random.default_rng(3).uniform(-1, 1, (1, 4, 4, 8)).astype(np.float32)
        assert np.abs(run(interp, x) - expected_gate(x)).max() <= 16 * EPS32 * np.abs(expected_gate(x)).max()
        assert sorted(i for nodes in replaced(delegate).values() for i in nodes) == list(range(6))
        interp.resize_tensor_input(0, [3, 4, 4, 8])
        interp.allocate_tensors()
        x3 = np.random.default_rng(4).uniform(-1, 1, (3, 4, 4, 8)).astype(np.float32)
        assert np.abs(run(interp, x3) - expected_gate(x3)).max() <= 16 * EPS32 * np.abs(expected_gate(x3)).max()


def test_a_placeholder_reshape_is_claimed_at_its_real_shape():
    """Keras 3's Dense on a rank-3 input: LiteRT declares the flattening RESHAPE's output [1, 1]
    until invoke; the delegate plans it at [tokens, features] from the SHAPE chain and claims
    every operator."""
    from tests.test_placeholder_shapes import expected_dense, keras_dense_model
    model, weights = keras_dense_model(tokens=6, features=8, units=5)
    with GpuDelegate() as delegate:
        interp = LiteRT(model_content=model, experimental_delegates=[delegate])
        interp.allocate_tensors()
        x = np.random.default_rng(5).uniform(-1, 1, (1, 6, 8)).astype(np.float32)
        expected = expected_dense(x, weights)
        assert np.abs(run(interp, x) - expected).max() <= 8 * EPS32 * np.abs(expected).max()
        assert sorted(i for nodes in replaced(delegate).values() for i in nodes) == list(range(8))


def test_out_of_range_input_indices_fail_the_invoke_inside_litert():
    """A GATHER with runtime indices that enter the delegate's partition from LiteRT: an index
    past the table fails the invoke (LiteRT's RuntimeError naming our kernel and the node), as
    LiteRT's own GATHER does; the next in-range invoke runs."""
    from tests.oplib import In, single_op_model
    table = np.arange(1, 13, dtype=np.float32).reshape(4, 3)
    model = single_op_model("GATHER", [In(table, const=True), In(np.array([1, 3], np.int32))], {"axis": 0})
    with GpuDelegate() as delegate:
        interp = LiteRT(model_content=model, experimental_delegates=[delegate])
        interp.allocate_tensors()
        assert sorted(i for nodes in replaced(delegate).values() for i in nodes) == [0]
        index = interp.get_input_details()[0]["index"]
        interp.set_tensor(index, np.array([4, 0], np.int32))
        with pytest.raises(RuntimeError, match=r"#0 \(GATHER\): gather index out of range \[0, 4\)"):
            interp.invoke()
        interp.set_tensor(index, np.array([3, 0], np.int32))
        interp.invoke()
        assert np.array_equal(interp.get_tensor(interp.get_output_details()[0]["index"]), table[[3, 0]])


@pytest.mark.parametrize("case", ["float_1x4_blocks", "int8_1x16_blocks"])
def test_sparse_weights_read_directly_run_on_the_gpu(case):
    """LiteRT's sparse FULLY_CONNECTED: the delegate densifies its weights (a DENSIFY it folds)
    and claims the node; the outputs are LiteRT's builtin kernels' (int8 within a step of the
    float view, float within rounding), where LiteRT's own default path (XNNPACK) gave NaN."""
    from tests.litert import run_litert
    from tests.test_fold_constants import sparse_fc_model
    model, x, weights, bias = sparse_fc_model(case, np.random.default_rng(len(case)))
    with GpuDelegate(precision="fp32") as delegate:
        interp = LiteRT(model_content=model, experimental_delegates=[delegate])
        interp.allocate_tensors()
        out = run(interp, x)
        assert list(replaced(delegate).values()) == [[0]]
    (theirs,) = run_litert(model, [x], resolver="builtin")
    if x.dtype == np.int8:
        assert np.abs(out.astype(np.int32) - theirs).max() <= 1
    else:
        bound = 32 * EPS32 * (np.abs(x).astype(np.float64) @ np.abs(weights).T + np.abs(bias))
        assert np.all(np.abs(out - theirs) <= bound)


def resized_run(data, shape, x, delegates=()):
    """LiteRT's Interpreter (with `delegates`) resized to `shape`, run on x: (interpreter, output)."""
    interp = LiteRT(model_content=data, experimental_delegates=list(delegates))
    interp.resize_tensor_input(0, shape)
    interp.allocate_tensors()
    return interp, run(interp, x)


def test_a_node_invalid_at_the_declared_shapes_is_compiled_at_the_resized_ones(caplog):
    """Built at the declared batch 1, the RESHAPE to [B // 8, 8, 4] is [0, 8, 4]. It reads the
    dynamic input, so the delegate claims it and what reads it all the same (a warning says so)
    and compiles them at the kernel's prepare, at the resize to [16, 4]: every node on the GPU
    (openWakeWord's melspectrogram, a [1, 1] signal in the file under 512-sample convolutions,
    left 23 of its 26 nodes to LiteRT's CPU kernels before)."""
    data = batch_div8_model()
    x = np.random.default_rng(8).standard_normal((16, 4)).astype(np.float32)
    with GpuDelegate() as delegate:
        interp, out = resized_run(data, [16, 4], x, [delegate])
        kernels = [k for n in native_delegates(delegate) for k in n.kernels.values()]
        on_gpu = sorted(n.index for k in kernels for p in k.partitions for n in p.nodes)
        assert not any(k.pending or k.reference for k in kernels)
        del interp
    assert on_gpu == [0, 5, 6, 7], on_gpu  # the ADD, RESHAPE, MUL, SUM; the shape chain folded
    assert "#5 (RESHAPE): cannot reshape [1, 4] (4 elements) to [0, 8, 4]" in caplog.text
    assert "are claimed, compiled at the shapes the input is resized to" in caplog.text
    _, ref = resized_run(data, [16, 4], x)
    assert out.shape == (2, 4) and np.abs(out - ref).max() <= 8 * EPS32 * np.abs(ref).max()


def test_a_pending_node_left_at_the_declared_shapes_fails_allocate_as_litert_does():
    """Not resized, the pending RESHAPE still cannot run: allocate_tensors() fails naming it
    (LiteRT alone fails that model too, at its first invoke), and a resize afterwards recovers."""
    data = batch_div8_model()
    with pytest.raises(RuntimeError, match=r"RESHAPE"):
        litert_alone(data, np.ones((1, 4), np.float32))
    x = np.random.default_rng(3).standard_normal((8, 4)).astype(np.float32)
    with GpuDelegate() as delegate:
        interp = LiteRT(model_content=data, experimental_delegates=[delegate])
        with pytest.raises(RuntimeError, match=r"#5 \(RESHAPE\): cannot reshape \[1, 4\]"):
            interp.allocate_tensors()
        interp.resize_tensor_input(0, [8, 4])
        interp.allocate_tensors()
        out = run(interp, x)
        del interp
    _, ref = resized_run(data, [8, 4], x)
    assert np.abs(out - ref).max() <= 8 * EPS32 * np.abs(ref).max()


def test_calibration_inputs_for_the_resized_input_calibrate_the_resized_plan():
    """precision 'auto' with calibration_inputs of the resized shape ([16, 4]): at the declared
    batch 1 LiteRT has the delegate plan first, drawn samples calibrate that plan (the given ones
    cannot: a ValueError there failed the Interpreter before), and the plan made at the resize
    calibrates on the samples given."""
    data = batch_div8_model()
    rng = np.random.default_rng(5)
    samples = [[rng.standard_normal((16, 4)).astype(np.float32)] for _ in range(2)]
    x = rng.standard_normal((16, 4)).astype(np.float32)
    with GpuDelegate(precision="auto", calibration_inputs=samples) as delegate:
        interp, out = resized_run(data, [16, 4], x, [delegate])
        calibration = delegate.summary()["calibration"]
        del interp
    assert calibration and all(entry["held_out"] == 1 for entry in calibration), calibration
    _, ref = resized_run(data, [16, 4], x)
    assert np.abs(out - ref).max() <= 1e-2 * np.abs(ref).max()


def test_a_node_invalid_at_static_shapes_stays_on_litert(monkeypatch, caplog):
    """A node our shape propagation refuses though it reads no dynamic input (here, made to
    refuse the LOGISTIC of a static model) is not claimed: it and what reads it stay on LiteRT."""
    from gles_delegate import shape_propagation
    original = shape_propagation.propagate_shapes

    def refusing(graph, resized=None, *args, **kwargs):
        for node in graph.nodes:
            if node.op == "LOGISTIC":
                raise ModelError(f"operator {node.label}: refused (test)")
        return original(graph, resized, *args, **kwargs)

    monkeypatch.setattr(plan_module, "propagate_shapes", refusing)
    data = mixed_model()
    x = np.random.default_rng(0).standard_normal((1, 8, 8, 4)).astype(np.float32)
    out, claimed = claimed_run(data, x)
    assert "stay on LiteRT's CPU kernels" in caplog.text
    assert claimed == [0], claimed  # the CONV_2D; the LOGISTIC #1 and the ADD #4 reading it stay on LiteRT
    ref = litert_alone(data, x)
    assert np.abs(out - ref).max() <= 8 * EPS32 * np.abs(ref).max()


def test_a_fold_in_another_kernel_follows_a_resize():
    """LiteRT puts the claimed SHAPE -> FILL chain (a constant of the GPU partition) in a kernel of
    its own, apart from the GPU nodes from the UNPACK on: after a resize the GPU kernel folds that
    chain again at the new batch, and keeps every node it claimed."""
    data = unpack_fc_model()
    x = np.random.default_rng(9).standard_normal((3, 2, 3)).astype(np.float32)
    with GpuDelegate() as delegate:
        interp, out = resized_run(data, [3, 2, 3], x, [delegate])
        kernels = [k for n in native_delegates(delegate) for k in n.kernels.values() if k.partitions]
        assert [[n.index for p in k.partitions for n in p.nodes] for k in kernels] == [[2, 3, 4, 7, 8, 9, 10]]
        del interp
    _, ref = resized_run(data, [3, 2, 3], x)
    assert out.shape == (3, 5) and np.abs(out - ref).max() <= 8 * EPS32


def test_a_node_the_gpu_refuses_at_new_shapes_runs_on_the_reference(monkeypatch, caplog):
    """A GPU kernel that refuses LOGISTIC past batch 1: after the resize, the kernel runs both
    LOGISTICs on the numpy reference between its partitions (the ADD between them, cut off by
    max_delegated_partitions=1, too), with a warning naming each node and why."""
    reason = GpuDelegate.unsupported_reason

    def refuse(self, node):
        if node.op == "LOGISTIC" and node.inputs[0].shape[0] > 1:
            return "refused past batch 1 (test)"
        return reason(self, node)

    monkeypatch.setattr(GpuDelegate, "unsupported_reason", refuse)
    data = unpack_fc_model()
    x = np.random.default_rng(10).standard_normal((3, 2, 3)).astype(np.float32)
    with GpuDelegate() as delegate:
        interp, out = resized_run(data, [3, 2, 3], x, [delegate])
        (kernel,) = [k for n in native_delegates(delegate) for k in n.kernels.values() if k.partitions]
        assert [n.index for n in kernel.reference] == [8, 9, 10]  # the partition: #2, #3, #4, #7
        del interp
    assert "operator #8 (LOGISTIC) (refused past batch 1 (test))" in caplog.text
    assert "operator #9 (ADD) (its GPU partition is not among the max_delegated_partitions=1" in caplog.text
    _, ref = resized_run(data, [3, 2, 3], x)
    assert out.shape == (3, 5) and np.abs(out - ref).max() <= 8 * EPS32


def test_building_interpreters_makes_no_ctypes_type_each_time():
    # make_int_array defined a Structure per call, and ctypes keeps the pointer type of each
    # forever: 200 more pointer types and 6.2 KB more memory after 200 interpreters built.
    data, x = add_model(), np.ones((1, 4, 4, 3), np.float32)
    with GpuDelegate() as delegate:
        def build():
            interp = LiteRT(model_content=data, experimental_delegates=[delegate])
            interp.allocate_tensors()
            return run(interp, x)
        build()
        before = len(ctypes._pointer_type_cache)
        for _ in range(10):
            build()
        assert len(ctypes._pointer_type_cache) == before


def test_int_arrays_round_trip():
    pointer, memory = abi.make_int_array([3, -1, 7])
    assert abi.int_array(pointer) == [3, -1, 7] and abi.int_array(abi.make_int_array([])[0]) == []
    assert abi.int_array(ctypes.POINTER(abi.TfLiteIntArray)()) == []
    del memory


def test_reduce_windows_run_on_the_gpu_inside_litert(caplog):
    """litert-torch's ceil-mode average pool (STABLEHLO_REDUCE_WINDOW with ADD bodies): LiteRT hands
    us its nodes, which run on the GPU as in our Interpreter, and asks about the two alike body
    subgraphs too, which LiteRT never runs: no warning about them."""
    from tests.reduce_window_models import avg_pool_ceil_model
    data, _ = avg_pool_ceil_model()
    x = np.random.default_rng(3).standard_normal((1, 9, 10, 6)).astype(np.float32)
    with GpuDelegate() as delegate:
        with caplog.at_level(logging.WARNING, logger="gles_delegate"):
            interp = LiteRT(model_content=data, experimental_delegates=[delegate])
            interp.allocate_tensors()
        out = run(interp, x)
        assert delegate.summary()["gpu_nodes"] == 2 and delegate.summary()["cpu_nodes"] == 0
        del interp
    assert not [r for r in caplog.records if r.name == "gles_delegate"], caplog.text
    theirs = litert_alone(data, x)
    assert_close(out, theirs, 3 * 10 * EPS32 * np.abs(theirs).max())


def test_an_empty_constant_litert_holds_read_only_passes_the_file_check(monkeypatch):
    """litert-torch writes a RESHAPE to a scalar with a [0] int32 shape whose buffer holds an
    empty data vector: LiteRT holds that tensor read-only, where a missing vector (our writer's
    default) is a read-write one; both are one empty buffer to the reader. The delegate's check
    that LiteRT loaded the file it read (litert/verify.py) made LiteRT's Interpreter fail to
    build on such a model (a litert-torch SmolLM); it passes, and the graph runs on the GPU."""
    from gles_delegate.tflite import ModelBuilder, writer

    def buffers(self):  # every buffer as a data vector, the empty ones too
        tables = [self.table("Buffer", ("Data", self.bytes_vector(np.ascontiguousarray(raw, np.uint8).tobytes())))
                  for raw in self.model.buffers]
        return tables, []
    monkeypatch.setattr(writer._Writer, "buffers", buffers)
    b = ModelBuilder()
    x = b.input("x", (1,))
    y, z = b.tensor("y", ()), b.tensor("z", ())
    b.op("RESHAPE", [x, b.const("shape", np.zeros((0,), np.int32))], [y])
    b.op("ADD", [y, b.const("one", np.float32(1.0))], [z], fused_activation_function=0)
    b.output(z)
    data = b.build()
    with GpuDelegate() as delegate:
        interp = LiteRT(model_content=data, experimental_delegates=[delegate])
        interp.allocate_tensors()
        assert float(run(interp, np.array([2.0], np.float32))) == 3.0
        assert sorted(i for nodes in replaced(delegate).values() for i in nodes) == [0, 1]
        del interp


@pytest.mark.parametrize("precision", ["fp16_fp32acc", "auto"])
def test_a_half_overflow_warns_inside_litert_too(precision):
    """gpu/half_overflow.py on LiteRT's path: the kernel's partition sets its overflow word and the
    invoke warns naming the output, which LiteRT returns as half held it (inf) at fp16_fp32acc,
    and as LiteRT alone computes it at 'auto' (the float32 twin's run, inside LiteRT's invoke)."""
    from gles_delegate import HalfOverflowWarning
    from tests.gpu.test_half_overflow import gained_model, scaled
    x, model = scaled((1, 8, 8, 6), 100.0), gained_model("ABS")
    with GpuDelegate(precision=precision) as delegate:
        interp = LiteRT(model_content=model, experimental_delegates=[delegate])
        interp.allocate_tensors()
        with pytest.warns(HalfOverflowWarning, match=r"#0 \(MUL\) \.\. #1 \(ABS\)"):
            out = run(interp, x)
        record = delegate.summary()["half_overflow"]
        del interp
    assert record["reached_outputs"] == 1 and record["recomputed"] == (precision == "auto")
    if precision == "auto":
        assert_close(out, litert_alone(model, x))
    else:
        assert np.isinf(out).any()


def test_auto_outputs_follow_the_twin_and_back_inside_litert():
    """Invokes alternating between the twin (an overflow) and the half plan (none): each output
    LiteRT returns is that invoke's, wherever its memory was lent from (litert/memory.py)."""
    from gles_delegate import HalfOverflowWarning
    from tests.gpu.test_half_overflow import gained_model, scaled
    model = gained_model("ABS")
    inputs = [scaled((1, 8, 8, 6), scale) for scale in (100.0, 10.0, 90.0, 20.0)]
    with GpuDelegate(precision="auto") as delegate:
        interp = LiteRT(model_content=model, experimental_delegates=[delegate])
        interp.allocate_tensors()
        with pytest.warns(HalfOverflowWarning):
            outputs = [run(interp, x).copy() for x in inputs]
        assert delegate.summary()["half_overflow"]["recomputed"] == 2
        del interp
    for x, out in zip(inputs, outputs):
        expected = litert_alone(model, x)
        np.testing.assert_allclose(out, expected, rtol=0, atol=2 * np.finfo(np.float16).eps * np.abs(expected).max())


def test_a_half_overflow_made_an_error_fails_litert_invoke():
    """warnings.simplefilter("error", HalfOverflowWarning): LiteRT's invoke() raises its
    RuntimeError, saying the warning (docs/usage.md, "Half storage overflow")."""
    import warnings
    from gles_delegate import HalfOverflowWarning
    from tests.gpu.test_half_overflow import gained_model, scaled
    with warnings.catch_warnings():
        warnings.simplefilter("error", HalfOverflowWarning)
        with GpuDelegate(precision="fp16_fp32acc") as delegate:
            interp = LiteRT(model_content=gained_model("ABS"), experimental_delegates=[delegate])
            interp.allocate_tensors()
            with pytest.raises(RuntimeError, match="HalfOverflowWarning: the GPU partition of nodes #0"):
                run(interp, scaled((1, 8, 8, 6), 100.0))
            del interp
