"""Models with control flow under the GPU delegate: a small loop runs in a LiteRT sub-model
(callee_subgraphs.py), a large one's body gets GPU partitions of its own (CALLEE_WORK_MAX set
below every body here to make them large), the nodes after a loop with static outputs stay on
the GPU, dynamic tensors stay on the CPU, and the results match LiteRT."""
import numpy as np
import pytest

from gles_delegate import GpuDelegate, Interpreter, callee_subgraphs
from gles_delegate.cpu_litert import LiteRTStep
from gles_delegate.gpu.runtime import GpuPartition
from tests.control_flow_models import (check_keras_rnn, growing_loop, invoke_resized, keras_rnn_loop, rnn_bounds,
                                      rnn_case, rnn_loop, stateful_counter)
from tests.litert import run_litert
from tests.oplib import assert_close


def _run(model, inputs, delegate):
    interpreter = Interpreter(model_content=model, experimental_delegates=[delegate])
    interpreter.allocate_tensors()
    for detail, value in zip(interpreter.get_input_details(), inputs):
        interpreter.set_tensor(detail["index"], value)
    interpreter.invoke()
    return [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()], interpreter


def _delegated_ops(interpreter, subgraph):
    """The ops of subgraph `subgraph` that run in GPU partitions."""
    steps = interpreter._executors[subgraph].steps
    return sorted(node.op for step in steps if hasattr(step, "release") for node in step.nodes)


@pytest.fixture
def large_loops(monkeypatch):
    """Every loop body counts as large: it stays ours, its nodes in GPU partitions."""
    monkeypatch.setattr(callee_subgraphs, "CALLEE_WORK_MAX", -1)


@pytest.mark.parametrize("steps, batch", [(1, 1), (5, 2)])
def test_rnn_loop_body_runs_on_the_gpu(steps, batch, large_loops):
    wx, wh, bias, head, inputs = rnn_case(steps, batch, n_in=4, n_hidden=8)
    model = rnn_loop(wx, wh, bias, head, steps, batch)
    with GpuDelegate(precision="fp32", max_delegated_partitions=0) as delegate:
        ours, interpreter = _run(model, inputs, delegate)
        body_ops, main_ops = _delegated_ops(interpreter, 2), _delegated_ops(interpreter, 0)
        # Invoking again reuses the partitions (the loop's shapes are static).
        interpreter.invoke()
        again = [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]
    assert {"FULLY_CONNECTED", "TANH"} <= set(body_ops), body_ops
    assert main_ops == ["FULLY_CONNECTED"], main_ops
    theirs = run_litert(model, inputs, resolver="builtin")
    assert int(ours[0]) == int(theirs[0]) == steps
    h_bound, y_bound = rnn_bounds(wx, wh, bias, head, *inputs)
    assert_close(ours[1], theirs[1], bound=np.full(theirs[1].shape, h_bound), what="h")
    assert_close(ours[2], theirs[2], bound=np.full(theirs[2].shape, y_bound), what="head")
    for first, second in zip(ours, again):
        np.testing.assert_array_equal(first, second)


def test_dynamic_loop_stays_on_the_cpu():
    """A node that reads a dynamic tensor (the grown x) is not delegated, and the model still
    gives LiteRT's results with the delegate present."""
    x = np.array([1.0, -2.0, 0.5], np.float32)
    with GpuDelegate(precision="fp32", max_delegated_partitions=0) as delegate:
        grown, interpreter = _run(growing_loop(3), [np.array(2, np.int32), x], delegate)
        assert _delegated_ops(interpreter, 0) == []
    for ours, theirs in zip(grown, run_litert(growing_loop(3), [np.array(2, np.int32), x])):
        np.testing.assert_array_equal(ours, theirs)


def test_a_counter_in_a_resource_variable_runs_on_the_gpu():
    """READ_VARIABLE's shape is fixed at allocate (the initializer and the ADD assign that shape),
    so the read, the ADD and the assignment run on the GPU (tests/gpu/test_variables.py goes on)."""
    x = np.array([1.0, -2.0, 0.5], np.float32)
    with GpuDelegate(precision="fp32", max_delegated_partitions=0) as delegate:
        counted, interpreter = _run(stateful_counter(x), [x], delegate)
        assert _delegated_ops(interpreter, 0) == ["ADD", "ASSIGN_VARIABLE", "READ_VARIABLE", "VAR_HANDLE"]
    np.testing.assert_array_equal(counted[0], run_litert(stateful_counter(x), [x])[0])


@pytest.mark.parametrize("dynamic_batch", [False, True])
def test_keras_rnn_loop_body_runs_on_the_gpu(dynamic_batch, large_loops):
    """The TF converter's Keras RNN loop (its body's SLICEs are dynamic tensors): the body's
    static nodes run on the GPU (the float math, and the int32 arithmetic that builds the slices'
    begin indices from the loop counter), the slices and what reads them on the CPU, and the
    results match LiteRT."""
    case = rnn_case(4, 2, n_in=3, n_hidden=8)
    model = keras_rnn_loop(*case[:4], 4, 2, dynamic_batch)
    with GpuDelegate(precision="fp32", max_delegated_partitions=0) as delegate:
        interpreter = Interpreter(model_content=model, experimental_delegates=[delegate])
        ours = invoke_resized(interpreter, case[4])
        body_ops = _delegated_ops(interpreter, 2)
    assert {"FULLY_CONNECTED", "GATHER", "TANH", "ADD", "CONCATENATION"} <= set(body_ops) and "SLICE" not in body_ops
    check_keras_rnn(ours, case, model)


def test_a_small_loop_runs_on_litert_the_head_after_it_on_the_gpu():
    """rnn_loop's body is small: the WHILE runs in one LiteRT step (its cond and body copied in),
    the FULLY_CONNECTED head after it in a GPU partition, fed by LiteRT's output."""
    wx, wh, bias, head, inputs = rnn_case(5, 2, n_in=4, n_hidden=8)
    model = rnn_loop(wx, wh, bias, head, 5, 2)
    with GpuDelegate(precision="fp32", max_delegated_partitions=0) as delegate:
        ours, interpreter = _run(model, inputs, delegate)
        steps = interpreter._main.steps
        assert [type(s) for s in steps] == [LiteRTStep, GpuPartition]
        assert [n.op for n in steps[0].nodes] == ["WHILE"] and _delegated_ops(interpreter, 0) == ["FULLY_CONNECTED"]
    theirs = run_litert(model, inputs, resolver="builtin")
    h_bound, y_bound = rnn_bounds(wx, wh, bias, head, *inputs)
    assert int(ours[0]) == int(theirs[0]) == 5
    assert_close(ours[1], theirs[1], bound=np.full(theirs[1].shape, h_bound), what="h")
    assert_close(ours[2], theirs[2], bound=np.full(theirs[2].shape, y_bound), what="head")

