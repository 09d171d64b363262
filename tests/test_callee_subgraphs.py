"""A WHILE / IF on LiteRT's kernels, its subgraphs copied into the sub-model of its CPU run
(callee_subgraphs.py): the same outputs as LiteRT's interpreter of the file, one LiteRT step
where our Python ran the loop once per iteration."""
import numpy as np
import pytest

from gles_delegate import Interpreter
from gles_delegate.callee_subgraphs import callee_refusal, copy_callees
from gles_delegate.cpu_litert import PRESERVING_CALLERS
from gles_delegate.graph import Graph
from gles_delegate.tflite.reader import read_model
from tests.control_flow_models import (bias_free_depthwise_loop, check_keras_rnn, constant_bound_loop, counter_loop,
                                       if_model, invoke_resized, keras_rnn_loop, nested_loop, rnn_case)
from tests.litert import LiteRTInterpreter
from tests.tolerance import F32_ULPS

STEP = np.float32([0.25, -1.5, 3.0])


def outputs_of(interpreter, inputs):
    interpreter.allocate_tensors()
    for detail, value in zip(interpreter.get_input_details(), inputs):
        interpreter.set_tensor(detail["index"], value)
    interpreter.invoke()
    return [np.asarray(interpreter.get_tensor(d["index"])) for d in interpreter.get_output_details()]


def litert_outputs(model, inputs):
    return outputs_of(LiteRTInterpreter(model_content=model), inputs)


def test_a_nested_loop_runs_as_one_litert_step_its_subgraphs_renumbered():
    """The file holds the inner loop's subgraphs (1, 2) before the outer's (3, 4): the sub-model
    numbers them as first called (3, 4, 1, 2 -> 1, 2, 3, 4), options renumbered alike."""
    data = nested_loop((3,), STEP, outer=3, inner=4)
    x = np.float32([1, 2, 3])
    ours = Interpreter(model_content=data)
    got = outputs_of(ours, [x])
    assert ours.cpu_summary()["litert_partitions"] == [["#0 (WHILE)"]]
    model = read_model(data)
    _, _, renumber = copy_callees(model, Graph.from_model(model, 0).nodes, first_buffer=1)
    assert renumber == {3: 1, 4: 2, 1: 3, 2: 4}
    expected = litert_outputs(data, [x])
    for mine, theirs in zip(got, expected):
        np.testing.assert_array_equal(mine, theirs)
    # x + 12 steps of one addition each: within 12 roundings of the sum's magnitude.
    np.testing.assert_allclose(got[1], x + 12 * STEP, rtol=0, atol=12 * F32_ULPS * np.abs(x + 12 * STEP).max())


@pytest.mark.parametrize("dynamic_batch", [False, True])
def test_a_keras_rnn_runs_on_litert_with_the_dynamic_nodes_after_its_loop(dynamic_batch):
    """keras_rnn_loop: its WHILE's outputs are dynamic (placeholder shapes); the loop and the
    FULLY_CONNECTED reading its h are one LiteRT sub-model, which resizes them as TFLite does."""
    case = rnn_case(5, 2, n_in=3, n_hidden=4)
    data = keras_rnn_loop(*case[:4], 5, 2, dynamic_batch)
    ours = Interpreter(model_content=data)
    got = invoke_resized(ours, case[4])
    runs = ours.cpu_summary()["litert_partitions"]
    assert len(runs) == 1 and "#3 (WHILE)" in runs[0] and ours.cpu_summary()["reference_nodes"] == []
    check_keras_rnn(got, case, data)


@pytest.mark.parametrize("same_shapes", [True, False], ids=["same", "dynamic"])
@pytest.mark.parametrize("condition", [True, False])
def test_if_runs_either_branch_on_litert(condition, same_shapes):
    data = if_model((2, 3), same_shapes)
    rng = np.random.default_rng(0)
    inputs = [np.array([condition]), *rng.standard_normal((2, 2, 3)).astype(np.float32)]
    ours = Interpreter(model_content=data)
    got = outputs_of(ours, inputs)
    assert ours.cpu_summary()["litert_nodes"] == ["#0 (IF)"]
    for mine, theirs in zip(got, litert_outputs(data, inputs)):
        np.testing.assert_array_equal(mine, theirs)


def stateful_body_loop():
    """A loop whose body adds a resource variable to acc: state our interpreter holds."""
    def step(body, i, acc):
        handle, value = body.tensor("handle", (), type_name="RESOURCE"), body.tensor("value", (3,), np.float32)
        body.op("VAR_HANDLE", [], [handle], container="", shared_name="v")
        body.op("READ_VARIABLE", [handle], [value])
        i2, acc2 = body.tensor("i2", (), np.int32), body.tensor("acc2", (3,), np.float32)
        body.op("ADD", [i, body.const("one", np.array(1, np.int32))], [i2], fused_activation_function=0)
        body.op("ADD", [acc, value], [acc2], fused_activation_function=0)
        return i2, acc2
    return constant_bound_loop(("acc", (3,), np.float32), 3, step)


def test_a_loop_whose_body_holds_state_stays_ours():
    model = read_model(stateful_body_loop())
    (loop,) = Graph.from_model(model, 0).nodes
    assert "VAR_HANDLE" in callee_refusal(loop, Graph.from_model(model, 0))
    graph = Graph.from_model(read_model(counter_loop((3,), STEP)), 0)
    assert callee_refusal(graph.nodes[0], graph) is None


def test_a_loop_whose_body_litert_crashes_on_stays_ours():
    """A DEPTHWISE_CONV_2D of 2 inputs in the body crashes LiteRT (litert_crashes.py): the loop
    is not copied into a sub-model; the reference runs it, as LiteRT's interpreter would not."""
    ours = Interpreter(model_content=bias_free_depthwise_loop())
    x = np.arange(18, dtype=np.float32).reshape(1, 3, 3, 2)
    (got,) = outputs_of(ours, [x])
    assert "crashes LiteRT" in ours.cpu_summary()["reference_reasons"]["#0 (WHILE)"]
    np.testing.assert_array_equal(got, x * 0.125)  # three halvings, exact in float32


def test_preserve_all_tensors_keeps_a_loop_ours_and_every_tensor_readable():
    """LiteRT's WHILE leaves a carried value its body passes through unallocated (a Keras GRU's
    'Tensor data is null'): under experimental_preserve_all_tensors the reference runs the loop."""
    data = nested_loop((3,), STEP, outer=2, inner=2)
    ours = Interpreter(model_content=data, experimental_preserve_all_tensors=True)
    outputs_of(ours, [np.float32([1, 2, 3])])
    assert ours.cpu_summary()["reference_reasons"] == {"#0 (WHILE)": PRESERVING_CALLERS}
    for detail in ours.get_tensor_details():
        assert ours.get_tensor(detail["index"]) is not None
