"""Tensors of rank 5 and 6 on the GPU through their BHWC view (gpu/phwc4.py: the leading dims
merged into B): elementwise, broadcasting binary ops, the layout ops of the attention and
channel-shuffle kinds, SOFTMAX, concatenation / slices / gathers that keep their axis a box of the
view, against the numpy reference in every precision (BATCH_MATMUL's rank-5 cases are in
test_matmul.py); two small models (a ShuffleNet channel shuffle, multi-head attention through a
rank-5 reshape) as one GPU partition; and the refusals, which say why."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gles_delegate.gpu import kernels
from gles_delegate.gpu.kernels import layout
from gles_delegate.gpu.phwc4 import Shape4, bhwc, from_phwc4, to_phwc4
from tests.gpu.gpulib import PRECISIONS, assert_gpu_matches, check_gpu, run_gpu
from tests.gpu.transforms import rulelib
from tests.gpu.transforms.rulelib import Chain, random
from tests.oplib import In, node_with_output, run_ours, single_op_model, single_op_node


def x(*shape, seed=0, const=False):
    """A float32 input (or constant) of `shape`, values standard normal."""
    return In(random(shape, seed + len(shape)), const=const)


def ints(values):
    return In(np.array(values, np.int32), const=True)


# -- the view ---------------------------------------------------------------------------------
def test_view_merges_the_leading_dims_into_the_batch():
    assert bhwc((2, 3, 4, 5, 6)) == Shape4(6, 4, 5, 6)
    assert bhwc((2, 3, 4, 5, 6, 7)) == Shape4(24, 5, 6, 7)
    assert bhwc((1, 1, 1, 1, 9)) == bhwc((9,))  # the view is a row-major reshape: size-1 dims change nothing
    value = random((2, 1, 3, 2, 2, 5), 1)
    assert np.array_equal(from_phwc4(to_phwc4(value), value.shape), value)
    with pytest.raises(ValueError, match="rank 7"):
        bhwc((1,) * 7)


def test_a_map_splits_merged_dims_into_digits_and_joins_dims_that_step_as_one():
    """layout_map reads B of a rank-6 output through one digit per merged dim (outer radix None),
    dims whose strides continue each other as one digit, dims of one element as none."""
    axes = layout._strided_axes((2, 3, 4, 5, 6, 7), (1, 2, 6, 24, 120, 720))
    assert axes[0] == ((None, 1), (3, 2), (4, 6))
    assert axes[1:] == (((None, 24),), ((None, 120),), ((None, 720),))
    assert layout._strided_axes((2, 3, 4, 5, 6, 7), (420, 140, 35, 7, 1, 5))[0] == ((None, 35),)
    assert layout._strided_axes((2, 1, 3, 4, 5, 6), (5, 99, 7, 10, 40, 1))[0] == ((None, 5), (3, 7))


# -- one op at a time, in every precision -------------------------------------------------------
CASES = {
    "tanh_rank5": ("TANH", [x(2, 3, 4, 5, 6)], {}),
    "hard_swish_rank6": ("HARD_SWISH", [x(2, 1, 3, 2, 3, 5)], {}),
    "add_broadcast_rank3": ("ADD", [x(2, 3, 4, 5, 6), x(4, 1, 6, seed=1)], {"fused_activation_function": 1}),
    "mul_broadcast_merged": ("MUL", [x(2, 3, 2, 4, 5, 6), x(1, 1, 1, 4, 5, 1, seed=1)], {}),
    "sub_same_shape": ("SUB", [x(2, 3, 4, 5, 6), x(2, 3, 4, 5, 6, seed=1)], {}),
    "maximum_const": ("MAXIMUM", [x(2, 3, 1, 5, 6), x(1, 1, 1, 1, 6, seed=1, const=True)], {}),
    "prelu": ("PRELU", [x(2, 2, 3, 4, 5), x(1, 1, 5, seed=1, const=True)], {}),
    "softmax": ("SOFTMAX", [x(2, 3, 4, 5, 6)], {"beta": 0.7}),
    "softmax_wide": ("SOFTMAX", [x(1, 2, 1, 2, 70)], {"beta": 1.0}),  # a workgroup per pixel
    "log_softmax_rank6": ("LOG_SOFTMAX", [x(2, 1, 2, 3, 2, 9)], {}),
    # Multi-head attention: [B, S, 3 * heads * dh] -> [B, S, 3, heads, dh] -> [3, B, heads, S, dh].
    "attention_split_heads": ("RESHAPE", [x(2, 6, 48), ints([2, 6, 3, 2, 8])], {}),
    "attention_transpose": ("TRANSPOSE", [x(2, 6, 3, 2, 8), ints([2, 0, 3, 1, 4])], {}),
    "attention_merge_heads": ("TRANSPOSE", [x(1, 2, 2, 6, 8), ints([0, 1, 3, 2, 4])], {}),
    # Channel shuffle: [N, H, W, G, C / G] -> swap the last two -> [N, H, W, C].
    "shuffle_split": ("RESHAPE", [x(2, 5, 3, 12), ints([2, 5, 3, 3, 4])], {}),
    "shuffle_transpose": ("TRANSPOSE", [x(2, 5, 3, 3, 4), ints([0, 1, 2, 4, 3])], {}),
    "shuffle_join": ("RESHAPE", [x(2, 5, 3, 4, 3), ints([2, 5, 3, 12])], {}),
    "transpose_rank6": ("TRANSPOSE", [x(2, 3, 2, 3, 2, 5), ints([5, 3, 1, 0, 2, 4])], {}),
    "reshape_rank6_to_rank5": ("RESHAPE", [x(2, 3, 2, 2, 3, 4), ints([3, 4, 2, 3, 4])], {}),
    "squeeze_to_rank5": ("SQUEEZE", [x(2, 1, 3, 2, 2, 5)], {"squeeze_dims": [1]}),
    "expand_dims_to_rank6": ("EXPAND_DIMS", [x(2, 3, 2, 2, 5), ints(1)], {}),
    "slice": ("SLICE", [x(3, 4, 3, 5, 6), ints([1, 1, 0, 2, 1]), ints([2, -1, 3, 2, 4])], {}),
    "strided_slice": ("STRIDED_SLICE", [x(2, 3, 4, 5, 6), ints([1, 2, 0, 1, 0]), ints([2, 0, 4, 5, 6]),
                                        ints([1, -1, 2, 1, 3])], {"shrink_axis_mask": 1}),
    "reverse_merged_axis": ("REVERSE_V2", [x(2, 3, 2, 3, 4), ints([1])], {}),
    "concat_channels": ("CONCATENATION", [x(2, 3, 2, 5, 6), x(2, 3, 2, 5, 3, seed=1)], {"axis": -1}),
    "concat_outer_merged": ("CONCATENATION", [x(1, 2, 3, 4, 5), x(1, 3, 3, 4, 5, seed=1, const=True)], {"axis": 1}),
    "gather_runs_outer_merged": ("GATHER", [x(3, 2, 2, 3, 4), ints([2, 0, 1, 1])], {"axis": 0}),
    # Reductions whose axes are the view's: a 3D net's global pool, every merged dim at once, a
    # merged dim of one element reduced beside a kept batch, H and W of rank 6.
    "mean_3d_global_pool": ("MEAN", [x(1, 4, 5, 6, 7), ints([1, 2, 3])], {"keep_dims": False}),
    "sum_merged_dims_keep": ("SUM", [x(2, 3, 4, 5, 6), ints([0, 1])], {"keep_dims": True}),
    "mean_unit_merged_dim": ("MEAN", [x(2, 1, 4, 5, 6), ints([1, 2])], {"keep_dims": True}),
    "max_hw_rank6": ("REDUCE_MAX", [x(2, 1, 3, 4, 5, 6), ints([3, -2])], {"keep_dims": False}),
    # Pads: a litert-torch Conv3d's explicit PAD of depth (a batch of one), the outer of two merged
    # dims (the inner one 1), H, W and C of a batch.
    "pad_depth_of_one_clip": ("PAD", [x(1, 4, 5, 6, 3), ints([[0, 0], [1, 2], [1, 1], [0, 1], [0, 0]])], {}),
    "pad_outer_merged_dim": ("PAD", [x(3, 1, 4, 5, 2), ints([[1, 2], [0, 0], [0, 1], [0, 0], [1, 0]])], {}),
    "padv2_spatial_rank5": ("PADV2", [x(2, 3, 4, 5, 6), ints([[0, 0], [0, 0], [2, 0], [1, 1], [0, 3]]),
                                      x(1, seed=1, const=True)], {}),
    "mirror_pad_rank6": ("MIRROR_PAD", [x(1, 1, 3, 4, 5, 2), ints([[0, 0], [0, 0], [2, 1], [1, 1], [0, 2], [0, 0]])],
                         {"mode": 1}),
}


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("case", CASES)
def test_op(case, precision):
    op, inputs, options = CASES[case]
    check_gpu(op, inputs, options, precision)


@settings(max_examples=10, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=5, max_size=6), st.integers(0, 2 ** 31), st.sampled_from(PRECISIONS))
def test_random_transpose_then_reshape(shape, seed, precision):
    """A random permutation of a random rank-5 / 6 shape, and a reshape of that shape to a random
    rank-5 / 6 split of its size."""
    rng = np.random.default_rng(seed)
    check_gpu("TRANSPOSE", [x(*shape, seed=seed), ints(rng.permutation(len(shape)))], {}, precision)
    size, target = int(np.prod(shape)), []
    for _ in range(int(rng.integers(4, 6))):
        d = int(rng.choice([f for f in range(1, size + 1) if size % f == 0]))
        target.append(d)
        size //= d
    check_gpu("RESHAPE", [x(*shape, seed=seed), ints(target + [size])], {}, precision)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_split_of_a_rank5_tensor(precision):
    check_gpu("SPLIT", [ints(0), x(3, 2, 2, 6, 8)], {"num_splits": 3}, precision, n_outputs=3,
              output_dtypes=[np.float32] * 3)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_selections_on_the_float_view(precision):
    """SELECT_V2 with a broadcast condition and ARG_MAX / ARG_MIN over the last axis, rank 5 and 6:
    exactly the reference's values (they select stored values)."""
    rng = np.random.default_rng(5)
    condition = In(rng.random((3, 1, 5)) < 0.5)
    cases = [("SELECT_V2", [condition, x(2, 2, 3, 4, 5), x(1, 1, 1, 4, 1, seed=1, const=True)], {}, np.float32)]
    for op, shape in [("ARG_MAX", (2, 3, 2, 4, 7)), ("ARG_MIN", (2, 1, 3, 2, 3, 6))]:
        values = np.round(random(shape, 6) * 2) / 2  # ties: the first index wins
        cases.append((op, [In(values), ints([-1])], {"output_type": 2}, np.int32))  # TensorType INT32
    for op, inputs, options, dtype in cases:
        reference, gpu = check_gpu(op, inputs, options, precision, output_dtypes=[np.dtype(dtype)])
        assert np.array_equal(gpu[0], reference[0]), op


def test_int8_rank5_through_the_float_view():
    """int8 ADD and TRANSPOSE of rank 5 run on their float view (quant.py), whose fake-quant
    nodes take the view too: within one step of the integer reference."""
    rng = np.random.default_rng(3)
    a, b = (rng.integers(-128, 128, (2, 3, 2, 4, 5)).astype(np.int8) for _ in range(2))
    add = single_op_model("ADD", [In(a, quant=(0.05, 3)), In(b, quant=(0.03, -2))], output_quant=[(0.08, 1)])
    transpose = single_op_model("TRANSPOSE", [In(a, quant=(0.05, 3)), ints([0, 1, 2, 4, 3])],
                                output_quant=[(0.05, 3)])
    for model, values in ((add, [a, b]), (transpose, [a])):
        (gpu,), summary = run_gpu(model, values)
        assert summary["gpu_nodes"] == 1, summary
        assert np.abs(gpu.astype(np.int64) - run_ours(model, values)[0]).max() <= 1


# -- models that run as one GPU partition -------------------------------------------------------
def channel_shuffle(groups=3):
    """conv -> [N, H, W, G, C / G] -> TRANSPOSE(0, 1, 2, 4, 3) -> [N, H, W, C] -> conv (ShuffleNet)."""
    n, h, w, c = shape = (2, 5, 4, 12)
    m = Chain(shape)
    value = m.conv(m.x, c, kernel=1, activation=1)
    value = m.op("RESHAPE", value, m.const([n, h, w, groups, c // groups], np.int32),
                 shape=(n, h, w, groups, c // groups))
    value = m.op("TRANSPOSE", value, m.const([0, 1, 2, 4, 3], np.int32), shape=(n, h, w, c // groups, groups))
    value = m.op("RESHAPE", value, m.const(shape, np.int32), shape=shape)
    return m.build(m.depthwise(value, activation=3)), [random(shape, 1)]


def attention(batch=2, seq=6, heads=2, depth=8):
    """Self-attention as litert-torch converts it: a fused QKV projection reshaped to rank 5
    [B, S, 3, heads, dh], transposed to [3, B, heads, S, dh] and split, rank-5 BATCH_MATMULs
    and SOFTMAX, the heads merged back and projected."""
    width = heads * depth
    m = Chain((batch, seq, width))
    qkv = m.op("FULLY_CONNECTED", m.x, m.const(random((3 * width, width), 2, 0.3)), m.const(random(3 * width, 3)),
               shape=(batch, seq, 3 * width), keep_num_dims=True)
    qkv = m.op("RESHAPE", qkv, m.const([batch, seq, 3, heads, depth], np.int32), shape=(batch, seq, 3, heads, depth))
    qkv = m.op("TRANSPOSE", qkv, m.const([2, 0, 3, 1, 4], np.int32), shape=(3, batch, heads, seq, depth))
    part = (1, batch, heads, seq, depth)
    q, k, v = (m.b.tensor(f"{name}", part) for name in "qkv")
    m.b.op("SPLIT", [m.const(0, np.int32), qkv], [q, k, v], num_splits=3)
    m.shapes.update({q: part, k: part, v: part})
    scores = m.op("BATCH_MATMUL", q, k, shape=(1, batch, heads, seq, seq), adj_x=False, adj_y=True)
    scores = m.op("MUL", scores, m.const(np.float32(depth ** -0.5)))
    weights = m.op("SOFTMAX", scores, beta=1.0)
    context = m.op("BATCH_MATMUL", weights, v, shape=part, adj_x=False, adj_y=False)
    context = m.op("TRANSPOSE", context, m.const([0, 1, 3, 2, 4], np.int32), shape=(1, batch, seq, heads, depth))
    context = m.op("RESHAPE", context, m.const([batch, seq, width], np.int32), shape=(batch, seq, width))
    out = m.op("FULLY_CONNECTED", context, m.const(random((width, width), 4, 0.3)), m.const(random(width, 5)),
               shape=(batch, seq, width), keep_num_dims=True)
    return m.build(out), [random((batch, seq, width), 1)]


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("model", [channel_shuffle, attention])
def test_model_runs_as_one_gpu_partition(model, precision):
    summary, _ = rulelib.check_gpu(*model(), precision)
    assert summary["partitions"] == 1 and summary["cpu_nodes"] == 0, summary


def test_a_reshape_between_ranks_of_one_layout_is_free():
    """[2, 3, 4, 5, 6] and [6, 4, 5, 6] have one view: the reshape aliases, no dispatch."""
    m = Chain((2, 3, 4, 5, 6))
    value = m.op("RESHAPE", m.op("TANH", m.x), m.const([6, 4, 5, 6], np.int32), shape=(6, 4, 5, 6))
    # read by a SOFTMAX: an elementwise reader would join the reshape's epilogue (a copy, then)
    model, values = m.build(m.op("SOFTMAX", value, beta=1.0)), [random((2, 3, 4, 5, 6), 1)]
    summary, log = rulelib.check_gpu(model, values)
    assert rulelib.statuses(log, "alias_reshape") == [("APPLIED", "#1 (RESHAPE)")]
    assert summary["dispatches"] == rulelib.dispatches(model, values, rewrite_rules=False) - 1


# -- refusals ---------------------------------------------------------------------------------
REFUSALS = {
    "rank7": (lambda: node_with_output("TANH", [x(1, 2, 1, 2, 1, 2, 3)], (1, 2, 1, 2, 1, 2, 3)),
              "rank 7 > 6, the highest the GPU views as BHWC"),
    "rank7_transpose": (lambda: node_with_output("TRANSPOSE", [x(2, 1, 1, 1, 1, 1, 3), ints([6, 1, 2, 3, 4, 5, 0])],
                                        (3, 1, 1, 1, 1, 1, 2)), "rank 7 > 6"),
    "mean_inside_merged_dims": (lambda: single_op_node("MEAN", [x(2, 3, 4, 5, 6), ints([1])]),
                                "axes [1] reduce part of dims [0, 1] of [2, 3, 4, 5, 6], which its rank-5 view "
                                "merges into one batch axis"),
    "pad_inside_merged_dims": (lambda: single_op_node("PAD", [x(2, 3, 4, 5, 6),
                                                              ints([[0, 0], [1, 1], [0, 0], [0, 0], [0, 0]])]),
                               "it pads dims [1] of [2, 3, 4, 5, 6], which its rank-5 view merges into one batch axis "
                               "with dims [2]"),
    "pad_two_merged_dims": (lambda: single_op_node("PAD", [x(1, 1, 4, 5, 6),
                                                           ints([[1, 0], [0, 1], [0, 0], [0, 0], [0, 0]])]),
                            "it pads dims [0, 1] of [1, 1, 4, 5, 6]"),
    # The float reduction takes rank 5 (HIGH_RANK); the int32 one, its second candidate, does not.
    "int32_sum_rank5": (lambda: single_op_node("SUM", [In(np.ones((1, 3, 4, 5, 6), np.int32)), ints([1, 2, 3])]),
                        "the integer reduction takes ranks <= 4"),
    "tile": (lambda: single_op_node("TILE", [x(2, 3, 4, 5, 6), ints([1, 1, 2, 1, 1])]),
             "has rank 5: the GPU's TILE kernel takes ranks <= 4"),
    "partial_broadcast": (lambda: single_op_node("ADD", [x(2, 3, 4, 5, 6), x(2, 1, 4, 5, 6, seed=1)]),
                          "broadcasts along some but not all of the dims that the rank-5 view"),
    "concat_inner_merged": (lambda: single_op_node("CONCATENATION", [x(2, 3, 4, 5, 6), x(2, 2, 4, 5, 6, seed=1)],
                                                   {"axis": 1}),
                            "dim 1 of [2, 5, 4, 5, 6] is merged into the batch of its rank-5 view inside outer dims [2]"),
}


def test_a_gather_whose_runs_cross_merged_dims_runs_in_the_gather_kernel():
    """layout_map cannot box runs along a dim merged into the batch; the second GATHER candidate
    (gather.glsl, reading by row-major index) takes them."""
    inputs = [x(2, 3, 4, 5, 6), ints([2, 0, 1])]
    assert "dim 1 of [2, 3, 4, 5, 6] is merged" in layout.SUPPORT["GATHER"](single_op_node("GATHER", inputs, {"axis": 1}))
    check_gpu("GATHER", inputs, {"axis": 1})


@pytest.mark.parametrize("case", REFUSALS)
def test_refusal_says_why(case):
    make, why = REFUSALS[case]
    reason = kernels.unsupported_reason(make())
    assert reason is not None and why in reason, reason


def test_a_refused_rank5_node_runs_on_the_cpu_and_the_rest_on_the_gpu(caplog):
    """A model whose rank-5 MEAN has no view (it reduces one of the two dims merged into the
    batch) stays correct: the partitioner keeps it on the CPU, saying why, and the rank-5 nodes
    around it that have one run on the GPU."""
    m = Chain((2, 3, 4, 5, 6))
    value = m.op("TANH", m.x)
    value = m.op("MEAN", value, m.const([1], np.int32), shape=(2, 1, 4, 5, 6), keep_dims=True)
    model, values = m.build(m.op("RELU", value)), [random((2, 3, 4, 5, 6), 1)]
    (gpu,), summary = run_gpu(model, values, max_delegated_partitions=0)
    assert (summary["gpu_nodes"], summary["cpu_nodes"]) == (2, 1), summary
    assert "(MEAN) cannot be handled by this delegate: axes [1] reduce part of dims [0, 1] of [2, 3, 4, 5, 6]" \
        in caplog.text
    assert_gpu_matches(run_ours(model, values)[0], gpu, "fp32", "TANH, MEAN, RELU")


# -- every candidate of an op either runs a high-rank node or refuses it ---------------------------
def int32s(*shape, seed=0):
    return In(np.random.default_rng(seed).integers(-50, 50, shape).astype(np.int32))


SWEEP = [("ADD", 2), ("SUB", 2), ("MUL", 2), ("MAXIMUM", 2), ("MINIMUM", 2), ("FLOOR_DIV", 2), ("FLOOR_MOD", 2),
         ("LESS", 2), ("EQUAL", 2), ("ABS", 1), ("NEG", 1), ("SUM", "axes"), ("MEAN", "axes"),
         ("REDUCE_MAX", "axes"), ("REDUCE_MIN", "axes"), ("REDUCE_PROD", "axes")]


@pytest.mark.parametrize("shape", [(1, 3, 2, 4, 5), (2, 1, 3, 2, 2, 3)])
@pytest.mark.parametrize("op, operands", SWEEP)
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_every_candidate_runs_a_high_rank_node_or_refuses_it(op, operands, dtype, shape):
    """An op two kernels run (kernels.ORDER: the float one, then the int32 one) takes rank 5 / 6
    where either module says so (HIGH_RANK); the other must then refuse it itself, not reach the
    compiler with a shape it cannot index (an int32 SUM at rank 5 once failed to compile)."""
    make = (lambda seed: x(*shape, seed=seed)) if dtype == np.float32 else (lambda seed: int32s(*shape, seed=seed))
    if operands == "axes":
        inputs, options = [make(1), ints([len(shape) - 3, len(shape) - 2])], {"keep_dims": True}
    else:
        inputs, options = [make(k + 1) for k in range(operands)], {}
    if op in ("FLOOR_DIV", "FLOOR_MOD"):  # no zero divisor
        inputs[1] = In(np.where(inputs[1].value == 0, 7, inputs[1].value).astype(dtype))
    out_dtype = np.bool_ if op in ("LESS", "EQUAL") else dtype
    check_gpu(op, inputs, options, gpu_nodes=None, output_dtypes=[out_dtype])
