"""The complex view (gpu/complex_view.py): complex64 tensors on the GPU as float32 pairs [..., 2].
The layout ops LiteRT runs on complex64 (RESHAPE, SQUEEZE, EXPAND_DIMS, TRANSPOSE, SLICE,
STRIDED_SLICE, TILE) move complex values on the GPU exactly as the reference does, whatever axes
they name (negative ones, masks, fewer slice specs than axes); ops that would mix the parts stay
on the CPU with a reason; complex64 partition inputs and outputs pass every I/O path, a warm start
from the serialization cache, captured intermediates, debug_nonfinite and LiteRT's Interpreter."""
import logging

import numpy as np
import pytest

from gles_delegate import GpuDelegate, Interpreter
from gles_delegate.gpu import complex_view
from gles_delegate.tflite import ModelBuilder
from tests.gpu.gpulib import PRECISIONS, as_stored, run_gpu
from tests.gpu.test_io_paths import IO_PATHS, check_io_path, use_io_path
from tests.oplib import In, first_node, run_ours, single_op_model
from tests.ops.test_spectral import complex_values

F32, C64, I32 = np.float32, np.complex64, np.int32


def random_complex(shape, seed=0):
    rng = np.random.default_rng(seed)
    return complex_values(rng.normal(size=shape), rng.normal(size=shape), C64)


def const(values):
    return In(np.array(values, I32), const=True)


# (op, inputs after the complex value, options, the value's shape)
LAYOUT_CASES = {
    "reshape": ("RESHAPE", [const([3, 8])], {}, (2, 3, 4)),
    "reshape_option_only": ("RESHAPE", [], {"new_shape": [4, 6]}, (2, 3, 4)),
    "squeeze_last": ("SQUEEZE", [], {"squeeze_dims": [-1]}, (2, 3, 1)),  # -1: not the pair axis
    "squeeze_all": ("SQUEEZE", [], {}, (1, 3, 1)),
    "expand_dims_last": ("EXPAND_DIMS", [const([-1])], {}, (2, 3)),
    "transpose": ("TRANSPOSE", [const([2, 0, 1])], {}, (2, 3, 4)),
    "transpose_rank5": ("TRANSPOSE", [const([4, 1, 2, 0, 3])], {}, (2, 1, 3, 2, 5)),
    "slice": ("SLICE", [const([1, 0, 2]), const([1, -1, 2])], {}, (2, 3, 5)),
    "strided_slice": ("STRIDED_SLICE", [const([1, -1, 4]), const([7, -4, 0]), const([2, -1, -2])], {"end_mask": 4},
                      (8, 5, 6)),
    "strided_slice_fewer_specs": ("STRIDED_SLICE", [const([1]), const([3]), const([1])], {}, (4, 3, 2)),
    "strided_slice_ellipsis": ("STRIDED_SLICE", [const([0, 0, 1]), const([1, 0, 3]), const([1, 1, 1])],
                               {"ellipsis_mask": 2, "shrink_axis_mask": 1}, (2, 3, 4, 5)),
    "strided_slice_new_axis": ("STRIDED_SLICE", [const([0, 1, 0]), const([0, 3, 2]), const([1, 1, 1])],
                               {"new_axis_mask": 1, "begin_mask": 1, "end_mask": 1}, (4, 3)),
    "tile": ("TILE", [const([2, 1, 3])], {}, (2, 3, 2)),
}


def layout_model(case):
    op, operands, options, shape = LAYOUT_CASES[case]
    inputs = [In(random_complex(shape, len(case)))] + operands
    return single_op_model(op, inputs, options, output_dtypes=[C64]), inputs


@pytest.mark.parametrize("precision", PRECISIONS + ("auto",))
@pytest.mark.parametrize("case", LAYOUT_CASES)
def test_layout_ops_move_complex_values(case, precision):
    """Exactly the reference's values (on the inputs as stored: halves in half storage)."""
    model, inputs = layout_model(case)
    (reference,) = run_ours(model, [as_stored(inputs[:1], precision)[0].value])
    (gpu,), summary = run_gpu(model, [inputs[0].value], precision)
    assert (summary["gpu_nodes"], summary["cpu_nodes"]) == (1, 0), summary
    assert gpu.dtype == C64 and np.array_equal(gpu, reference), case


def complex_mul_model():
    """z * z (a complex product) -> COMPLEX_ABS."""
    b = ModelBuilder()
    z = b.input("z", (2, 3), C64)
    square, out = b.tensor("square", (2, 3), C64), b.tensor("abs", (2, 3), F32)
    b.op("MUL", [z, z], [square], fused_activation_function=0)
    b.op("COMPLEX_ABS", [square], [out])
    b.output(out)
    return b.build()


def test_ops_that_would_mix_the_parts_stay_on_the_cpu():
    """A complex MUL has no view (the pairs' product is no elementwise product): it runs on the
    CPU with the reason said, COMPLEX_ABS after it on the GPU; complex128 has no view at all."""
    model = complex_mul_model()
    z = random_complex((2, 3))
    with GpuDelegate() as delegate:
        (gpu,) = run_ours(model, [z], experimental_delegates=[delegate])
        assert (delegate.summary()["gpu_nodes"], delegate.summary()["cpu_nodes"]) == (1, 1)
        assert "no complex view: MUL has no rule" in delegate.unsupported_reason(first_node(model))
        wide = first_node(single_op_model("REAL", [In(z.astype(np.complex128))], output_dtypes=[np.float64]))
        assert "float64" in delegate.unsupported_reason(wide)
    np.testing.assert_allclose(gpu, np.abs(z * z), rtol=1e-6)


def cast_after_transpose(target=F32):
    """complex z [3, 5] -> TRANSPOSE -> CAST to `target` (TFLite: the real part)."""
    b = ModelBuilder()
    z = b.input("z", (3, 5), C64)
    t, out = b.tensor("t", (5, 3), C64), b.tensor("out", (5, 3), target)
    b.op("TRANSPOSE", [z, b.const("perm", np.array([1, 0], I32))], [t])
    b.op("CAST", [t], [out])
    b.output(out)
    return b.build()


@pytest.mark.parametrize("precision", PRECISIONS + ("auto",))
def test_a_cast_to_float_keeps_the_real_part_on_the_gpu(precision):
    """CAST complex64 -> float32 (BirdNET's spectrogram) runs as REAL on the view: exactly the
    reference's values, the partition whole on the GPU."""
    z = random_complex((3, 5))
    (reference,) = run_ours(cast_after_transpose(), [as_stored([In(z)], precision)[0].value])
    (gpu,), summary = run_gpu(cast_after_transpose(), [z], precision)
    assert (summary["gpu_nodes"], summary["cpu_nodes"]) == (2, 0), summary
    assert gpu.dtype == F32 and np.array_equal(gpu, reference) and np.array_equal(reference, as_stored(
        [In(z)], precision)[0].value.T.real)


def test_a_cast_to_an_integer_stays_on_the_cpu():
    with GpuDelegate() as delegate:
        (ours,) = run_ours(cast_after_transpose(I32), [random_complex((3, 5)) * 9], experimental_delegates=[delegate])
        assert (delegate.summary()["gpu_nodes"], delegate.summary()["cpu_nodes"]) == (1, 1)
    assert ours.dtype == I32


def test_an_axis_rule_that_splits_the_pairs_is_refused(monkeypatch):
    """The iota check: a TRANSPOSE rule putting the pair axis first would move real and imaginary
    parts apart; the node then has no view, and runs on the CPU."""
    model, inputs = layout_model("transpose")
    node = first_node(model)
    assert complex_view.unsupported_reason(node, lambda n: None) is None
    monkeypatch.setitem(complex_view.AXIS_RULES, "TRANSPOSE",
                        lambda node, rank: ({1: np.array([rank, *range(rank)])}, {}))
    assert "would not move the real and imaginary parts" in complex_view.unsupported_reason(node, lambda n: None)


def test_the_view_keeps_indices_and_numbers_new_constants_past_the_model():
    model, _ = layout_model("transpose")
    node = first_node(model)
    from gles_delegate.graph import Graph
    graph = Graph([node], [node.inputs[0]], [node.outputs[0]], [*node.inputs, *node.outputs])
    view = complex_view.complex_view(graph, tensor_count=100)
    (viewed,) = view.nodes
    assert [(t.index, t.shape, t.dtype) for t in view.inputs] == [(node.inputs[0].index, (2, 3, 4, 2), F32)]
    assert viewed.inputs[1].index == 100 and viewed.inputs[1].data.tolist() == [2, 0, 1, 3]
    assert node.inputs[1].data.tolist() == [2, 0, 1] and node.outputs[0].dtype == C64  # the model untouched
    assert complex_view.complex_view(Graph([], [], [], [])).nodes == []


def layout_then_abs(op="TRANSPOSE", operand=(1, 0), shape=(3, 5), out_shape=(5, 3), expose=True):
    """complex z -> op(z, operand) = t -> |t|, a float output; t a (complex) output too when `expose`."""
    b = ModelBuilder()
    z = b.input("z", shape, C64)
    t, m = b.tensor("t", out_shape, C64), b.tensor("m", out_shape, F32)
    b.op(op, [z, b.const("operand", np.array(operand, I32))], [t])
    b.op("COMPLEX_ABS", [t], [m])
    if expose:
        b.output(t)
    b.output(m)
    return b.build()


def invoke(interpreter, z):
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], z)
    interpreter.invoke()
    return [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]


@pytest.mark.parametrize("path", IO_PATHS)
def test_complex_inputs_and_outputs_on_every_io_path(monkeypatch, path):
    with GpuDelegate() as delegate:
        use_io_path(monkeypatch, delegate, path)
        interpreter = Interpreter(model_content=layout_then_abs(), experimental_delegates=[delegate])
        interpreter.allocate_tensors()
        for seed in (1, 2):  # a second invoke reads the input anew
            z = random_complex((3, 5), seed)
            t, m = invoke(interpreter, z)
            assert t.dtype == C64 and np.array_equal(t, z.T)
            np.testing.assert_allclose(m, np.abs(z.T), rtol=1e-6)
        (partition,) = delegate.partitions
        check_io_path(partition, path)


def test_a_warm_start_loads_a_complex_plan(tmp_path):
    z = random_complex((3, 5))
    results = []
    for _ in range(2):
        with GpuDelegate(serialization_dir=str(tmp_path)) as delegate:
            interpreter = Interpreter(model_content=layout_then_abs(), experimental_delegates=[delegate])
            interpreter.allocate_tensors()
            results.append((delegate.summary()["cache_hit"], invoke(interpreter, z)))
    assert [hit for hit, _ in results] == [False, True]
    assert all(np.array_equal(a, b) for a, b in zip(results[0][1], results[1][1]))


def test_captured_complex_intermediates_are_complex():
    """preserve_all_tensors: a complex tensor the GPU computed reads back as the model's complex64."""
    model = layout_then_abs("RESHAPE", [3, 4], (2, 6), (3, 4), expose=False)
    value = random_complex((2, 6))
    with GpuDelegate() as delegate:
        interpreter = Interpreter(model_content=model, experimental_delegates=[delegate],
                                  experimental_preserve_all_tensors=True)
        interpreter.allocate_tensors()
        invoke(interpreter, value)
        assert delegate.summary()["gpu_nodes"] == 2
        captured = interpreter.get_tensor(next(d["index"] for d in interpreter.get_tensor_details()
                                                if d["name"] == "t"))
    assert captured.dtype == C64 and np.array_equal(captured, value.reshape(3, 4))


def test_debug_nonfinite_sees_an_imaginary_nan(caplog):
    z = random_complex((3, 5))
    z.imag[1, 2] = np.nan
    with GpuDelegate(debug_nonfinite=True) as delegate:
        interpreter = Interpreter(model_content=layout_then_abs(), experimental_delegates=[delegate])
        interpreter.allocate_tensors()
        with caplog.at_level(logging.WARNING, logger="gles_delegate"):
            invoke(interpreter, z)
        found = delegate.summary()["first_nonfinite"]
    assert found["step"] is None and found["nan"] == 1, found


def test_litert_runs_the_complex_partition_through_the_delegate():
    """LiteRT's own Interpreter hands our kernel its complex64 tensors' memory."""
    litert = pytest.importorskip("ai_edge_litert.interpreter")
    z = random_complex((3, 5))
    alone = litert.Interpreter(model_content=layout_then_abs())
    alone.allocate_tensors()
    with GpuDelegate() as delegate:
        delegated = litert.Interpreter(model_content=layout_then_abs(), experimental_delegates=[delegate])
        delegated.allocate_tensors()
        ours, theirs = invoke(delegated, z), invoke(alone, z)
        assert delegate.summary()["gpu_nodes"] == 2
    assert np.array_equal(ours[0], theirs[0])
    np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-6)
