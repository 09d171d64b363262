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
