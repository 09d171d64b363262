"""matmul_through_layout: an attention block's head split (RESHAPE -> TRANSPOSE, the key's
transpose too) and head merge around BATCH_MATMUL cost no dispatch: the matmul reads its operands
and writes its output through strides (matmul.View). Where the moved values are not whole vec4s
of the stored tensor, or the moved tensor is read elsewhere, the layout op stays."""
import numpy as np
import pytest

from gles_delegate.gpu.kernels import matmul
from gles_delegate.gpu.kernels.matmul import VIEWS, fit_view, matrix_strides
from tests.gpu.transforms.rulelib import Chain, check_gpu, ops_of, random, rewrite_through, statuses, why

RULE = "matmul_through_layout"


def transpose(c, x, perm):
    shape = tuple(c.shapes[x][p] for p in perm)
    return c.op("TRANSPOSE", x, c.const(perm, np.int32), shape=shape)


def reshape(c, x, shape):
    return c.op("RESHAPE", x, c.const(shape, np.int32), shape=shape)


def attention(tokens=8, heads=2, depth=16, merge=True, extra_reader=False, project=True):
    """(model, its input shape): softmax(q k^T) v over `heads` heads of `depth` channels, q, k and v
    the head split of ABS(x), [1, tokens, heads * depth]; the result merged back and projected,
    unless not `merge` (then negated); not `project`: the merged heads are the model's output.
    extra_reader: the split query is also a model output."""
    shape = (1, tokens, heads * depth)
    c = Chain(shape)
    x = c.op("ABS", c.x)
    split = reshape(c, x, (1, tokens, heads, depth))
    q = transpose(c, split, (0, 2, 1, 3))  # [1, heads, tokens, depth]
    k = transpose(c, split, (0, 2, 3, 1))  # [1, heads, depth, tokens]: the key transposed
    v = transpose(c, split, (0, 2, 1, 3))
    scores = c.op("BATCH_MATMUL", q, k, shape=(1, heads, tokens, tokens), adj_x=False, adj_y=False)
    weights = c.op("SOFTMAX", scores, beta=1.0)
    out = c.op("BATCH_MATMUL", weights, v, shape=(1, heads, tokens, depth), adj_x=False, adj_y=False)
    if merge:  # an output projection reads the merged heads, as in a transformer
        out = reshape(c, transpose(c, out, (0, 2, 1, 3)), shape)
        result = out if not project else c.op("FULLY_CONNECTED", out, c.const(random((12, heads * depth), 5)), shape=(1, tokens, 12),
                      keep_num_dims=True)
    else:
        result = c.op("NEG", out)
    return c.build(result, q) if extra_reader else c.build(result), shape


@pytest.mark.parametrize("precision", ["fp32", "fp16", "fp16_fp32acc"])
def test_the_head_split_and_merge_become_views(precision):
    model, shape = attention()
    graph, log = rewrite_through(model, RULE)
    assert ops_of(graph) == ["ABS", "BATCH_MATMUL", "SOFTMAX", "BATCH_MATMUL", "FULLY_CONNECTED"]
    first, second = (n for n in graph.nodes if n.op == "BATCH_MATMUL")
    assert set(first.options[VIEWS]) == {"lhs", "rhs"} and first.options[VIEWS]["rhs"].transposed
    assert set(second.options[VIEWS]) == {"rhs", "out"}
    summary, _ = check_gpu(model, [random(shape, 1)], precision)
    assert summary["dispatches"] == 6  # convert in, ABS, 2 matmuls, SOFTMAX, FULLY_CONNECTED


@pytest.mark.parametrize("precision", ["fp32", "fp16_fp32acc"])
def test_merged_heads_leaving_the_partition_are_written_in_place(precision):
    # The output the matmul writes through its view is converted out of the partition as it is.
    model, shape = attention(project=False)
    graph, log = rewrite_through(model, RULE)
    assert ops_of(graph) == ["ABS", "BATCH_MATMUL", "SOFTMAX", "BATCH_MATMUL"]
    assert "out" in graph.nodes[-1].options[VIEWS]
    check_gpu(model, [random(shape, 6)], precision)


def test_heads_of_a_depth_off_the_vec4_grid_keep_their_copies():
    model, shape = attention(heads=3, depth=6)
    graph, log = rewrite_through(model, RULE)
    assert all("whole vec4s" in r.why for r in log if r.rule == RULE and r.status == "SKIPPED")
    assert [s for s, _ in statuses(log, RULE)] == ["SKIPPED", "SKIPPED"]
    check_gpu(model, [random(shape, 2)])


def test_a_split_read_elsewhere_keeps_its_copy():
    model, shape = attention(extra_reader=True)
    graph, log = rewrite_through(model, RULE)
    first = next(n for n in graph.nodes if n.op == "BATCH_MATMUL")
    assert "lhs" not in first.options[VIEWS] and "rhs" in first.options[VIEWS]
    assert "read elsewhere or leaves the partition" in why(log, RULE, first.label)
    check_gpu(model, [random(shape, 3)], "fp16_fp32acc")


def test_an_output_that_leaves_the_partition_is_written_as_it_is():
    model, shape = attention(merge=False)
    graph, log = rewrite_through(model, RULE)
    second = [n for n in graph.nodes if n.op == "BATCH_MATMUL"][1]
    assert "out" not in second.options[VIEWS]
    assert "leaves the partition" in why(log, RULE, second.label)  # NEG went into its epilogue
    check_gpu(model, [random(shape, 4)])


@pytest.mark.parametrize("shape", [(8, 12), (3, 5, 8), (2, 3, 4, 16), (6, 4)])
def test_a_tensor_viewed_as_itself_has_its_own_strides(shape):
    # The view fitted to a tensor's own positions is how the kernel addresses a plain operand.
    positions = np.arange(np.prod(shape)).reshape(shape)
    fit = fit_view(shape, positions)
    if shape[-1] % 4:
        assert fit is None  # its last slice holds padding, which a view would read
    else:
        base, strides = fit
        own = matrix_strides(shape, shape)
        grid = np.indices((*matmul.batch_dims(shape), shape[-2], shape[-1] // 4)).reshape(4, -1)
        assert base == 0 and np.array_equal(np.dot(strides, grid), np.dot(own, grid))


def test_a_view_that_splits_a_vec4_is_refused():
    positions = np.arange(32).reshape(1, 4, 8)[..., 2:6]  # channels 2..5 of each row: across vec4s
    assert fit_view((1, 4, 8), positions) is None
    assert matmul.fit_view((1, 4, 8), np.arange(32).reshape(1, 4, 8)[..., 4:8]) == (4, (0, 0, 1, 0))
