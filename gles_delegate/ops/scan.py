"""Scans and selections along an axis: CUMSUM and TOPK_V2, with TFLite's semantics (cumsum.cc,
topk_v2.cc).

CUMSUM adds in the input's type, one element after the other along the axis as TFLite's scan
does (numpy's cumsum is sequential too), wrapping for integers. TOPK_V2 orders the last axis by
value, largest first, ties by the lower index first (TopContainer's comparator) and NaN last.
"""
import numpy as np

from .checks import (arity_reason, dtype_reason, index_input_reason, index_values, node_error, normalized_axis,
                     with_arity)

F32, I32, I64, I8, U8, I16 = (np.dtype(t) for t in (np.float32, np.int32, np.int64, np.int8, np.uint8, np.int16))
CUMSUM_DTYPES = {F32, I32, I64}
TOPK_DTYPES = {F32, I32, I64, I8, U8, I16}
TOPK_INDEX_DTYPES = {I32, I16}  # of k and of the indices output


# -- CUMSUM -----------------------------------------------------------------------------------
def _cumsum_axis(node, rank, axis_value):
    if rank == 0:
        raise node_error(node, "input must have at least one dimension")
    return normalized_axis(node, index_values(node, axis_value, "axis", count=1)[0], rank)


def cumsum(node, inputs):
    """CUMSUM: x [..], axis [] (negative counts from the end) -> running sums along the axis;
    `exclusive`: each sum leaves out its own element (the first is 0); `reverse`: sums run from
    the end of the axis."""
    x, axis_value = inputs
    axis = _cumsum_axis(node, x.ndim, axis_value)
    reverse, exclusive = node.options.get("reverse", False), node.options.get("exclusive", False)
    values = np.flip(x, axis) if reverse else x
    with np.errstate(all="ignore"):  # wrapping integers, inf - inf: as in C++
        sums = np.cumsum(values, axis=axis, dtype=x.dtype)
    if exclusive:
        sums = np.concatenate([np.zeros_like(np.take(sums, [0], axis)), np.delete(sums, -1, axis)], axis) \
            if x.shape[axis] else sums
    return [np.flip(sums, axis) if reverse else sums]


def _cumsum_support(node):
    x, out = node.inputs[0], node.outputs[0]
    if out.dtype != x.dtype:
        return f"output {out.dtype} differs from input {x.dtype}"
    if len(x.shape) == 0:
        return "input must have at least one dimension"
    return index_input_reason(node, 1, "axis", int32_only=True) or dtype_reason(node, x, CUMSUM_DTYPES, "on")


# -- TOPK_V2 ----------------------------------------------------------------------------------
def _topk_k(node, last, k_value):
    """k (one int32 or int16 value), in [0, size of the last axis]."""
    k_value = np.asarray(k_value)
    if k_value.size != 1:
        raise node_error(node, f"k must hold one value, got shape {list(k_value.shape)}")
    k = int(k_value.reshape(-1)[0])
    if not 0 <= k <= last:
        raise node_error(node, f"k {k} is outside [0, {last}] (the size of the last axis)")
    return k


def descending_order(x):
    """Indices that sort x's last axis by value, largest first, ties by the lower index first,
    NaN after every number (where LiteRT's kernel puts it, whatever k)."""
    _, ranks = np.unique(np.where(np.isnan(x), 0, x) if x.dtype.kind == "f" else x, return_inverse=True)
    key = -ranks.reshape(x.shape).astype(np.int64)  # -0.0 and 0.0 share a rank: a tie
    if x.dtype.kind == "f":
        key[np.isnan(x)] = 1
    return np.argsort(key, axis=-1, kind="stable")


def topk_v2(node, inputs):
    """TOPK_V2: x [..., n], k [] -> the k largest values of the last axis [..., k] and their
    indices (largest first, ties by the lower index first)."""
    x, k_value = inputs
    if x.ndim == 0:
        raise node_error(node, "input must have at least one dimension")
    order = descending_order(x)[..., :_topk_k(node, x.shape[-1], k_value)]
    return [np.take_along_axis(x, order, -1), order.astype(node.outputs[1].dtype)]


def _topk_support(node):
    (x, k), (values, indices) = node.inputs, node.outputs
    if values.dtype != x.dtype:
        return f"values output {values.dtype} differs from input {x.dtype}"
    if len(x.shape) == 0:
        return "input must have at least one dimension"
    return dtype_reason(node, k, TOPK_INDEX_DTYPES, "k") or \
        dtype_reason(node, indices, TOPK_INDEX_DTYPES, "indices output") or dtype_reason(node, x, TOPK_DTYPES, "on")


KERNELS = {"CUMSUM": cumsum, "TOPK_V2": topk_v2}
SUPPORT = {"CUMSUM": with_arity(2, 0, _cumsum_support),
           "TOPK_V2": lambda node: arity_reason(node, 2, 2) or _topk_support(node)}


def _topk_shapes(node, shapes, values):
    if values[1] is None:
        return None
    k = _topk_k(node, shapes[0][-1], values[1])
    return [shapes[0][:-1] + (k,)] * 2


OUTPUT_SHAPES = {"CUMSUM": lambda node, shapes, values: [shapes[0]], "TOPK_V2": _topk_shapes}
