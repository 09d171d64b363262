"""CUMSUM along any axis (kernels_glsl/scan.glsl): one dispatch, one invocation per vec4 of the
output, each channel adding its line of the input in TFLite's order, so float32 sums are
TFLite's own and int32 ones (their bits: base.py's int view) wrap as TFLite's do. The axis is a
constant; `exclusive` and `reverse` are compiled in."""
import numpy as np

from ...ops import scan as reference
from ...registry import BINARY, OpFacts
from ..phwc4 import bhwc
from .base import Dispatch

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


SUPPORT = {"CUMSUM": supports}
BUILD = {"CUMSUM": build}
FLOAT_VIEW = {"CUMSUM": None}  # int32 values, as their bits
FACTS = {"CUMSUM": OpFacts(arity=BINARY)}
