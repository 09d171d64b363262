"""Operators that write their own input, graph inputs that an operator overwrites, graph outputs
that no operator writes: refused where LiteRT refuses them, otherwise the values LiteRT gives
(its reference kernels), on the CPU and with the GpuDelegate."""
import re

import numpy as np
import pytest

from gles_delegate import GpuDelegate, Interpreter, ModelError
from gles_delegate.tflite import ModelBuilder
from tests.litert import LiteRTInterpreter, run_litert

SHAPE = (1, 2, 2, 4)
X = np.arange(16, dtype=np.float32).reshape(SHAPE)


def build(body):
    """A model with float input x of SHAPE and constant c = [2, 2, 2, 2]; body(b, x, c) adds the
    operators and the outputs."""
    b = ModelBuilder()
    x = b.input("x", SHAPE)
    c = b.const("c", np.full(4, 2, np.float32))
    body(b, x, c)
    return b.build()


def binary(b, op, lhs, rhs, out):
    b.op(op, [lhs, rhs], [out], fused_activation_function=0)


def ours(model, gpu):
    """Outputs of our Interpreter (x = X), with or without the GpuDelegate."""
    delegates = [GpuDelegate()] if gpu else None
    interpreter = Interpreter(model_content=model, experimental_delegates=delegates)
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], X)
    interpreter.invoke()
    outputs = [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]
    for delegate in delegates or ():
        delegate.close()
    return outputs


def input_in_place(b, x, c):  # ADD(x, c) -> x, x also the output
    binary(b, "ADD", x, c, x)
    b.output(x)


def intermediate_in_place(b, x, c):  # ADD(x, c) -> y; MUL(y, c) -> y
    y = b.tensor("y", SHAPE)
    binary(b, "ADD", x, c, y)
    binary(b, "MUL", y, c, y)
    b.output(y)


def in_place_to_an_unwritten_output(b, x, c):  # ADD(x, c) -> x; the output t nothing writes
    binary(b, "ADD", x, c, x)
    b.output(b.tensor("t", SHAPE))


@pytest.mark.parametrize("body, tensor, operator", [
    (input_in_place, "tensor 0 ('x')", "#0 (ADD)"),
    (intermediate_in_place, "tensor 2 ('y')", "#1 (MUL)"),
    (in_place_to_an_unwritten_output, "tensor 0 ('x')", "#0 (ADD)"),
], ids=lambda v: getattr(v, "__name__", None))
@pytest.mark.parametrize("gpu", [False, True], ids=["cpu", "gpu"])
def test_an_operator_writing_its_own_input_is_refused(body, tensor, operator, gpu):
    model = build(body)
    with pytest.raises(RuntimeError, match="is both input 0 and output 0"):
        LiteRTInterpreter(model_content=model).allocate_tensors()
    with pytest.raises(ModelError, match=re.escape(f"operator {operator} writes {tensor} as its output 0, "
                                                   "which is also its input 0")):
        ours(model, gpu)


def overwrites_input_after_a_read(b, x, c):  # ADD(x, c) -> y; MUL(y, c) -> x; outputs y, x
    y = b.tensor("y", SHAPE)
    binary(b, "ADD", x, c, y)
    binary(b, "MUL", y, c, x)
    b.output(y)
    b.output(x)


def overwrites_input_from_constants(b, x, c):  # ADD(k, k) -> x; MUL(x, c) -> y
    k = b.const("k", np.ones(SHAPE, np.float32))
    binary(b, "ADD", k, k, x)
    y = b.tensor("y", SHAPE)
    binary(b, "MUL", x, c, y)
    b.output(y)


def output_is_the_input(b, x, c):  # outputs ADD(x, c) and x itself
    y = b.tensor("y", SHAPE)
    binary(b, "ADD", x, c, y)
    b.output(y)
    b.output(x)


def output_is_a_constant(b, x, c):  # outputs ADD(x, c) and c itself
    y = b.tensor("y", SHAPE)
    binary(b, "ADD", x, c, y)
    b.output(y)
    b.output(c)


@pytest.mark.parametrize("body", [overwrites_input_after_a_read, overwrites_input_from_constants,
                                  output_is_the_input, output_is_a_constant], ids=lambda f: f.__name__)
@pytest.mark.parametrize("gpu", [False, True], ids=["cpu", "gpu"])
def test_what_litert_accepts_gives_its_values(body, gpu):
    model = build(body)
    expected = run_litert(model, [X], resolver="reference")
    got = ours(model, gpu)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(g, e)


def unwritten_output(b, x, c):  # outputs ADD(x, c) and t, which nothing writes
    y = b.tensor("y", SHAPE)
    binary(b, "ADD", x, c, y)
    b.output(y)
    b.output(b.tensor("t", SHAPE))


@pytest.mark.parametrize("gpu", [False, True], ids=["cpu", "gpu"])
def test_an_output_nothing_writes_holds_no_data(gpu):
    """LiteRT allocates and invokes the model, and reading that output fails: ours too, with a
    ValueError naming the tensor (not zeros, not the 'partition was released' message)."""
    model = build(unwritten_output)
    litert = LiteRTInterpreter(model_content=model)
    litert.allocate_tensors()
    litert.set_tensor(litert.get_input_details()[0]["index"], X)
    litert.invoke()
    with pytest.raises(ValueError, match="Tensor data is null"):
        litert.get_tensor(litert.get_output_details()[1]["index"])
    with GpuDelegate() as delegate:
        interpreter = Interpreter(model_content=model, experimental_delegates=[delegate] if gpu else None)
        interpreter.allocate_tensors()
        interpreter.set_tensor(0, X)
        interpreter.invoke()
        y, t = (d["index"] for d in interpreter.get_output_details())
        np.testing.assert_array_equal(interpreter.get_tensor(y), X + 2)
        with pytest.raises(ValueError, match=r"tensor 3 \('t'\) holds no data: it is a graph output that no "
                                             "operator writes"):
            interpreter.get_tensor(t)


def test_a_partition_without_dispatches_is_not_a_released_one():
    """A GPU partition whose plan has nothing to dispatch invokes (uploads, downloads); only a
    released one says it was released."""
    model = build(output_is_the_input)
    with GpuDelegate() as delegate:
        interpreter = Interpreter(model_content=model, experimental_delegates=[delegate])
        interpreter.allocate_tensors()
        (partition,) = delegate.partitions
        partition.steps = []  # as a plan whose every node a rewrite removed
        interpreter.set_tensor(0, X)
        interpreter.invoke()
        partition.release()
        with pytest.raises(ValueError, match="this GPU partition was released"):
            interpreter.invoke()
