"""StableHLO ops that call subgraphs (a scatter's update computation, a reduce window's body), as
litert-torch writes them for torch's index_copy / index_put / scatter and local_response_norm:
their options (the operator's second options union) are read and written, and our Interpreter
runs them through LiteRT's kernels with their callees copied into the sub-model
(callee_subgraphs.py), as LiteRT's own Interpreter runs the file; a reduce window, whose body
LiteRT's kernel only reads, runs on our own kernels (ops/reduce_window.py)."""
import dataclasses
import subprocess
import sys

import numpy as np
import pytest
from flatbuffers import flexbuffers

from gles_delegate import GpuDelegate, Interpreter, ModelError, cpu_litert
from gles_delegate.tflite import ModelBuilder
from gles_delegate.tflite.reader import read_model
from gles_delegate.tflite.writer import write_model
from tests.cpu_litert_models import litert_outputs, run
from tests.forking import in_forked_child

pytest.importorskip("ai_edge_litert.interpreter")

# litert-torch's index_copy(1, positions, rows) of a [1, 16, 8] cache: rows [1, n, 8] at positions [n, 1]
SCATTER_OPTIONS = dict(indices_are_sorted=False, update_window_dims=(0, 2), inserted_window_dims=(1,),
                       scatter_dims_to_operand_dims=(1,), index_vector_dim=1, unique_indices=False)


def scatter_model(rows, combine=None):
    """x [1, 16, 8] (times 2 first: a node before the scatter), positions [rows, 1] int32,
    updates [1, rows, 8] -> x with each row at its position replaced by its update (combine
    None) or combined with it by `combine` (STABLEHLO_ADD, STABLEHLO_MAXIMUM: the update
    computation's one op, which LiteRT's kernel recognises)."""
    b = ModelBuilder("scatter")
    x = b.input("x", (1, 16, 8))
    positions = b.input("positions", (rows, 1), np.int32)
    updates = b.input("updates", (1, rows, 8))
    doubled, out = b.tensor("doubled", (1, 16, 8)), b.tensor("out", (1, 16, 8))
    b.op("MUL", [x, b.const("two", np.float32([2.0]))], [doubled], fused_activation_function=0)
    b.op("STABLEHLO_SCATTER", [doubled, positions, updates], [out], update_computation_subgraph_index=1,
         **SCATTER_OPTIONS)
    b.output(out)
    update = b.subgraph("update")
    old, new = update.input("old", ()), update.input("new", ())
    if combine is None:
        update.output(new)
    else:
        result = update.tensor("result", ())
        update.op(combine, [old, new], [result])
        update.output(result)
    return b.build()


def reduce_window_model():
    """A sum over windows of 3 along the channels of a [1, 4, 5, 6] tensor padded by 1 each side,
    as litert-torch writes local_response_norm's: STABLEHLO_REDUCE_WINDOW with an ADD body."""
    b = ModelBuilder("reduce_window")
    x = b.input("x", (1, 4, 5, 6))
    out = b.tensor("out", (1, 4, 5, 6))
    b.op("STABLEHLO_REDUCE_WINDOW", [x, b.const("zero", np.float32(0.0))], [out],
         window_dimensions=(1, 1, 1, 3), window_strides=(1, 1, 1, 1), base_dilations=(1, 1, 1, 1),
         window_dilations=(1, 1, 1, 1), padding=(0, 0, 0, 0, 0, 0, 1, 1), body_subgraph_index=1)
    b.output(out)
    body = b.subgraph("body")
    a, c = body.input("a", ()), body.input("c", ())
    total = body.tensor("total", ())
    body.op("ADD", [a, c], [total], fused_activation_function=0)
    body.output(total)
    return b.build()


def scatter_inputs(rows, seed=0):
    rng = np.random.default_rng(seed)
    positions = rng.choice(16, rows, replace=False).astype(np.int32).reshape(rows, 1)
    return [rng.standard_normal((1, 16, 8)).astype(np.float32), positions,
            rng.standard_normal((1, rows, 8)).astype(np.float32)]


def test_second_union_options_survive_our_reader_and_writer():
    """The scatter's and reduce window's options (int64 dimension lists, the callee's index) read
    back equal after our writer wrote them, and LiteRT runs what it wrote."""
    for model in (scatter_model(2), reduce_window_model()):
        read = read_model(model)
        options = [op.options for op in read.subgraphs[0].operators if op.op.startswith("STABLEHLO_")]
        assert options and all(any("subgraph_index" in key for key in o) for o in options)
        again = read_model(write_model(read))
        assert [op.options for sg in again.subgraphs for op in sg.operators] == \
            [op.options for sg in read.subgraphs for op in sg.operators]
    assert read_model(scatter_model(2)).subgraphs[0].operators[1].options["update_window_dims"] == (0, 2)


@pytest.mark.parametrize("combine", [None, "STABLEHLO_ADD", "STABLEHLO_MAXIMUM"])
def test_a_scatter_runs_through_litert_with_its_update_computation(combine):
    model, inputs = scatter_model(3, combine), scatter_inputs(3)
    (ours,), summary = run(model, inputs)
    want, = litert_outputs(model, inputs)
    assert np.array_equal(ours, want)
    expected = 2 * inputs[0]
    rows = inputs[1][:, 0]
    if combine is None:
        expected[0, rows] = inputs[2][0]
    else:
        expected[0, rows] = (np.add if combine == "STABLEHLO_ADD" else np.maximum)(expected[0, rows], inputs[2][0])
    assert np.allclose(ours, expected)


def test_a_reduce_window_with_its_body_runs_as_litert_s():
    """Its body's one ADD is what LiteRT's kernel reads: our reference kernel takes the node
    (ops/reduce_window.py) and gives LiteRT's sums."""
    model = reduce_window_model()
    x = np.random.default_rng(1).standard_normal((1, 4, 5, 6)).astype(np.float32)
    (ours,), _ = run(model, [x])
    padded = np.pad(x, [(0, 0), (0, 0), (0, 0), (1, 1)])
    assert np.allclose(ours, padded[..., :-2] + padded[..., 1:-1] + padded[..., 2:], atol=1e-6)
    assert np.array_equal(ours, litert_outputs(model, [x])[0])


def test_with_the_gpu_delegate_the_nodes_around_run_on_the_gpu():
    model, inputs = scatter_model(2), scatter_inputs(2, seed=3)
    with GpuDelegate() as delegate:
        interpreter = Interpreter(model_content=model, experimental_delegates=[delegate])
        interpreter.allocate_tensors()
        for detail, value in zip(interpreter.get_input_details(), inputs):
            interpreter.set_tensor(detail["index"], value)
        interpreter.invoke()
        ours = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
        assert delegate.summary()["gpu_nodes"] == 1  # the MUL
    assert np.array_equal(ours, litert_outputs(model, inputs)[0])


def test_without_litert_s_kernels_the_op_is_a_clear_error():
    with pytest.raises(ModelError, match="STABLEHLO_SCATTER"):
        Interpreter(model_content=scatter_model(2), cpu_backend="reference").allocate_tensors()


def composite_model():
    """x [2, 3] -> STABLEHLO_COMPOSITE 'odml.double_plus_one' whose decomposition (subgraph 1) is
    x * 2 + 1, as litert-torch marks a block it may lower whole; then a LOGISTIC."""
    b = ModelBuilder("composite")
    x = b.input("x", (2, 3))
    block, y = b.tensor("block", (2, 3)), b.tensor("y", (2, 3))
    attributes = tuple(flexbuffers.Dumps({"scale": 2}))  # a flexbuffer map, which LiteRT requires
    options = {"name": "odml.double_plus_one", "composite_attributes": attributes, "decomposition_subgraph_index": 1,
               "version": 1}  # StableHLOCompositeOptions.version: passed as a dict, beside the op's version
    b.op("STABLEHLO_COMPOSITE", [x], [block], options=options)
    b.op("LOGISTIC", [block], [y])
    b.output(y)
    body = b.subgraph("decomposition")
    v = body.input("v", (2, 3))
    doubled, out = body.tensor("doubled", (2, 3)), body.tensor("out", (2, 3))
    body.op("MUL", [v, body.const("two", np.float32([2.0]))], [doubled], fused_activation_function=0)
    body.op("ADD", [doubled, body.const("one", np.float32([1.0]))], [out], fused_activation_function=0)
    body.output(out)
    return b.build()


def test_a_composite_runs_its_decomposition_through_litert():
    x = np.random.default_rng(2).standard_normal((2, 3)).astype(np.float32)
    (ours,), _ = run(composite_model(), [x])
    assert np.allclose(ours, 1 / (1 + np.exp(-(2 * x + 1))), rtol=1e-6)
    assert np.array_equal(ours, litert_outputs(composite_model(), [x])[0])


def test_a_hostile_stablehlo_node_is_refused_not_crashed_on():
    """A composite whose input is omitted (-1) crashes LiteRT's kernel (SIGSEGV in LiteRT
    alone): the sub-model's trial run in a child process sees that, and allocate_tensors()
    refuses the node with a ModelError instead of the process dying. Run in a forked child, so
    that a regression fails this test, not the test run. (A reduce window with its init value
    omitted, gles-fuzz's first such find, is our reference's to refuse since it has a kernel.)"""
    model = read_model(composite_model())
    op = model.subgraphs[0].operators[0]
    model.subgraphs[0].operators[0] = dataclasses.replace(op, inputs=(-1,))
    data = write_model(model)
    litert_alone = subprocess.run([sys.executable, "-c", cpu_litert._TRIAL], input=bytes(data), capture_output=True)
    assert litert_alone.returncode < 0, "LiteRT no longer crashes on it: pick another hostile model"

    def refused():
        try:
            Interpreter(model_content=data).allocate_tensors()
        except ModelError as error:
            return "crash" in str(error) and "STABLEHLO_COMPOSITE" in str(error)
        return False
    assert in_forked_child(refused)


def test_a_reduce_window_missing_its_init_value_is_malformed():
    """gles-fuzz's mutation that crashed LiteRT's reduce window kernel: refused before LiteRT sees it."""
    model = read_model(reduce_window_model())
    op = model.subgraphs[0].operators[0]
    model.subgraphs[0].operators[0] = dataclasses.replace(op, inputs=(op.inputs[0], -1))
    with pytest.raises(ModelError, match=r"STABLEHLO_REDUCE_WINDOW.*input 1 is omitted"):
        Interpreter(model_content=write_model(model)).allocate_tensors()
