"""Layout reference kernels (ops/layout.py) against LiteRT's builtin kernels on one-op models."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gles_delegate.ops import layout as layout_ops
from gles_delegate.tflite import ModelBuilder
from tests.litert import run_litert
from tests.oplib import (In, assert_close, assert_kernel_error, assert_refused_like_litert, assert_rejected,
                         check_nodes_on_real_models, check_op, feeds, run_ours, single_op_model)

I32, I64 = np.int32, np.int64
# (dtype, quantization) pairs the layout ops must carry through unchanged.
DTYPES = [(np.float32, None), (np.int8, (0.05, -3)), (np.uint8, (0.1, 128)), (np.int32, None), (np.bool_, None)]


def rand(rng, shape, dtype=np.float32):
    """Random values of any dtype: floats in [-2, 2), integers over (part of) their range."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -1000), min(info.max, 1000) + 1, shape).astype(dtype)
    return rng.uniform(-2, 2, shape).astype(dtype)


def rand_shape(rng, rank, low=1, high=5):
    return tuple(int(d) for d in rng.integers(low, high + 1, rank))


def test_layout_nodes_of_real_models(mediapipe_models):
    assert check_nodes_on_real_models(mediapipe_models, layout_ops.KERNELS) > 0


def check_layout(op, inputs, options=None, n_outputs=1, **kwargs):
    """check_op for a value-preserving op: outputs keep the first input's dtype and quantization."""
    data = inputs[0]
    return check_op(op, inputs, options, n_outputs=n_outputs, output_dtypes=[data.value.dtype] * n_outputs,
                    output_quant=[data.quant] * n_outputs, **kwargs)


# -- RESHAPE ----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype,quant", DTYPES)
def test_reshape_from_shape_input(dtype, quant):
    rng = np.random.default_rng(1)
    for _ in range(4):
        x = rand(rng, rand_shape(rng, int(rng.integers(1, 5))), dtype)
        shape = list(rng.permutation(x.shape)) + [1]
        shape[int(rng.integers(len(shape)))] = -1
        check_layout("RESHAPE", [In(x, quant=quant), In(np.array(shape, I32), const=True)])


def test_reshape_from_options_and_legacy_scalar():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    check_layout("RESHAPE", [In(x)], {"new_shape": [2, -1, 3]})
    # An int64 shape input is not a "shape vector" for TFLite: the option wins.
    check_layout("RESHAPE", [In(x), In(np.array([12], I64), const=True)], {"new_shape": [6, 2]})
    # new_shape [0] is how old converters wrote a scalar.
    ours, _ = check_layout("RESHAPE", [In(np.array([5.0], np.float32))], {"new_shape": [0]})
    assert ours[0].shape == ()


def test_reshape_zero_size():
    x = np.zeros((0, 6), np.float32)
    ours, _ = check_layout("RESHAPE", [In(x), In(np.array([0, -1], I32), const=True)])
    assert ours[0].shape == (0, 6)  # the -1 divides the non-zero sizes only
    ours, _ = check_layout("RESHAPE", [In(x), In(np.array([-1, 3], I32), const=True)])
    assert ours[0].shape == (0, 3)  # an empty input turns the -1 into 0


def test_reshape_rejects_bad_shapes():
    x = In(np.zeros((2, 3), np.float32))
    assert_kernel_error("RESHAPE", [x, In(np.array([4, -1], I32), const=True)], match="cannot reshape")
    assert_kernel_error("RESHAPE", [x, In(np.array([-1, -1], I32), const=True)], match="at most one -1")
    assert_kernel_error("RESHAPE", [x, In(np.array([-2, -3], I32), const=True)], match="at most one -1")


# -- PAD / PADV2 / MIRROR_PAD -----------------------------------------------------------------
@pytest.mark.parametrize("dtype,quant", DTYPES[:4])
def test_pad(dtype, quant):
    rng = np.random.default_rng(2)
    for rank in range(1, 6):
        x = rand(rng, rand_shape(rng, rank), dtype)
        paddings = rng.integers(0, 3, (rank, 2))
        index_dtype = I32 if rank % 2 else I64
        ours, _ = check_layout("PAD", [In(x, quant=quant), In(paddings.astype(index_dtype), const=True)])
        if quant is not None and paddings.any():
            # Quantized PAD fills with the zero point, i.e. real 0.
            assert (ours[0] == quant[1]).sum() >= ours[0].size - x.size


@pytest.mark.parametrize("dtype,quant,value", [(np.float32, None, -1.5), (np.int8, (0.05, -3), 17),
                                               (np.uint8, (0.1, 128), 3), (np.int32, None, -7)])
def test_padv2_constant(dtype, quant, value):
    rng = np.random.default_rng(3)
    x = rand(rng, (2, 3, 4), dtype)
    paddings = np.array([[1, 0], [0, 2], [3, 1]], I32)
    check_layout("PADV2", [In(x, quant=quant), In(paddings, const=True),
                           In(np.array(value, dtype), const=True, quant=quant)])


def test_pad_rejects():
    x = In(np.zeros((2, 3), np.float32))
    assert_kernel_error("PAD", [x, In(np.array([[1, -1], [0, 0]], I32), const=True)], match=">= 0")
    assert_kernel_error("PAD", [x, In(np.array([[1, 1]], I32), const=True)], match="holds 2 values")
    assert_rejected("PAD", [x, In(np.zeros((2, 2), np.float32), const=True)], match="int32 or int64")


@pytest.mark.parametrize("mode", [0, 1])
@pytest.mark.parametrize("dtype,quant", DTYPES[:3])
def test_mirror_pad(mode, dtype, quant):
    rng = np.random.default_rng(4)
    for rank in range(1, 5):
        x = rand(rng, rand_shape(rng, rank, 2, 5), dtype)
        limit = np.array(x.shape) - (1 - mode)  # REFLECT: pad < dim, SYMMETRIC: pad <= dim
        paddings = (rng.uniform(0, 1, (rank, 2)) * (limit[:, None] + 1)).astype(I32)
        check_layout("MIRROR_PAD", [In(x, quant=quant), In(paddings, const=True)], {"mode": mode})


def test_mirror_pad_rejects_pads_past_the_edge():
    x = In(np.zeros((3, 3), np.float32))
    assert_kernel_error("MIRROR_PAD", [x, In(np.array([[3, 0], [0, 0]], I32), const=True)], {"mode": 0},
                        match="REFLECT")
    assert_kernel_error("MIRROR_PAD", [x, In(np.array([[0, 4], [0, 0]], I32), const=True)], {"mode": 1},
                        match="SYMMETRIC")


# -- CONCATENATION ----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype,quant", DTYPES[:4])
def test_concatenation(dtype, quant):
    rng = np.random.default_rng(5)
    for rank in range(1, 5):
        shape = rand_shape(rng, rank)
        axis = int(rng.integers(-rank, rank))
        parts = []
        for _ in range(int(rng.integers(1, 4))):
            part_shape = list(shape)
            part_shape[axis] = int(rng.integers(1, 4))
            parts.append(In(rand(rng, part_shape, dtype), quant=quant))
        check_layout("CONCATENATION", parts, {"axis": axis})


def test_concatenation_uint8_requantizes_to_the_output_scale():
    rng = np.random.default_rng(6)
    for _ in range(5):
        quants = [(float(rng.uniform(0.01, 0.2)), int(rng.integers(0, 256))) for _ in range(3)]
        parts = [In(rand(rng, (2, int(rng.integers(1, 4)), 3), np.uint8), quant=q) for q in quants[:2]]
        check_op("CONCATENATION", parts, {"axis": 1}, output_quant=[quants[2]], quantum=1)


def test_concatenation_int8_requantizes_like_uint8():
    # LiteRT refuses int8 inputs whose scale differs from the output's; we requantize them with
    # the uint8 formula, so compare against LiteRT's uint8 kernel on values shifted by 128.
    rng = np.random.default_rng(7)
    quants = [(0.07, -20), (0.02, 5), (0.05, 1)]
    values = [rand(rng, (2, 3), np.int8), rand(rng, (2, 4), np.int8)]
    model = single_op_model("CONCATENATION", [In(v, quant=q) for v, q in zip(values, quants)], {"axis": 1},
                            output_quant=[quants[2]])
    ours = run_ours(model, values)[0]
    shifted = [(s, z + 128) for s, z in quants]
    unsigned = [(v.astype(np.int16) + 128).astype(np.uint8) for v in values]
    _, theirs = check_op("CONCATENATION", [In(v, quant=q) for v, q in zip(unsigned, shifted)], {"axis": 1},
                         output_quant=[shifted[2]], quantum=1)
    assert_close((ours.astype(np.int16) + 128).astype(np.uint8), theirs[0], quantum=1)


@pytest.mark.parametrize("activation,op", [(1, "RELU"), (2, "RELU_N1_TO_1"), (3, "RELU6")])
def test_concatenation_fused_activation(activation, op):
    # LiteRT's kernel refuses fused activations, so compare against CONCATENATION + activation op.
    rng = np.random.default_rng(8)
    parts = [rng.uniform(-8, 8, (2, 3, k)).astype(np.float32) for k in (2, 5)]
    ours = run_ours(single_op_model("CONCATENATION", [In(p) for p in parts],
                                    {"axis": -1, "fused_activation_function": activation}), parts)[0]
    b = ModelBuilder()
    inputs = [b.input(f"x{k}", p.shape) for k, p in enumerate(parts)]
    joined, out = b.tensor("joined", (2, 3, 7)), b.tensor("out", (2, 3, 7))
    b.op("CONCATENATION", inputs, [joined], axis=-1)
    b.op(op, [joined], [out])
    b.output(out)
    assert_close(ours, run_litert(b.build(), parts, resolver="builtin")[0])


def test_concatenation_refuses_activations_it_cannot_apply():
    x = np.zeros((2, 3), np.int32)
    joined = [((2, 6), np.int32, None)]
    assert_rejected("CONCATENATION", [In(x), In(x)], {"axis": 1, "fused_activation_function": 4},
                    match="fused activation 4", outputs=joined)
    assert_rejected("CONCATENATION", [In(x.astype(np.float32))], {"axis": 1, "fused_activation_function": 9},
                    match="fused activation 9")
    assert_rejected("CONCATENATION", [In(x), In(x.astype(np.float32))], {"axis": 1}, match="share one dtype",
                    outputs=joined)


def test_concatenation_rejects_mismatched_shapes():
    assert_kernel_error("CONCATENATION", [In(np.zeros((2, 3), np.float32)), In(np.zeros((3, 3), np.float32))],
                        {"axis": 1}, match="does not fit")
    assert_kernel_error("CONCATENATION", [In(np.zeros((2, 3), np.float32))], {"axis": 2}, match="out of range")


# -- STRIDED_SLICE ----------------------------------------------------------------------------
def check_strided_slice(x, begin, end, strides, quant=None, **masks):
    inputs = [In(x, quant=quant)] + [In(np.array(v, I32), const=True) for v in (begin, end, strides)]
    return check_layout("STRIDED_SLICE", inputs, masks)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_strided_slice_random(data):
    rank = data.draw(st.integers(1, 5))
    shape = data.draw(st.lists(st.integers(1, 5), min_size=rank, max_size=rank))
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    bound = st.integers(-7, 7)
    begin = data.draw(st.lists(bound, min_size=rank, max_size=rank))
    end = data.draw(st.lists(bound, min_size=rank, max_size=rank))
    strides = data.draw(st.lists(st.integers(-3, 3).filter(bool), min_size=rank, max_size=rank))
    masks = {name: data.draw(st.integers(0, 2 ** rank - 1)) for name in ("begin_mask", "end_mask")}
    # Shrink only dimensions where TFLite picks one element (positive stride, begin in range).
    shrinkable = [k for k in range(rank) if strides[k] > 0 and -shape[k] <= begin[k] < shape[k]
                  and not masks["begin_mask"] >> k & 1]
    picked = data.draw(st.lists(st.sampled_from(shrinkable), unique=True)) if shrinkable else []
    masks["shrink_axis_mask"] = sum(1 << k for k in picked)
    check_strided_slice(x, begin, end, strides, **masks)


@pytest.mark.parametrize("begin,end,strides,masks", [
    ([0, 0], [1, 2], [1, 1], {"ellipsis_mask": 1}),                       # ... then one dim
    ([1, 0, 0], [2, 1, 3], [1, 1, -1], {"ellipsis_mask": 2}),             # dim, ..., dim
    ([0], [1], [1], {"ellipsis_mask": 1}),                                # ellipsis alone
    ([0, 0, 0], [1, 2, 1], [1, 1, 1], {"new_axis_mask": 2}),
    ([0, 0, 1], [1, 1, 3], [1, 1, 1], {"new_axis_mask": 1, "shrink_axis_mask": 2}),
    ([0, 0, 0], [1, 1, 1], [1, 1, 1], {"new_axis_mask": 2, "ellipsis_mask": 1}),
    ([-1, 2], [0, 0], [-1, -1], {"end_mask": 3}),                         # reversed
    ([1, -1, 0], [0, 0, 0], [1, 1, 1], {"shrink_axis_mask": 3, "end_mask": 4}),
    ([0, 1, 1], [2, 2, 2], [1, 1, 1], {"offset": True}),                  # end holds sizes
    ([1, 2, 3], [1, -2, -3], [1, -1, -1], {"offset": True}),
])
def test_strided_slice_masks(begin, end, strides, masks):
    x = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    check_strided_slice(x, begin, end, strides, **masks)


@pytest.mark.parametrize("dtype,quant", DTYPES)
def test_strided_slice_dtypes(dtype, quant):
    x = rand(np.random.default_rng(9), (3, 4, 5), dtype)
    check_strided_slice(x, [2, 0, -1], [0, 4, 0], [-1, 2, -2], quant=quant)


def test_strided_slice_rejects():
    x = np.zeros((2, 3), np.float32)
    args = [In(x)] + [In(np.array(v, I32), const=True) for v in ([5, 0], [6, 3], [1, 1])]
    assert_kernel_error("STRIDED_SLICE", args, {"shrink_axis_mask": 1}, match="one element")
    args = [In(x)] + [In(np.array(v, I32), const=True) for v in ([0, 0], [2, 3], [1, 0])]
    assert_kernel_error("STRIDED_SLICE", args, match="non-zero")
    args = [In(x)] + [In(np.array(v, I32), const=True) for v in ([0, 1], [2, 5], [1, 1])]
    assert_kernel_error("STRIDED_SLICE", args, {"offset": True}, match="offset slice")
    # A new axis past the effective rank leaves a begin entry with no input dimension (LiteRT
    # reads past the shape array there).
    args = [In(np.zeros(2, np.float32))] + [In(np.ones(3, I32), const=True)] * 3
    assert_kernel_error("STRIDED_SLICE", args, {"new_axis_mask": 4}, match="do not fit input rank")


def test_strided_slice_ignores_extra_entries_like_litert():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    check_strided_slice(x, [1, 1, 0], [2, 3, 1], [1, 1, 1])


# -- SLICE ------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype,quant", DTYPES)
def test_slice(dtype, quant):
    rng = np.random.default_rng(10)
    for rank in range(1, 6):
        x = rand(rng, rand_shape(rng, rank), dtype)
        begin = np.array([rng.integers(0, d) for d in x.shape])
        size = np.array([rng.integers(0, d - b + 1) for d, b in zip(x.shape, begin)])
        size[rng.uniform(size=rank) < 0.3] = -1
        index_dtype = I32 if rank % 2 else I64
        check_layout("SLICE", [In(x, quant=quant), In(begin.astype(index_dtype), const=True),
                               In(size.astype(index_dtype), const=True)])


def test_slice_rejects_out_of_range():
    x = In(np.zeros((2, 3), np.float32))
    assert_kernel_error("SLICE", [x, In(np.array([1, 1], I32), const=True), In(np.array([2, 1], I32), const=True)],
                        match="outside shape")


# -- DEPTH_TO_SPACE / SPACE_TO_DEPTH ----------------------------------------------------------
@pytest.mark.parametrize("dtype,quant", DTYPES[:4])
def test_depth_space(dtype, quant):
    rng = np.random.default_rng(11)
    for block in (1, 2, 3):
        n, h, w, c = int(rng.integers(1, 3)), int(rng.integers(1, 4)), int(rng.integers(1, 4)), int(rng.integers(1, 3))
        deep = rand(rng, (n, h, w, c * block * block), dtype)
        check_layout("DEPTH_TO_SPACE", [In(deep, quant=quant)], {"block_size": block})
        wide = rand(rng, (n, h * block, w * block, c), dtype)
        check_layout("SPACE_TO_DEPTH", [In(wide, quant=quant)], {"block_size": block})


def test_depth_space_reject_indivisible_shapes():
    block = {"block_size": 2}
    assert_kernel_error("DEPTH_TO_SPACE", [In(np.zeros((1, 2, 2, 6), np.float32))], block, match="divisible")
    assert_kernel_error("SPACE_TO_DEPTH", [In(np.zeros((1, 3, 2, 1), np.float32))], block, match="divisible")
    assert_kernel_error("DEPTH_TO_SPACE", [In(np.zeros((2, 2, 4), np.float32))], block, match="4-D")


# -- TRANSPOSE / SQUEEZE / EXPAND_DIMS --------------------------------------------------------
@pytest.mark.parametrize("dtype,quant", DTYPES)
def test_transpose(dtype, quant):
    rng = np.random.default_rng(12)
    for rank in range(1, 7):
        x = rand(rng, rand_shape(rng, rank, 1, 4), dtype)
        check_layout("TRANSPOSE", [In(x, quant=quant), In(rng.permutation(rank).astype(I32), const=True)])


def test_transpose_and_strided_slice_refuse_int64_indices():
    # TFLite reads perm as int32 whatever its type, and refuses int64 begin/end/strides.
    x = np.zeros((2, 3, 4), np.float32)
    assert_rejected("TRANSPOSE", [In(x), In(np.array([2, 0, 1], I64), const=True)],
                    match="perm must be an int32 tensor", outputs=[((4, 2, 3), np.float32, None)])
    assert_rejected("STRIDED_SLICE", [In(x)] + [In(np.array(v, I64), const=True) for v in ([0] * 3, [1] * 3, [1] * 3)],
                    match="begin must be an int32 tensor", outputs=[((1, 1, 1), np.float32, None)])


def test_transpose_rejects_a_non_permutation():
    assert_kernel_error("TRANSPOSE", [In(np.zeros((2, 3), np.float32)), In(np.array([0, 0], I32), const=True)],
                        match="not a permutation")
    assert_kernel_error("TRANSPOSE", [In(np.zeros((2, 3), np.float32)), In(np.array([-1, 0], I32), const=True)],
                        match="not a permutation")


@pytest.mark.parametrize("dims", [None, [0], [-1], [0, 2], [2, -5]])
def test_squeeze(dims):
    x = rand(np.random.default_rng(13), (1, 3, 1, 2, 1))
    check_layout("SQUEEZE", [In(x)], {} if dims is None else {"squeeze_dims": dims})


def test_squeeze_rejects_a_dim_that_is_not_one():
    assert_kernel_error("SQUEEZE", [In(np.zeros((1, 3), np.float32))], {"squeeze_dims": [1]}, match="not 1")


@pytest.mark.parametrize("dtype,quant", DTYPES)
def test_expand_dims(dtype, quant):
    x = rand(np.random.default_rng(14), (2, 3, 4), dtype)
    for axis in range(-4, 4):
        check_layout("EXPAND_DIMS", [In(x, quant=quant), In(np.array([axis], I32 if axis % 2 else I64), const=True)])
    assert_kernel_error("EXPAND_DIMS", [In(x), In(np.array(4, I32), const=True)], match="out of range")


# -- GATHER -----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype,quant", DTYPES)
def test_gather(dtype, quant):
    rng = np.random.default_rng(15)
    for rank in range(1, 5):
        params = rand(rng, rand_shape(rng, rank), dtype)
        axis = int(rng.integers(-rank, rank))
        indices = rng.integers(0, params.shape[axis], rand_shape(rng, int(rng.integers(0, 3)), 1, 3))
        index_dtype = I32 if rank % 2 else I64
        check_layout("GATHER", [In(params, quant=quant), In(indices.astype(index_dtype))], {"axis": axis})


def test_gather_rejects():
    params = In(np.zeros((3, 2), np.float32))
    assert_kernel_error("GATHER", [params, In(np.array([0, 3], I32))], match="out of range")
    assert_kernel_error("GATHER", [params, In(np.array([-1], I32))], match="out of range")


@pytest.mark.parametrize("params_shape,indices_shape,axis,batch_dims", [
    ((2, 3, 4), (2, 2), 1, 1), ((2, 3, 4, 5), (2, 3, 2), 2, 2), ((2, 3, 4), (2, 5), 2, -1), ((2, 3, 4), (2,), 1, 1),
    ((3, 4), (3, 2, 2), -1, 1)])
@pytest.mark.parametrize("dtype,quant", DTYPES[:2])
def test_gather_batch_dims(params_shape, indices_shape, axis, batch_dims, dtype, quant):
    """Batch item i of params gathered by batch item i of the indices; a negative batch_dims
    counts from the end of the indices' dims."""
    rng = np.random.default_rng(16)
    params = rand(rng, params_shape, dtype)
    indices = rng.integers(0, params_shape[axis], indices_shape).astype(I32)
    check_layout("GATHER", [In(params, quant=quant), In(indices)], {"axis": axis, "batch_dims": batch_dims})


@pytest.mark.parametrize("params_shape,indices_shape,axis,batch_dims", [
    ((2, 3), (2, 1), 0, 1), ((2, 3), (3, 1), 1, 1), ((2, 3, 4), (2, 2), 2, 3), ((2, 3, 4), (2, 2), 2, -3)])
def test_gather_batch_dims_out_of_range_or_unmatched(params_shape, indices_shape, axis, batch_dims):
    """batch_dims past the axis, the indices' rank or params' rank, or batch dims that differ:
    LiteRT's Prepare refuses them, and so do we."""
    assert_refused_like_litert("GATHER", [In(np.zeros(params_shape, np.float32)), In(np.zeros(indices_shape, I32))],
                               [(params_shape, np.float32, None)], {"axis": axis, "batch_dims": batch_dims},
                               match="batch_dims|differ")


# -- SPLIT / SPLIT_V / PACK / UNPACK ----------------------------------------------------------
# LiteRT's SPLIT, SPLIT_V, PACK and UNPACK take no bool; ours do, like every layout kernel.
@pytest.mark.parametrize("dtype,quant", DTYPES[:4])
def test_split(dtype, quant):
    rng = np.random.default_rng(16)
    for rank in range(1, 5):
        parts = int(rng.integers(1, 4))
        axis = int(rng.integers(-rank, rank))
        shape = list(rand_shape(rng, rank))
        shape[axis] *= parts
        x = rand(rng, shape, dtype)
        check_op("SPLIT", [In(np.array(axis, I32), const=True), In(x, quant=quant)], {"num_splits": parts},
                 n_outputs=parts, output_dtypes=[x.dtype] * parts, output_quant=[quant] * parts)


@pytest.mark.parametrize("dtype,quant", DTYPES[:4])
def test_split_v(dtype, quant):
    rng = np.random.default_rng(17)
    for rank in range(1, 5):
        axis = int(rng.integers(-rank, rank))
        sizes = rng.integers(0, 4, int(rng.integers(1, 4)))
        shape = list(rand_shape(rng, rank))
        shape[axis] = int(sizes.sum())
        if rng.uniform() < 0.5:
            sizes[int(rng.integers(sizes.size))] = -1
        x = rand(rng, shape, dtype)
        check_layout("SPLIT_V", [In(x, quant=quant), In(sizes.astype(I32), const=True),
                                 In(np.array([axis], I32), const=True)], {"num_splits": sizes.size},
                     n_outputs=sizes.size)


def test_split_rejects():
    x = In(np.zeros((4, 3), np.float32))
    assert_kernel_error("SPLIT", [In(np.array(1, I32), const=True), x], {"num_splits": 2}, n_outputs=2,
                        match="does not split")
    assert_kernel_error("SPLIT_V", [x, In(np.array([1, 2], I32), const=True), In(np.array(0, I32), const=True)],
                        {"num_splits": 2}, n_outputs=2, match="do not add up")
    assert_kernel_error("SPLIT_V", [x, In(np.array([-1, -1], I32), const=True), In(np.array(0, I32), const=True)],
                        {"num_splits": 2}, n_outputs=2, match="one -1")


@pytest.mark.parametrize("dtype,quant", DTYPES[:4])
def test_pack_unpack(dtype, quant):
    rng = np.random.default_rng(18)
    for rank in range(0, 4):
        shape = rand_shape(rng, rank)
        count = int(rng.integers(1, 4))
        axis = int(rng.integers(-rank - 1, rank + 1))
        values = [In(rand(rng, shape, dtype), quant=quant) for _ in range(count)]
        check_layout("PACK", values, {"values_count": count, "axis": axis})
        if rank:
            axis = int(rng.integers(-rank, rank))
            check_layout("UNPACK", [values[0]], {"num": shape[axis], "axis": axis}, n_outputs=shape[axis])


def test_pack_unpack_reject():
    assert_kernel_error("PACK", [In(np.zeros(2, np.float32)), In(np.zeros(3, np.float32))], {"values_count": 2},
                        match="differ")
    assert_kernel_error("UNPACK", [In(np.zeros((2, 3), np.float32))], {"num": 3, "axis": 0}, n_outputs=3,
                        match="does not unpack")


# -- TILE / SHAPE -----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype,quant", DTYPES)
def test_tile(dtype, quant):
    rng = np.random.default_rng(19)
    for rank in range(1, 5):
        x = rand(rng, rand_shape(rng, rank, 1, 3), dtype)
        multiples = rng.integers(1, 4, rank).astype(I32 if rank % 2 else I64)
        check_layout("TILE", [In(x, quant=quant), In(multiples, const=True)])


@pytest.mark.parametrize("out_dtype", [I32, I64])
def test_shape(out_dtype):
    options = {"out_type": 2 if out_dtype == I32 else 4}
    for shape in [(3,), (2, 1, 4), (1, 2, 3, 4, 5)]:
        ours, _ = check_op("SHAPE", [In(np.zeros(shape, np.float32))], options, output_dtypes=[out_dtype])
        assert ours[0].tolist() == list(shape)
    # LiteRT's Python API cannot read back the empty shape of a scalar, so check ours alone.
    scalar = [In(np.zeros((), np.float32))]
    ours = run_ours(single_op_model("SHAPE", scalar, options, output_dtypes=[out_dtype]), feeds(scalar))[0]
    assert ours.shape == (0,) and ours.dtype == out_dtype


def test_layout_ops_refuse_missing_or_bad_index_inputs():
    x = np.zeros((2, 3), np.float32)
    assert_rejected("TRANSPOSE", [In(x), In(np.array([1.0, 0.0], np.float32), const=True)],
                    match="perm must be an int32 tensor", outputs=[((3, 2), np.float32, None)])
    assert_rejected("TILE", [In(x)], match="takes 2 inputs")


def test_dynamic_shape_inputs_are_read_at_run_time():
    # Non-constant shape-defining inputs: the kernels use the values fed at invoke.
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    ours, _ = check_layout("SLICE", [In(x), In(np.array([1, 1], I32)), In(np.array([2, 2], I32), const=True)])
    assert_close(ours[0], x[1:3, 1:3])
    ours, _ = check_layout("RESHAPE", [In(x), In(np.array([2, 6], I32))])
    assert ours[0].shape == (2, 6)
