"""fold_constants: constant-only nodes become read-only constants at allocate time."""
import numpy as np
import pytest

from gles_delegate import Interpreter, ModelError
from gles_delegate.graph import Graph
from gles_delegate.tflite import ModelBuilder, read_model
from gles_delegate.fold_constants import fold_constants


def mean_of_constant_scalar():
    """MEAN of a constant scalar (numpy reduces it to a numpy scalar, not an array) feeding an ADD."""
    b = ModelBuilder()
    x = b.input("x", (2,))
    value, axis = b.const("value", np.float32(2.5)), b.const("axis", np.array([0], np.int32))
    mean, out = b.tensor("mean", ()), b.tensor("out", (2,))
    b.op("MEAN", [value, axis], [mean], keep_dims=False)
    b.op("ADD", [x, mean], [out])
    b.output(out)
    return b.build()


def test_a_numpy_scalar_result_folds_into_a_read_only_constant():
    graph = Graph.from_model(read_model(mean_of_constant_scalar()))
    assert [node.op for node in fold_constants(graph)] == ["MEAN"]
    folded = graph.nodes[0].inputs[1].data
    assert isinstance(folded, np.ndarray) and folded.shape == () and folded == np.float32(2.5)
    assert not folded.flags.writeable
    interp = Interpreter(model_content=mean_of_constant_scalar())
    interp.allocate_tensors()
    interp.set_tensor(interp.get_input_details()[0]["index"], np.array([1.0, -1.0], np.float32))
    interp.invoke()
    np.testing.assert_array_equal(interp.get_tensor(interp.get_output_details()[0]["index"]), [3.5, 1.5])


def test_a_result_that_does_not_fit_the_declared_shape_is_a_model_error():
    b = ModelBuilder()
    x = b.const("x", np.arange(6, dtype=np.float32).reshape(2, 3))
    y = b.tensor("y", (4,))
    b.op("RESHAPE", [x], [y], new_shape=[6])
    b.output(y)
    # Said by the fold, or before the kernel runs by RESHAPE's output-shape rule (ops.OUTPUT_SHAPES).
    with pytest.raises(ModelError, match=r"#0 \(RESHAPE\).*output (tensor 1 shape|0 \(tensor 1\) would have shape) "
                                         r"\[6\].*declares \[4\]"):
        Interpreter(model_content=b.build()).allocate_tensors()


def keras_gate_model(batch=1):
    """x [batch, 4, 4, 8] (a dynamic batch, as a Keras 3 model declares it) -> MEAN over H, W ->
    RESHAPE to [batch, 1, 1, 8], the target shape computed as Keras writes it: SHAPE(x) ->
    STRIDED_SLICE (the batch) -> PACK with 1, 1, 8 -> then x * the gate."""
    b = ModelBuilder()
    x = b.input("x", (batch, 4, 4, 8), shape_signature=(-1, 4, 4, 8))
    mean = b.tensor("mean", (batch, 8), shape_signature=(-1, 8))
    b.op("MEAN", [x, b.const("axes", np.array([1, 2], np.int32))], [mean], keep_dims=False)
    shape, size = b.tensor("shape", (4,), np.int32), b.tensor("batch", (), np.int32)
    b.op("SHAPE", [x], [shape], out_type=2)
    one = np.array([1], np.int32)
    b.op("STRIDED_SLICE", [shape, b.const("begin", np.array([0], np.int32)), b.const("end", one),
                           b.const("strides", one)], [size], shrink_axis_mask=1)
    target = b.tensor("target", (4,), np.int32)
    b.op("PACK", [size] + [b.const(f"d{k}", np.array(v, np.int32)) for k, v in enumerate((1, 1, 8))], [target],
         values_count=4, axis=0)
    gate = b.tensor("gate", (batch, 1, 1, 8), shape_signature=(-1, 1, 1, 8))
    b.op("RESHAPE", [mean, target], [gate])
    y = b.tensor("y", (batch, 4, 4, 8), shape_signature=(-1, 4, 4, 8))
    b.op("MUL", [x, gate], [y], fused_activation_function=0)
    b.output(y)
    return b.build()


def expected_gate(x):
    return x * x.mean(axis=(1, 2), keepdims=True)


def test_shape_of_a_fixed_shape_folds_with_what_only_computes_on_it():
    interpreter = Interpreter(model_content=keras_gate_model())
    interpreter.allocate_tensors()
    assert [node.op for node in interpreter._main.graph.nodes] == ["MEAN", "RESHAPE", "MUL"]
    target = {d["name"]: d["index"] for d in interpreter.get_tensor_details()}["target"]
    np.testing.assert_array_equal(interpreter.get_tensor(target), [1, 1, 1, 8])


def test_a_folded_shape_follows_a_resize():
    interpreter = Interpreter(model_content=keras_gate_model())
    interpreter.allocate_tensors()
    interpreter.resize_tensor_input(0, [3, 4, 4, 8])
    interpreter.allocate_tensors()  # plans again from the model: SHAPE folds to [3, 4, 4, 8]
    x = np.random.default_rng(0).uniform(-1, 1, (3, 4, 4, 8)).astype(np.float32)
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    interpreter.invoke()
    out, expected = interpreter.get_tensor(interpreter.get_output_details()[0]["index"]), expected_gate(x)
    # float32 throughout: the mean's summation order differs from numpy's by a few ulps.
    assert np.abs(out - expected).max() <= 16 * np.finfo(np.float32).eps * np.abs(expected).max()
