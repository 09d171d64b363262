"""slice_views: a SLICE / STRIDED_SLICE / SPLIT / SPLIT_V output whose PHWC4 storage is a
contiguous block of its input's is read in place by its readers (no copy dispatch); any other
output keeps its copy. Every case runs on the GPU against the reference in every precision, with
its dispatch count."""
import numpy as np
import pytest

from gles_delegate.gpu.kernels.layout import VIEW_OUTPUTS
from tests.gpu.gpulib import PRECISIONS
from tests.gpu.transforms.rulelib import Chain, check_gpu, random, rewrite_through, why

RULE = "slice_views"


def views(model):
    """{node label: ((output position, offset), ...)} after the rules up to this one."""
    graph, _ = rewrite_through(model, RULE)
    return {n.label: n.options.get(VIEW_OUTPUTS, ()) for n in graph.nodes
            if n.op in ("SLICE", "STRIDED_SLICE", "SPLIT", "SPLIT_V")}


def split_v(c, x, sizes, axis=3):
    """SPLIT_V outputs of `x` along `axis`."""
    shape = c.shapes[x]
    outs = [c.b.tensor(f"part{k}", shape[:axis] + (n,) + shape[axis + 1:]) for k, n in enumerate(sizes)]
    for out, n in zip(outs, sizes):
        c.shapes[out] = shape[:axis] + (n,) + shape[axis + 1:]
    c.b.op("SPLIT_V", [x, c.const(sizes, np.int32), c.const(axis, np.int32)], outs, num_splits=len(sizes))
    return outs


def slice_(c, x, begin, size):
    return c.op("SLICE", x, c.const(begin, np.int32), c.const(size, np.int32), shape=size)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_channel_groups_are_read_in_place(precision):
    """MixNet's split into channel groups of 8, 4, 12: every group a view, read by a convolution."""
    c = Chain((1, 4, 5, 8))
    x = c.conv(c.x, 24)
    parts = split_v(c, x, (8, 4, 12))
    model = c.build(*[c.conv(p, 4, seed=3 + k) for k, p in enumerate(parts)])
    assert list(views(model).values()) == [((0, 0), (1, 40), (2, 60))]
    summary, _ = check_gpu(model, [random((1, 4, 5, 8))], precision)
    assert summary["dispatches"] == 5  # convert_in, 4 convolutions: no copy


@pytest.mark.parametrize("precision", PRECISIONS)
def test_channels_off_the_vec4_grid_are_no_blocks(precision):
    """8 + 5 + 3 channels: the second ends mid-slice (its padding would show the third's
    channels), the third starts mid-slice; the first is a view. (Rule lane_views then reads
    the other two in place too.)"""
    c = Chain((1, 4, 5, 8))
    parts = split_v(c, c.conv(c.x, 16), (8, 5, 3))
    model = c.build(*[c.op("ABS", c.conv(p, 4, seed=3 + k)) for k, p in enumerate(parts)])
    [(label, kept)] = views(model).items()
    assert kept == ((0, 0),)
    assert "output 1: it is no contiguous block" in why(rewrite_through(model, RULE)[1], RULE, label)
    summary, _ = check_gpu(model, [random((1, 4, 5, 8))], precision)
    assert summary["dispatches"] == 5  # convert_in, 4 convolutions


@pytest.mark.parametrize("precision", PRECISIONS)
def test_a_slice_of_a_slice(precision):
    """Channels 8..24 of 32, then 4..12 of those: the offsets add up (slice 2 + slice 1 = 60
    vec4s in)."""
    c = Chain((1, 4, 5, 8))
    outer = slice_(c, c.conv(c.x, 32), (0, 0, 0, 8), (1, 4, 5, 16))
    inner = slice_(c, outer, (0, 0, 0, 4), (1, 4, 5, 8))
    model = c.build(c.conv(inner, 4, seed=5), c.conv(outer, 4, seed=7))
    assert list(views(model).values()) == [((0, 40),), ((0, 20),)]
    summary, _ = check_gpu(model, [random((1, 4, 5, 8))], precision)
    assert summary["dispatches"] == 4


@pytest.mark.parametrize("precision", PRECISIONS)
def test_the_outermost_dim(precision):
    """An attention's q, k, v: [3, 37, 1, 10] split along dim 0 (any channel count); a
    STRIDED_SLICE of two rows of it too, one with a stride of 2 keeps its copy."""
    c = Chain((3, 37, 1, 10))
    q, k, v = split_v(c, c.op("EXP", c.x), (1, 1, 1), axis=0)
    strided = c.op("STRIDED_SLICE", c.x, c.const((0, 0, 0, 0), np.int32), c.const((3, 37, 1, 10), np.int32),
                   c.const((2, 1, 1, 1), np.int32), shape=(2, 37, 1, 10))
    rows = c.op("STRIDED_SLICE", c.x, c.const((1, 0, 0, 0), np.int32), c.const((3, 37, 1, 10), np.int32),
                c.const((1, 1, 1, 1), np.int32), shape=(2, 37, 1, 10))
    model = c.build(c.op("MUL", q, k), c.op("ABS", v), c.op("NEG", strided), c.op("ABS", rows), c.op("NEG", rows))
    assert list(views(model).values()) == [((0, 0), (1, 111), (2, 222)), (), ((0, 111),)]
    check_gpu(model, [random((3, 37, 1, 10))], precision)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_rank_5(precision):
    """mobilevit's [3, 2, 4, 4, 6] split along dim 0: blocks of the merged batch."""
    c = Chain((3, 2, 4, 4, 6))
    parts = split_v(c, c.op("EXP", c.x), (1, 2), axis=0)
    model = c.build(c.op("ADD", parts[0], c.const(random((1, 2, 4, 4, 6), 2))), c.op("ABS", parts[1]))
    assert list(views(model).values()) == [((0, 0), (1, 64))]
    check_gpu(model, [random((3, 2, 4, 4, 6))], precision)


def test_a_slice_of_the_graph_input_leaving_the_partition():
    c = Chain((1, 4, 5, 12))
    part = slice_(c, c.x, (0, 0, 0, 4), (1, 4, 5, 8))
    model = c.build(part, c.conv(part, 4))
    assert list(views(model).values()) == [((0, 20),)]
    summary, _ = check_gpu(model, [random((1, 4, 5, 12))])
    assert summary["dispatches"] == 3  # convert_in, the convolution, convert_out of the view


@pytest.mark.parametrize("precision", PRECISIONS)
def test_two_slices_added(precision):
    """ADD of two views of one tensor that dies there: its output must not take that storage
    in place (another invocation still reads the other half)."""
    c = Chain((1, 8, 8, 8))
    a, b = split_v(c, c.op("EXP", c.x), (4, 4))
    model = c.build(c.conv(c.op("ADD", a, b), 4))
    assert list(views(model).values()) == [((0, 0), (1, 64))]
    check_gpu(model, [random((1, 8, 8, 8))], precision)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_a_slice_through_a_removed_reshape(precision):
    """[1, 4, 5, 4] -> RESHAPE [4, 20] (a copy: rows of 20 channels) -> rows 1..2: the reshape
    goes (read_through_layout) and the slice is rows 1..2 of the convolution's own storage (one
    slice: pixels 5..14)."""
    c = Chain((1, 4, 5, 8))
    rows = c.op("RESHAPE", c.conv(c.x, 4), c.const((4, 20), np.int32), shape=(4, 20))
    part = slice_(c, rows, (1, 0), (2, 20))
    model = c.build(c.op("ABS", part), c.op("NEG", part))
    graph, log = rewrite_through(model, RULE)
    assert "RESHAPE" not in [n.op for n in graph.nodes]
    assert list(views(model).values()) == [((0, 5),)]
    summary, _ = check_gpu(model, [random((1, 4, 5, 8))], precision)
    assert summary["dispatches"] == 4  # convert_in, the convolution, ABS, NEG
