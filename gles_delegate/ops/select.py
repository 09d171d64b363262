"""Selection ops: SELECT, SELECT_V2 (pick x or y by a bool condition), WHERE (coordinates of the
true elements), ARG_MAX / ARG_MIN (index of the extreme along an axis) and UNIQUE (the distinct
values of a vector), with TFLite's semantics.

SELECT (v1) takes a condition of x's shape, a scalar, or a vector over x's first dimension
(RankOneSelect); SELECT_V2 broadcasts all three inputs as numpy does. ARG_MAX / ARG_MIN keep the
first index of the running extreme and replace it only by a strictly greater (smaller) value,
as arg_min_max.cc does: ties keep the first index and a NaN never replaces the extreme. A NaN
in the first place depends on the axis, as LiteRT's kernels do (measured against LiteRT 2.3):
over an axis whose following dimensions are all 1 (the last axis, typically) every comparison
with it is false and it stays the extreme (index 0); over any other axis the first non-NaN
value replaces it (index 0 only when all are NaN). UNIQUE keeps values in order of first
occurrence, keyed as unique.cc's std::map<T, int> does: -0.0 and 0.0 are one value (the first
seen is kept); a NaN breaks that map's ordering (its slot depends on the tree's shape), so for it
ours only promises what numpy does: every NaN is one value.
"""
import numpy as np

from .checks import Unimplemented, arity_reason, index_input_reason, node_error, normalized_axis

BOOL, I32, I64 = np.dtype(np.bool_), np.dtype(np.int32), np.dtype(np.int64)
SELECT_DTYPES = {np.dtype(t) for t in (np.float32, np.int32, np.int64, np.int8, np.uint8, np.int16, np.bool_)}
WHERE_DTYPES = {np.dtype(t) for t in (np.bool_, np.float32, np.int32, np.int64, np.int8, np.uint8)}
ARG_DTYPES = {np.dtype(t) for t in (np.float32, np.int32, np.int8, np.uint8, np.bool_)}
# ArgMaxOptions / ArgMinOptions output_type: the schema's TensorType codes.
OUTPUT_TYPES = {2: I32, 4: I64}
ARG_BETTER = {"ARG_MAX": np.greater, "ARG_MIN": np.less}


# -- SELECT / SELECT_V2 -------------------------------------------------------------------------
def _rank_one_condition(node, condition, x):
    """SELECT (v1)'s low-rank condition (a scalar, or one value per row of x) as an array that
    broadcasts against x; None when it has x's shape already."""
    if node.op != "SELECT" or condition.shape == x.shape:
        return None
    return condition.reshape(condition.shape + (1,) * (x.ndim - condition.ndim))


def select(node, inputs):
    """SELECT / SELECT_V2: condition ? x : y elementwise (SELECT_V2 broadcasting all three)."""
    condition, x, y = (np.asarray(v) for v in inputs)
    low_rank = _rank_one_condition(node, condition, x)
    return [np.asarray(np.where(condition if low_rank is None else low_rank, x, y), dtype=x.dtype)]


def _select_shape(node, shapes, values):
    condition, x, y = shapes
    if node.op == "SELECT_V2":
        return [np.broadcast_shapes(condition, x, y)]
    rank_one = len(condition) == 0 or (len(condition) == 1 and len(x) >= 1 and condition[0] == x[0])
    if x != y or (condition != x and not rank_one):
        raise node_error(node, f"SELECT condition {list(condition)}, x {list(x)} and y {list(y)}: x and y "
                               "must match, the condition must be of their shape, a scalar or one value per row")
    return [x]


def select_support(node):
    """Why SELECT / SELECT_V2 cannot run this node, or None."""
    reason = arity_reason(node, 3)
    if reason:
        return reason
    condition, x, y = node.inputs
    if condition.dtype != BOOL:
        return f"{node.op} condition must be bool, not {condition.dtype}"
    if not x.dtype == y.dtype == node.outputs[0].dtype:
        return f"{node.op} x, y and output dtypes differ ({x.dtype}, {y.dtype}, {node.outputs[0].dtype})"
    if x.dtype not in SELECT_DTYPES:
        return Unimplemented(f"{node.op} on {x.dtype} is not supported")
    try:
        _select_shape(node, [tuple(t.shape) for t in node.inputs], None)
    except ValueError as exc:  # ModelError, or shapes that do not broadcast
        return str(exc)
    return None


# -- WHERE --------------------------------------------------------------------------------------
def where(node, inputs):
    """WHERE with one input: [true count, rank] int64 coordinates of its nonzero elements, in
    row-major order (quantized inputs: nonzero raw values, as where.cc reads them)."""
    condition = np.asarray(inputs[0])
    return [np.argwhere(condition).astype(np.int64).reshape(-1, condition.ndim)]


def _where_shape(node, shapes, values):
    """Its row count is the condition's true count: known only for a known condition."""
    if values[0] is None:
        return None
    return [(int(np.count_nonzero(values[0])), len(shapes[0]))]


def where_support(node):
    reason = arity_reason(node, 1)
    if reason:
        return reason
    if node.inputs[0].dtype not in WHERE_DTYPES:
        return Unimplemented(f"WHERE condition of {node.inputs[0].dtype} is not supported")
    if node.outputs[0].dtype != I64:
        return f"WHERE output must be int64, not {node.outputs[0].dtype}"
    return None


# -- ARG_MAX / ARG_MIN --------------------------------------------------------------------------
def _arg_axis(node, rank, axis_values):
    """The axis input (one value) as an index in [0, rank)."""
    values = np.asarray(axis_values).reshape(-1)
    if values.size != 1:
        raise node_error(node, f"axis holds {values.size} values, expected 1")
    return normalized_axis(node, values[0], rank)


def arg_extreme(node, inputs):
    """ARG_MAX / ARG_MIN: x [..], axis (one int32 / int64 value) -> the index along the axis of
    the first strictly best value (arg_min_max.cc's running comparison), in the output_type."""
    x = np.asarray(inputs[0])
    axis = _arg_axis(node, x.ndim, inputs[1])
    if x.shape[axis] == 0:
        raise node_error(node, f"{node.op} over axis {axis} of size 0")
    values = np.moveaxis(x, axis, -1)
    better = ARG_BETTER[node.op]
    nan_yields = x.dtype.kind == "f" and int(np.prod(x.shape[axis + 1:])) > 1
    best, index = values[..., 0].copy(), np.zeros(values.shape[:-1], np.int64)
    with np.errstate(invalid="ignore"):
        for k in range(1, values.shape[-1]):
            replace = better(values[..., k], best)
            if nan_yields:
                replace |= np.isnan(best) & ~np.isnan(values[..., k])
            best = np.where(replace, values[..., k], best)
            index[replace] = k
    return [np.asarray(index, dtype=OUTPUT_TYPES[node.options.get("output_type")])]


def _arg_shape(node, shapes, values):
    if values[1] is None:
        return None
    axis = _arg_axis(node, len(shapes[0]), values[1])
    return [shapes[0][:axis] + shapes[0][axis + 1:]]


def arg_support(node):
    """Why ARG_MAX / ARG_MIN cannot run this node, or None."""
    reason = arity_reason(node, 2) or index_input_reason(node, 1, "axis")
    if reason:
        return reason
    x, out = node.inputs[0], node.outputs[0]
    if x.dtype not in ARG_DTYPES:
        return Unimplemented(f"{node.op} on {x.dtype} is not supported")
    output_type = node.options.get("output_type")
    if output_type not in OUTPUT_TYPES:
        return f"{node.op} output_type {output_type} is not int32 or int64"
    if out.dtype != OUTPUT_TYPES[output_type]:
        return f"{node.op} output is {out.dtype}, its output_type says {OUTPUT_TYPES[output_type]}"
    if len(x.shape) == 0:
        return f"{node.op} of a scalar"
    return None


# -- UNIQUE ---------------------------------------------------------------------------------
# unique.cc lists uint16 too, but LiteRT 2.3's UNIQUE fails on it at invoke.
UNIQUE_DTYPES = {np.dtype(t) for t in (np.float32, np.int8, np.int16, np.int32, np.int64, np.uint8)}


def unique(node, inputs):
    """UNIQUE: x [n] -> its distinct values [m] in order of first occurrence, and for each
    element the index of its value among them [n] (int32 or int64: idx_out_type)."""
    x = np.asarray(inputs[0])
    if x.ndim != 1:
        raise node_error(node, f"input must be a vector, got shape {list(x.shape)}")
    _, first, inverse = np.unique(x, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")  # the distinct values by first occurrence
    slot = np.empty_like(order)
    slot[order] = np.arange(order.size)
    return [x[first[order]], slot[inverse.reshape(-1)].astype(OUTPUT_TYPES[node.options.get("idx_out_type", 2)])]


def _unique_shapes(node, shapes, values):
    """The distinct count is known only for a known input."""
    return None if values[0] is None else [r.shape for r in unique(node, values)]


def unique_support(node):
    """Why UNIQUE cannot run this node, or None."""
    reason = arity_reason(node, 1, 2)
    if reason:
        return reason
    x, (values, index) = node.inputs[0], node.outputs
    if x.dtype not in UNIQUE_DTYPES or values.dtype != x.dtype:
        return Unimplemented(f"UNIQUE of {x.dtype} -> {values.dtype} is not supported")
    if len(x.shape) != 1:
        return f"UNIQUE takes a vector, got shape {list(x.shape)}"
    index_type = node.options.get("idx_out_type", 2)
    if OUTPUT_TYPES.get(index_type) != index.dtype:
        return f"UNIQUE index output {index.dtype} does not match idx_out_type {index_type} (int32 or int64)"
    return None


KERNELS = {"SELECT": select, "SELECT_V2": select, "WHERE": where, "ARG_MAX": arg_extreme, "ARG_MIN": arg_extreme,
           "UNIQUE": unique}
SUPPORT = {"SELECT": select_support, "SELECT_V2": select_support, "WHERE": where_support,
           "ARG_MAX": arg_support, "ARG_MIN": arg_support, "UNIQUE": unique_support}
OUTPUT_SHAPES = {"SELECT": _select_shape, "SELECT_V2": _select_shape, "WHERE": _where_shape,
                 "ARG_MAX": _arg_shape, "ARG_MIN": _arg_shape, "UNIQUE": _unique_shapes}
