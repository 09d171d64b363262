"""WHILE, IF, CALL_ONCE and the resource variable ops against LiteRT, and the ModelErrors of
malformed control flow (ops/control_flow.py, ops/variables.py, subgraphs.py)."""
import dataclasses
import functools
import weakref

import numpy as np
import pytest

from gles_delegate import Interpreter, ModelError, ops
from gles_delegate.graph import Graph
from gles_delegate.subgraphs import MAX_NESTING, Subgraphs
from gles_delegate.tflite import read_model, write_model
from gles_delegate.tflite.model import SubgraphDef
from tests.control_flow_models import (check_keras_rnn, counter_loop, growing_loop, growing_then_select, if_model,
                                      invoke_resized, keras_rnn_loop, rnn_bounds, rnn_case, rnn_loop,
                                      stateful_counter)
from tests.litert import LiteRTInterpreter, run_litert
from tests.oplib import assert_close
from tests.refcount import collector_disabled


def run(model, inputs):
    """(outputs, interpreter) of our Interpreter on `inputs` (a list in input order), its CPU
    nodes on the reference ('fallback': LiteRT only where the reference lacks a kernel)."""
    interpreter = Interpreter(model_content=model, cpu_backend="fallback")
    interpreter.allocate_tensors()
    for detail, value in zip(interpreter.get_input_details(), inputs):
        interpreter.set_tensor(detail["index"], value)
    interpreter.invoke()
    return [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()], interpreter


@pytest.mark.parametrize("n", [0, 1, 7, 40])
def test_counter_loop_matches_litert(n):
    rng = np.random.default_rng(n)
    shape = tuple(rng.integers(1, 5, rng.integers(1, 4)))
    model = counter_loop(shape, rng.standard_normal(shape).astype(np.float32))
    inputs = [np.array(n, np.int32), rng.standard_normal(shape).astype(np.float32)]
    ours, interpreter = run(model, inputs)
    theirs = run_litert(model, inputs)
    assert int(ours[0]) == int(theirs[0]) == n
    # The same float32 additions in the same order on both sides: bit for bit.
    np.testing.assert_array_equal(ours[1], theirs[1])
    assert interpreter._main.dynamic == frozenset()  # the body keeps the shapes: static outputs


@pytest.mark.parametrize("steps, batch, n_in, n_hidden", [(1, 1, 3, 4), (6, 2, 5, 8), (12, 3, 4, 16)])
def test_rnn_loop_matches_litert(steps, batch, n_in, n_hidden):
    wx, wh, bias, head, inputs = rnn_case(steps, batch, n_in, n_hidden)
    model = rnn_loop(wx, wh, bias, head, steps, batch)
    ours, _ = run(model, inputs)
    theirs = run_litert(model, inputs, resolver="builtin")
    assert int(ours[0]) == int(theirs[0]) == steps
    h_bound, y_bound = rnn_bounds(wx, wh, bias, head, *inputs)
    assert_close(ours[1], theirs[1], bound=np.full(theirs[1].shape, h_bound), what="h")
    assert_close(ours[2], theirs[2], bound=np.full(theirs[2].shape, y_bound), what="head")


@pytest.mark.parametrize("steps, batch, dynamic_batch", [(1, 1, False), (6, 2, False), (4, 3, True)])
def test_keras_rnn_loop_matches_litert(steps, batch, dynamic_batch):
    """The TF converter's Keras RNN loop: the body's SLICEs sized by the loop counter are declared
    as placeholders ([1, 1, 1] for [-1, -1, -1]); planning the body with those shapes failed in
    the CONCATENATION after them. They are dynamic tensors: the body's other nodes keep static
    shapes, the slices take the shapes the invoke gives (the details show them, as in LiteRT).
    With dynamic_batch the caller's resized shapes replace the body's declared ones."""
    case = rnn_case(steps, batch, n_in=3, n_hidden=5)
    model = keras_rnn_loop(*case[:4], steps, batch, dynamic_batch)
    interpreter = Interpreter(model_content=model, cpu_backend="fallback")
    for _ in range(2):  # the second invoke starts from the declared placeholder shapes again
        check_keras_rnn(invoke_resized(interpreter, case[4]), case, model)
    body = interpreter._executors[2]
    assert sorted(t.name for t in body.graph.tensors if id(t) in body.dynamic) == ["after", "before", "outs2"]
    before = next(t.index for t in body.graph.tensors if t.name == "before")
    assert interpreter.get_tensor(before, subgraph_index=2).shape == (steps - 1, batch, 5)  # the last step's


@pytest.mark.parametrize("n", [0, 3])
def test_loop_with_growing_tensors_is_dynamic(n):
    """The carried x doubles per iteration: the WHILE's outputs, and the ADD after it, take the
    shapes the loop gives, as in LiteRT (details included), at every invoke."""
    model = growing_loop(3)
    ours = Interpreter(model_content=model, cpu_backend="fallback")
    theirs = LiteRTInterpreter(model_content=model)
    x = np.arange(3, dtype=np.float32) - 1.5
    for interpreter in (ours, theirs):
        interpreter.allocate_tensors()
    for repeat in range(2):  # the second invoke starts from the declared shapes again
        results = []
        for interpreter in (ours, theirs):
            interpreter.set_tensor(interpreter.get_input_details()[0]["index"], np.array(n + repeat, np.int32))
            interpreter.set_tensor(interpreter.get_input_details()[1]["index"], x)
            interpreter.invoke()
            details = interpreter.get_output_details()
            results.append(([interpreter.get_tensor(d["index"]) for d in details], [list(d["shape"]) for d in details]))
        (mine, my_shapes), (reference, their_shapes) = results
        assert my_shapes == their_shapes
        for a, b in zip(mine, reference):
            np.testing.assert_array_equal(a, b)
        assert mine[1].shape == (3 * 2 ** (n + repeat),)


@pytest.mark.parametrize("backend", ["auto", "reference"])
def test_a_node_reading_a_dynamic_tensor_is_checked_on_its_invoke_shapes(backend):
    """SELECT reads the loop's x, declared [3] (a placeholder): allocate_tensors once refused it
    ('x and y must match' against the [12] condition). It runs as in LiteRT when the loop makes
    x [12], and is a ModelError naming it at invoke when the loop makes x [6]."""
    model = growing_then_select(3, 2)
    rng = np.random.default_rng(0)
    inputs = [np.array(2, np.int32), rng.standard_normal(3).astype(np.float32), rng.random(12) > 0.5,
              rng.standard_normal(12).astype(np.float32)]
    ours = Interpreter(model_content=model, cpu_backend=backend)
    ours.allocate_tensors()
    for detail, value in zip(ours.get_input_details(), inputs):
        ours.set_tensor(detail["index"], value)
    ours.invoke()
    (theirs,) = run_litert(model, inputs)
    np.testing.assert_array_equal(ours.get_tensor(ours.get_output_details()[0]["index"]), theirs)
    ours.set_tensor(ours.get_input_details()[0]["index"], np.array(1, np.int32))
    # Under 'auto' the loop and the SELECT after it are one LiteRT sub-model (callee_subgraphs.py),
    # whose Prepare refuses the shapes; the reference's check names them itself.
    refusal = (r"operator #0 \(WHILE\) .. #1 \(SELECT\) \(2 nodes\) failed in LiteRT: .*SELECT" if backend == "auto" else
               r"operator #1 \(SELECT\) cannot run on the CPU with the input shapes \[\[12\], \[6\], \[12\]\] "
               r"this invoke gave it: .*must match")
    with pytest.raises(ModelError, match=refusal):
        ours.invoke()


def test_loop_follows_a_resized_input():
    model = counter_loop((1,), np.array([0.5], np.float32))  # the step broadcasts over any x
    inputs = [np.array(4, np.int32), np.linspace(-2, 2, 5, dtype=np.float32)]
    results = []
    for make in (Interpreter, LiteRTInterpreter):
        interpreter = make(model_content=model)
        interpreter.resize_tensor_input(interpreter.get_input_details()[1]["index"], [5])
        interpreter.allocate_tensors()
        for detail, value in zip(interpreter.get_input_details(), inputs):
            interpreter.set_tensor(detail["index"], value)
        interpreter.invoke()
        results.append([interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()])
    np.testing.assert_array_equal(results[0][1], results[1][1])
    assert results[0][1].shape == (5,)


def test_body_tensors_are_readable_by_subgraph_index():
    model = counter_loop((2,), np.array([1.0, 2.0], np.float32))
    _, interpreter = run(model, [np.array(3, np.int32), np.zeros(2, np.float32)])
    body = read_model(model).subgraphs[2]
    acc2 = next(k for k, t in enumerate(body.tensors) if t.name == "acc2")
    np.testing.assert_array_equal(interpreter.get_tensor(acc2, subgraph_index=2), [3.0, 6.0])


@pytest.mark.parametrize("condition", [True, False])
@pytest.mark.parametrize("same_shapes", [True, False])
def test_if_matches_litert(condition, same_shapes):
    rng = np.random.default_rng(int(condition) + 2 * int(same_shapes))
    shape = (3, 2)
    model = if_model(shape, same_shapes)
    inputs = [np.array([condition]), *(rng.standard_normal(shape).astype(np.float32) for _ in range(2))]
    ours, interpreter = run(model, inputs)
    theirs = run_litert(model, inputs)
    np.testing.assert_array_equal(ours[0], theirs[0])  # one rounded MUL / SUB, or a copy
    assert bool(interpreter._main.dynamic) == (not same_shapes)


@pytest.mark.parametrize("cpu_backend", ["reference", "auto"])
@pytest.mark.parametrize("initial", [np.array([10.0, -20.0], np.float32), np.arange(6, dtype=np.int32).reshape(2, 3)])
def test_stateful_counter_matches_litert(initial, cpu_backend):
    """CALL_ONCE initializes the variable at the first invoke only; each invoke reads, adds and
    assigns; reset_all_variables() leaves resource variables alone, as in LiteRT: on the
    reference kernels, and whole on LiteRT (cpu_backend 'auto', whole_model.py)."""
    model = stateful_counter(initial)
    x = np.ones_like(initial) * 3
    sequences = []
    for make in (functools.partial(Interpreter, cpu_backend=cpu_backend), LiteRTInterpreter):
        interpreter = make(model_content=model)
        interpreter.allocate_tensors()
        if make is not LiteRTInterpreter:
            assert interpreter._whole_on_litert() == (cpu_backend == "auto")
        outputs = []
        for step in range(4):
            if step == 3:
                interpreter.reset_all_variables()
            interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
            interpreter.invoke()
            outputs.append(interpreter.get_tensor(interpreter.get_output_details()[0]["index"]))
        sequences.append(outputs)
    for ours, theirs in zip(*sequences):
        np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(sequences[0][-1], initial + 4 * x)


def test_variables_are_shared_by_name_and_per_interpreter():
    model = stateful_counter(np.zeros(2, np.float32))
    first, _ = run(model, [np.ones(2, np.float32)])
    second, _ = run(model, [np.ones(2, np.float32)])  # a new interpreter starts from the initializer
    np.testing.assert_array_equal(first[0], second[0])


# -- malformed control flow ---------------------------------------------------------------
def _edited(model, edit):
    """`model` (bytes) with `edit(ModelDef)` applied, written again."""
    definition = read_model(model)
    edit(definition)
    return write_model(definition)


def _set_options(subgraph, operator, **options):
    def edit(definition):
        op = definition.subgraphs[subgraph].operators[operator]
        definition.subgraphs[subgraph].operators[operator] = dataclasses.replace(op, options={**op.options, **options})
    return edit


def _drop_output(subgraph):
    def edit(definition):
        sg = definition.subgraphs[subgraph]
        definition.subgraphs[subgraph] = dataclasses.replace(sg, outputs=sg.outputs[:-1])
    return edit


COUNTER = counter_loop((2,), np.ones(2, np.float32))
MALFORMED = {
    "cond index out of range": (_set_options(0, 0, cond_subgraph_index=7), r"#0 \(WHILE\).*cond_subgraph_index 7 is out of range"),
    "body index out of range": (_set_options(0, 0, body_subgraph_index=-1), r"#0 \(WHILE\).*body_subgraph_index -1"),
    "cond is body": (_set_options(0, 0, cond_subgraph_index=2), r"#0 \(WHILE\).*both 2"),
    "loop into itself": (_set_options(0, 0, body_subgraph_index=0), r"#0 \(WHILE\).*calls back into subgraph 0"),
    "body gives fewer": (_drop_output(2), r"#0 \(WHILE\).*outputs of body subgraph 2 has 2 tensors, the node passes 3"),
    "cond gives none": (_drop_output(1), r"#0 \(WHILE\).*cond subgraph 1 must have one bool output"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_while_is_a_model_error_at_allocate(case):
    edit, match = MALFORMED[case]
    interpreter = Interpreter(model_content=_edited(COUNTER, edit))
    with pytest.raises(ModelError, match=match):
        interpreter.allocate_tensors()


def test_recursion_through_a_body_is_a_model_error():
    def edit(definition):  # the body gets a WHILE that runs the body again
        body, loop = definition.subgraphs[2], definition.subgraphs[0].operators[0]
        again = range(len(body.tensors), len(body.tensors) + len(body.inputs))
        body.tensors += [dataclasses.replace(body.tensors[i], name=f"again{i}") for i in body.inputs]
        body.operators.append(dataclasses.replace(loop, inputs=body.inputs, outputs=tuple(again)))
    with pytest.raises(ModelError, match=r"#0 \(WHILE\).*body_subgraph_index 2 runs subgraph 2, which runs itself"):
        Interpreter(model_content=_edited(COUNTER, edit)).allocate_tensors()


def test_bad_if_and_call_once_are_model_errors():
    bad_if = _edited(if_model((2,)), _set_options(0, 0, else_subgraph_index=9))
    with pytest.raises(ModelError, match=r"#0 \(IF\).*else_subgraph_index 9 is out of range"):
        Interpreter(model_content=bad_if).allocate_tensors()
    self_init = _edited(stateful_counter(np.zeros(1, np.float32)), _set_options(0, 0, init_subgraph_index=0))
    with pytest.raises(ModelError, match=r"#0 \(CALL_ONCE\).*calls back into subgraph 0"):
        Interpreter(model_content=self_init).allocate_tensors()


def test_error_inside_a_body_names_the_subgraph():
    """A body node the kernels refuse: allocate_tensors() names the WHILE, the subgraph and the node."""
    def edit(definition):  # the body's counter ADD reads the float accumulator: int32 + float32
        op = definition.subgraphs[2].operators[0]
        definition.subgraphs[2].operators[0] = dataclasses.replace(op, inputs=(op.inputs[0], 2))
    with pytest.raises(ModelError, match=r"#0 \(WHILE\).*subgraph 2: operator #0 \(ADD\)"):
        Interpreter(model_content=_edited(COUNTER, edit)).allocate_tensors()


def test_reading_an_unassigned_variable_is_a_model_error():
    model = _edited(stateful_counter(np.zeros(2, np.float32)), lambda d: d.subgraphs[1].operators.pop())
    interpreter = Interpreter(model_content=model)
    interpreter.allocate_tensors()
    with pytest.raises(ModelError, match=r"#2 \(READ_VARIABLE\).*nothing has assigned"):
        interpreter.invoke()


def test_control_flow_needs_the_interpreter():
    """Outside an Interpreter (no node.runtime) the kernels refuse the nodes with a reason."""
    graph = Graph.from_model(read_model(stateful_counter(np.zeros(2, np.float32))))
    for node in graph.nodes:
        if node.op in ops.RUNTIME_OPS:
            assert "Interpreter" in ops.unsupported_reason(node), node


def test_control_flow_nested_too_deep_is_a_model_error():
    """A chain of CALL_ONCEs, each init subgraph calling the next, deeper than MAX_NESTING."""
    def edit(definition):
        call = definition.subgraphs[0].operators[0]
        start = len(definition.subgraphs)
        definition.subgraphs[0].operators[0] = dataclasses.replace(call, options={"init_subgraph_index": start})
        for k in range(MAX_NESTING + 1):
            op = dataclasses.replace(call, options={"init_subgraph_index": start + k + 1})
            definition.subgraphs.append(SubgraphDef(f"chain{k}", tensors=[], inputs=(), outputs=(), operators=[op]))
        definition.subgraphs.append(SubgraphDef("last", tensors=[], inputs=(), outputs=(), operators=[]))
    model = _edited(stateful_counter(np.zeros(2, np.float32)), edit)
    with pytest.raises(ModelError, match=rf"#0 \(CALL_ONCE\).*more than {MAX_NESTING} subgraphs deep"):
        Interpreter(model_content=model).allocate_tensors()


def test_subgraphs_go_by_reference_counting():
    """Subgraphs.nesting() recurses in a method: a recursive closure refers to itself (and to
    the Subgraphs), a cycle left for the cyclic collector at every call; and each Runtime (what
    executors and nodes hold) refers to the Subgraphs, which holds the executors, weakly."""
    # The executors here are the Runtimes themselves.
    subgraphs = Subgraphs(read_model(counter_loop((1, 2), 1.0)), lambda index, runtime: runtime, [])
    with collector_disabled():
        assert subgraphs.nesting(0) == 2 and subgraphs.executor(1).subgraphs.nesting(1) == 1
        gone = weakref.ref(subgraphs)
        del subgraphs
        assert gone() is None
