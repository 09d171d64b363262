"""Ops that read or write a tensor at run-time indices: GATHER_ND, SCATTER_ND, EMBEDDING_LOOKUP,
DYNAMIC_UPDATE_SLICE. (GATHER, whose indices pick along one axis, is a layout op.)

They move stored values without changing them (TFLite copies raw bytes, so a quantized output
keeps its input's integers), except EMBEDDING_LOOKUP of 8-bit rows into a float32 output, which
dequantizes them (TFLite's hybrid lookup). An index out of range is an error in TFLite (the
kernel fails at invoke), never a clamp, except DYNAMIC_UPDATE_SLICE's start, which TFLite clamps
so that the update fits.
"""
import numpy as np

from .checks import Unimplemented, arity_reason, index_input_reason, index_values, node_error

I8, U8, I16, I32, I64 = (np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.int32, np.int64))
F16, F32, BOOL = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.bool_)
# The value types each kernel of LiteRT's builtin resolver takes (and numpy can hold).
GATHER_ND_TYPES = (F32, F16, U8, I8, I16, I32, I64, BOOL)
SCATTER_ND_TYPES = (F32, U8, I8, I32, I64, BOOL)
EMBEDDING_TYPES = (F32, U8, I8, I32, I64, BOOL)
UPDATE_SLICE_TYPES = (F32, F16, U8, I8, I16, I32, I64, BOOL)


def _dtype_reason(tensor, accepted, what):
    if tensor.dtype not in accepted:
        return Unimplemented(f"{what} of type {tensor.dtype} is not supported (only {', '.join(map(str, accepted))})")
    return None


def _same_dtype_reason(node, k, accepted, what):
    """Why input k's dtype is not one of `accepted` or differs from the output's, or None."""
    tensor, out = node.inputs[k], node.outputs[0]
    reason = _dtype_reason(tensor, accepted, what)
    if reason is None and out.dtype != tensor.dtype:
        reason = f"the output is {out.dtype}, the {what} {tensor.dtype}"
    return reason


def _check_in_range(node, index, shape, what):
    """ModelError naming the node unless every row of `index` [n, len(shape)] lies in `shape`."""
    bad = (index < 0) | (index >= np.asarray(shape, np.int64))
    if bad.any():
        row = index[np.argmax(bad.any(axis=1))]
        raise node_error(node, f"{what} {row.tolist()} is out of range for shape {list(shape)}")


# -- GATHER_ND ------------------------------------------------------------------------------
def _gather_nd_shape(node, params_shape, indices_shape):
    """indices.shape[:-1] + params.shape[indices.shape[-1]:], TFLite's Prepare checks first."""
    if not params_shape or not indices_shape:
        raise node_error(node, f"params {list(params_shape)} and indices {list(indices_shape)} must have rank >= 1")
    depth = indices_shape[-1]
    if not 0 < depth <= len(params_shape):
        # TFLite takes an innermost size of 0 at Prepare but fails every invoke of it.
        raise node_error(node, f"indices of innermost size {depth} must pick 1 to {len(params_shape)} dims")
    return tuple(indices_shape[:-1]) + tuple(params_shape[depth:])


def gather_nd(node, inputs):
    """GATHER_ND: out[i...] = params[indices[i..., :]] (a slice of the dims the index leaves)."""
    params, indices = inputs
    shape = _gather_nd_shape(node, params.shape, indices.shape)
    flat = np.asarray(indices, np.int64).reshape(-1, indices.shape[-1])
    _check_in_range(node, flat, params.shape[:indices.shape[-1]], "gather_nd index")
    return [params[tuple(flat.T)].reshape(shape)]


def _gather_nd_support(node):
    reason = arity_reason(node, 2) or _same_dtype_reason(node, 0, GATHER_ND_TYPES, "params")
    return reason or _dtype_reason(node.inputs[1], (I16, I32, I64), "indices")


# -- SCATTER_ND -----------------------------------------------------------------------------
def _scatter_nd_shape(node, indices_shape, updates_shape, shape):
    """The output shape (input 2's values), after TFLite's CheckShapes of the three inputs."""
    shape = tuple(int(d) for d in index_values(node, shape, "shape"))
    outer = len(indices_shape) - 1
    depth = indices_shape[-1] if indices_shape else 0
    fits = (indices_shape and updates_shape and 0 < depth <= len(shape) and min(shape, default=0) >= 0
            and tuple(updates_shape[:outer]) == tuple(indices_shape[:outer])
            and tuple(updates_shape[outer:]) == shape[depth:])
    if not fits:
        raise node_error(node, f"indices {list(indices_shape)} and updates {list(updates_shape)} do not fit "
                               f"the output shape {list(shape)}")
    return shape


def scatter_nd(node, inputs):
    """SCATTER_ND: zeros of the shape in input 2, with updates added at indices (duplicate
    indices add up, in index order as TFLite does)."""
    indices, updates, shape = inputs
    shape = _scatter_nd_shape(node, indices.shape, updates.shape, shape)
    depth = indices.shape[-1]
    flat = np.asarray(indices, np.int64).reshape(-1, depth)
    _check_in_range(node, flat, shape[:depth], "scatter_nd index")
    out = np.zeros(shape, updates.dtype)
    np.add.at(out, tuple(flat.T), updates.reshape((flat.shape[0],) + shape[depth:]))
    return [out]


def _scatter_nd_support(node):
    reason = arity_reason(node, 3) or _same_dtype_reason(node, 1, SCATTER_ND_TYPES, "updates")
    # LiteRT reads indices and shape as int32 only (int64 fails at Prepare).
    reason = reason or index_input_reason(node, 0, "indices", int32_only=True)
    return reason or index_input_reason(node, 2, "shape", int32_only=True)


# -- EMBEDDING_LOOKUP -----------------------------------------------------------------------
def _embedding_shape(node, lookup_shape, value_shape):
    if len(lookup_shape) != 1 or len(value_shape) < 2:
        raise node_error(node, f"needs a 1-D lookup and a value of rank >= 2, got {list(lookup_shape)} and "
                               f"{list(value_shape)}")
    return (lookup_shape[0],) + tuple(value_shape[1:])


def _row_scales(value, rows):
    """The float32 scale of each of `rows` picked rows of a hybrid lookup's 8-bit value: its one
    scale, or the scale of each row (quantized along dimension 0)."""
    scales = value.quantization.scales.astype(np.float32)
    return scales[rows] if scales.size > 1 else np.full(rows.shape, scales[0], np.float32)


def embedding_lookup(node, inputs):
    """EMBEDDING_LOOKUP: out[i] = value[lookup[i]]; 8-bit rows into a float32 output are
    dequantized (row as int8 * its scale, in float32: TFLite's hybrid kernel, zero point 0)."""
    lookup, value = inputs
    shape = _embedding_shape(node, lookup.shape, value.shape)
    rows = np.asarray(lookup, np.int64)
    _check_in_range(node, rows[:, None], value.shape[:1], "embedding_lookup index")
    picked = value[rows]
    if node.outputs[0].dtype == F32 and value.dtype != F32:
        scales = _row_scales(node.inputs[1], rows).reshape((-1,) + (1,) * (value.ndim - 1))
        # TFLite's hybrid kernel reads the stored bytes as int8 whatever their type (uint8 200 is -56).
        picked = picked.view(np.int8).astype(np.float32) * scales
    return [picked.reshape(shape)]


def _embedding_support(node):
    reason = arity_reason(node, 2) or index_input_reason(node, 0, "lookup", int32_only=True)
    value, out = (node.inputs[1], node.outputs[0]) if reason is None else (None, None)
    if reason or value.dtype == out.dtype:
        return reason or _dtype_reason(value, EMBEDDING_TYPES, "value")
    if out.dtype != F32 or value.dtype not in (I8, U8):
        return f"a {value.dtype} value cannot be looked up into a {out.dtype} output"
    q = value.quantization
    if q is None or not np.all(q.scales > 0) or q.scales.size not in (1, value.shape[0]):
        return "a hybrid lookup needs a positive scale per tensor or per row of the value"
    if np.any(q.zero_points != 0):
        return "a hybrid lookup needs a zero point of 0 (TFLite's is symmetric)"
    return None


# -- DYNAMIC_UPDATE_SLICE -------------------------------------------------------------------
def _update_slice_check(node, operand_shape, update_shape):
    if len(update_shape) != len(operand_shape) or any(u > o for u, o in zip(update_shape, operand_shape)):
        raise node_error(node, f"update of shape {list(update_shape)} does not fit in operand of shape "
                               f"{list(operand_shape)}")


def dynamic_update_slice(node, inputs):
    """DYNAMIC_UPDATE_SLICE: the operand with `update` written at start_indices, each start
    clamped to [0, operand dim - update dim] (TFLite's, as XLA's) so that the update fits."""
    operand, update, start = inputs
    _update_slice_check(node, operand.shape, update.shape)
    start = index_values(node, start, "start_indices", count=operand.ndim)
    start = np.clip(start, 0, np.subtract(operand.shape, update.shape, dtype=np.int64))
    out = np.array(operand)
    out[tuple(slice(s, s + u) for s, u in zip(start.tolist(), update.shape))] = update
    return [out]


def _update_slice_support(node):
    reason = arity_reason(node, 3) or _same_dtype_reason(node, 0, UPDATE_SLICE_TYPES, "operand")
    if reason is None and node.inputs[1].dtype != node.inputs[0].dtype:
        reason = f"the update is {node.inputs[1].dtype}, the operand {node.inputs[0].dtype}"
    return reason or index_input_reason(node, 2, "start_indices")


KERNELS = {"GATHER_ND": gather_nd, "SCATTER_ND": scatter_nd, "EMBEDDING_LOOKUP": embedding_lookup,
           "DYNAMIC_UPDATE_SLICE": dynamic_update_slice}
SUPPORT = {"GATHER_ND": _gather_nd_support, "SCATTER_ND": _scatter_nd_support,
           "EMBEDDING_LOOKUP": _embedding_support, "DYNAMIC_UPDATE_SLICE": _update_slice_support}


def _scattered_shape(node, shapes, values):
    return None if values[2] is None else [_scatter_nd_shape(node, shapes[0], shapes[1], values[2])]


def _updated_shape(node, shapes, values):
    _update_slice_check(node, shapes[0], shapes[1])
    return [shapes[0]]


OUTPUT_SHAPES = {
    "GATHER_ND": lambda node, shapes, values: [_gather_nd_shape(node, shapes[0], shapes[1])],
    "SCATTER_ND": _scattered_shape,
    "EMBEDDING_LOOKUP": lambda node, shapes, values: [_embedding_shape(node, shapes[0], shapes[1])],
    "DYNAMIC_UPDATE_SLICE": _updated_shape,
}
