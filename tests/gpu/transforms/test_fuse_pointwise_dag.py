"""fuse_pointwise_dag: a connected, convex group of elementwise nodes and channel SLICEs (the gates
and state update of an unrolled LSTM / GRU cell, which epilogues fuse as chains only) runs as one
POINTWISE_DAG dispatch storing what is read outside it, to the reference's values in every
precision and, in half storage, to the unfused graph's bit for bit."""
import numpy as np
import pytest

from gles_delegate import GpuDelegate, Interpreter
from gles_delegate.gpu.kernels import pointwise
from gles_delegate.gpu.kernels.pointwise import INPUT, REG, Input, Program, Ref, Slot
from gles_delegate.graph import Node, Tensor
from tests.gpu.gpulib import PRECISIONS, assert_gpu_matches
from tests.gpu.transforms.rulelib import (Chain, assert_same_as_unfused, check_gpu, dispatches, dispatches_without,
                                          ops_of, random, rule_off, rewrite_through, run_on_gpu, statuses,
                                          unfused_outputs, why)
from tests.oplib import run_ours

RULE = "fuse_pointwise_dag"
DENSE_RULE = "fuse_dense_into_dag"  # the rule after it, which takes each cell's FC into its DAG: off where these count
H = 32  # hidden units: the cell's gates are channel slices at multiples of 4 of the gate vector


class Cell(Chain):
    """A model of unrolled recurrent cells as litert-torch writes them (batch 1, [1, 1, units])."""

    def __init__(self, c_units=H):
        """Inputs h [1, 1, H] and c [1, 1, c_units] (an LSTM's cell state, a GRU's input projection)."""
        super().__init__((1, 1, H), "h")
        self.c = self.b.input("c", (1, 1, c_units))
        self.shapes[self.c] = (1, 1, c_units)

    def dense(self, x, units, seed):
        """FULLY_CONNECTED with keep_num_dims: [1, 1, H] -> [1, 1, units], plus a bias."""
        weights, bias = self.const(random((units, H), seed, 0.3)), self.const(random(units, seed + 1))
        return self.op("FULLY_CONNECTED", x, weights, bias, shape=(1, 1, units), keep_num_dims=True)

    def gate(self, x, k, op=None, extra=None):
        """Channels [k H, (k + 1) H) of x (a SLICE), plus `extra` (ADD), through `op`."""
        y = self.op("SLICE", x, self.const([0, 0, k * H], np.int32), self.const([1, 1, H], np.int32), shape=(1, 1, H))
        y = y if extra is None else self.op("ADD", y, extra)
        return y if op is None else self.op(op, y)

    def lstm(self, h, c, seed):
        """gates = FC(h); i, f, o = sigmoid, g = tanh; c' = f c + i g; h' = o tanh(c')."""
        gates = self.dense(h, 4 * H, seed)
        i, f, g, o = (self.gate(gates, k, op) for k, op in enumerate(("LOGISTIC", "LOGISTIC", "TANH", "LOGISTIC")))
        self.gates = self.gates if hasattr(self, "gates") else (i, f, g, o)  # the first cell's
        c = self.op("ADD", self.op("MUL", f, c), self.op("MUL", i, g))
        return self.op("MUL", o, self.op("TANH", c)), c

    def gru(self, h, x, seed):
        """gh = FC(h); r, z = sigmoid(gh_k + x_k); n = tanh(r gh_n + x_n); h' = (h - n) z + n."""
        gh = self.dense(h, 3 * H, seed)
        r, z = (self.gate(gh, k, "LOGISTIC", self.gate(x, k)) for k in (0, 1))
        n = self.op("TANH", self.op("ADD", self.op("MUL", self.gate(gh, 2), r), self.gate(x, 2)))
        return self.op("ADD", self.op("MUL", self.op("SUB", h, n), z), n)


def lstm_model(steps=2, state=False):
    """`steps` LSTM cells; outputs the last h (and c with `state`)."""
    cell = Cell()
    h, c = cell.x, cell.c
    for step in range(steps):
        h, c = cell.lstm(h, c, seed=10 * step)
    return cell.build(h, c) if state else cell.build(h)


def gru_model(steps=2):
    """`steps` GRU cells, each adding the input projection c ([1, 1, 3H]: the input "c")."""
    cell = Cell(3 * H)
    h = cell.x
    for step in range(steps):
        h = cell.gru(h, cell.c, seed=10 * step)
    return cell.build(h)


def cell_values(seed=1, gru=False):
    return [random((1, 1, H), seed), random((1, 1, 3 * H if gru else H), seed + 1)]


def dags(graph):
    return [n for n in graph.nodes if n.op == pointwise.OP]


def test_lstm_cell_runs_between_two_dense_layers_in_one_dispatch():
    """Per cell: the FC, then one dispatch computing c' and h' (the unfused cell took 5 in 3
    barrier phases after the FC: i, f c, o | c' | h')."""
    model = lstm_model()
    graph, log = rewrite_through(model, RULE)
    assert ops_of(graph) == ["FULLY_CONNECTED", pointwise.OP] * 2
    assert [len(dag.outputs) for dag in dags(graph)] == [2, 1]  # h and c, then the model output h
    for dag in dags(graph):
        program = dag.options[pointwise.PROGRAM]
        assert len(program.slots) == 9  # i, f, g, o, f c, i g, c', tanh(c'), h'
        assert [(e.shift, e.block) for e in program.inputs if e.block] == [(0, True), (8, True), (16, True), (24, True)]
    assert all(status == "APPLIED" for status, _ in statuses(log, RULE))
    values = cell_values()
    with rule_off(DENSE_RULE):
        assert dispatches(model, values) == 6  # convert_in x 2, (FC, cell) x 2
    assert dispatches_without(RULE, model, values) == 13  # the last c' takes its TANH: 5 + 4


def test_gru_cell_is_one_dispatch():
    """The r and z gates' input projections are slices of the input (views: rule slice_views)."""
    model = gru_model()
    graph, _ = rewrite_through(model, RULE)
    assert [op for op in ops_of(graph) if op != "SLICE"] == ["FULLY_CONNECTED", pointwise.OP] * 2
    values = cell_values(3, gru=True)
    with rule_off(DENSE_RULE):
        assert (dispatches(model, values), dispatches_without(RULE, model, values)) == (6, 14)


@pytest.mark.parametrize("precision", [*PRECISIONS, "auto"])
@pytest.mark.parametrize("make", [lstm_model, gru_model], ids=["lstm", "gru"])
def test_cells_match_the_reference(make, precision):
    model = make()
    with rule_off(DENSE_RULE):
        summary, _ = check_gpu(model, cell_values(3, gru=make is gru_model), precision)
    assert summary["dispatches"] == 6


@pytest.mark.parametrize("precision", ["fp16", "fp16_fp32acc"])
@pytest.mark.parametrize("state", [False, True])
def test_half_storage_results_equal_the_unfused_graph(precision, state):
    """Each tensor passed between members is rounded to half as its store did (Ref.stored):
    fused and unfused are bit-identical on llvmpipe; without the rounding the cell's outputs
    differ (checked below by switching it off). With the state an output too, the last cell's
    h and c go to two groups (each stores one output straight into the I/O buffer, as float32)."""
    assert_same_as_unfused(RULE, lstm_model(steps=3, state=state), cell_values(5), precision)


def test_without_the_rounding_half_storage_results_differ(monkeypatch):
    """The test above can fail: registers passed between members unrounded change the outputs."""
    model, values = lstm_model(steps=3, state=True), cell_values(5)
    unfused = unfused_outputs(RULE, model, values, "fp16_fp32acc")
    monkeypatch.setattr(pointwise, "_put_slot", _unrounded(pointwise._put_slot))
    fused = run_on_gpu(model, values, "fp16_fp32acc")
    assert any(not np.array_equal(a, b) for a, b in zip(fused, unfused))


def _unrounded(put_slot):
    def put(k, slot, defines, params):
        put_slot(k, slot._replace(a=slot.a._replace(stored=False), b=slot.b._replace(stored=False)), defines, params)
    return put


def test_the_last_cell_of_a_model_that_outputs_its_state_takes_two_groups():
    """h and c both leave the partition: one group stores c, the other reads it and stores h."""
    model = lstm_model(state=True)
    graph, log = rewrite_through(model, RULE)
    assert ops_of(graph) == ["FULLY_CONNECTED", pointwise.OP] * 2 + [pointwise.OP]
    assert "it would store 2 partition outputs" in why(log, RULE, "#26 (TANH)")
    for precision in PRECISIONS:
        check_gpu(model, cell_values(), precision)


def test_a_member_read_outside_is_stored_too():
    """The first cell's input gate is also read by a MEAN: a third output of its group, whose
    other members still share one dispatch."""
    cell = Cell()
    h1, c1 = cell.lstm(cell.x, cell.c, seed=0)
    mean = cell.op("MEAN", cell.gates[0], cell.const([2], np.int32), shape=(1, 1), keep_dims=False)
    model = cell.build(cell.lstm(h1, c1, seed=10)[0], mean)
    graph, _ = rewrite_through(model, RULE)
    first, second = dags(graph)
    assert len(first.outputs) == 3 and len(second.outputs) == 1
    for precision in PRECISIONS:
        check_gpu(model, cell_values(), precision)


def test_nodes_between_the_members_that_read_them_move_after_the_group():
    """a = LOGISTIC(x); m = MEAN(a) (runs between the members, reads one); b = TANH(x) * a: the
    group {a, b} runs where b ran and the MEAN after it."""
    c = Chain((1, 4, 4, 8))
    a = c.op("LOGISTIC", c.x)
    m = c.op("MEAN", a, c.const([1, 2], np.int32), shape=(1, 1, 1, 8), keep_dims=True)
    model = c.build(c.op("MUL", c.op("TANH", c.x), a), m)
    graph, _ = rewrite_through(model, RULE)
    assert ops_of(graph) == [pointwise.OP, "MEAN"]
    for precision in PRECISIONS:
        check_gpu(model, [random((1, 4, 4, 8), 2)], precision)


def test_a_group_a_path_would_leave_and_reenter_is_refused():
    """b = a + MEAN(a): joining b to a's group would leave it through the MEAN and come back."""
    c = Chain((1, 4, 4, 8))
    a = c.op("LOGISTIC", c.x)
    m = c.op("MEAN", a, c.const([1, 2], np.int32), shape=(1, 1, 1, 8), keep_dims=True)
    model = c.build(c.op("ADD", a, m))
    graph, log = rewrite_through(model, RULE)
    assert pointwise.OP not in ops_of(graph)
    assert "leaves them through #1 (MEAN) and comes back" in why(log, RULE, "#2 (ADD)")
    check_gpu(model, [random((1, 4, 4, 8), 2)])


def test_a_group_stops_at_the_outputs_the_template_holds():
    """Six elementwise nodes in a chain, each also read by a MEAN (no epilogue takes them):
    groups of four outputs and two."""
    c = Chain((1, 3, 3, 8))
    means, y = [], c.x
    for op in ("ABS", "NEG", "EXP", "LOGISTIC", "TANH", "ELU"):  # (a SQUARE a MEAN alone reads: its input squared)
        y = c.op(op, y)
        means.append(c.op("MEAN", y, c.const([1, 2], np.int32), shape=(1, 8), keep_dims=False))
    model = c.build(*means)
    graph, log = rewrite_through(model, RULE)
    assert [len(n.outputs) for n in dags(graph)] == [4, 2]
    assert f"5 steps, 1 inputs and 5 outputs (at most {pointwise.MAX_SLOTS}" in why(log, RULE, "#8 (TANH)")
    check_gpu(model, [random((1, 3, 3, 8), 4)])


def test_a_slice_that_is_no_block_stays_a_copy():
    """A gate starting at channel 2 is no load at an offset (its vec4s straddle the input's); the
    aligned one takes the sum as an epilogue step and has no pointwise node to join."""
    c = Chain((1, 1, 16))
    a, b = (c.op("SLICE", c.x, c.const([0, 0, k], np.int32), c.const([1, 1, 8], np.int32), shape=(1, 1, 8))
            for k in (2, 8))
    model = c.build(c.op("ADD", c.op("LOGISTIC", a), c.op("LOGISTIC", b)))
    graph, log = rewrite_through(model, RULE)
    assert "no contiguous block" in why(log, RULE, "#0 (SLICE)")
    assert "no pointwise node of its shape" in why(log, RULE, "#1 (SLICE)")
    check_gpu(model, [random((1, 1, 16), 6)])


def test_int32_arithmetic_stays_on_the_integer_kernel():
    c = Chain((1, 2, 2, 4))
    k = c.b.input("k", (1, 2, 2, 4), np.int32)
    total = c.b.tensor("total", (1, 2, 2, 4), np.int32)
    c.b.op("ADD", [k, c.const(np.full(4, 3), np.int32)], [total])
    doubled = c.b.tensor("doubled", (1, 2, 2, 4), np.int32)
    c.b.op("MUL", [total, total], [doubled])
    model = c.build(c.op("TANH", c.x), doubled)
    graph, log = rewrite_through(model, RULE)
    assert "int32 values" in why(log, RULE, "#0 (ADD)")
    assert pointwise.OP not in ops_of(graph)


@pytest.mark.parametrize("precision", [*PRECISIONS, "auto"])
def test_preserve_all_tensors_reads_every_cell_tensor(precision):
    """The gates only the group read are no longer stored: a capture computes them on the
    reference kernels from what the GPU computed (fused_away); the rest are read back."""
    model, values = lstm_model(), cell_values(3)
    reference = Interpreter(model_content=model, experimental_preserve_all_tensors=True, cpu_backend="fallback")
    with GpuDelegate(precision=precision) as delegate:
        interp = Interpreter(model_content=model, experimental_delegates=[delegate],
                             experimental_preserve_all_tensors=True)
        for it in (reference, interp):
            it.allocate_tensors()
            for detail, value in zip(it.get_input_details(), values):
                it.set_tensor(detail["index"], value)
            it.invoke()
        fused = set().union(*(p.fused_away for p in delegate.partitions))
        assert len(fused) >= 8  # i, f, g, o, f c, i g, tanh(c') of each cell, less what stayed
        for detail in interp.get_tensor_details():
            index = detail["index"]
            if detail["dtype"] == np.float32 and index not in (0, 1):
                assert_gpu_matches(reference.get_tensor(index), interp.get_tensor(index), precision,
                                   f"tensor {index}", extra=1e-3 if precision == "auto" else 0.0)


def test_warm_start_runs_the_cached_plan(tmp_path):
    path = tmp_path / "lstm.tflite"
    path.write_bytes(lstm_model())
    outputs = []
    for expect_hit in (False, True):
        with GpuDelegate(serialization_dir=str(tmp_path)) as delegate:
            outputs.append(run_ours(path.read_bytes(), cell_values(), experimental_delegates=[delegate]))
            assert delegate.summary()["cache_hit"] is expect_hit
            assert any(t == "pointwise" for p in delegate.partitions for t in p.plan.templates)
    for a, b in zip(*outputs):
        np.testing.assert_array_equal(a, b)


def test_the_kernel_refuses_programs_it_cannot_run():
    x, out = (Tensor(index=k, name=n, shape=(1, 1, 8), dtype=np.dtype(np.float32)) for k, n in enumerate("xy"))

    def reason(program):
        return pointwise.support(Node(index=0, op=pointwise.OP, inputs=[x], outputs=[out],
                                      options={pointwise.PROGRAM: program}))
    ok = Program((Input(0),), (Slot("LOGISTIC", Ref(INPUT, 0), Ref(pointwise.SCALAR)),), (0,))
    assert reason(ok) is None
    assert "does not exist" in reason(ok._replace(slots=(Slot("LOGISTIC", Ref(REG, 0), Ref(pointwise.SCALAR)),)))
    assert "no slot writes" in reason(ok._replace(outputs=(3,)))
    assert "holds no block" in reason(ok._replace(inputs=(Input(0, shift=1, block=True),)))
    assert "the template holds" in reason(ok._replace(slots=ok.slots * (pointwise.MAX_SLOTS + 1)))


def test_a_group_writes_one_lane_view():
    """Two outputs of one group are each a concatenation's input at channel 2: rule lane_views
    writes the first in place and leaves the second a copy (a dispatch stores one lane view;
    two failed the compile)."""
    c = Chain((1, 2, 2, 6))
    y = c.b.input("y", (1, 2, 2, 2))
    c.shapes[y] = (1, 2, 2, 2)
    a = c.op("LOGISTIC", c.x)
    b = c.op("MUL", c.op("TANH", c.x), a)
    firsts = [c.op("CONCATENATION", c.op(op, y), z, shape=(1, 2, 2, 8), axis=3) for op, z in (("NEG", a), ("ABS", b))]
    model = c.build(*firsts)
    graph, log = rewrite_through(model, "lane_views")
    assert ops_of(graph)[0] == pointwise.OP
    assert "writes a lane view already" in why(log, "lane_views", "#6 (CONCATENATION)")
    for precision in PRECISIONS:
        check_gpu(model, [random((1, 2, 2, 6), 1), random((1, 2, 2, 2), 2)], precision)


@pytest.mark.parametrize("precision", [*PRECISIONS, "auto"])
def test_every_kind_of_operand(precision):
    """One group reading a per-channel constant, a scalar, a runtime tensor broadcast over the
    output ([1, 1, 1, C]), a PRELU slope, a comparison's bool value and its CAST, in one dispatch."""
    c = Chain((1, 3, 5, 12))
    scale = c.b.input("scale", (1, 1, 1, 12))
    c.shapes[scale] = (1, 1, 1, 12)
    a = c.op("ABS", c.x)
    b = c.op("MUL", c.op("ADD", a, c.const(random(12, 7))), scale)
    mask = c.b.tensor("mask", (1, 3, 5, 12), np.bool_)
    c.b.op("GREATER", [b, c.x], [mask])
    as_float = c.op("CAST", mask, shape=(1, 3, 5, 12))
    d = c.op("PRELU", c.op("SUB", b, c.op("MUL", a, c.const(0.5))), c.const(random(12, 8)))
    e = c.op("MAXIMUM", c.op("MUL", d, as_float), c.op("LEAKY_RELU", c.x, alpha=0.2))
    model = c.build(e)
    graph, _ = rewrite_through(model, RULE)
    assert ops_of(graph) == [pointwise.OP]
    values = [random((1, 3, 5, 12), 9), random((1, 1, 1, 12), 10, 2.0)]
    summary, _ = check_gpu(model, values, precision)
    assert summary["dispatches"] == 3  # convert_in x 2, the group storing the output


@pytest.mark.parametrize("precision", PRECISIONS)
def test_more_inputs_than_slots(precision):
    """a = h + c, read by a * w (an output) and a - v (a MEAN's input) over four runtime inputs:
    three slots, and
    slot 2 reads input 3. The
    template's register branch of an input's argument read r[3] then, a constant index past the
    registers, and the group failed to compile (its node ran on the CPU; gles-fuzz-graphs
    --families float, seed 33 case 53)."""
    c = Cell()
    w, v = (c.b.input(name, (1, 1, H)) for name in "wv")
    c.shapes.update({w: (1, 1, H), v: (1, 1, H)})
    total = c.op("ADD", c.x, c.c)
    centered = c.op("SUB", total, v)
    model = c.build(c.op("MUL", total, w), c.op("MEAN", centered, c.const([2], np.int32), shape=(1, 1), keep_dims=False))
    graph, _ = rewrite_through(model, RULE)
    [group] = dags(graph)
    assert len(group.inputs) == 4 and len(group.options[pointwise.PROGRAM].slots) == 3
    values = [random((1, 1, H), seed) for seed in range(4)]
    check_gpu(model, values, precision)  # no node on the CPU, the outputs the reference's
