"""Calls the interpreter cannot take in its state, and tensors that hold no data: ours raises what
LiteRT raises (side by side here), so code written for LiteRT catches ours; StateError and
ResizeError are also the ValueError / ModelError ours raised before."""
import numpy as np
import pytest

from gles_delegate import GpuDelegate, Interpreter, ModelError, ResizeError, StateError
from gles_delegate.tflite import ModelBuilder
from tests.litert import LiteRTInterpreter

SHAPE = (1, 2, 2, 4)
X = np.arange(16, dtype=np.float32).reshape(SHAPE)


def add_reshape_model():
    """x -> ADD 1 -> s -> RESHAPE to a fixed [1, 16] -> y: s is an intermediate, and a batch of 2
    makes the RESHAPE impossible (32 elements into 16)."""
    b = ModelBuilder()
    x = b.input("x", SHAPE)
    s, y = b.tensor("s", SHAPE), b.tensor("y", (1, 16))
    b.op("ADD", [x, b.const("one", np.ones(4, np.float32))], [s], fused_activation_function=0)
    b.op("RESHAPE", [s, b.const("shape", np.array([1, 16], np.int32))], [y], new_shape=[1, 16])
    b.output(y)
    return b.build()


def interpreters(delegate):
    """LiteRT's Interpreter and ours, each with its own copy of the model (not allocated)."""
    model = add_reshape_model()
    return (LiteRTInterpreter(model_content=model),
            Interpreter(model_content=model, experimental_delegates=[delegate]))


def test_invoke_before_allocate_tensors_is_a_runtime_error():
    with GpuDelegate() as delegate:
        for interpreter in interpreters(delegate):
            with pytest.raises(RuntimeError):
                interpreter.invoke()
            with pytest.raises(ValueError):  # LiteRT's type for a tensor before allocation
                interpreter.set_tensor(0, X)
        with pytest.raises(StateError, match=r"allocate_tensors\(\) must be called before"):
            interpreters(delegate)[1].get_tensor(0)


def test_a_failed_allocate_after_a_resize_is_a_runtime_error_and_so_is_the_next_invoke():
    with GpuDelegate() as delegate:
        for interpreter in interpreters(delegate):
            interpreter.allocate_tensors()
            interpreter.resize_tensor_input(0, [2, 2, 2, 4])
            with pytest.raises(RuntimeError) as failed:
                interpreter.allocate_tensors()
            with pytest.raises(RuntimeError):
                interpreter.invoke()
    assert isinstance(failed.value, ResizeError) and isinstance(failed.value, ModelError)  # ours, the last one
    assert "operator #1 (RESHAPE) cannot take the resized input shapes" in str(failed.value)


def test_invoke_after_the_delegate_closed_is_a_runtime_error():
    for runtime in (LiteRTInterpreter, Interpreter):
        delegate = GpuDelegate()
        interpreter = runtime(model_content=add_reshape_model(), experimental_delegates=[delegate])
        interpreter.allocate_tensors()
        interpreter.set_tensor(0, X)
        interpreter.invoke()
        delegate.close()
        with pytest.raises(RuntimeError, match="closed"):
            interpreter.invoke()


def test_an_intermediate_the_gpu_keeps_holds_no_data_unless_all_tensors_are_preserved():
    """LiteRT's XNNPACK keeps its intermediates too: 'Tensor data is null' (a ValueError) from
    both, where ours returned zeros; preserved, the GPU's value."""
    with GpuDelegate() as delegate:
        for interpreter in interpreters(delegate):
            interpreter.allocate_tensors()
            interpreter.set_tensor(0, X)
            interpreter.invoke()
            with pytest.raises(ValueError, match="Tensor data is null"):
                interpreter.get_tensor(1)  # s
        (_, ours) = interpreters(delegate)
        ours.allocate_tensors()
        with pytest.raises(ValueError, match=r"tensor 1 \('s'\) is an intermediate .* experimental_preserve_all"):
            ours.tensor(1)()
        preserved = Interpreter(model_content=add_reshape_model(), experimental_delegates=[delegate],
                                experimental_preserve_all_tensors=True)
        preserved.allocate_tensors()
        preserved.set_tensor(0, X)
        preserved.invoke()
        np.testing.assert_array_equal(preserved.get_tensor(1), X + 1)
