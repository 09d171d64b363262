"""Layout ops: reshape, pad, concatenate, slice, transpose, gather, split, pack, tile, shape.

They move values without changing them, so they take any dtype and the output keeps the input's
quantization; the one exception is CONCATENATION, which requantizes 8-bit inputs whose scale or
zero point differs from its output's (as TFLite's ConcatenationWithScaling does).
Shape-defining inputs (RESHAPE's shape, PAD's paddings, STRIDED_SLICE's begin/end/strides, ...)
are read from their values, so a kernel computes its output shape from its inputs.
"""
import numpy as np

from .checks import INDEX_DTYPES, Malformed, arity_reason, index_input_reason, node_error, normalized_axis
from .checks import index_values as _index_values
from .common import (ACT_NONE, ACT_SIGN_BIT, ACT_TANH, activation_range, apply_activation, fused_activation,
                     is_quantized, quantized_activation_range, round_half_away, same_quantization, saturate,
                     scale_of, zero_point_of)

MIRROR_PAD_REFLECT, MIRROR_PAD_SYMMETRIC = 0, 1


def _scalar_axis(node, values, rank):
    return normalized_axis(node, _index_values(node, values, "axis", count=1)[0], rank)


def _simple_support(n_inputs, n_outputs=1, index_inputs=(), optional=(), int32_only=False):
    """A SUPPORT check for an op with fixed arity and (input index, name) index tensors."""
    def check(node):
        reason = arity_reason(node, n_inputs, n_outputs, optional)
        for k, what in index_inputs:
            reason = reason or index_input_reason(node, k, what, int32_only)
        return reason
    return check


# -- RESHAPE ----------------------------------------------------------------------------------
def _requested_shape(node, inputs):
    """TFLite's GetOutputShape: the shape input when it is a 1-D int32 tensor, else the
    new_shape option, where the legacy value [0] means a scalar."""
    if len(inputs) == 2 and inputs[1] is not None and inputs[1].ndim == 1 and inputs[1].dtype == np.int32:
        return [int(d) for d in inputs[1]]
    new_shape = list(node.options.get("new_shape") or [])
    return [] if new_shape == [0] else [int(d) for d in new_shape]


def _resolve_stretch(node, in_shape, shape):
    """Fill in the one -1 dimension like TFLite's ResizeOutput: zero-size dimensions are left out
    of the division, and a -1 becomes 0 when the input is empty but the known dims are not."""
    if shape.count(-1) > 1 or any(d < -1 for d in shape):
        raise node_error(node, f"invalid new shape {shape}: at most one -1 and no other negative size")
    num_in = int(np.prod(in_shape, dtype=np.int64))
    known = [d for d in shape if d != -1]
    num_known = int(np.prod(known, dtype=np.int64))
    if -1 in shape:
        nonzero_in = int(np.prod([d for d in in_shape if d], dtype=np.int64))
        nonzero_known = int(np.prod([d for d in known if d], dtype=np.int64))
        fill = 0 if num_in == 0 and num_known != 0 else nonzero_in // nonzero_known
        shape = [fill if d == -1 else d for d in shape]
    if int(np.prod(shape, dtype=np.int64)) != num_in:
        raise node_error(node, f"cannot reshape {list(in_shape)} ({num_in} elements) to {shape}")
    return shape


def reshape(node, inputs):
    """RESHAPE: same values, shape from the shape input or the new_shape option."""
    x = inputs[0]
    return [x.reshape(_resolve_stretch(node, x.shape, _requested_shape(node, inputs)))]


# -- PAD / PADV2 / MIRROR_PAD -----------------------------------------------------------------
def _paddings(node, values, rank):
    """[[before, after]] per dimension from a [rank, 2] paddings tensor; TFLite rejects negatives."""
    widths = _index_values(node, values, "paddings", count=2 * rank).reshape(rank, 2)
    if (widths < 0).any():
        raise node_error(node, f"paddings must be >= 0, got {widths.tolist()}")
    return widths


def _pad_value(node, inputs):
    """PADV2's constant value, else 0 in real terms: the output zero point when quantized."""
    if len(inputs) > 2 and inputs[2] is not None:
        if inputs[2].size != 1:
            raise node_error(node, f"constant_values must hold one value, got {inputs[2].size}")
        return inputs[2].reshape(-1)[0]
    out = node.outputs[0]
    return zero_point_of(out) if is_quantized(out) else 0


def pad(node, inputs):
    """PAD / PADV2: constant padding. inputs: x, paddings [rank, 2][, constant_values []]."""
    x = inputs[0]
    return [np.pad(x, _paddings(node, inputs[1], x.ndim), constant_values=_pad_value(node, inputs))]


def _pad_support(node):
    reason = arity_reason(node, (2, 3)) or index_input_reason(node, 1, "paddings")
    if reason or len(node.inputs) < 3 or node.inputs[2] is None:
        return reason
    value, out = node.inputs[2], node.outputs[0]
    if value.dtype != node.inputs[0].dtype:
        return f"constant_values is {value.dtype}, the input is {node.inputs[0].dtype}"
    if is_quantized(out) and not same_quantization(value, out):
        # TFLite pads with the raw stored value, so it must share the output's quantization.
        return "quantized constant_values must have the output's scale and zero point"
    return None


def mirror_pad(node, inputs):
    """MIRROR_PAD: REFLECT (edge not repeated, pad <= dim - 1) or SYMMETRIC (pad <= dim)."""
    x = inputs[0]
    widths = _paddings(node, inputs[1], x.ndim)
    symmetric = node.options.get("mode", MIRROR_PAD_REFLECT) == MIRROR_PAD_SYMMETRIC
    limit = np.maximum(np.array(x.shape, np.int64) - (0 if symmetric else 1), 0)
    if (widths > limit[:, None]).any():
        raise node_error(node, f"paddings {widths.tolist()} exceed what {'SYMMETRIC' if symmetric else 'REFLECT'} "
                               f"mode allows for shape {list(x.shape)}")
    return [np.pad(x, widths, mode="symmetric" if symmetric else "reflect")]


def _mirror_pad_support(node):
    mode = node.options.get("mode", MIRROR_PAD_REFLECT)
    if mode not in (MIRROR_PAD_REFLECT, MIRROR_PAD_SYMMETRIC):
        return f"unknown mirror pad mode {mode}"
    return arity_reason(node, 2) or index_input_reason(node, 1, "paddings")


# -- CONCATENATION ----------------------------------------------------------------------------
def _requantize(tensor, values, out):
    """TFLite's ConcatenationWithScaling for one input, in its float32 arithmetic:
    q_out = round(q * s + bias) + zp_out with s = s_in / s_out and bias = -zp_in * s."""
    if same_quantization(tensor, out):
        return values
    scale = np.float32(scale_of(tensor)) * (np.float32(1) / np.float32(scale_of(out)))
    bias = np.float32(-zero_point_of(tensor)) * scale
    return saturate(round_half_away(values.astype(np.float32) * scale + bias) + zero_point_of(out), out.dtype)


def concatenation(node, inputs):
    """CONCATENATION along options['axis'] (negative counts from the end), then the fused
    activation (a clamp in the quantized domain for 8-bit outputs)."""
    first, out = inputs[0], node.outputs[0]
    axis = normalized_axis(node, node.options.get("axis", 0), first.ndim)
    for k, value in enumerate(inputs):
        if value.ndim != first.ndim or value.shape[:axis] + value.shape[axis + 1:] != \
                first.shape[:axis] + first.shape[axis + 1:]:
            raise node_error(node, f"input {k} of shape {list(value.shape)} does not fit input 0 of shape "
                                   f"{list(first.shape)} off axis {axis}")
    activation = fused_activation(node)
    if is_quantized(out):
        joined = np.concatenate([_requantize(t, v, out) for t, v in zip(node.inputs, inputs)], axis)
        if activation == ACT_NONE:
            return [joined]
        qmin, qmax = quantized_activation_range(activation, out)
        return [np.clip(joined, qmin, qmax).astype(out.dtype)]
    return [apply_activation(np.concatenate(inputs, axis), activation)]


def _joined_inputs_reason(node):
    """Why the inputs of a CONCATENATION / PACK (one or more, none omitted, one output) do not
    fit, or None."""
    if not node.inputs:
        return Malformed(f"{node.op} takes one or more inputs, got 0")
    reason = arity_reason(node, len(node.inputs))
    if reason is None and any(t.dtype != node.inputs[0].dtype for t in node.inputs):
        return "all inputs must share one dtype"
    return reason


def _concatenation_support(node):
    reason = _joined_inputs_reason(node)
    out = node.outputs[0] if len(node.outputs) == 1 else None
    if reason is None and is_quantized(out) and any(not is_quantized(t) for t in node.inputs):
        reason = "a quantized output needs quantized inputs"
    return reason or _activation_reason(fused_activation(node), out)


def _activation_reason(activation, out):
    """Integer outputs take only the clamping activations; float ones also TANH and SIGN_BIT."""
    clamps = activation_range(activation) is not None
    if activation == ACT_NONE or (out.dtype.kind in "iu" and clamps) or \
            (out.dtype.kind == "f" and (clamps or activation in (ACT_TANH, ACT_SIGN_BIT))):
        return None
    return f"fused activation {activation} cannot apply to a {out.dtype} output"


# -- STRIDED_SLICE ----------------------------------------------------------------------------
def _expand_masks(options, count, rank):
    """TFLite's BuildStridedSliceParams, first half: how many new axes are added, and the
    ellipsis / new-axis masks over the effective (expanded) dimensions."""
    ellipsis_mask, new_axis_mask = options.get("ellipsis_mask", 0), options.get("new_axis_mask", 0)
    num_add_axis = sum(1 for i in range(count) if not ellipsis_mask >> i & 1 and new_axis_mask >> i & 1)
    dims = rank + num_add_axis
    ellipsis, new_axis, ellipsis_start, expanded = 0, 0, dims, 0
    i = 0
    while i < dims:
        if ellipsis_mask >> i & 1:
            # The ellipsis spans every dimension begin/end/strides leave unspecified.
            ellipsis_end = max(i + 1, min(i + 1 + num_add_axis + rank - count, dims))
            ellipsis_start, expanded = i, ellipsis_end - i - 1
            ellipsis |= ((1 << ellipsis_end) - 1) & ~((1 << i) - 1)
            i = ellipsis_end
            continue
        if new_axis_mask >> (i - expanded) & 1:
            new_axis |= 1 << i
        i += 1
    return dims, ellipsis, new_axis, ellipsis_start, expanded


def _slice_axes(node, in_shape, begin, end, strides):
    """Per effective dimension: (size, begin, end, stride, begin_masked, end_masked, shrink),
    where new axes have size 1 and ellipsis / unspecified dimensions take everything."""
    options = node.options
    count = begin.size
    dims, ellipsis, new_axis, ellipsis_start, expanded = _expand_masks(options, count, len(in_shape))
    axes, added_axes, added_ellipsis = [], 0, 0
    for i in range(dims):
        if new_axis >> i & 1:
            axes.append((1, 0, 1, 1, False, False, False))
            added_axes += 1
            continue
        if i - added_axes >= len(in_shape):
            raise node_error(node, f"begin/end/strides of length {count} do not fit input rank {len(in_shape)}")
        size = in_shape[i - added_axes]
        if ellipsis >> i & 1:
            added_ellipsis = max(0, i - ellipsis_start)
            axes.append((size, 0, 0, 1, True, True, False))
        elif i >= count + expanded:
            axes.append((size, 0, 0, 1, True, True, False))
        else:
            k = i - added_ellipsis
            axes.append((size, int(begin[k]), int(end[k]), int(strides[k]), bool(options.get("begin_mask", 0) >> k & 1),
                         bool(options.get("end_mask", 0) >> k & 1), bool(options.get("shrink_axis_mask", 0) >> k & 1)))
    return axes


def _slice_start(size, begin, stride, masked):
    """TFLite's StridedSliceStartForAxis."""
    if begin < 0:
        begin += size
    begin = min(max(begin, 0), size) if stride > 0 else min(max(begin, -1), size - 1)
    if masked:
        begin = 0 if stride > 0 else size - 1
    return begin


def _slice_stop(size, start, end, stride, masked, shrink, offset):
    """TFLite's StridedSliceEndForAxis; with `offset`, end counts from start."""
    if shrink:
        return start if start >= size else start + 1
    if offset:
        end += start
    if end < 0:
        end += size
    end = min(max(end, 0), size) if stride > 0 else min(max(end, -1), size - 1)
    if masked:
        end = size if stride > 0 else -1
    return end


def _strided_slice_operands(node, begin, end, strides):
    """STRIDED_SLICE's (begin, end, strides) as int arrays of one length, and its `offset` option
    (end holds sizes); ModelError naming the node for a zero stride."""
    begin = _index_values(node, begin, "begin")
    end = _index_values(node, end, "end", count=begin.size)
    strides = _index_values(node, strides, "strides", count=begin.size)
    if (strides == 0).any():
        raise node_error(node, "strides must be non-zero")
    return begin, end, strides, bool(node.options.get("offset", False))


def strided_slice(node, inputs):
    """STRIDED_SLICE with begin/end/strides from inputs 1-3 and TFLite's mask semantics
    (begin, end, ellipsis, new_axis, shrink_axis masks; `offset`: end holds sizes)."""
    x = inputs[0]
    begin, end, strides, offset = _strided_slice_operands(node, *inputs[1:4])
    axes = _slice_axes(node, x.shape, begin, end, strides)
    indices, out_shape = [], []
    for size, b, e, stride, begin_masked, end_masked, shrink in axes:
        start = _slice_start(size, b, stride, begin_masked)
        picked = np.arange(start, _slice_stop(size, start, e, stride, end_masked, shrink, offset), stride)
        if shrink and picked.size != 1:
            raise node_error(node, f"shrink_axis slice at {b} with stride {stride} does not pick one element "
                                   f"of a dimension of size {size}")
        if offset and not shrink and picked.size != max(0, -(-e // stride)):
            raise node_error(node, f"offset slice of size {e} from {b} leaves a dimension of size {size}")
        indices.append(picked)
        if not shrink:
            out_shape.append(picked.size)
    expanded = x.reshape([a[0] for a in axes])
    return [expanded[np.ix_(*indices)].reshape(out_shape)]


# -- SLICE ------------------------------------------------------------------------------------
def slice_(node, inputs):
    """SLICE: inputs x, begin [rank], size [rank] where size -1 means up to the end."""
    x = inputs[0]
    begin = _index_values(node, inputs[1], "begin", count=x.ndim)
    size = _index_values(node, inputs[2], "size", count=x.ndim)
    dims = np.array(x.shape, np.int64)
    size = np.where(size == -1, dims - begin, size)
    if (begin < 0).any() or (size < 0).any() or (begin + size > dims).any():
        raise node_error(node, f"slice begin {begin.tolist()} size {size.tolist()} is outside shape {list(x.shape)}")
    return [x[tuple(slice(b, b + s) for b, s in zip(begin, size))]]


# -- DEPTH_TO_SPACE / SPACE_TO_DEPTH ----------------------------------------------------------
def _block_size(node, x):
    block = int(node.options.get("block_size", 0))
    if x.ndim != 4 or block < 1:
        raise node_error(node, f"needs a 4-D NHWC input and block_size >= 1, got shape {list(x.shape)}, "
                               f"block_size {block}")
    return block


def depth_to_space(node, inputs):
    """DEPTH_TO_SPACE [N, H, W, C] -> [N, H*b, W*b, C/b^2]; channel (by*b + bx)*C' + c moves to
    pixel (y*b + by, x*b + bx), channel c (TFLite's DCR order)."""
    x = inputs[0]
    block = _block_size(node, x)
    n, h, w, c = x.shape
    if c % (block * block):
        raise node_error(node, f"depth {c} is not divisible by block_size^2 = {block * block}")
    depth = c // (block * block)
    blocks = x.reshape(n, h, w, block, block, depth).transpose(0, 1, 3, 2, 4, 5)
    return [blocks.reshape(n, h * block, w * block, depth)]


def space_to_depth(node, inputs):
    """SPACE_TO_DEPTH [N, H, W, C] -> [N, H/b, W/b, C*b^2], the inverse of DEPTH_TO_SPACE."""
    x = inputs[0]
    block = _block_size(node, x)
    n, h, w, c = x.shape
    if h % block or w % block:
        raise node_error(node, f"height {h} and width {w} must be divisible by block_size {block}")
    blocks = x.reshape(n, h // block, block, w // block, block, c).transpose(0, 1, 3, 2, 4, 5)
    return [blocks.reshape(n, h // block, w // block, block * block * c)]


# -- TRANSPOSE / SQUEEZE / EXPAND_DIMS --------------------------------------------------------
def transpose(node, inputs):
    """TRANSPOSE by the permutation in input 1 (TFLite takes no negative entries)."""
    x = inputs[0]
    perm = _index_values(node, inputs[1], "perm", count=x.ndim)
    if sorted(perm.tolist()) != list(range(x.ndim)):
        raise node_error(node, f"perm {perm.tolist()} is not a permutation of the {x.ndim} input dims")
    return [np.transpose(x, perm)]


def squeeze(node, inputs):
    """SQUEEZE the squeeze_dims (negative allowed), or every size-1 dim when none are given."""
    x = inputs[0]
    dims = node.options.get("squeeze_dims") or []
    if not dims:
        return [x.reshape([d for d in x.shape if d != 1])]
    axes = {normalized_axis(node, d, x.ndim, "squeeze dim") for d in dims}
    if any(x.shape[a] != 1 for a in axes):
        raise node_error(node, f"squeeze_dims {list(dims)} name dims that are not 1 in {list(x.shape)}")
    return [x.reshape([d for a, d in enumerate(x.shape) if a not in axes])]


def expand_dims(node, inputs):
    """EXPAND_DIMS: insert a size-1 dim at the axis in input 1, in [-rank-1, rank]."""
    x = inputs[0]
    axis = normalized_axis(node, _index_values(node, inputs[1], "axis", count=1)[0], x.ndim + 1)
    return [np.expand_dims(x, axis)]


# -- GATHER -----------------------------------------------------------------------------------
def gather(node, inputs):
    """GATHER: out = params[:axis] x indices.shape[batch_dims:] x params[axis+1:]; with
    batch_dims b, batch item i of params (its first b dims) is gathered by batch item i of the
    indices (gather_dims checks the dims as TFLite's Prepare)."""
    params, indices = inputs
    axis, batch_dims = gather_dims(node, params.shape, np.shape(indices))
    flat = np.asarray(indices, np.int64)
    check_gather_indices(node, flat, params.shape[axis])
    if batch_dims == 0:
        return [np.take(params, flat, axis=axis)]
    batch = params.shape[:batch_dims]
    items = int(np.prod(batch, dtype=np.int64))
    p = params.reshape((items,) + params.shape[batch_dims:])
    i = flat.reshape((items,) + flat.shape[batch_dims:])
    out = [np.take(p[k], i[k], axis=axis - batch_dims) for k in range(items)]
    shape = params.shape[:axis] + flat.shape[batch_dims:] + params.shape[axis + 1:]
    return [np.stack(out).reshape(shape) if items else np.zeros(shape, params.dtype)]


def gather_dims(node, params_shape, indices_shape):
    """(axis, batch_dims) of a GATHER, both made non-negative as TFLite's Prepare does (batch_dims
    counts from the end of the indices' dims), checked as it checks them: a ModelError naming
    the node otherwise."""
    rank = len(params_shape)
    axis = normalized_axis(node, node.options.get("axis", 0), rank)
    batch_dims = int(node.options.get("batch_dims", 0))
    batch_dims += len(indices_shape) if batch_dims < 0 else 0
    if not 0 <= batch_dims <= min(axis, len(indices_shape)) or batch_dims >= rank:
        raise node_error(node, f"batch_dims {node.options.get('batch_dims', 0)} out of range for axis {axis}, "
                               f"params of rank {rank} and indices of rank {len(indices_shape)}")
    if tuple(params_shape[:batch_dims]) != tuple(indices_shape[:batch_dims]):
        raise node_error(node, f"the first {batch_dims} dims of params {list(params_shape)} and indices "
                               f"{list(indices_shape)} differ (batch_dims {batch_dims})")
    return axis, batch_dims


def gather_index_error(node, axis_size):
    """The ModelError (naming the node) of a GATHER index outside [0, axis_size), negative ones
    included, which TFLite reports as an error of the invoke."""
    return node_error(node, f"gather index out of range [0, {int(axis_size)})")


def check_gather_indices(node, indices, axis_size):
    """gather_index_error unless every one of `indices` is in [0, axis_size)."""
    if indices.size and (indices.min() < 0 or indices.max() >= axis_size):
        raise gather_index_error(node, axis_size)


def _gather_support(node):
    return arity_reason(node, 2) or index_input_reason(node, 1, "indices")


# -- SPLIT / SPLIT_V / PACK / UNPACK ----------------------------------------------------------
def split(node, inputs):
    """SPLIT: inputs axis [], x; len(node.outputs) equal parts along axis."""
    axis_values, x = inputs
    axis = _scalar_axis(node, axis_values, x.ndim)
    parts = len(node.outputs)
    if x.shape[axis] % parts:
        raise node_error(node, f"dimension {axis} of size {x.shape[axis]} does not split into {parts} parts")
    return np.split(x, parts, axis=axis)


def split_v(node, inputs):
    """SPLIT_V: inputs x, size_splits [num_splits] (one -1 takes the rest), axis []."""
    x, sizes, axis_values = inputs
    axis = _scalar_axis(node, axis_values, x.ndim)
    sizes = _index_values(node, sizes, "size_splits", count=len(node.outputs))
    unknown = sizes == -1
    if unknown.sum() > 1 or (sizes[~unknown] < 0).any():
        raise node_error(node, f"size_splits {sizes.tolist()} may hold one -1 and no other negative size")
    sizes = np.where(unknown, x.shape[axis] - sizes[~unknown].sum(), sizes)
    if sizes.sum() != x.shape[axis] or (sizes < 0).any():
        raise node_error(node, f"size_splits {sizes.tolist()} do not add up to dimension {axis} "
                               f"of size {x.shape[axis]}")
    return np.split(x, np.cumsum(sizes)[:-1], axis=axis)


def pack(node, inputs):
    """PACK the inputs (one shape) along a new axis in [-rank-1, rank]."""
    first = inputs[0]
    if any(v.shape != first.shape for v in inputs):
        raise node_error(node, f"inputs of shapes {[list(v.shape) for v in inputs]} differ")
    return [np.stack(inputs, axis=normalized_axis(node, node.options.get("axis", 0), first.ndim + 1))]


def unpack(node, inputs):
    """UNPACK along axis into len(node.outputs) tensors (the axis size must match)."""
    x = inputs[0]
    axis = normalized_axis(node, node.options.get("axis", 0), x.ndim)
    if x.shape[axis] != len(node.outputs):
        raise node_error(node, f"dimension {axis} of size {x.shape[axis]} does not unpack into "
                               f"{len(node.outputs)} outputs")
    return [np.take(x, k, axis=axis) for k in range(x.shape[axis])]


def _pack_support(node):
    return _joined_inputs_reason(node)


# -- TILE / SHAPE -----------------------------------------------------------------------------
def tile(node, inputs):
    """TILE by the non-negative multiples in input 1 (one per dim)."""
    x = inputs[0]
    multiples = _index_values(node, inputs[1], "multiples", count=x.ndim)
    if (multiples < 0).any():
        raise node_error(node, f"multiples {multiples.tolist()} must be >= 0")
    return [np.tile(x, multiples)]


def shape(node, inputs):
    """SHAPE: the input's shape as a 1-D int32 or int64 tensor (the output's dtype)."""
    return [np.array(inputs[0].shape, node.outputs[0].dtype)]


def _shape_support(node):
    reason = arity_reason(node, 1)
    if reason is None and node.outputs[0].dtype not in INDEX_DTYPES:
        reason = f"output must be int32 or int64, got {node.outputs[0].dtype}"
    return reason


KERNELS = {
    "RESHAPE": reshape, "PAD": pad, "PADV2": pad, "MIRROR_PAD": mirror_pad, "CONCATENATION": concatenation,
    "STRIDED_SLICE": strided_slice, "SLICE": slice_, "DEPTH_TO_SPACE": depth_to_space,
    "SPACE_TO_DEPTH": space_to_depth, "TRANSPOSE": transpose, "SQUEEZE": squeeze, "EXPAND_DIMS": expand_dims,
    "GATHER": gather, "SPLIT": split, "SPLIT_V": split_v, "PACK": pack, "UNPACK": unpack, "TILE": tile,
    "SHAPE": shape,
}

SUPPORT = {
    "RESHAPE": _simple_support((1, 2), optional=(1,)), "PAD": _pad_support, "PADV2": _pad_support,
    "MIRROR_PAD": _mirror_pad_support, "CONCATENATION": _concatenation_support,
    "STRIDED_SLICE": _simple_support(4, 1, ((1, "begin"), (2, "end"), (3, "strides")), int32_only=True),
    "SLICE": _simple_support(3, 1, ((1, "begin"), (2, "size"))),
    "DEPTH_TO_SPACE": _simple_support(1), "SPACE_TO_DEPTH": _simple_support(1),
    "TRANSPOSE": _simple_support(2, 1, ((1, "perm"),), int32_only=True), "SQUEEZE": _simple_support(1),
    "EXPAND_DIMS": _simple_support(2, 1, ((1, "axis"),)), "GATHER": _gather_support,
    "SPLIT": _simple_support(2, None, ((0, "axis"),)),
    "SPLIT_V": _simple_support(3, None, ((1, "size_splits"), (2, "axis"))),
    "PACK": _pack_support, "UNPACK": _simple_support(1, None), "TILE": _simple_support(2, 1, ((1, "multiples"),)),
    "SHAPE": _shape_support,
}


# -- output shapes of the ops whose output can be far larger than their input ------------------
def _padded_shape(node, shapes, values):
    if values[1] is None:
        return None
    widths = np.asarray(values[1], np.int64).reshape(len(shapes[0]), 2)
    return [tuple(int(d + before + after) for d, (before, after) in zip(shapes[0], widths))]


def _tiled_shape(node, shapes, values):
    if values[1] is None:
        return None
    multiples = np.asarray(values[1], np.int64).reshape(-1)
    return [tuple(int(d * m) for d, m in zip(shapes[0], multiples))] if multiples.size == len(shapes[0]) else None


def _gathered_shape(node, shapes, values):
    params, indices = shapes
    axis, batch_dims = gather_dims(node, params, indices)
    return [params[:axis] + indices[batch_dims:] + params[axis + 1:]]


# -- output shapes of the ops that only move values (shape propagation after a resize): the
# kernels' shape logic and errors, without their arrays. None where a runtime value decides.
def _reshaped_shape(node, shapes, values):
    if len(shapes) == 2 and shapes[1] is not None:
        if values[1] is None:
            return None
        requested = _requested_shape(node, [None, np.asarray(values[1])])
    else:
        requested = _requested_shape(node, [None])
    return [tuple(_resolve_stretch(node, shapes[0], requested))]


def _concatenated_shape(node, shapes, values):
    first = shapes[0]
    axis = normalized_axis(node, node.options.get("axis", 0), len(first))
    for k, shape in enumerate(shapes):
        if len(shape) != len(first) or shape[:axis] + shape[axis + 1:] != first[:axis] + first[axis + 1:]:
            raise node_error(node, f"input {k} of shape {list(shape)} does not fit input 0 of shape "
                                   f"{list(first)} off axis {axis}")
    return [first[:axis] + (sum(shape[axis] for shape in shapes),) + first[axis + 1:]]


def _strided_slice_shape(node, shapes, values):
    if any(v is None for v in values[1:4]):
        return None
    begin, end, strides, offset = _strided_slice_operands(node, *values[1:4])
    out_shape = []
    for size, b, e, stride, begin_masked, end_masked, shrink in _slice_axes(node, shapes[0], begin, end, strides):
        start = _slice_start(size, b, stride, begin_masked)
        picked = len(range(start, _slice_stop(size, start, e, stride, end_masked, shrink, offset), stride))
        if shrink and picked != 1:
            raise node_error(node, f"shrink_axis slice at {b} with stride {stride} does not pick one element "
                                   f"of a dimension of size {size}")
        if offset and not shrink and picked != max(0, -(-e // stride)):
            raise node_error(node, f"offset slice of size {e} from {b} leaves a dimension of size {size}")
        if not shrink:
            out_shape.append(picked)
    return [tuple(out_shape)]


def _sliced_shape(node, shapes, values):
    if values[1] is None or values[2] is None:
        return None
    rank = len(shapes[0])
    begin = _index_values(node, values[1], "begin", count=rank)
    size = _index_values(node, values[2], "size", count=rank)
    dims = np.array(shapes[0], np.int64)
    size = np.where(size == -1, dims - begin, size)
    if (begin < 0).any() or (size < 0).any() or (begin + size > dims).any():
        raise node_error(node, f"slice begin {begin.tolist()} size {size.tolist()} is outside shape {list(shapes[0])}")
    return [tuple(int(s) for s in size)]


def _block_shape(to_space):
    def rule(node, shapes, values):
        block = int(node.options.get("block_size", 0))
        if len(shapes[0]) != 4 or block < 1:
            raise node_error(node, f"needs a 4-D NHWC input and block_size >= 1, got shape {list(shapes[0])}, "
                                   f"block_size {block}")
        n, h, w, c = shapes[0]
        if to_space:
            if c % (block * block):
                raise node_error(node, f"depth {c} is not divisible by block_size^2 = {block * block}")
            return [(n, h * block, w * block, c // (block * block))]
        if h % block or w % block:
            raise node_error(node, f"height {h} and width {w} must be divisible by block_size {block}")
        return [(n, h // block, w // block, block * block * c)]
    return rule


def _transposed_shape(node, shapes, values):
    if values[1] is None:
        return None
    rank = len(shapes[0])
    perm = _index_values(node, values[1], "perm", count=rank)
    if sorted(perm.tolist()) != list(range(rank)):
        raise node_error(node, f"perm {perm.tolist()} is not a permutation of the {rank} input dims")
    return [tuple(shapes[0][p] for p in perm)]


def _squeezed_shape(node, shapes, values):
    shape = shapes[0]
    dims = node.options.get("squeeze_dims") or []
    if not dims:
        return [tuple(d for d in shape if d != 1)]
    axes = {normalized_axis(node, d, len(shape), "squeeze dim") for d in dims}
    if any(shape[a] != 1 for a in axes):
        raise node_error(node, f"squeeze_dims {list(dims)} name dims that are not 1 in {list(shape)}")
    return [tuple(d for a, d in enumerate(shape) if a not in axes)]


def _expanded_shape(node, shapes, values):
    if values[1] is None:
        return None
    axis = normalized_axis(node, _index_values(node, values[1], "axis", count=1)[0], len(shapes[0]) + 1)
    return [shapes[0][:axis] + (1,) + shapes[0][axis:]]


def _split_shape(node, shapes, values):
    if values[0] is None:
        return None
    shape = shapes[1]
    axis = _scalar_axis(node, values[0], len(shape))
    parts = len(node.outputs)
    if shape[axis] % parts:
        raise node_error(node, f"dimension {axis} of size {shape[axis]} does not split into {parts} parts")
    return [shape[:axis] + (shape[axis] // parts,) + shape[axis + 1:]] * parts


def _split_v_shape(node, shapes, values):
    if values[1] is None or values[2] is None:
        return None
    shape = shapes[0]
    axis = _scalar_axis(node, values[2], len(shape))
    sizes = _index_values(node, values[1], "size_splits", count=len(node.outputs))
    unknown = sizes == -1
    if unknown.sum() > 1 or (sizes[~unknown] < 0).any():
        raise node_error(node, f"size_splits {sizes.tolist()} may hold one -1 and no other negative size")
    sizes = np.where(unknown, shape[axis] - sizes[~unknown].sum(), sizes)
    if sizes.sum() != shape[axis] or (sizes < 0).any():
        raise node_error(node, f"size_splits {sizes.tolist()} do not add up to dimension {axis} "
                               f"of size {shape[axis]}")
    return [shape[:axis] + (int(s),) + shape[axis + 1:] for s in sizes]


def _packed_shape(node, shapes, values):
    first = shapes[0]
    if any(shape != first for shape in shapes):
        raise node_error(node, f"inputs of shapes {[list(shape) for shape in shapes]} differ")
    axis = normalized_axis(node, node.options.get("axis", 0), len(first) + 1)
    return [first[:axis] + (len(shapes),) + first[axis:]]


def _unpacked_shape(node, shapes, values):
    shape = shapes[0]
    axis = normalized_axis(node, node.options.get("axis", 0), len(shape))
    if shape[axis] != len(node.outputs):
        raise node_error(node, f"dimension {axis} of size {shape[axis]} does not unpack into "
                               f"{len(node.outputs)} outputs")
    return [shape[:axis] + shape[axis + 1:]] * shape[axis]


OUTPUT_SHAPES = {"PAD": _padded_shape, "PADV2": _padded_shape, "MIRROR_PAD": _padded_shape, "TILE": _tiled_shape,
                 "GATHER": _gathered_shape, "RESHAPE": _reshaped_shape, "CONCATENATION": _concatenated_shape,
                 "STRIDED_SLICE": _strided_slice_shape, "SLICE": _sliced_shape,
                 "DEPTH_TO_SPACE": _block_shape(True), "SPACE_TO_DEPTH": _block_shape(False),
                 "TRANSPOSE": _transposed_shape, "SQUEEZE": _squeezed_shape, "EXPAND_DIMS": _expanded_shape,
                 "SPLIT": _split_shape, "SPLIT_V": _split_v_shape, "PACK": _packed_shape, "UNPACK": _unpacked_shape,
                 "SHAPE": lambda node, shapes, values: [(len(shapes[0]),)]}
