"""dense_rows_as_batch: a FULLY_CONNECTED's [1, T, U] output that slicing ops alone read, one row
at a time, is stored as [T, U] (row t a contiguous block) and each row slice becomes a view;
where the slices are blocks of the [1, T, U] layout already (channels of every row), or a
non-slicing op reads the output, it stays. Every case runs on the GPU against the reference."""
import numpy as np
import pytest

from gles_delegate import GpuDelegate, Interpreter
from gles_delegate.gpu.kernels.layout import VIEW_OUTPUTS
from gles_delegate.gpu.transforms import dense_rows_as_batch
from tests.gpu.gpulib import PRECISIONS, assert_gpu_matches
from tests.gpu.transforms.rulelib import Chain, check_gpu, dispatches_without, random, rewrite_through, statuses, why

RULE = "dense_rows_as_batch"
FC = "#0 (FULLY_CONNECTED)"


def projection(c, steps, units, activation=0):
    """x [1, steps, 8] -> FULLY_CONNECTED (keep_num_dims, bias) -> [1, steps, units]."""
    return c.op("FULLY_CONNECTED", c.x, c.const(random((units, 8), 3, 0.5)), c.const(random(units, 4)),
                shape=(1, steps, units), fused_activation_function=activation, keep_num_dims=True)


def slice_(c, x, begin, size):
    return c.op("SLICE", x, c.const(begin, np.int32), c.const(size, np.int32), shape=size)


def dense(c, x, seed):
    """A FULLY_CONNECTED to 4 units reading `x` (an elementwise reader would join a slice's
    epilogue instead, and a slice with epilogue steps computes: no view)."""
    shape = c.shapes[x]
    return c.op("FULLY_CONNECTED", x, c.const(random((4, shape[-1]), seed, 0.5)), -1, shape=shape[:-1] + (4,),
                fused_activation_function=0, keep_num_dims=True)


def unrolled_gates(steps=3, gate=8, activation=0):
    """litert-torch's unrolled GRU input side: the projection reshaped to [steps, 1, 3 * gate],
    each step's row sliced and reshaped to [1, 3 * gate], then its three gates sliced apart, each
    read by a FULLY_CONNECTED."""
    units = 3 * gate
    c = Chain((1, steps, 8))
    rows = c.op("RESHAPE", projection(c, steps, units, activation), c.const([steps, 1, units], np.int32),
                shape=(steps, 1, units))
    outputs = []
    for t in range(steps):
        row = c.op("RESHAPE", slice_(c, rows, (t, 0, 0), (1, 1, units)), c.const([1, units], np.int32),
                   shape=(1, units))
        for g in range(3):
            outputs.append(dense(c, slice_(c, row, (0, g * gate), (1, gate)), 5 + g))
    return c.build(*outputs)


def slice_views(graph):
    return sum(len(n.options.get(VIEW_OUTPUTS, ())) for n in graph.nodes)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("activation", [0, 1])  # none, RELU: an activation stays the FC's own
def test_each_step_and_gate_is_read_in_place(precision, activation):
    model = unrolled_gates(activation=activation)
    graph, log = rewrite_through(model, "slice_views")
    assert "9 of its slices' outputs become views (against 0)" in why(log, RULE, FC)
    assert slice_views(graph) == 9
    values = [random((1, 3, 8), 1)]
    summary, _ = check_gpu(model, values, precision)
    assert dispatches_without(RULE, model, values) - summary["dispatches"] == 9  # the slices' copies


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_a_row_sliced_straight_from_the_projection(precision):
    """A SLICE reading the [1, 5, 16] projection itself (no removed layout op between) and a
    SPLIT_V of another row: both read the rows in place."""
    c = Chain((1, 5, 8))
    projected = projection(c, 5, 16)
    row = slice_(c, projected, (0, 2, 0), (1, 1, 16))
    parts = [c.b.tensor(f"part{k}", (1, 1, 8)) for k in range(2)]
    for part in parts:
        c.shapes[part] = (1, 1, 8)
    c.b.op("SPLIT_V", [slice_(c, projected, (0, 4, 0), (1, 1, 16)), c.const((8, 8), np.int32),
                       c.const(2, np.int32)], parts, num_splits=2)
    model = c.build(dense(c, row, 5), dense(c, parts[0], 6), dense(c, parts[1], 7))
    graph, log = rewrite_through(model, "slice_views")
    assert "3 of its slices' outputs become views (against 0)" in why(log, RULE, FC)
    check_gpu(model, [random((1, 5, 8), 2)], precision)


def test_channel_slices_of_every_row_stay_blocks_of_the_rank_3_layout():
    """Channels 0..7 of all 4 rows: two slices of every pixel, contiguous as [1, 4, 16] and
    strided as [4, 16]: the rule leaves it."""
    c = Chain((1, 4, 8))
    model = c.build(dense(c, slice_(c, projection(c, 4, 16), (0, 0, 0), (1, 4, 8)), 5))
    graph, log = rewrite_through(model, "slice_views")
    assert "make 0 views as [rows, U] against 1" in why(log, RULE, FC)
    assert slice_views(graph) == 1
    check_gpu(model, [random((1, 4, 8), 3)])


def test_another_reader_keeps_the_layout():
    c = Chain((1, 4, 8))
    projected = projection(c, 4, 16)
    model = c.build(dense(c, slice_(c, projected, (0, 1, 0), (1, 1, 16)), 5), c.op("NEG", projected))
    _, log = rewrite_through(model, "slice_views")
    assert "is no slicing op reading it as its data" in why(log, RULE, FC)
    check_gpu(model, [random((1, 4, 8), 4)])


def test_the_switch_turns_the_rule_off(monkeypatch):
    monkeypatch.setattr(dense_rows_as_batch, "ENABLED", False)
    graph, log = rewrite_through(unrolled_gates(), "slice_views")
    assert not statuses(log, RULE) and slice_views(graph) == 0


def test_every_tensor_stays_readable_with_preserve_all_tensors():
    """The projection's own [1, 3, 24] tensor, which no dispatch writes in that layout any more,
    and the row slices, views of the [3, 24] rows, read back as the reference computes them."""
    model, x = unrolled_gates(), random((1, 3, 8), 1)
    reference = Interpreter(model_content=model, experimental_preserve_all_tensors=True, cpu_backend="fallback")
    with GpuDelegate() as delegate:
        ours = Interpreter(model_content=model, experimental_delegates=[delegate], experimental_preserve_all_tensors=True)
        for it in (reference, ours):
            it.allocate_tensors()
            it.set_tensor(it.get_input_details()[0]["index"], x)
            it.invoke()
        assert "dense_rows_as_batch" in {r.rule for r in delegate.rewrite_log if r.status == "APPLIED"}
        for detail in reference.get_tensor_details():
            index = detail["index"]
            assert_gpu_matches(reference.get_tensor(index), ours.get_tensor(index), "fp32", f"tensor {index}")
