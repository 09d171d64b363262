"""Scans and selections along an axis: CUMSUM and TOPK_V2.

CUMSUM (kernels_glsl/scan.glsl): one dispatch, one
invocation per vec4 of the output, each channel adding its line of the input in TFLite's order,
so float32 sums are TFLite's own and int32 ones (their bits: base.py's int view) wrap as
TFLite's do; the axis is a constant, `exclusive` and `reverse` are compiled in. TOPK_V2
(kernels_glsl/topk.glsl) of float32 rows: every element's rank in TFLite's order into an int32
scratch tensor, then the values and the indices of ranks 0 .. k-1 (three dispatches); its order is
a comparison of stored values, so the picks are exact (ties and NaN where TFLite puts them).
Both read a line's elements once per element: lines of at most MAX_LINE."""
import dataclasses

import numpy as np

from ...ops import scan as reference
from ...registry import BINARY, OpFacts
from ..phwc4 import bhwc
from .base import Dispatch, scratch

SCANNED_DTYPES = (np.dtype(np.float32), np.dtype(np.int32))  # int64 has no GPU type
# Each element adds up to its whole line: a line of n costs n^2 / 2 reads, which past this many
# elements would keep the GPU busy for seconds (a driver may reset it) where the CPU's scan is
# linear.
MAX_LINE = 4096


def supports(node):
    """The reference's checks; a constant axis; float32 or int32 values, ranks <= 4; lines of at
    most MAX_LINE elements."""
    reason = reference.SUPPORT["CUMSUM"](node)
    if reason:
        return reason
    if not node.inputs[1].is_const:
        return "the axis must be constant"
    if node.inputs[0].dtype not in SCANNED_DTYPES:
        return f"CUMSUM of {node.inputs[0].dtype} values (the GPU scans float32 and int32)"
    length = node.inputs[0].shape[_axis(node)]
    if length > MAX_LINE:
        return f"a scan of {length} elements a line (each element re-adds its line: at most {MAX_LINE})"
    return None


def _axis(node):
    x = node.inputs[0]
    return int(np.asarray(node.inputs[1].data).reshape(-1)[0]) % len(x.shape)


def build(node, env):
    """One scan.glsl dispatch over the output."""
    x, out = node.inputs[0], node.outputs[0]
    axis = _axis(node)
    x4, out4 = bhwc(x.shape), bhwc(out.shape)
    params = {"out_size": out4.as_ivec4(), "out_channels": out4.c, "out_offset": env.arena(out),
              "in_size": x4.as_ivec4(), "in_channels": x4.c, "in_offset": env.arena(x),
              "axis_size": int(x.shape[axis]), "inner": int(np.prod(x.shape[axis + 1:], dtype=np.int64))}
    defines = {"INT_VALUES": int(x.dtype == np.int32), "REVERSE": int(bool(node.options.get("reverse", False))),
               "EXCLUSIVE": int(bool(node.options.get("exclusive", False)))}
    return [Dispatch("scan", (out4.w, out4.h, out4.slices * out4.b), defines, params, reads=(x,), writes=(out,))]


def topk_supports(node):
    """The reference's checks; float32 values, int32 indices out; a constant k; rows of at most
    MAX_LINE elements."""
    reason = reference.SUPPORT["TOPK_V2"](node)
    if reason:
        return reason
    x, k = node.inputs
    if x.dtype != np.float32 or node.outputs[1].dtype != np.int32:
        return f"TOPK_V2 of {x.dtype} into {node.outputs[1].dtype} indices (the GPU's: float32 into int32)"
    if not k.is_const:
        return "k must be constant"
    if x.shape[-1] > MAX_LINE:
        return f"a TOPK_V2 over {x.shape[-1]} elements a row (each element compares itself with its row: at most " \
               f"{MAX_LINE})"
    return None


def topk_build(node, env):
    """Ranks into an int32 scratch of the input's shape, then the values, then the indices."""
    x, (values, indices) = node.inputs[0], node.outputs
    ranks = dataclasses.replace(scratch(node, 0, x.shape), dtype=np.dtype(np.int32))
    x4, r4 = bhwc(x.shape), bhwc(x.shape)
    common = {"in_size": x4.as_ivec4(), "in_channels": x4.c, "in_offset": env.arena(x), "n": int(x.shape[-1]),
              "k": int(values.shape[-1]), "rank_size": r4.as_ivec4(), "rank_channels": r4.c,
              "rank_offset": env.arena(ranks)}
    dispatches = []
    for kind, (target, reads) in enumerate(((ranks, (x,)), (values, (x, ranks)), (indices, (ranks,)))):
        t4 = bhwc(target.shape)
        params = {**common, "out_size": t4.as_ivec4(), "out_channels": t4.c, "out_offset": env.arena(target)}
        dispatches.append(Dispatch("topk", (t4.w, t4.h, t4.slices * t4.b), {"PASS": kind}, params, reads=reads,
                                   writes=(target,)))
    return dispatches


SUPPORT = {"CUMSUM": supports, "TOPK_V2": topk_supports}
BUILD = {"CUMSUM": build, "TOPK_V2": topk_build}
FLOAT_VIEW = {"CUMSUM": None, "TOPK_V2": None}  # int32 values, as their bits; TOPK_V2's int32 indices
FACTS = {"CUMSUM": OpFacts(arity=BINARY), "TOPK_V2": OpFacts(arity=((2,), (), 2))}
HIGH_RANK = {"TOPK_V2": None}  # rows of the last axis, read and written by row-major index
