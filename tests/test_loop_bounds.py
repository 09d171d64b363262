"""loop_bounds.input_bound_loop: which loops run as often as the model's inputs say (placement
'fastest' times a model whole on zeros only where none does)."""
import numpy as np
import pytest

from gles_delegate.loop_bounds import input_bound_loop
from gles_delegate.tflite import ModelBuilder
from gles_delegate.tflite.reader import read_model
from tests.control_flow_models import (constant_bound_loop, counter_loop, growing_loop, if_model, keras_rnn_loop,
                                       nested_loop, rnn_case, rnn_loop, stepped_loop)

STEP = np.float32([0.5])


@pytest.mark.parametrize("data, loop", [(counter_loop((1,), STEP), 0), (growing_loop(2), 0), (stepped_loop((1, 4)), 2)],
                         ids=["bound input", "bound input, growing", "step input"])
def test_a_loop_its_inputs_bound_is_found(data, loop):
    assert input_bound_loop(read_model(data)) == f"operator #{loop} (WHILE) of subgraph 0"


def test_loops_their_constants_bound_are_not():
    wx, wh, bias, head, _ = rnn_case(4, 2, 3, 5)
    for data in (rnn_loop(wx, wh, bias, head, 4, 2), keras_rnn_loop(wx, wh, bias, head, 4, 2),
                 keras_rnn_loop(wx, wh, bias, head, 4, 2, dynamic_batch=True), nested_loop((2,), STEP, 3, 2),
                 if_model((2,))):
        assert input_bound_loop(read_model(data)) is None


def shape_bound_loop(through_shape):
    """while i < n: i += 1, where n is SHAPE(x)[0] (fixed once x's shape is) or, with
    `through_shape` False, CAST(x)[0] (x's value)."""
    b = ModelBuilder()
    x = b.input("x", (4,), np.float32)
    n = b.tensor("n", (1,), np.int32)
    if through_shape:
        b.op("SHAPE", [x], [n], out_type=2)
    else:
        first = b.tensor("first", (1,), np.float32)
        b.op("SLICE", [x, b.const("begin", np.int32([0])), b.const("size", np.int32([1]))], [first])
        b.op("CAST", [first], [n])
    cond, body = b.subgraph("cond"), b.subgraph("body")
    outputs = [b.tensor("i_out", (), np.int32), b.tensor("n_out", (1,), np.int32)]
    b.op("WHILE", [b.const("zero", np.array(0, np.int32)), n], outputs, cond_subgraph_index=cond.index,
         body_subgraph_index=body.index)
    b.output(outputs[0])
    ci, cn = cond.input("i", (), np.int32), cond.input("n", (1,), np.int32)
    less = cond.tensor("less", (1,), np.bool_)
    cond.op("LESS", [ci, cn], [less])
    cond.output(less)
    bi, bn = body.input("i", (), np.int32), body.input("n", (1,), np.int32)
    i2 = body.tensor("i2", (), np.int32)
    body.op("ADD", [bi, body.const("one", np.array(1, np.int32))], [i2], fused_activation_function=0)
    body.output(i2)
    body.output(bn)
    return b.build()


def test_a_bound_from_an_inputs_shape_is_fixed_one_from_its_value_is_not():
    assert input_bound_loop(read_model(shape_bound_loop(True))) is None
    assert input_bound_loop(read_model(shape_bound_loop(False))) == "operator #2 (WHILE) of subgraph 0"


def test_a_counter_the_body_makes_input_dependent_is_found():
    """The bound is a constant, but the body adds the input to the counter: the fixpoint over the
    carried values finds the condition reading it."""
    def step(body, i, s):
        i2 = body.tensor("i2", (), np.int32)
        body.op("ADD", [i, s], [i2], fused_activation_function=0)
        return i2, s
    data = constant_bound_loop(("s", (), np.int32), 5, step, output=0)
    assert input_bound_loop(read_model(data)) == "operator #0 (WHILE) of subgraph 0"
