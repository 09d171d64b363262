"""ONE_HOT of runtime int32 indices (kernels_glsl/one_hot.glsl): one dispatch writing the whole
output, on_value where an element's position along the new axis is its index, else off_value.
depth, on_value and off_value are constants compiled into the dispatch as the output stores them
(float32, bool as 0.0 / 1.0, int32 as its bits: base.py), so every value is exact in every
precision but a float32 one past half's range in half storage, which the store rounds as any."""
import numpy as np

from ...ops import generate as reference
from ...registry import OpFacts
from ..phwc4 import bhwc
from .base import Dispatch, stored_values

OUTPUT_DTYPES = (np.dtype(np.float32), np.dtype(np.bool_), np.dtype(np.int32))


def supports(node):
    """The reference's checks; runtime int32 indices; constant depth, on and off values; a
    float32, bool or int32 output."""
    reason = reference.SUPPORT["ONE_HOT"](node)
    if reason:
        return reason
    indices, depth, on_value, off_value = node.inputs
    if indices.dtype != np.int32 or indices.is_const:
        return "the GPU's ONE_HOT takes runtime int32 indices"
    for tensor, what in ((depth, "depth"), (on_value, "on_value"), (off_value, "off_value")):
        if not tensor.is_const:
            return f"{what} (tensor {tensor.index}) must be constant"
    if node.outputs[0].dtype not in OUTPUT_DTYPES:
        return f"a {node.outputs[0].dtype} output (the GPU writes float32, bool and int32)"
    return None


def _stored_bits(value, dtype):
    """The int32 bits of the float32 word the output's storage holds for `value` of `dtype`
    (base.stored_values: an int32's own bits, a bool's 0.0 / 1.0, a float's)."""
    return int(stored_values(np.asarray(value, dtype).reshape(1)).view(np.int32)[0])


def build(node, env):
    """One one_hot.glsl dispatch over the output."""
    indices, depth, on_value, off_value = node.inputs
    out = node.outputs[0]
    axis = reference.one_hot_axis(node, len(indices.shape))
    i4, o4 = bhwc(indices.shape), bhwc(out.shape)
    params = {"out_size": o4.as_ivec4(), "out_channels": o4.c, "out_offset": env.arena(out),
              "idx_size": i4.as_ivec4(), "idx_channels": i4.c, "idx_offset": env.arena(indices),
              "depth": int(out.shape[axis]), "inner": int(np.prod(out.shape[axis + 1:], dtype=np.int64)),
              "on_bits": _stored_bits(np.asarray(on_value.data).reshape(-1)[0], out.dtype),
              "off_bits": _stored_bits(np.asarray(off_value.data).reshape(-1)[0], out.dtype)}
    return [Dispatch("one_hot", (o4.w, o4.h, o4.slices * o4.b), {}, params, reads=(indices,), writes=(out,))]


SUPPORT = {"ONE_HOT": supports}
BUILD = {"ONE_HOT": build}
FLOAT_VIEW = {"ONE_HOT": None}  # int32 indices, bool and int32 outputs
FACTS = {"ONE_HOT": OpFacts(arity=((4,), (), 1))}
