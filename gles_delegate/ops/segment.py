"""Segment reductions: UNSORTED_SEGMENT_SUM / PROD / MAX / MIN (float32, int32), with TFLite's
semantics (unsorted_segment.cc, reference_ops::UnsortedSegmentRef); SEGMENT_SUM's output shape
only (LiteRT's kernels run it: the reference has no kernel).

segment_ids (int32) has the shape of a prefix of data's; each slice of data under an id is
folded into output[id] in data order, starting from the op's identity (0, 1, the lowest or the
highest value of the type, which an id no slice maps to keeps); a negative id drops its slice.
MAX / MIN are std::max(acc, x) / std::min(acc, x), so a NaN slice never wins; integers wrap.
"""
import numpy as np

from .checks import Unimplemented, arity_reason, node_error

F32, I32 = np.dtype(np.float32), np.dtype(np.int32)


def _lowest(dtype):
    return np.finfo(dtype).min if dtype.kind == "f" else np.iinfo(dtype).min


def _highest(dtype):
    return np.finfo(dtype).max if dtype.kind == "f" else np.iinfo(dtype).max


# op: (initial value of the dtype, acc, x -> the folded value, as TFLite's functor)
FOLDS = {
    "UNSORTED_SEGMENT_SUM": (lambda dtype: 0, lambda acc, x: acc + x),
    "UNSORTED_SEGMENT_PROD": (lambda dtype: 1, lambda acc, x: acc * x),
    "UNSORTED_SEGMENT_MAX": (_lowest, lambda acc, x: np.where(acc < x, x, acc)),
    "UNSORTED_SEGMENT_MIN": (_highest, lambda acc, x: np.where(x < acc, x, acc)),
}


def _num_segments(node, value):
    value = np.asarray(value)
    if value.size != 1 or value.ndim > 1:
        raise node_error(node, f"num_segments must be a scalar or a one-element vector, got shape {list(value.shape)}")
    count = int(value.reshape(-1)[0])
    if count < 0:
        raise node_error(node, f"num_segments {count} is negative")
    return count


def _segment_shape(node, data_shape, ids_shape, ids, count):
    """[num_segments] + data's shape past the ids' rank; a ModelError when the ids' shape is not
    a prefix of data's or an id is >= num_segments."""
    if tuple(data_shape[:len(ids_shape)]) != tuple(ids_shape) or len(ids_shape) > len(data_shape):
        raise node_error(node, f"segment_ids shape {list(ids_shape)} is not a prefix of data shape {list(data_shape)}")
    if ids is not None and np.size(ids) and int(np.max(ids)) >= count:
        raise node_error(node, f"segment id {int(np.max(ids))} is not below num_segments {count}")
    return (count,) + tuple(data_shape[len(ids_shape):])


def unsorted_segment(node, inputs):
    """data [d0..dk, ...], segment_ids [d0..dk] (int32), num_segments [] or [1] (int32) ->
    [num_segments, ...]: each data slice folded into its segment, in data order."""
    data, ids, num = inputs
    count = _num_segments(node, num)
    shape = _segment_shape(node, data.shape, np.shape(ids), ids, count)
    initial, fold = FOLDS[node.op]
    out = np.full(shape, initial(data.dtype), data.dtype)
    slices = data.reshape((int(np.size(ids)),) + shape[1:])
    with np.errstate(all="ignore"):  # integers wrap, as TFLite's WrappingAdd / WrappingMul
        for row, segment in enumerate(np.asarray(ids).reshape(-1).tolist()):
            if segment >= 0:
                out[segment] = fold(out[segment], slices[row])
    return [out]


def _support(node):
    reason = arity_reason(node, 3)
    if reason:
        return reason
    (data, ids, num), out = node.inputs, node.outputs[0]
    if data.dtype not in (F32, I32) or out.dtype != data.dtype:
        return Unimplemented(f"{node.op} on {data.dtype} -> {out.dtype} is not supported (float32 or int32, "
                             "unchanged)")
    if ids.dtype != I32 or num.dtype != I32:
        return "segment_ids and num_segments must be int32"
    return None


def _shapes(node, shapes, values):
    if values[2] is None:
        return None
    return [_segment_shape(node, shapes[0], shapes[1], values[1], _num_segments(node, values[2]))]


def _sorted_segment_shapes(node, shapes, values):
    """SEGMENT_SUM: data [n, ...], segment_ids [n] (int32: 0, then steps of 0 or 1) -> [last id
    + 1, ...]; None while the ids are runtime values (segment_sum.cc makes the output a dynamic
    tensor then, sized at invoke: the shape cannot come from stand-in ids)."""
    if values[1] is None:
        return None
    ids = np.asarray(values[1]).reshape(-1)
    if len(shapes[1]) != 1 or not shapes[0] or shapes[0][0] != ids.size:
        raise node_error(node, f"segment_ids shape {list(shapes[1])} must be [n] for data shape {list(shapes[0])}")
    steps = np.diff(ids)
    if ids.size and (ids[0] != 0 or ((steps != 0) & (steps != 1)).any()):
        raise node_error(node, f"segment ids {ids.tolist()[:16]} must start at 0 and grow by 0 or 1")
    return [(int(ids[-1]) + 1 if ids.size else 0,) + tuple(shapes[0][1:])]


KERNELS = {op: unsorted_segment for op in FOLDS}
SUPPORT = {op: _support for op in FOLDS}
OUTPUT_SHAPES = {op: _shapes for op in FOLDS} | {"SEGMENT_SUM": _sorted_segment_shapes}
