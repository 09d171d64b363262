"""Our Interpreter without a delegate runs a model LiteRT's sub-models cannot carry (resource
variables, a Keras LSTM's variable tensors) as the file whole on LiteRT, but only where
whole_model.refusal() finds nothing LiteRT would leave unchecked: each hazard below goes node by
node instead, where the reference says what is wrong."""
import dataclasses
import re

import numpy as np
import pytest

from gles_delegate import Interpreter, ModelError, whole_model
from gles_delegate.cpu_litert import whole_model_failure
from gles_delegate.graph import Graph
from gles_delegate.tflite import ModelBuilder, read_model
from gles_delegate.tflite.model import DimensionMetadata, Sparsity
from gles_delegate.tools.fuzz_models import small_models
from tests.control_flow_models import bias_free_depthwise_loop, constant_bound_loop, stateful_counter
from tests.forking import in_forked_child
from tests.litert import RESOLVERS, LiteRTInterpreter
from tests.ops.test_control_flow import _edited
from tests.ops.test_variables import _read_model
from tests.streaming_models import Ring, frames, ring_model


def _allocated(model):
    interpreter = Interpreter(model_content=model)
    interpreter.allocate_tensors()
    return interpreter


def test_a_streaming_model_runs_whole_and_matches_litert_invoke_after_invoke():
    model = ring_model(Ring())
    # LiteRT's builtin kernels, which run a model of resource variables whole (WholeModelStep)
    ours, theirs = _allocated(model), LiteRTInterpreter(model_content=model,
                                                        experimental_op_resolver_type=RESOLVERS["builtin"])
    theirs.allocate_tensors()
    assert whole_model.refusal(ours._main.graph) is None and ours._whole_on_litert()
    for x in frames(Ring(), 5):
        outputs = []
        for interpreter in (ours, theirs):
            interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
            interpreter.invoke()
            outputs.append(interpreter.get_tensor(interpreter.get_output_details()[0]["index"]))
        np.testing.assert_array_equal(*outputs)  # the same kernels, the same state


@pytest.mark.parametrize("model, refusal", [
    (lambda: _read_model(np.zeros(4, np.float32), (2, 3)), r"#2 \(READ_VARIABLE\) reads resource variable 'v', "
                                                             r"assigned a value of shape \[4\], into \[2, 3\]"),
    (lambda: _edited(stateful_counter(np.zeros(2, np.float32)), lambda d: d.subgraphs[1].operators.pop()),
     r"#2 \(READ_VARIABLE\) may read resource variable 'acc' before anything assigns it"),
], ids=["a smaller variable", "never assigned"])
def test_a_read_litert_would_not_check_goes_node_by_node(model, refusal):
    """LiteRT reads past the variable's buffer here (garbage out, checked by hand); the reference
    says so at invoke instead (tests/ops/test_variables.py, test_control_flow.py)."""
    interpreter = _allocated(model())
    assert not interpreter._whole_on_litert()
    assert re.fullmatch(refusal, whole_model.refusal(interpreter._main.graph) or "")
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"],
                           np.ones(interpreter.get_input_details()[0]["shape"], np.float32))
    with pytest.raises(ModelError, match="READ_VARIABLE"):
        interpreter.invoke()


def test_a_loop_body_litert_crashes_on_keeps_the_file_from_litert():
    """A DEPTHWISE_CONV_2D of 2 inputs crashes LiteRT's kernels (litert_crashes.py): in a loop
    body (subgraph 2) as in the main subgraph, the file does not go whole."""
    interpreter = _allocated(bias_free_depthwise_loop())
    assert whole_model.refusal(interpreter._main.graph).startswith("subgraph 2: #1 (DEPTHWISE_CONV_2D)")
    assert not interpreter._whole_on_litert()


def test_a_variable_used_in_a_loop_body_keeps_the_file_from_litert():
    """Variables a loop body reads or assigns are not followed by unchecked_read: node by node."""
    def step(body, i, acc):
        i2 = body.tensor("i2", (), np.int32)
        body.op("ADD", [i, body.const("one", np.array(1, np.int32))], [i2], fused_activation_function=0)
        handle = body.tensor("handle", (), type_name="RESOURCE")
        body.op("VAR_HANDLE", [], [handle], container="", shared_name="seen")
        body.op("ASSIGN_VARIABLE", [handle, acc], [])
        return i2, acc
    interpreter = _allocated(constant_bound_loop(("acc", (2,), np.float32), 2, step))
    assert whole_model.unchecked_read(interpreter._main.graph) == \
        "a subgraph other than a CALL_ONCE initializer uses resource variables"


def test_litert_s_failure_of_a_whole_model_names_the_main_subgraph_s_operator():
    """LiteRT names the failed node of each subgraph it entered, innermost first."""
    error = whole_model_failure(RuntimeError("gather index out of bounds Node number 1 (GATHER) failed to invoke. "
                                             "Node number 4 (WHILE) failed to invoke."))
    assert str(error).startswith("operator #4 (WHILE) failed in LiteRT: gather index out of bounds")
    assert str(whole_model_failure(RuntimeError("no node named"))).startswith("the model failed in LiteRT")


def _stateful_with_sparse_weights():
    """The stateful counter's model plus a FULLY_CONNECTED of x whose sparse weights index a
    column past the matrix (CSR index 9 of 4): the state would send the file whole to LiteRT,
    whose Prepare reads those indices unchecked (a segfault: gles-fuzz seed 110)."""
    b = ModelBuilder()
    x = b.input("x", (1, 4))
    init = b.subgraph("init")
    b.op("CALL_ONCE", [], [], init_subgraph_index=init.index)
    init_handle = init.tensor("handle", (), type_name="RESOURCE")
    init.op("VAR_HANDLE", [], [init_handle], container="", shared_name="acc")
    init.op("ASSIGN_VARIABLE", [init_handle, init.const("zeros", np.zeros((1, 4), np.float32))], [])
    handle = b.tensor("handle", (), type_name="RESOURCE")
    b.op("VAR_HANDLE", [], [handle], container="", shared_name="acc")
    value, total = b.tensor("value", (1, 4)), b.tensor("total", (1, 4))
    b.op("READ_VARIABLE", [handle], [value])
    b.op("ADD", [value, x], [total], fused_activation_function=0)
    b.op("ASSIGN_VARIABLE", [handle, total], [])
    csr = DimensionMetadata("SPARSE_CSR", array_segments=np.array([0, 1, 2]), array_indices=np.array([0, 9]))
    weights = b.tensor("w", (2, 4), np.float32, data=np.array([1.0, 2.0], np.float32),
                       sparsity=Sparsity((0, 1), (), [DimensionMetadata("DENSE", 2), csr]))
    y = b.tensor("y", (1, 2))
    b.op("FULLY_CONNECTED", [total, weights, -1], [y])
    b.output(y)
    return b.build()


def test_sparse_weights_keep_the_file_from_litert_and_are_checked():
    """In a forked child (a crash there fails the test, not the run): the model stays node by
    node and allocate_tensors() is the densify check's ModelError, not LiteRT's segfault."""
    def refused():
        with pytest.raises(ModelError, match="outside"):
            Interpreter(model_content=_stateful_with_sparse_weights()).allocate_tensors()
        return True
    assert in_forked_child(refused)


def test_a_variable_op_missing_a_tensor_is_a_model_error_naming_it():
    """gles-fuzz seed 110: an ASSIGN_VARIABLE mutated to one input was an IndexError of the
    variables' annotation; it is the allocate check's ModelError now."""
    def drop_value(definition):
        operators = definition.subgraphs[0].operators  # CALL_ONCE, VAR_HANDLE, READ, ADD, ASSIGN
        operators[4] = dataclasses.replace(operators[4], inputs=operators[4].inputs[:1])
    model = _edited(stateful_counter(np.zeros(2, np.float32)), drop_value)
    with pytest.raises(ModelError, match=r"#4 \(ASSIGN_VARIABLE\).*takes two inputs"):
        Interpreter(model_content=model).allocate_tensors()


def test_only_state_and_dynamic_shapes_send_the_file_whole_and_never_sparse_weights():
    """carried_whole: the nodes LiteRT's sub-models cannot carry but its interpreter of the file
    does (variable ops, CALL_ONCE, variable / resource / dynamic tensors); a node left on the
    reference for another reason (LiteRT refused it: a mutated sparse FULLY_CONNECTED, gles-fuzz
    seed 110) keeps the plan node by node. refusal: sparse weights, which LiteRT reads unchecked."""
    graph = _allocated(stateful_counter(np.zeros(2, np.float32)))._main.graph
    carried = {n.op: whole_model.carried_whole(n, frozenset()) for n in graph.nodes}
    assert carried == {"CALL_ONCE": True, "VAR_HANDLE": True, "READ_VARIABLE": True, "ADD": False,
                       "ASSIGN_VARIABLE": True}
    add = next(n for n in graph.nodes if n.op == "ADD")
    assert whole_model.carried_whole(add, frozenset({id(add.outputs[0])}))  # of a dynamic tensor
    model = read_model(_stateful_with_sparse_weights())  # its graph only: allocating is the densify check's error
    assert re.fullmatch(r"tensor \d+ \('w'\) is sparse", whole_model.refusal(Graph.from_model(model, 0)))


def test_a_reshape_without_its_shape_input_keeps_a_stateful_file_from_litert():
    """gles-fuzz seed 114: gles-fuzz's stream seed with its RESHAPE's shape input omitted (-1,
    the shape from its options) crashed LiteRT's interpreter of the whole file (SIGSEGV: its
    input is dynamic there, after the READ_VARIABLE, so LiteRT reads the missing shape). Node by
    node, in a LiteRT sub-model of static shapes, it runs; in a forked child, so a crash fails
    the test alone."""
    def omit_shape(definition):
        operators = definition.subgraphs[0].operators
        k = next(i for i, op in enumerate(operators) if op.op == "RESHAPE")
        operators[k] = dataclasses.replace(operators[k], inputs=(operators[k].inputs[0], -1))
    model = _edited(small_models()["stream"], omit_shape)

    def runs_node_by_node():
        interpreter = _allocated(model)
        interpreter.set_tensor(interpreter.get_input_details()[0]["index"], np.ones((1, 1, 4), np.float32))
        interpreter.invoke()
        reason = whole_model.refusal(interpreter._main.graph)
        return not interpreter._whole_on_litert() and "shape input omitted" in reason
    assert in_forked_child(runs_node_by_node)
