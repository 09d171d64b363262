"""fuse_dense_into_dag: the one-row FULLY_CONNECTED of an unrolled recurrent cell runs in its
POINTWISE_DAG's workgroup (one dispatch per cell, not two), to the reference's values in every
precision and, in half storage, to the unfused graph's bit for bit; a layer the DAG's one
workgroup cannot take keeps its dispatch, and the log says why."""
import numpy as np
import pytest

from gles_delegate.gpu import shader
from gles_delegate.gpu.kernels import pointwise
from gles_delegate.gpu.transforms import fuse_dense_into_dag
from tests.gpu.gpulib import PRECISIONS
from tests.gpu.transforms.rulelib import assert_same_as_unfused, check_gpu, dispatches, dispatches_without, ops_of, \
    random, rewrite_through, run_on_gpu, statuses, unfused_outputs, why
from tests.gpu.transforms.test_fuse_pointwise_dag import H, Cell, cell_values, gru_model, lstm_model

RULE = "fuse_dense_into_dag"


def test_each_lstm_cell_is_one_dispatch():
    """Three cells: FC + DAG each before, one DAG each after (the FC of the first reads the
    model's input h); two input conversions besides."""
    model = lstm_model(steps=3)
    graph, log = rewrite_through(model, RULE)
    assert ops_of(graph) == [pointwise.OP] * 3
    assert [s for s, _ in statuses(log, RULE)] == ["APPLIED"] * 3
    for dag in graph.nodes:
        layer = dag.options[pointwise.PROGRAM].layer
        assert dag.inputs[layer.weights].shape == (4 * H, H) and layer.output.shape == (1, 1, 4 * H)
    values = cell_values()
    assert (dispatches(model, values), dispatches_without(RULE, model, values)) == (5, 8)


def test_gru_cell_reads_its_state_twice():
    """A GRU's DAG reads h itself ((h - n) z) besides the layer that reads it."""
    model = gru_model(steps=2)
    graph, _ = rewrite_through(model, RULE)
    assert [op for op in ops_of(graph) if op != "SLICE"] == [pointwise.OP] * 2
    values = cell_values(3, gru=True)
    assert (dispatches(model, values), dispatches_without(RULE, model, values)) == (4, 6)


def projected_lstm_model(steps=2):
    """litert-torch's form: each cell's gates = FC(h) + x projection (an ADD that rule
    fuse_elementwise makes the FC's epilogue step with a tensor operand)."""
    cell = Cell(4 * H)
    h, c = cell.x, cell.b.input("c0", (1, 1, H))
    cell.shapes[c] = (1, 1, H)
    for step in range(steps):
        gates = cell.op("ADD", cell.dense(h, 4 * H, seed=10 * step), cell.c)
        i, f, g, o = (cell.gate(gates, k, op) for k, op in enumerate(("LOGISTIC", "LOGISTIC", "TANH", "LOGISTIC")))
        c = cell.op("ADD", cell.op("MUL", f, c), cell.op("MUL", i, g))
        h = cell.op("MUL", o, cell.op("TANH", c))
    return cell.build(h)


def projected_values(seed=4):
    return [random((1, 1, H), seed), random((1, 1, 4 * H), seed + 1), random((1, 1, H), seed + 2)]


def test_a_layer_epilogue_with_a_tensor_operand_moves_with_it():
    model = projected_lstm_model()
    graph, _ = rewrite_through(model, RULE)
    assert ops_of(graph) == [pointwise.OP] * 2
    layer = graph.nodes[0].options[pointwise.PROGRAM].layer
    assert [step.op for step in layer.steps] == ["ADD"]
    assert any(t is layer.steps[0].operand for t in graph.nodes[0].inputs)  # a read the plan sees


@pytest.mark.parametrize("precision", [*PRECISIONS, "auto"])
@pytest.mark.parametrize("make", [lstm_model, gru_model, projected_lstm_model], ids=["lstm", "gru", "projected"])
def test_cells_match_the_reference(make, precision):
    values = projected_values() if make is projected_lstm_model else cell_values(3, gru=make is gru_model)
    summary, log = check_gpu(make(), values, precision)
    assert any(r.rule == RULE and r.status == "APPLIED" for r in log)


@pytest.mark.parametrize("precision", ["fp16", "fp16_fp32acc"])
@pytest.mark.parametrize("make", [lstm_model, projected_lstm_model], ids=["lstm", "projected"])
def test_half_storage_results_equal_the_unfused_graph(make, precision):
    """The layer sums in fully_connected.glsl's order and rounds its output as that store did."""
    values = projected_values() if make is projected_lstm_model else cell_values(5)
    assert_same_as_unfused(RULE, make(), values, precision)


def test_without_the_rounding_half_storage_results_differ(monkeypatch):
    """The test above can fail: the layer's output kept unrounded changes the cell's outputs."""
    model, values = lstm_model(steps=3), cell_values(5)
    unfused = unfused_outputs(RULE, model, values, "fp16_fp32acc")
    monkeypatch.setattr(shader, "template", _unrounded(shader.template))
    fused = run_on_gpu(model, values, "fp16_fp32acc")
    assert any(not np.array_equal(a, b) for a, b in zip(fused, unfused))


def _unrounded(template):
    """shader.template with pointwise.glsl's layer output kept unrounded."""
    rounded = "return ep_stored(keep_channels(v, layer_units, o));"

    def text(name):
        source = template(name)
        if name == "pointwise":
            assert rounded in source
            source = source.replace(rounded, "return keep_channels(v, layer_units, o);")
        return source
    return text


def test_a_layer_whose_output_is_read_elsewhere_keeps_its_dispatch():
    """The first cell's gates are also a model output: the FC stays, the second cell fuses."""
    cell = Cell()
    gates = cell.dense(cell.x, 4 * H, seed=0)
    i, f, g, o = (cell.gate(gates, k, op) for k, op in enumerate(("LOGISTIC", "LOGISTIC", "TANH", "LOGISTIC")))
    c1 = cell.op("ADD", cell.op("MUL", f, cell.c), cell.op("MUL", i, g))
    h1 = cell.op("MUL", o, cell.op("TANH", c1))
    model = cell.build(cell.lstm(h1, c1, seed=10)[0], gates)
    graph, log = rewrite_through(model, RULE)
    assert ops_of(graph).count("FULLY_CONNECTED") == 1
    assert "also read outside" in why(log, RULE, "#0 (FULLY_CONNECTED)")
    for precision in PRECISIONS:
        check_gpu(model, cell_values(), precision)


def test_a_layer_too_large_for_one_workgroup_keeps_its_dispatch(monkeypatch):
    monkeypatch.setattr(fuse_dense_into_dag, "MAX_WEIGHTS", 4 * H * H - 1)
    model = lstm_model(steps=1)
    graph, log = rewrite_through(model, RULE)
    assert ops_of(graph) == ["FULLY_CONNECTED", pointwise.OP]
    assert f"it has {4 * H * H} weights" in why(log, RULE, "#0 (FULLY_CONNECTED)")


def test_a_layer_of_two_rows_keeps_its_dispatch():
    """A DAG reading an FC of a [1, 2, H] input (two rows): the workgroup computes one row only."""
    cell = Cell()
    x2 = cell.b.input("x2", (1, 2, H))
    cell.shapes[x2] = (1, 2, H)
    weights, bias = cell.const(random((8, H), 7)), cell.const(random(8, 8))
    rows = cell.op("FULLY_CONNECTED", x2, weights, bias, shape=(1, 2, 8), keep_num_dims=True)
    model = cell.build(cell.op("MUL", cell.op("LOGISTIC", rows), cell.op("TANH", rows)))
    graph, log = rewrite_through(model, RULE)
    assert "FULLY_CONNECTED" in ops_of(graph)
    assert "is not one row" in why(log, RULE, "#0 (FULLY_CONNECTED)")
    check_gpu(model, [random((1, 1, H), 1), random((1, 1, H), 2), random((1, 2, H), 3)])


def test_a_layer_whose_sums_overflow_shared_memory_keeps_its_dispatch(monkeypatch):
    """The rule asks the kernel (its shared memory bound here) before fusing: a DAG the kernel
    then refused would move to the CPU."""
    monkeypatch.setattr(pointwise, "LAYER_SHARED_VEC4S", 8)
    model = lstm_model(steps=1)
    graph, log = rewrite_through(model, RULE)
    assert ops_of(graph) == ["FULLY_CONNECTED", pointwise.OP]
    assert "bytes of shared memory" in why(log, RULE, "#0 (FULLY_CONNECTED)")
    check_gpu(model, cell_values(), "fp32")
