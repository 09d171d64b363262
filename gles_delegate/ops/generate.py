"""Generators and shape ops: FILL, ZEROS_LIKE, RANGE, BROADCAST_TO, BROADCAST_ARGS, RANK, ONE_HOT,
with TFLite's semantics (fill.cc, zeros_like.cc, range.cc, broadcast_to.cc, broadcast_args.cc,
rank.cc, one_hot.cc).

Their outputs are made from shapes and scalars, so their size comes from input values (FILL's
dims, RANGE's bounds, BROADCAST_TO's shape, ONE_HOT's depth): the shape rules compute it when
those values are known (constants, or the actual inputs when run_node checks a kernel's output
before it allocates) and return None for runtime values. TFLite has no ONES_LIKE builtin
(tf.ones_like converts to FILL). RANDOM_UNIFORM and RANDOM_STANDARD_NORMAL have a shape rule only
(LiteRT's kernels run them, with their seeds): their output is shaped by their shape operand.
"""
import numpy as np

from .checks import INDEX_DTYPES, dtype_reason, index_input_reason, index_values, node_error, with_arity

F32, I32, I64, I8, U8, I16, BOOL = (np.dtype(t) for t in (np.float32, np.int32, np.int64, np.int8, np.uint8, np.int16,
                                                           np.bool_))
FILL_DTYPES = {F32, I32, I64, I8, U8, I16, BOOL}
ZEROS_LIKE_DTYPES = {F32, I32, I64}
RANGE_DTYPES = {F32, I32, I64}
BROADCAST_TO_DTYPES = {F32, I32, I64, I8, U8, I16, BOOL}
ONE_HOT_DTYPES = {F32, I32, I64, I8, U8, BOOL}  # LiteRT's one_hot fails at invoke on int16
MAX_BROADCAST_RANK = 8  # broadcast_to.cc's kMaxDims


def _scalar(node, value, what):
    """The one value of a scalar input (TFLite reads element 0; it must hold exactly one)."""
    value = np.asarray(value)
    if value.size != 1:
        raise node_error(node, f"{what} must hold one value, got shape {list(value.shape)}")
    return value.reshape(-1)[0]


# -- FILL / ZEROS_LIKE ------------------------------------------------------------------------
def _fill_shape_of(node, dims):
    shape = index_values(node, dims, "dims")
    if (shape < 0).any():
        raise node_error(node, f"dims {shape.tolist()} must be >= 0")
    return tuple(int(d) for d in shape)


def fill(node, inputs):
    """FILL: dims [rank] (int32 / int64), value [] -> an array of shape dims, every element value."""
    dims, value = inputs
    if np.ndim(value) != 0:
        raise node_error(node, f"value must be a scalar, got shape {list(np.shape(value))}")
    return [np.full(_fill_shape_of(node, dims), value, node.outputs[0].dtype)]


def _fill_support(node):
    dims, value = node.inputs
    if dims.dtype not in INDEX_DTYPES or len(dims.shape) != 1:
        return "dims must be a 1-D int32 or int64 tensor"
    if len(value.shape) != 0:
        return f"value must be a scalar, got shape {list(value.shape)}"
    if node.outputs[0].dtype != value.dtype:
        return f"output {node.outputs[0].dtype} differs from value {value.dtype}"
    return dtype_reason(node, value, FILL_DTYPES, "value")


def zeros_like(node, inputs):
    """ZEROS_LIKE: zeros of the input's shape and dtype."""
    return [np.zeros_like(inputs[0])]


def _zeros_like_support(node):
    if node.outputs[0].dtype != node.inputs[0].dtype:
        return f"output {node.outputs[0].dtype} differs from input {node.inputs[0].dtype}"
    return dtype_reason(node, node.inputs[0], ZEROS_LIKE_DTYPES, "input")


# -- RANGE ------------------------------------------------------------------------------------
def _range_size(node, start, limit, delta):
    """range.cc's GetSize: ceil(|(limit - start) / delta|) in float, (|limit - start| + |delta|
    - 1) / |delta| for integers; delta must be non-zero and point from start to limit."""
    if delta == 0:
        raise node_error(node, "delta must be non-zero")
    if not ((start >= limit and delta < 0) or (start <= limit and delta > 0)):
        raise node_error(node, f"delta {delta} does not lead from start {start} to limit {limit}")
    if np.asarray(start).dtype.kind == "f":
        with np.errstate(all="ignore"):
            size = np.ceil(np.abs((limit - start) / delta))  # float32 arithmetic, as TFLite's
        if not np.isfinite(size):
            raise node_error(node, f"range from {start} to {limit} by {delta} has no finite size")
        return int(size)
    return (abs(int(limit) - int(start)) + abs(int(delta)) - 1) // abs(int(delta))


def _range_operands(node, inputs):
    return [_scalar(node, v, what) for v, what in zip(inputs, ("start", "limit", "delta"))]


def range_(node, inputs):
    """RANGE: start, limit, delta scalars of one dtype -> start, start + delta, ... short of
    limit. TFLite adds delta to a running value (in float32 for floats, wrapping for integers),
    so a float range drifts as a running sum does."""
    start, limit, delta = _range_operands(node, inputs)
    size = _range_size(node, start, limit, delta)
    steps = np.full(size, delta, node.outputs[0].dtype)
    if size:
        steps[0] = start
    with np.errstate(over="ignore"):
        return [np.cumsum(steps, dtype=node.outputs[0].dtype)]


def _range_support(node):
    dtypes = {t.dtype for t in node.inputs + node.outputs}
    if len(dtypes) != 1:
        return f"start, limit, delta and output must share one dtype, got {sorted(d.name for d in dtypes)}"
    return dtype_reason(node, node.inputs[0], RANGE_DTYPES, "on")


# -- BROADCAST_TO / BROADCAST_ARGS ------------------------------------------------------------
def _broadcast_target(node, in_shape, shape_values):
    """BROADCAST_TO's output shape: the shape input, which the input must broadcast to (numpy's
    rule with the output at least as long as the input), up to 8 dimensions."""
    shape = tuple(int(d) for d in index_values(node, shape_values, "shape"))
    if len(shape) > MAX_BROADCAST_RANK or any(d < 0 for d in shape):
        raise node_error(node, f"shape {list(shape)} must have at most {MAX_BROADCAST_RANK} dims, none negative")
    padded = (1,) * (len(shape) - len(in_shape)) + tuple(in_shape)
    if len(in_shape) > len(shape) or any(i not in (1, o) for i, o in zip(padded, shape)):
        raise node_error(node, f"input shape {list(in_shape)} does not broadcast to {list(shape)}")
    return shape


def broadcast_to(node, inputs):
    """BROADCAST_TO: x and a 1-D shape -> x repeated along the dims where it has size 1."""
    x = inputs[0]
    return [np.broadcast_to(x, _broadcast_target(node, x.shape, inputs[1])).copy()]


def _broadcast_to_support(node):
    if node.outputs[0].dtype != node.inputs[0].dtype:
        return f"output {node.outputs[0].dtype} differs from input {node.inputs[0].dtype}"
    return index_input_reason(node, 1, "shape") or \
        dtype_reason(node, node.inputs[0], BROADCAST_TO_DTYPES, "input")


def _broadcast_shape_of(node, a, b):
    try:
        return np.broadcast_shapes(tuple(a), tuple(b))
    except ValueError:
        raise node_error(node, f"shapes {list(a)} and {list(b)} do not broadcast") from None


def broadcast_args(node, inputs):
    """BROADCAST_ARGS: two 1-D shapes -> the shape they broadcast to (of their dtype)."""
    a, b = (index_values(node, v, f"shape {k}") for k, v in enumerate(inputs))
    if (a < 0).any() or (b < 0).any():
        raise node_error(node, f"shapes {a.tolist()} and {b.tolist()} must not be negative")
    return [np.array(_broadcast_shape_of(node, a.tolist(), b.tolist()), node.outputs[0].dtype)]


def _broadcast_args_support(node):
    dtypes = {t.dtype for t in node.inputs + node.outputs}
    if len(dtypes) != 1 or not dtypes <= set(INDEX_DTYPES):
        return f"shapes and output must share one dtype, int32 or int64, got {sorted(d.name for d in dtypes)}"
    if any(len(t.shape) != 1 for t in node.inputs):
        return "shapes must be 1-D"
    return None


# -- RANK -------------------------------------------------------------------------------------
def rank(node, inputs):
    """RANK: the input's number of dimensions as an int32 scalar."""
    return [np.array(np.ndim(inputs[0]), np.int32)]


def _rank_support(node):
    # LiteRT writes an int32 whatever the output declares.
    return None if node.outputs[0].dtype == I32 else f"output must be int32, got {node.outputs[0].dtype}"


# -- ONE_HOT ----------------------------------------------------------------------------------
def one_hot_axis(node, indices_rank):
    """options axis: -1 (last) or in [0, rank(indices)]; TFLite takes no other negative axis."""
    axis = int(node.options.get("axis", -1))
    if axis == -1:
        return indices_rank
    if not 0 <= axis <= indices_rank:
        raise node_error(node, f"axis {axis} is out of range for an output of rank {indices_rank + 1}")
    return axis


def _one_hot_depth(node, depth):
    depth = int(_scalar(node, depth, "depth"))
    if depth < 0:
        raise node_error(node, f"depth {depth} must be >= 0")
    return depth


def one_hot(node, inputs):
    """ONE_HOT: indices, depth [], on_value [], off_value [] -> indices' shape with a new axis
    of `depth` inserted at options axis; on_value where the index equals the position, else
    off_value (indices out of [0, depth) give a row of off_value)."""
    indices, depth, on_value, off_value = inputs
    axis = one_hot_axis(node, indices.ndim)
    positions = np.arange(_one_hot_depth(node, depth)).reshape((-1,) + (1,) * (indices.ndim - axis))
    hot = np.expand_dims(indices.astype(np.int64), axis) == positions
    on, off = (_scalar(node, v, what) for v, what in ((on_value, "on_value"), (off_value, "off_value")))
    return [np.where(hot, on, off).astype(node.outputs[0].dtype)]


def _one_hot_support(node):
    indices, _, on_value, off_value = node.inputs
    reason = index_input_reason(node, 0, "indices") or index_input_reason(node, 1, "depth", int32_only=True)
    if reason:
        return reason
    if not on_value.dtype == off_value.dtype == node.outputs[0].dtype:
        return (f"on_value {on_value.dtype}, off_value {off_value.dtype} and output {node.outputs[0].dtype} "
                "must share one dtype")
    axis = int(node.options.get("axis", -1))
    if not -1 <= axis <= len(indices.shape):
        return f"axis {axis} is out of range for an output of rank {len(indices.shape) + 1}"
    return dtype_reason(node, on_value, ONE_HOT_DTYPES, "output")


KERNELS = {"FILL": fill, "ZEROS_LIKE": zeros_like, "RANGE": range_, "BROADCAST_TO": broadcast_to,
           "BROADCAST_ARGS": broadcast_args, "RANK": rank, "ONE_HOT": one_hot}
SUPPORT = {"FILL": with_arity(2, 0, _fill_support), "ZEROS_LIKE": with_arity(1, 0, _zeros_like_support),
           "RANGE": with_arity(3, 0, _range_support), "BROADCAST_TO": with_arity(2, 0, _broadcast_to_support),
           "BROADCAST_ARGS": with_arity(2, 0, _broadcast_args_support), "RANK": with_arity(1, 0, _rank_support),
           "ONE_HOT": with_arity(4, 0, _one_hot_support)}


# -- output shapes: from the size-giving input's values, None while they are runtime values --
def _filled_shape(node, shapes, values):
    return None if values[0] is None else [_fill_shape_of(node, values[0])]


def _range_shape(node, shapes, values):
    if any(v is None for v in values):
        return None
    return [(_range_size(node, *_range_operands(node, values)),)]


def _broadcast_to_shape(node, shapes, values):
    return None if values[1] is None else [_broadcast_target(node, shapes[0], values[1])]


def _random_shape(node, shapes, values):
    """RANDOM_UNIFORM / RANDOM_STANDARD_NORMAL (LiteRT's kernels run them: the reference has
    none): shape [rank] -> an array of that shape; a runtime shape makes the output dynamic
    (random_ops.cc), so None then."""
    return None if values[0] is None else [_fill_shape_of(node, values[0])]


def _one_hot_shape(node, shapes, values):
    if values[1] is None:
        return None
    axis = one_hot_axis(node, len(shapes[0]))
    return [shapes[0][:axis] + (_one_hot_depth(node, values[1]),) + shapes[0][axis:]]


OUTPUT_SHAPES = {"FILL": _filled_shape, "ZEROS_LIKE": lambda node, shapes, values: [shapes[0]],
                 "RANGE": _range_shape, "BROADCAST_TO": _broadcast_to_shape,
                 "BROADCAST_ARGS": lambda node, shapes, values: [(max(shapes[0][0], shapes[1][0]),)],
                 "RANK": lambda node, shapes, values: [()], "ONE_HOT": _one_hot_shape,
                 "RANDOM_UNIFORM": _random_shape, "RANDOM_STANDARD_NORMAL": _random_shape}
