"""STABLEHLO_REDUCE_WINDOW and REDUCE_WINDOW of float32 tensors up to rank 4 (kernels_glsl/reduce_window.glsl):
one dispatch, each output element init combined with its window's taps in LiteRT's order, so a
window sum is LiteRT's to float32 rounding in FP32 and its max / min (NaN included) exactly.
litert-torch writes avg_pool2d with ceil_mode or count_include_pad=False as two of these (the
sums, and the counts of a constant that folds at load) and a DIV. The reduction and the window
geometry are the reference's (ops/reduce_window.py); the init value must be constant.
"""
import numpy as np

from ...ops import reduce_window as reference
from ...registry import OpFacts
from ..phwc4 import bhwc
from .base import Dispatch

OP_CODES = {"add": 0, "mul": 1, "max": 2, "min": 3}
RANK = 4  # the template's dimensions
# Each output element loops over its window's taps: a driver may reset a GPU kept busy by more.
MAX_TAPS = 1 << 16
INT_REACH = 1 << 30


def supports(node):
    """The reference's checks; float32 tensors of rank <= 4; a constant init value; add, mul, max
    or min; at most MAX_TAPS taps a window."""
    reason = reference.SUPPORT[node.op](node)
    if reason:
        return reason
    x, init = node.inputs[0], node.inputs[1]
    if x.dtype != np.float32:
        return f"a {x.dtype} window reduction (the GPU reduces float32)"
    if len(x.shape) > RANK:
        return f"rank {len(x.shape)} (the GPU's window reduction takes up to {RANK})"
    if not init.is_const:
        return f"the init value (tensor {init.index}) must be constant"
    if reference.reducer(node) not in OP_CODES:
        return f"a window reduced by {reference.reducer(node)} (the GPU adds, multiplies, takes max or min)"
    g, _ = reference.geometry_reason(node, x.shape, [t.data for t in node.inputs])
    if g.taps > MAX_TAPS:
        return f"a window of {g.taps} taps (the GPU loops over at most {MAX_TAPS} an element)"
    # The template's positions are int32: out * stride + tap * dilation - pad, as far as they reach.
    spans = [o * s + w * d for o, s, w, d in zip(g.out_shape, g.strides, g.window, g.window_dilations)]
    reach = max(*spans, *map(abs, g.pad_before), *g.dilated)
    if reach >= INT_REACH:
        return f"window positions reaching {reach} (the GPU's int32 positions stay below {INT_REACH})"
    return None


def _ivec4(values, fill):
    """`values` (one per dimension of the op) as an ivec4, leading dimensions filled with `fill`."""
    values = tuple(int(v) for v in values)
    return (fill,) * (RANK - len(values)) + values


def build(node, env):
    """One reduce_window.glsl dispatch over the output."""
    x, init, out = node.inputs[0], node.inputs[1], node.outputs[0]
    g, _ = reference.geometry_reason(node, x.shape, [t.data for t in node.inputs])
    x4, out4 = bhwc(x.shape), bhwc(out.shape)
    params = {"out_size": out4.as_ivec4(), "out_channels": out4.c, "out_offset": env.arena(out),
              "in_size": x4.as_ivec4(), "in_channels": x4.c, "in_offset": env.arena(x),
              "out_dims": _ivec4(g.out_shape, 1), "in_dims": _ivec4(x.shape, 1), "window": _ivec4(g.window, 1),
              "strides": _ivec4(g.strides, 1), "base_dilations": _ivec4(g.base_dilations, 1),
              "window_dilations": _ivec4(g.window_dilations, 1), "pad_before": _ivec4(g.pad_before, 0),
              "dilated": _ivec4(g.dilated, 1), "taps": g.taps,
              "init": float(np.asarray(init.data, np.float32).reshape(-1)[0])}
    defines = {"OP": OP_CODES[reference.reducer(node)]}
    return [Dispatch("reduce_window", (out4.w, out4.h, out4.slices * out4.b), defines, params, reads=(x,),
                     writes=(out,))]


SUPPORT = {op: supports for op in reference.OPS}
BUILD = {op: build for op in reference.OPS}
FACTS = {"STABLEHLO_REDUCE_WINDOW": OpFacts(arity=((2,), (), 1)), "REDUCE_WINDOW": OpFacts(arity=((5,), (), 1))}
