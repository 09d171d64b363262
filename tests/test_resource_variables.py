"""resource_variables.annotate: which variable each READ_VARIABLE / ASSIGN_VARIABLE uses and when
its shape is fixed before invoke (what a GPU partition needs to hold it), and stale()."""
import numpy as np
import pytest

from gles_delegate import Interpreter
from gles_delegate.ops.variables import VARIABLE
from gles_delegate.resource_variables import stale
from gles_delegate.tflite import ModelBuilder
from tests.streaming_models import Ring, ring_model


def _refs(model):
    """{op label: VariableRef} of the main subgraph's annotated nodes, and the interpreter."""
    interpreter = Interpreter(model_content=model)
    interpreter.allocate_tensors()
    return {n.label: n.options[VARIABLE] for n in interpreter._main.graph.nodes if VARIABLE in n.options}, interpreter


@pytest.mark.parametrize("ring", [Ring(), Ring(quantized=True)], ids=["float32", "int8"])
def test_a_ring_buffer_is_fixed(ring):
    refs, _ = _refs(ring_model(ring))
    assert set(refs) == {"#2 (READ_VARIABLE)", "#6 (ASSIGN_VARIABLE)"}
    ref = refs["#2 (READ_VARIABLE)"]
    assert (ref.key, ref.shape, ref.dtype, ref.why, ref.gpu_reason) == (
        ("", "ring"), (1, 2, 1, 8), np.dtype(np.int8 if ring.quantized else np.float32), None, None)


def test_an_assignment_of_another_shape_fixes_nothing():
    refs, _ = _refs(ring_model(Ring(keep_from=1)))  # assigns 4 frames, the initializer 2
    ref = refs["#2 (READ_VARIABLE)"]
    assert ref.shape is None and "shapes ['[1, 2, 1, 8]', '[1, 4, 1, 8]']" in ref.why


def _variable_model(read_grid, assign_grid, dtype=np.int8, handle_as_input=False):
    """main: VAR_HANDLE, READ_VARIABLE (on read_grid), ADD of 1, ASSIGN_VARIABLE (on
    assign_grid); init: ASSIGN_VARIABLE of zeros. `handle_as_input`: a second subgraph assigns
    the variable through a handle it takes as its input."""
    b = ModelBuilder()
    quant = {} if dtype == np.int32 else {"quantization": read_grid}
    handle = b.tensor("handle", (), type_name="RESOURCE")
    b.op("VAR_HANDLE", [], [handle], container="", shared_name="v")
    value = b.tensor("value", (2, 3), dtype, **quant)
    b.op("READ_VARIABLE", [handle], [value])
    added = b.tensor("added", (2, 3), dtype, **({} if dtype == np.int32 else {"quantization": assign_grid}))
    b.op("ADD", [value, b.const("one", np.ones((2, 3), dtype), **quant)], [added], fused_activation_function=0)
    b.op("ASSIGN_VARIABLE", [handle, added], [])
    b.output(added)
    if handle_as_input:
        other = b.subgraph("other")
        given = other.input("handle", (), type_name="RESOURCE")
        other.op("ASSIGN_VARIABLE", [given, other.const("zeros", np.zeros((2, 3), dtype), **quant)], [])
    return b.build()


def test_reads_and_assignments_on_two_grids_are_not_for_the_gpu():
    refs, _ = _refs(_variable_model((0.1, 0), (0.2, 0)))
    ref = refs["#1 (READ_VARIABLE)"]
    assert ref.shape == (2, 3) and "different quantization grids" in ref.gpu_reason


def test_an_int32_variable_is_not_for_the_gpu():
    refs, _ = _refs(_variable_model(None, None, np.int32))
    assert "int32 values" in refs["#1 (READ_VARIABLE)"].gpu_reason


def test_a_handle_from_elsewhere_fixes_nothing():
    refs, _ = _refs(_variable_model((0.1, 0), (0.1, 0), handle_as_input=True))
    assert "takes its handle from elsewhere" in refs["#1 (READ_VARIABLE)"].why


def test_a_held_value_of_another_shape_fixes_nothing_and_makes_a_plan_stale():
    model = ring_model(Ring(), signatures=True)
    refs, interpreter = _refs(model)
    ref = refs["#2 (READ_VARIABLE)"]
    planned = {ref.rid: (ref.shape, ref.dtype)}
    store = interpreter._subgraphs.variables
    assert not stale(planned, store)
    store.assign(ref.rid, np.zeros((1, 2, 1, 8), np.float32))
    assert not stale(planned, store)
    store.assign(ref.rid, np.zeros((1, 4, 1, 8), np.float32))
    assert stale(planned, store)
    interpreter.allocate_tensors()
    again = next(n.options[VARIABLE] for n in interpreter._main.graph.nodes if n.op == "READ_VARIABLE")
    assert again.shape is None and "[1, 4, 1, 8]" in again.why
