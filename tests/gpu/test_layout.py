"""GPU layout ops (layout_map.glsl) against the numpy reference, in every precision: each op, the
vec4 and per-channel paths, every edge rule, split axes, concatenation boxes that start
mid-slice, constant sources, and random shapes and options."""
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gles_delegate.errors import ModelError
from gles_delegate.gpu import kernels
from gles_delegate.gpu.kernels import layout
from tests.gpu.gpulib import PRECISIONS, check_gpu, dispatches
from tests.oplib import In, first_node, node_with_output, single_op_model

RANDOM = settings(max_examples=8, deadline=None)
RANDOM_PAIRS = settings(max_examples=6, deadline=None)  # two checks per example


def x(*shape, seed=0, const=False):
    """A float32 input (or constant) of `shape`, values standard normal."""
    return In(np.random.default_rng(seed + len(shape)).standard_normal(shape).astype(np.float32), const=const)


def ints(values):
    return In(np.array(values, np.int32), const=True)


# (op, inputs, options, extra single_op_model arguments): every op, and every path of the kernel.
CASES = {
    "reshape_gather": ("RESHAPE", [x(1, 1, 1, 10), ints([1, 5, 2])], {}, {}),
    "reshape_vec4": ("RESHAPE", [x(1, 8, 8, 16), ints([1, -1, 16])], {}, {}),
    "reshape_rows": ("RESHAPE", [x(1, 6, 6, 6), ints([1, -1, 1])], {}, {}),
    "reshape_option": ("RESHAPE", [x(2, 3, 5)], {"new_shape": [5, 6]}, {}),
    "reshape_rank1": ("RESHAPE", [x(7), ints([1, 7])], {}, {}),
    "reshape_to_rank1": ("RESHAPE", [x(2, 3, 2, 5), ints([60])], {}, {}),
    "reshape_to_scalar": ("RESHAPE", [x(1, 1)], {"new_shape": []}, {}),
    "squeeze": ("SQUEEZE", [x(1, 5, 1, 3)], {"squeeze_dims": [0, 2]}, {}),
    "squeeze_all": ("SQUEEZE", [x(1, 1, 7)], {}, {}),
    "expand_dims": ("EXPAND_DIMS", [x(5, 3), ints(-1)], {}, {}),
    "transpose_4d": ("TRANSPOSE", [x(2, 3, 5, 6), ints([3, 1, 0, 2])], {}, {}),
    "transpose_hw": ("TRANSPOSE", [x(2, 3, 5, 8), ints([0, 2, 1, 3])], {}, {}),
    "transpose_2d": ("TRANSPOSE", [x(5, 9), ints([1, 0])], {}, {}),
    "slice": ("SLICE", [x(2, 5, 6, 7), ints([1, 1, 0, 2]), ints([-1, 3, 4, 3])], {}, {}),
    "slice_channels_vec4": ("SLICE", [x(1, 3, 3, 12), ints([0, 0, 1, 4]), ints([1, 3, 2, 6])], {}, {}),
    "strided_slice": ("STRIDED_SLICE", [x(2, 7, 6, 9), ints([0, -1, 1, 2]), ints([2, 0, 6, 9]), ints([1, -2, 2, 3])],
                      {"shrink_axis_mask": 1}, {}),
    "split_channels": ("SPLIT", [ints(-1), x(2, 3, 9)], {"num_splits": 3},
                       {"n_outputs": 3, "output_dtypes": [np.float32] * 3}),
    "split_v_rows": ("SPLIT_V", [x(2, 6, 7), ints([2, -1, 1]), ints(1)], {"num_splits": 3},
                     {"n_outputs": 3, "output_dtypes": [np.float32] * 3}),
    "unpack_rows": ("UNPACK", [x(2, 3, 5)], {"num": 3, "axis": 1},
                    {"n_outputs": 3, "output_dtypes": [np.float32] * 3}),
    "unpack_channels": ("UNPACK", [x(2, 3, 4)], {"num": 4, "axis": -1},
                        {"n_outputs": 4, "output_dtypes": [np.float32] * 4}),
    "unpack_batch": ("UNPACK", [x(2, 4, 4, 8)], {"num": 2, "axis": 0},
                     {"n_outputs": 2, "output_dtypes": [np.float32] * 2}),
    "pack_rows": ("PACK", [x(2, 5), x(2, 5, seed=1), x(2, 5, seed=2, const=True)], {"axis": 1, "values_count": 3},
                  {}),
    "pack_channels": ("PACK", [x(1, 3, 5), x(1, 3, 5, seed=1)], {"axis": -1, "values_count": 2}, {}),
    "pack_batch_vec4": ("PACK", [x(4, 4, 8), x(4, 4, 8, seed=1)], {"axis": 0, "values_count": 2}, {}),
    "pack_rank5": ("PACK", [x(2, 3, 2, 5), x(2, 3, 2, 5, seed=1)], {"axis": 4, "values_count": 2}, {}),
    "pack_one": ("PACK", [x(3, 7)], {"axis": 2, "values_count": 1}, {}),
    "broadcast_to_rows": ("BROADCAST_TO", [x(1, 3, 1), ints([2, 3, 5])], {}, {}),
    "broadcast_to_rank_up": ("BROADCAST_TO", [x(3, 1), ints([2, 4, 3, 6])], {}, {}),
    "broadcast_to_channels_vec4": ("BROADCAST_TO", [x(1, 1, 1, 8), ints([2, 4, 4, 8])], {}, {}),
    "broadcast_to_rank5": ("BROADCAST_TO", [x(1, 2, 1, 3, 1), ints([2, 2, 3, 3, 4])], {}, {}),
    "pad_spatial": ("PAD", [x(2, 5, 4, 8), ints([[0, 1], [1, 2], [2, 0], [0, 0]])], {}, {}),
    "pad_channels": ("PAD", [x(1, 3, 3, 6), ints([[0, 0], [0, 0], [0, 0], [0, 3]])], {}, {}),
    "pad_channels_before": ("PAD", [x(1, 3, 3, 6), ints([[0, 0], [1, 0], [0, 0], [3, 2]])], {}, {}),
    "pad_rank2": ("PAD", [x(3, 5), ints([[1, 1], [4, 0]])], {}, {}),
    "padv2_value": ("PADV2", [x(1, 4, 5, 6), ints([[0, 0], [1, 2], [2, 1], [0, 2]]), In(np.float32(1.5), const=True)],
                    {}, {}),
    "padv2_aligned": ("PADV2", [x(1, 4, 5, 8), ints([[0, 0], [1, 2], [2, 1], [4, 4]]), In(np.float32(-2), const=True)],
                      {}, {}),
    "mirror_reflect": ("MIRROR_PAD", [x(2, 5, 4, 6), ints([[1, 1], [2, 4], [3, 0], [0, 0]])], {"mode": 0}, {}),
    "mirror_symmetric": ("MIRROR_PAD", [x(1, 5, 4, 6), ints([[0, 0], [5, 1], [0, 4], [2, 6]])], {"mode": 1}, {}),
    "tile": ("TILE", [x(2, 3, 5), ints([2, 1, 3])], {}, {}),
    "tile_channels_vec4": ("TILE", [x(1, 2, 3, 8), ints([2, 2, 1, 3])], {}, {}),
    "tile_rank1": ("TILE", [x(3), ints([4])], {}, {}),
    "concat_channels_vec4": ("CONCATENATION", [x(1, 3, 5, 8), x(1, 3, 5, 4, seed=1)], {"axis": 3}, {}),
    "concat_channels_merge": ("CONCATENATION",
                              [x(2, 3, 3, 3), x(2, 3, 3, 6, seed=1, const=True), x(2, 3, 3, 5, seed=2)],
                              {"axis": -1, "fused_activation_function": 1}, {}),
    "concat_one_channel": ("CONCATENATION", [x(1, 4, 1), x(1, 4, 1, seed=1), x(1, 4, 1, seed=2)], {"axis": 2}, {}),
    "concat_rows": ("CONCATENATION", [x(1, 5, 18), x(1, 3, 18, seed=1)],
                    {"axis": 1, "fused_activation_function": 3}, {}),
    "concat_batch": ("CONCATENATION", [x(1, 2, 2, 3), x(2, 2, 2, 3, seed=1)], {"axis": 0}, {}),
    "concat_rank1": ("CONCATENATION", [x(3), x(2, seed=1, const=True)],
                     {"axis": 0, "fused_activation_function": 4}, {}),
    "depth_to_space_vec4": ("DEPTH_TO_SPACE", [x(2, 3, 4, 32)], {"block_size": 2}, {}),
    "depth_to_space": ("DEPTH_TO_SPACE", [x(1, 3, 2, 18)], {"block_size": 3}, {}),
    "space_to_depth_vec4": ("SPACE_TO_DEPTH", [x(2, 4, 6, 4)], {"block_size": 2}, {}),
    "space_to_depth": ("SPACE_TO_DEPTH", [x(1, 6, 3, 3)], {"block_size": 3}, {}),
    "gather_scalar": ("GATHER", [x(3, 4, 10), ints(2)], {"axis": 1}, {}),
    "gather_even": ("GATHER", [x(3, 4, 10), ints([1, 4, 7])], {"axis": -1}, {}),
    "gather_runs_channels": ("GATHER", [x(3, 4, 10), ints([0, 1, 2, 7, 5, 3, 3, 9])], {"axis": 2}, {}),
    "gather_runs_rows": ("GATHER", [x(6, 5), ints([5, 0, 1, 2, 2])], {"axis": 0}, {}),
    # an interleave: channel c reads (c % 3) * 2 + c // 3, affine in the digits (c // 3, c % 3)
    "gather_interleaved": ("GATHER", [x(2, 3, 6), ints([0, 2, 4, 1, 3, 5])], {"axis": -1}, {}),
    # batch_dims 1: out[b, j, c] = x[b, indices[b, j], c], a strided view for these indices
    "gather_batch_dims": ("GATHER", [x(2, 3, 4), ints([[0, 1], [1, 2]])], {"axis": 1, "batch_dims": 1}, {}),
    "gather_batch_dims_1d": ("GATHER", [x(2, 3, 5), ints([1, 2])], {"axis": 1, "batch_dims": -1}, {}),
    "reverse_channels": ("REVERSE_V2", [x(2, 3, 4, 6), ints([-1])], {}, {}),
    "reverse_spatial": ("REVERSE_V2", [x(2, 3, 4, 8), ints([2, 1])], {}, {}),
    "reverse_all": ("REVERSE_V2", [x(3, 5, 2), ints([0, 1, 2])], {}, {}),
    "space_to_batch_vec4": ("SPACE_TO_BATCH_ND", [x(2, 4, 6, 8), ints([2, 3]), ints([[0, 0], [0, 0]])], {}, {}),
    "space_to_batch_padded": ("SPACE_TO_BATCH_ND", [x(1, 5, 3, 6), ints([2, 2]), ints([[2, 1], [0, 1]])], {}, {}),
    "space_to_batch_rank3": ("SPACE_TO_BATCH_ND", [x(2, 5, 3), ints([3]), ints([[1, 0]])], {}, {}),
    "space_to_batch_padding_only": ("SPACE_TO_BATCH_ND", [x(1, 1, 1, 4), ints([3, 3]), ints([[1, 1], [2, 0]])],
                                    {}, {}),
    "batch_to_space_vec4": ("BATCH_TO_SPACE_ND", [x(8, 3, 2, 4), ints([2, 2]), ints([[0, 0], [0, 0]])], {}, {}),
    "batch_to_space_cropped": ("BATCH_TO_SPACE_ND", [x(12, 2, 3, 5), ints([3, 2]), ints([[2, 1], [1, 0]])], {}, {}),
    "batch_to_space_rank3": ("BATCH_TO_SPACE_ND", [x(6, 3, 7), ints([3]), ints([[1, 2]])], {}, {}),
}


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("case", CASES)
def test_layout_op(case, precision):
    op, inputs, options, kwargs = CASES[case]
    check_gpu(op, inputs, options, precision, **kwargs)


# Which path each case must take: the speed of the common model layouts depends on it.
PATHS = {  # case: VEC4 flag of each dispatch
    "reshape_gather": [0], "reshape_vec4": [1], "reshape_rows": [0], "slice_channels_vec4": [1],
    "pad_spatial": [1], "pad_channels": [1], "pad_channels_before": [0], "padv2_value": [0],
    "padv2_aligned": [1], "mirror_reflect": [1], "mirror_symmetric": [0], "tile_channels_vec4": [1], "tile": [0],
    "concat_channels_vec4": [1, 1], "concat_channels_merge": [1, 0, 0], "concat_rows": [1, 1],
    "depth_to_space_vec4": [1], "depth_to_space": [0], "space_to_depth_vec4": [1], "space_to_depth": [0],
    "gather_runs_channels": [1, 0, 0], "gather_interleaved": [0], "reverse_channels": [0], "reverse_spatial": [1],
    "space_to_batch_vec4": [1] * 6, "space_to_batch_padded": [1] * 4, "batch_to_space_vec4": [1],
    "batch_to_space_cropped": [1], "unpack_batch": [1, 1], "pack_batch_vec4": [1, 1],
    "broadcast_to_channels_vec4": [1],
}


@pytest.mark.parametrize("case", PATHS)
def test_vec4_path(case):
    op, inputs, options, kwargs = CASES[case]
    assert [d.defines["VEC4"] for d in dispatches(op, inputs, options, **kwargs)] == PATHS[case]


@pytest.mark.parametrize("shapes", [((1, 1, 1, 1001), (1, 1001)), ((1, 1001), (1, 1, 1, 1001)),
                                    ((1, 48, 48, 1), (1, 2304, 1)), ((1, 5, 8), (1, 1, 1, 40))])
def test_reshape_moves_vec4s(shapes):
    """Reshapes that keep the PHWC4 layout, or whose rows are whole vec4s, move vec4s."""
    source, target = shapes
    assert dispatches("RESHAPE", [x(*source), ints(target)])[0].defines["VEC4"] == 1


def test_a_gather_too_irregular_for_a_view_runs_in_the_gather_kernel():
    """A random permutation of 40 by constant indices is too many runs for layout_map's strided
    view: the second candidate (gpu/kernels/gather.py) reads its indices from the constants."""
    inputs = [x(40), ints(np.random.default_rng(0).permutation(40))]
    node = node_with_output("GATHER", inputs, (40,), axis=0)
    assert "runs" in layout.SUPPORT["GATHER"](node)
    (d,) = dispatches("GATHER", inputs, {"axis": 0})
    assert d.template == "gather" and d.defines["IDX_CONST"] == 1
    check_gpu("GATHER", inputs, {"axis": 0})


@pytest.mark.parametrize("op,inputs,options,out_shape,reason", [
    ("STRIDED_SLICE", [x(4, 6), x(2), ints([4, 6]), ints([1, 1])], {}, (4, 6), "input 1"),
    ("PAD", [x(2, 3), x(2, 2)], {}, (4, 5), "constant"),
    ("TILE", [x(2, 3), x(2)], {}, (4, 6), "constant"),
    ("CONCATENATION", [x(2, 3), x(2, 3, seed=1)], {"axis": 1, "fused_activation_function": 5}, (2, 6), "activation"),
    ("MIRROR_PAD", [x(2, 3), ints([[0, 0], [3, 0]])], {"mode": 0}, (2, 6), "invalid node"),
    ("DEPTH_TO_SPACE", [x(1, 2, 2, 6)], {"block_size": 2}, (1, 4, 4, 1), "invalid node"),
    ("RESHAPE", [x(2, 3), ints([3, 2])], {}, (2, 3), "declared"),
    ("REVERSE_V2", [x(2, 3), x(1)], {}, (2, 3), "input 1"),
    ("SPACE_TO_BATCH_ND", [x(1, 8, 8, 1), ints([5, 4]), ints([[1, 1], [0, 0]])], {}, (20, 2, 2, 1), "20 positions"),
    ("BATCH_TO_SPACE_ND", [x(4, 2, 2, 1), ints([2, 2]), x(2, 2)], {}, (1, 4, 4, 1), "constant"),
    ("CONCATENATION", [x(2, 3), x(2, 3, seed=1)], {"axis": 0}, (2, 6), "declared"),
])
def test_rejects(op, inputs, options, out_shape, reason):
    """Nodes the kernels cannot run, or that are malformed, are refused with a reason (runtime
    shape-defining inputs are float here so that the registry's dtype check does not answer
    first)."""
    assert reason in kernels.SUPPORT[op](node_with_output(op, inputs, out_shape, **options))


# -- random shapes and options ---------------------------------------------------------------
shapes = st.lists(st.integers(1, 7), min_size=1, max_size=4)


@RANDOM
@given(shapes, st.integers(0, 2 ** 31), st.sampled_from(PRECISIONS))
def test_random_reshape(shape, seed, precision):
    rng = np.random.default_rng(seed)
    size = int(np.prod(shape))
    target = []
    while size > 1 and len(target) < 3:
        d = int(rng.choice([f for f in range(1, size + 1) if size % f == 0]))
        target.append(d)
        size //= d
    target.append(size)
    target[rng.integers(len(target))] = -1
    check_gpu("RESHAPE", [x(*shape, seed=seed), ints(target)], {}, precision)


@RANDOM
@given(shapes, st.integers(0, 2 ** 31), st.sampled_from(PRECISIONS))
def test_random_transpose(shape, seed, precision):
    perm = np.random.default_rng(seed).permutation(len(shape))
    check_gpu("TRANSPOSE", [x(*shape, seed=seed), ints(perm)], {}, precision)


@settings(max_examples=20, deadline=None)
@given(shapes, st.integers(0, 2 ** 31), st.sampled_from(PRECISIONS))
def test_random_strided_slice(shape, seed, precision):
    rng = np.random.default_rng(seed)
    rank = len(shape)
    begin, end, strides = zip(*[_random_slice(rng, d) for d in shape])
    bits = (lambda p, allowed=range(rank): int(sum(1 << k for k in allowed if rng.random() < p)))
    options = {"begin_mask": bits(0.2), "end_mask": bits(0.2),
               "shrink_axis_mask": bits(0.2, [k for k in range(rank) if strides[k] > 0]),
               "new_axis_mask": bits(0.1) if rank < 4 else 0,
               "ellipsis_mask": (1 << int(rng.integers(rank))) if rng.random() < 0.2 else 0}
    inputs = [x(*shape, seed=seed), ints(begin), ints(end), ints(strides)]
    assume(_valid(lambda: single_op_model("STRIDED_SLICE", inputs, options)))
    check_gpu("STRIDED_SLICE", inputs, options, precision)


def _random_slice(rng, size):
    """(begin, end, stride) of a non-empty slice of a dimension, indices written from either end."""
    stride = int(rng.choice([-3, -2, -1, 1, 2, 3]))
    begin = int(rng.integers(size))
    end = int(rng.integers(begin + 1, size + 1)) if stride > 0 else int(rng.integers(-1, begin))
    if rng.random() < 0.5:
        begin -= size
    if rng.random() < 0.5 and end < size:
        end = end - size if end >= 0 else -size - 1  # -size - 1 clamps to "before the first"
    return begin, end, stride


def _valid(build):
    """Whether the reference accepts the op and produces a non-empty result of rank <= 4."""
    try:
        node = first_node(build())
    except (AssertionError, ModelError):
        return False
    out = node.outputs[0]
    return 0 not in out.shape and len(out.shape) <= 4


@RANDOM
@given(shapes, st.integers(0, 2 ** 31), st.sampled_from(PRECISIONS), st.sampled_from(["PADV2", "MIRROR_PAD"]))
def test_random_pad(shape, seed, precision, op):
    rng = np.random.default_rng(seed)
    if op == "MIRROR_PAD":
        mode = int(rng.integers(2))
        widths = [[int(rng.integers(0, d - 1 + mode + 1)) for _ in "ab"] for d in shape]
        inputs, options = [x(*shape, seed=seed), ints(widths)], {"mode": mode}
    else:
        widths = [[int(rng.integers(0, 5)) for _ in "ab"] for _ in shape]
        value = In(np.float32(rng.choice([0.0, 2.5])), const=True)
        inputs, options = [x(*shape, seed=seed), ints(widths), value], {}
    check_gpu(op, inputs, options, precision)


@RANDOM
@given(shapes, st.integers(0, 2 ** 31), st.sampled_from(PRECISIONS))
def test_random_concatenation(shape, seed, precision):
    rng = np.random.default_rng(seed)
    axis = int(rng.integers(-len(shape), len(shape)))
    inputs = []
    for k in range(int(rng.integers(1, 5))):
        part = list(shape)
        part[axis] = int(rng.integers(1, 7))
        inputs.append(x(*part, seed=seed + k, const=bool(rng.random() < 0.2)))
    assume(not all(s.const for s in inputs))
    options = {"axis": axis, "fused_activation_function": int(rng.choice([0, 1, 3]))}
    check_gpu("CONCATENATION", inputs, options, precision)


@RANDOM_PAIRS
@given(shapes, st.integers(0, 2 ** 31), st.sampled_from(PRECISIONS))
def test_random_split_and_tile(shape, seed, precision):
    rng = np.random.default_rng(seed)
    axis = int(rng.integers(len(shape)))
    cuts = sorted(rng.choice(np.arange(1, shape[axis]), min(2, shape[axis] - 1), replace=False))
    sizes = np.diff([0, *cuts, shape[axis]])
    check_gpu("SPLIT_V", [x(*shape, seed=seed), ints(sizes), ints(axis)], {"num_splits": len(sizes)}, precision,
              n_outputs=len(sizes), output_dtypes=[np.float32] * len(sizes))
    check_gpu("TILE", [x(*shape, seed=seed), ints(rng.integers(1, 4, len(shape)))], {}, precision)


@RANDOM_PAIRS
@given(st.integers(1, 3), st.integers(1, 4), st.integers(1, 4), st.integers(1, 9), st.integers(1, 2),
       st.sampled_from(PRECISIONS))
def test_random_depth_and_space(block, h, w, c, batch, precision):
    check_gpu("DEPTH_TO_SPACE", [x(batch, h, w, c * block * block)], {"block_size": block}, precision)
    check_gpu("SPACE_TO_DEPTH", [x(batch, h * block, w * block, c)], {"block_size": block}, precision)


@RANDOM
@given(shapes, st.integers(0, 2 ** 31), st.sampled_from(PRECISIONS))
def test_random_gather(shape, seed, precision):
    rng = np.random.default_rng(seed)
    axis = int(rng.integers(len(shape)))
    indices = rng.integers(0, shape[axis], int(rng.integers(1, 9)))
    check_gpu("GATHER", [x(*shape, seed=seed), ints(indices)], {"axis": axis - len(shape)}, precision)


@RANDOM
@given(st.integers(3, 4), st.integers(0, 2 ** 31), st.sampled_from(PRECISIONS))
def test_random_space_and_batch(rank, seed, precision):
    """SPACE_TO_BATCH_ND then BATCH_TO_SPACE_ND of its shape, random blocks, paddings and crops."""
    rng = np.random.default_rng(seed)
    block = [int(b) for b in rng.integers(1, 4, rank - 2)]
    pads = [[int(p) for p in rng.integers(0, 3, 2)] for _ in block]
    sizes = [int(rng.integers(1, 3)) * b + b - (before + after) % b for b, (before, after) in zip(block, pads)]
    shape = [int(rng.integers(1, 3))] + sizes + [int(rng.integers(1, 7))] * (rank - 1 - len(block))
    check_gpu("SPACE_TO_BATCH_ND", [x(*shape, seed=seed), ints(block), ints(pads)], {}, precision)
    batches = [shape[0] * int(np.prod(block))] + [int(rng.integers(1, 4)) for _ in block] + shape[len(block) + 1:]
    crops = [[int(rng.integers(0, (d * b - 1) // 2 + 1)) for _ in "ab"] for d, b in zip(batches[1:], block)]
    check_gpu("BATCH_TO_SPACE_ND", [x(*batches, seed=seed), ints(block), ints(crops)], {}, precision)


@RANDOM
@given(shapes, st.integers(0, 2 ** 31), st.sampled_from(PRECISIONS))
def test_random_reverse(shape, seed, precision):
    rng = np.random.default_rng(seed)
    first = int(rng.integers(len(shape)))
    axes = rng.permutation(np.arange(first, int(rng.integers(first + 1, len(shape) + 1))))
    check_gpu("REVERSE_V2", [x(*shape, seed=seed), ints(axes - len(shape) * (rng.random() < 0.5))], {}, precision)
