"""assign_in_place: the node computing an ASSIGN_VARIABLE's value writes it into the variable's
storage, and the assignment's copy goes; not where that would change what the partition reads
(a read of the variable after the value is computed, a second assignment, a value from outside,
one value assigned to two variables)."""
import numpy as np
import pytest

from gles_delegate import GpuDelegate, Interpreter
from gles_delegate.gpu.transforms import assign_in_place
from gles_delegate.tflite import ModelBuilder
from tests.gpu.transforms.rulelib import statuses, why
from tests.streaming_models import Ring, frames, ring_model

RULE = "assign_in_place"


def _steps(model, inputs, steps=4, **options):
    """Outputs of `steps` invokes on the GPU and on the reference (each equal), the delegate's
    rewrite log and dispatch count."""
    reference = Interpreter(model_content=model, cpu_backend="fallback")
    with GpuDelegate(precision="fp32", **options) as delegate:
        gpu = Interpreter(model_content=model, experimental_delegates=[delegate])
        for interpreter in (gpu, reference):
            interpreter.allocate_tensors()
        for step in range(steps):
            outputs = []
            for interpreter in (gpu, reference):
                for detail, value in zip(interpreter.get_input_details(), inputs(step)):
                    interpreter.set_tensor(detail["index"], value)
                interpreter.invoke()
                outputs.append([interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()])
            for ours, expected in zip(*outputs):
                np.testing.assert_allclose(ours, expected, rtol=1e-5, atol=1e-5)
        return list(delegate.rewrite_log), delegate.summary()["dispatches"]


def test_a_ring_buffers_slice_writes_the_state(monkeypatch):
    ring = Ring()
    xs = frames(ring, 4)
    log, count = _steps(ring_model(ring), lambda k: [xs[k]])
    assert statuses(log, RULE) == [("APPLIED", "#6 (ASSIGN_VARIABLE)")]
    assert "#5 (STRIDED_SLICE) writes tensor" in why(log, RULE, "#6 (ASSIGN_VARIABLE)")
    monkeypatch.setattr(assign_in_place, "ENABLED", False)
    _, without = _steps(ring_model(ring), lambda k: [xs[k]])
    assert count == without - 1


def _counter(case):
    """A variable v (initialized to zeros) and, by case, its assignments: 'read between' v = x + v
    read after x + v is computed too; 'twice' v = x, then v = x * 2; 'from outside' v = x (a
    model input); 'two variables' v = w = x + 1. Outputs: what the variables hold after."""
    b = ModelBuilder()
    x = b.input("x", (2, 3))
    init = b.subgraph("init")
    b.op("CALL_ONCE", [], [], init_subgraph_index=init.index)
    names = ("v", "w") if case == "two variables" else ("v",)
    handles = {}
    for name in names:
        handles[name] = b.tensor(f"{name}_handle", (), type_name="RESOURCE")
        b.op("VAR_HANDLE", [], [handles[name]], container="", shared_name=name)
        init_handle = init.tensor(f"{name}_handle", (), type_name="RESOURCE")
        init.op("VAR_HANDLE", [], [init_handle], container="", shared_name=name)
        init.op("ASSIGN_VARIABLE", [init_handle, init.const(f"{name}_zeros", np.zeros((2, 3), np.float32))], [])
    value, total = b.tensor("value", (2, 3)), b.tensor("total", (2, 3))
    b.op("READ_VARIABLE", [handles["v"]], [value])
    b.op("ADD", [value, x], [total], fused_activation_function=0)
    if case == "read between":
        again = b.tensor("again", (2, 3))
        b.op("READ_VARIABLE", [handles["v"]], [again])
        b.op("ASSIGN_VARIABLE", [handles["v"], total], [])
        b.output(again)
    elif case == "twice":
        doubled = b.tensor("doubled", (2, 3))
        b.op("ASSIGN_VARIABLE", [handles["v"], total], [])
        b.op("ADD", [total, total], [doubled], fused_activation_function=0)
        b.op("ASSIGN_VARIABLE", [handles["v"], doubled], [])
    elif case == "from outside":
        b.op("ASSIGN_VARIABLE", [handles["v"], x], [])
    else:
        for name in names:
            b.op("ASSIGN_VARIABLE", [handles[name], total], [])
    after = b.tensor("after", (2, 3))
    b.op("READ_VARIABLE", [handles["v"]], [after])
    b.output(after)
    return b.build()


@pytest.mark.parametrize("case, skipped, reason", [
    ("read between", "#5 (ASSIGN_VARIABLE)", "read between"),
    ("twice", "#4 (ASSIGN_VARIABLE)", "more than once"),
    ("from outside", "#4 (ASSIGN_VARIABLE)", "from outside the partition"),
    ("two variables", "#6 (ASSIGN_VARIABLE)", "to another variable in place already")])
def test_assignments_that_would_change_what_is_read_stay_copies(case, skipped, reason):
    rng = np.random.default_rng(2)
    xs = [rng.normal(0, 1, (2, 3)).astype(np.float32) for _ in range(4)]
    log, _ = _steps(_counter(case), lambda k: [xs[k]])
    assert ("SKIPPED", skipped) in statuses(log, RULE)
    assert reason in why(log, RULE, skipped)


def _slice_of_input_assigned():
    """v [1, 2, 2, 3] (zeros at first) = the last 2 rows of x [1, 5, 2, 3], a STRIDED_SLICE
    whose output is one contiguous block of x's storage (what slice_views makes a view); the
    output is v as read before that assignment (found by gles-fuzz-graphs --families state)."""
    b = ModelBuilder()
    x = b.input("x", (1, 5, 2, 3))
    init = b.subgraph("init")
    b.op("CALL_ONCE", [], [], init_subgraph_index=init.index)
    init_handle = init.tensor("handle", (), type_name="RESOURCE")
    init.op("VAR_HANDLE", [], [init_handle], container="", shared_name="v")
    init.op("ASSIGN_VARIABLE", [init_handle, init.const("zeros", np.zeros((1, 2, 2, 3), np.float32))], [])
    handle, state, newest = b.tensor("handle", (), type_name="RESOURCE"), b.tensor("state", (1, 2, 2, 3)), \
        b.tensor("newest", (1, 2, 2, 3))
    b.op("VAR_HANDLE", [], [handle], container="", shared_name="v")
    b.op("READ_VARIABLE", [handle], [state])
    b.op("STRIDED_SLICE", [x, b.const("begin", np.array([0, -2, 0, 0], np.int32)), b.const("end", np.zeros(4, np.int32)),
                           b.const("strides", np.ones(4, np.int32))], [newest], begin_mask=13, end_mask=15,
         ellipsis_mask=0, new_axis_mask=0, shrink_axis_mask=0, offset=False)
    b.op("ASSIGN_VARIABLE", [handle, newest], [])
    b.output(state)
    return b.build()


def test_a_value_written_in_place_is_no_view_of_another_tensor():
    """The slice writes the state (assign_in_place); slice_views must then not make it a view of
    x: the state would live in x's storage, read as the new value before its assignment and
    overwritten by the next invoke's input (it read x's rows from the first invoke on)."""
    rng = np.random.default_rng(3)
    xs = [rng.normal(0, 1, (1, 5, 2, 3)).astype(np.float32) for _ in range(4)]
    log, _ = _steps(_slice_of_input_assigned(), lambda k: [xs[k]])
    assert statuses(log, RULE) == [("APPLIED", "#4 (ASSIGN_VARIABLE)")]
    assert "shares a resource variable's storage" in why(log, "slice_views", "#3 (STRIDED_SLICE)")
