"""resize_tensor_input + allocate_tensors re-plans the GPU partitions; shape propagation takes
runtime integer inputs and says which node cannot take a resize; shapes that runtime values
decide, where the model declares placeholders, are dynamic as in LiteRT."""
import time
import tracemalloc

import numpy as np
import pytest

from gles_delegate import GpuDelegate, Interpreter, ModelError
from gles_delegate.graph import Graph
from gles_delegate.shape_propagation import propagate_shapes
from gles_delegate.tflite import ModelBuilder
from tests.litert import LiteRTInterpreter
from tests.oplib import assert_close
from tests.reliability.conftest import conv_model


def run(model, shape, x, delegate=None, extra=()):
    interpreter = Interpreter(model_content=model, experimental_delegates=[delegate] if delegate else None)
    interpreter.resize_tensor_input(0, shape)
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    for index, value in extra:
        interpreter.set_tensor(index, value)
    interpreter.invoke()
    return interpreter, [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]


@pytest.mark.usefixtures("gpu_available")
@pytest.mark.parametrize("shape", [(3, 8, 8, 3), (1, 12, 16, 3), (2, 5, 7, 3), (1, 1, 1, 3)])
def test_resize_replans_the_gpu_partition(shape):
    model = conv_model()
    x = np.random.default_rng(0).uniform(-1, 1, shape).astype(np.float32)
    _, expected = run(model, shape, x)
    with GpuDelegate() as delegate:
        interpreter, got = run(model, shape, x, delegate)
        assert delegate.summary()["cpu_nodes"] == 0
        live = [p for p in delegate.partitions if p.steps]
        assert len(live) == 1 and live[0].plan.inputs[0].shape == shape
        assert [o.shape for o in got] == [shape[:3] + (4,), (shape[0], 1, 1, 4)]
        for g, e in zip(got, expected):
            assert_close(g, e)


@pytest.mark.usefixtures("gpu_available")
def test_resize_back_and_forth_on_one_interpreter():
    model = conv_model()
    rng = np.random.default_rng(1)
    with GpuDelegate() as delegate:
        interpreter = Interpreter(model_content=model, experimental_delegates=[delegate])
        for shape in [(1, 8, 8, 3), (2, 16, 4, 3), (1, 8, 8, 3), (4, 3, 3, 3)]:
            interpreter.resize_tensor_input(0, shape)
            interpreter.allocate_tensors()
            x = rng.uniform(-1, 1, shape).astype(np.float32)
            interpreter.set_tensor(0, x)
            interpreter.invoke()
            got = [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]
            _, expected = run(model, shape, x)
            for g, e in zip(got, expected):
                assert_close(g, e)
        assert len([p for p in delegate.partitions if p.steps]) == 1


def test_invoke_before_allocate_is_a_clear_error():
    interpreter = Interpreter(model_content=conv_model())
    with pytest.raises(ValueError, match=r"allocate_tensors\(\) must be called"):
        interpreter.invoke()
    with pytest.raises(ValueError, match=r"allocate_tensors\(\) must be called"):
        interpreter.set_tensor(0, np.zeros((1, 8, 8, 3), np.float32))


def test_invoke_after_resize_without_allocate_is_a_clear_error():
    interpreter = Interpreter(model_content=conv_model())
    interpreter.allocate_tensors()
    interpreter.invoke()
    interpreter.resize_tensor_input(0, [2, 8, 8, 3])
    assert list(interpreter.get_input_details()[0]["shape"]) == [2, 8, 8, 3]
    for call in (interpreter.invoke, lambda: interpreter.get_tensor(0),
                 lambda: interpreter.set_tensor(0, np.zeros((2, 8, 8, 3), np.float32))):
        with pytest.raises(ValueError, match=r"resize_tensor_input\(\) changed the input shapes: call "
                                             r"allocate_tensors\(\)"):
            call()
    interpreter.allocate_tensors()
    interpreter.set_tensor(0, np.zeros((2, 8, 8, 3), np.float32))
    interpreter.invoke()


def int_div_model():
    """x int32 [1, 4] / d int32 [1, 4] (a runtime input), then CAST to float: an integer DIV
    fails on a zero stand-in for d."""
    b = ModelBuilder()
    x = b.input("x", (1, 4), np.int32, shape_signature=(-1, 4))
    d = b.input("d", (1, 4), np.int32)
    q = b.tensor("q", (1, 4), np.int32)
    b.op("DIV", [x, d], [q], fused_activation_function=0)
    f = b.tensor("f", (1, 4))
    b.op("CAST", [q], [f])
    b.output(f)
    return b.build()


def test_resize_with_a_runtime_integer_divisor():
    x = np.arange(12, dtype=np.int32).reshape(3, 4) * 7
    d = np.array([[1, 2, 3, 4]], np.int32)
    _, (got,) = run(int_div_model(), (3, 4), x, extra=[(1, d)])
    np.testing.assert_array_equal(got, (x // d).astype(np.float32))


def reshape_to_runtime_shape_model():
    """x [1, 6] -> RESHAPE to the shape held by the runtime input `shape` (int32 [2])."""
    b = ModelBuilder()
    x = b.input("x", (1, 6), shape_signature=(-1, 6))
    shape = b.input("shape", (2,), np.int32)
    y = b.tensor("y", (2, 3))
    b.op("RESHAPE", [x, shape], [y])
    b.output(y)
    return b.build()


def test_resize_into_a_runtime_reshape_names_the_node_and_the_tensor():
    interpreter = Interpreter(model_content=reshape_to_runtime_shape_model())
    interpreter.allocate_tensors()  # declared shapes: fine
    interpreter.resize_tensor_input(0, [2, 6])
    with pytest.raises(ModelError, match=r"operator #0 \(RESHAPE\) cannot take the resized input shapes.*"
                                         r"depend on the values of tensor 1 \('shape'\)"):
        interpreter.allocate_tensors()


def reshape_to_computed_shape_model(signatures=False):
    """x [1, 2, 3] -> SHAPE -> RESHAPE(LOGISTIC(RESHAPE(x, [-1])), shape): the target shape is
    computed from the resized input, so it follows the resize exactly. `signatures`: the
    tensors after x carry the shape_signatures a converter writes for a dynamic batch ([-1],
    [-1, -1, 3]): their shapes follow from x's, so they stay static."""
    b = ModelBuilder()
    x = b.input("x", (1, 2, 3), shape_signature=(-1, -1, 3))
    flat_shape = b.const("flat_shape", np.array([-1], np.int32))
    flat = b.tensor("flat", (6,), shape_signature=(-1,) if signatures else None)
    b.op("RESHAPE", [x, flat_shape], [flat])
    act = b.tensor("act", (6,), shape_signature=(-1,) if signatures else None)
    b.op("LOGISTIC", [flat], [act])
    shape = b.tensor("shape", (3,), np.int32)
    b.op("SHAPE", [x], [shape], out_type=2)
    y = b.tensor("y", (1, 2, 3), shape_signature=(-1, -1, 3) if signatures else None)
    b.op("RESHAPE", [act, shape], [y])
    b.output(y)
    return b.build()


@pytest.mark.parametrize("signatures", [False, True])
def test_resize_through_a_computed_shape(signatures):
    x = np.random.default_rng(2).uniform(-3, 3, (4, 5, 3)).astype(np.float32)
    interpreter, (got,) = run(reshape_to_computed_shape_model(signatures), (4, 5, 3), x)
    assert_close(got, (1 / (1 + np.exp(-x.astype(np.float64)))).astype(np.float32))
    assert interpreter._main.dynamic == frozenset()  # the shape operand is known before invoke


def slice_to_runtime_size_model():
    """x [6] -> SLICE(x, [0], size) -> MUL by itself, where `size` (int32 [1]) is a runtime
    input: the slice's shape is only known at invoke, and the model declares it as the TF
    converter does, [1] with shape_signature [-1]."""
    b = ModelBuilder()
    x, size = b.input("x", (6,)), b.input("size", (1,), np.int32)
    part, square = b.tensor("part", (1,), shape_signature=(-1,)), b.tensor("square", (1,), shape_signature=(-1,))
    b.op("SLICE", [x, b.const("begin", np.array([0], np.int32)), size], [part])
    b.op("MUL", [part, part], [square], fused_activation_function=0)
    b.output(square)
    return b.build()


def test_runtime_sized_slice_is_dynamic_as_in_litert():
    """TFLite makes a SLICE with a runtime size dynamic; the MUL after it takes its shape."""
    model = slice_to_runtime_size_model()
    ours, theirs = Interpreter(model_content=model), LiteRTInterpreter(model_content=model)
    x = np.linspace(-3, 2, 6, dtype=np.float32)
    for interpreter in (ours, theirs):
        interpreter.allocate_tensors()
    for size in (4, 1, -1, 6):
        results = []
        for interpreter in (ours, theirs):
            interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
            interpreter.set_tensor(interpreter.get_input_details()[1]["index"], np.array([size], np.int32))
            interpreter.invoke()
            detail = interpreter.get_output_details()[0]
            results.append((interpreter.get_tensor(detail["index"]), list(detail["shape"])))
        assert results[0][1] == results[1][1] == [6 if size < 0 else size]
        np.testing.assert_array_equal(results[0][0], results[1][0])  # one rounding, the same on both


def two_input_model():
    """a [1, 4] -> RELU; b [1, 3] -> TANH: resizing a leaves b's branch as declared."""
    b = ModelBuilder()
    a = b.input("a", (1, 4), shape_signature=(-1, 4))
    c = b.input("c", (1, 3))
    ra, tc = b.tensor("ra", (1, 4)), b.tensor("tc", (1, 3))
    b.op("RELU", [a], [ra])
    b.op("TANH", [c], [tc])
    b.output(ra)
    b.output(tc)
    return b.build()


def test_nodes_off_the_resized_path_keep_their_declared_shapes():
    interpreter = Interpreter(model_content=two_input_model())
    interpreter.resize_tensor_input(0, [5, 4])
    interpreter.allocate_tensors()
    assert [list(d["shape"]) for d in interpreter.get_output_details()] == [[5, 4], [1, 3]]


def resize_then_pad_model():
    """x [1, 4, 4, 1] -> PAD by 1: a resize grows the padded output with it."""
    b = ModelBuilder()
    x = b.input("x", (1, 4, 4, 1), shape_signature=(-1, -1, -1, 1))
    pads = b.const("pads", np.array([[0, 0], [1, 1], [1, 1], [0, 0]], np.int32))
    y = b.tensor("y", (1, 6, 6, 1))
    b.op("PAD", [x, pads], [y])
    b.output(y)
    return b.build()


def test_resize_grows_a_padded_output():
    x = np.ones((2, 30, 20, 1), np.float32)
    _, (got,) = run(resize_then_pad_model(), x.shape, x)
    assert got.shape == (2, 32, 22, 1) and got.sum() == x.sum()


@pytest.mark.parametrize("shape", [[1, 100000, 100000, 3], [2 ** 31, 1, 1, 3]])
def test_a_huge_resize_is_a_model_error_in_milliseconds(shape):
    # Was numpy's raw MemoryError from a stand-in array of the resized input (issue 17, item 7).
    interpreter = Interpreter(model_content=conv_model())
    interpreter.resize_tensor_input(0, shape)
    start = time.perf_counter()
    with pytest.raises(ModelError, match=r"input tensor 0 \('x'\) resized to .* more than a tensor may hold"):
        interpreter.allocate_tensors()
    assert time.perf_counter() - start < 1


def _propagated(interpreter, shape, symbolic=True, start_from=None):
    """allocate_tensors()'s shape step for input 0 resized to `shape`: (seconds, tracemalloc peak
    in bytes, the graph). `start_from`: the input's shape before the resize (default: the model's),
    so that a resize to the model's own shape still propagates."""
    graph = Graph.from_model(interpreter._executor(0).model, 0)
    if start_from is not None:
        graph.inputs[0].shape = tuple(start_from)
    tracemalloc.start()
    try:
        start = time.perf_counter()
        propagate_shapes(graph, {graph.inputs[0].index: shape}, symbolic=symbolic)
        seconds = time.perf_counter() - start
        return seconds, tracemalloc.get_traced_memory()[1], graph
    finally:
        tracemalloc.stop()


def test_a_large_resize_propagates_shapes_without_arrays():
    # Was 10-14 s and a 2.1 GiB tracemalloc peak: the reference kernels ran on full-size stand-ins
    # (issue 17, item 7). Each activation of the resized conv_model is 256 MiB.
    interpreter = Interpreter(model_content=conv_model())
    interpreter.resize_tensor_input(0, [1, 4096, 4096, 3])
    seconds, peak, graph = _propagated(interpreter, (1, 4096, 4096, 3))
    assert seconds < 2 and peak < 4 << 20
    assert [t.shape for t in graph.outputs] == [(1, 4096, 4096, 4), (1, 1, 1, 4)]


def test_a_large_mediapipe_resize_propagates_shapes_without_arrays(mediapipe_models):
    interpreter = Interpreter(model_path=str(mediapipe_models["face_detection_short_range"]))
    seconds, peak, graph = _propagated(interpreter, (1, 2048, 2048, 3))
    assert seconds < 2 and peak < 4 << 20
    assert [t.shape for t in graph.outputs] == [(1, 229376, 16), (1, 229376, 1)]
    # selfie_segmentation's global pools are fixed windows: at 2048 x 2048 they leave 8 x 8 maps
    # that a MUL cannot broadcast against 512 x 512 ones. Said in milliseconds, no array made.
    interpreter = Interpreter(model_path=str(mediapipe_models["selfie_segmentation"]))
    tracemalloc.start()
    try:
        start = time.perf_counter()
        with pytest.raises(ModelError, match=r"operator #21 \(MUL\) cannot take the resized input shapes: .*"
                                             r"\(1, 512, 512, 16\).*\(1, 8, 8, 16\)"):
            _propagated(interpreter, (1, 2048, 2048, 3))
        assert time.perf_counter() - start < 2 and tracemalloc.get_traced_memory()[1] < 4 << 20
    finally:
        tracemalloc.stop()


def test_a_resize_past_the_output_limit_is_a_model_error_naming_the_node():
    # The input fits the limit (2,070,000,000 elements), CONV_2D's 4-channel output does not.
    interpreter = Interpreter(model_content=conv_model())
    interpreter.resize_tensor_input(0, [1, 30000, 23000, 3])
    start = time.perf_counter()
    with pytest.raises(ModelError, match=r"operator #0 \(CONV_2D\) cannot take the resized input shapes: output 0 "
                                         r"\(tensor \d+\) would have shape \[1, 30000, 23000, 4\], more than a "
                                         r"tensor may hold"):
        interpreter.allocate_tensors()
    assert time.perf_counter() - start < 1


def _outcome(interpreter, shape, symbolic, start_from=None):
    try:
        _, _, graph = _propagated(interpreter, shape, symbolic, start_from)
    except ModelError as exc:
        return str(exc).split(" cannot take")[0]  # the node that refuses the shapes
    return [tuple(t.shape) for t in graph.tensors]


def test_symbolic_shapes_are_the_kernels_shapes_on_every_mediapipe_model(mediapipe_models):
    # The output-shape rules against the reference kernels run on full-size stand-ins (what shape
    # propagation did before), tensor by tensor: at each model's own size (propagated from
    # another shape), batch 2, and twice the height and width (several models refuse that: the
    # same node must refuse it).
    for name, path in sorted(mediapipe_models.items()):
        interpreter = Interpreter(model_path=str(path))
        own = tuple(interpreter.get_input_details()[0]["shape"])
        declared = [tuple(t.shape) for t in Graph.from_model(interpreter._executor(0).model, 0).tensors]
        for shape, start_from in [(own, (1, 1, 1, own[3])), ((2,) + own[1:], None),
                                  ((1, 2 * own[1], 2 * own[2], own[3]), None)]:
            symbolic = _outcome(interpreter, shape, True, start_from)
            assert symbolic == _outcome(interpreter, shape, False, start_from), (name, shape)
            if shape == own:
                assert symbolic == declared, name


def litert_run(model, shape, x):
    """LiteRT's outputs of `model` with input 0 resized to `shape` and set to x."""
    interpreter = LiteRTInterpreter(model_content=model)
    interpreter.resize_tensor_input(0, shape)
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    interpreter.invoke()
    return [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]


@pytest.mark.usefixtures("gpu_available")
@pytest.mark.parametrize("gpu", [False, True], ids=["cpu", "gpu"])
def test_a_batch_resized_to_zero_gives_empty_outputs_then_resizes_back(gpu):
    """LiteRT takes a 0 dimension (an empty batch): its kernels compute nothing and the outputs
    are empty, of the shapes the nodes give. A later resize to a real batch runs again."""
    rng = np.random.default_rng(0)
    b = ModelBuilder()
    x = b.input("x", (1, 8, 8, 3), shape_signature=(-1, 8, 8, 3))
    conv = b.tensor("conv", (1, 8, 8, 4))
    b.op("CONV_2D", [x, b.const("w", rng.uniform(-1, 1, (4, 3, 3, 3)).astype(np.float32)),
                     b.const("bias", rng.uniform(-1, 1, 4).astype(np.float32))], [conv],
         padding=0, stride_w=1, stride_h=1, fused_activation_function=1)
    mean = b.tensor("mean", (1, 1, 1, 4))
    b.op("MEAN", [conv, b.const("axes", np.array([1, 2], np.int32))], [mean], keep_dims=True)
    b.output(conv)
    b.output(mean)
    model = b.build()
    with GpuDelegate() as delegate:
        interpreter = Interpreter(model_content=model, experimental_delegates=[delegate] if gpu else None)
        for shape in [(0, 8, 8, 3), (2, 8, 8, 3)]:
            x = np.random.default_rng(1).uniform(-1, 1, shape).astype(np.float32)
            interpreter.resize_tensor_input(0, shape)
            interpreter.allocate_tensors()
            interpreter.set_tensor(0, x)
            interpreter.invoke()
            got = [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]
            expected = litert_run(model, shape, x)
            assert [g.shape for g in got] == [e.shape for e in expected]
            for g, e in zip(got, expected):
                assert_close(g, e)


@pytest.mark.usefixtures("gpu_available")
@pytest.mark.parametrize("gpu", [False, True], ids=["cpu", "gpu"])
def test_an_input_resized_to_another_rank_runs_as_in_litert(gpu):
    """LiteRT's ResizeInputTensor takes another rank; the nodes then say whether they can run
    it (an ADD broadcasting a [3] constant can). A strict resize keeps the rank."""
    b = ModelBuilder()
    x = b.input("x", (1, 4, 3), shape_signature=(-1, 4, 3))
    y = b.tensor("y", (1, 4, 3))
    b.op("ADD", [x, b.const("c", np.array([0.5, -1.0, 2.0], np.float32))], [y], fused_activation_function=0)
    b.output(y)
    model = b.build()
    shape = (2, 5, 4, 3)
    x = np.random.default_rng(2).uniform(-1, 1, shape).astype(np.float32)
    with GpuDelegate() as delegate:
        _, got = run(model, shape, x, delegate if gpu else None)
    expected = litert_run(model, shape, x)
    assert got[0].shape == expected[0].shape == shape
    assert_close(got[0], expected[0])
    with pytest.raises(ValueError, match="strict resize of input 0: rank 4, the model's is 3"):
        Interpreter(model_content=model).resize_tensor_input(0, shape, strict=True)
