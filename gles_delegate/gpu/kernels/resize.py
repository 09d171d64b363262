"""RESIZE_BILINEAR and RESIZE_NEAREST_NEIGHBOR (align_corners, half_pixel_centers):
kernels_glsl/resize.glsl, one vec4 per invocation."""
import numpy as np

from ...ops import resize as reference
from ...registry import BINARY, OpFacts
from ..phwc4 import bhwc
from . import epilogue
from .base import Dispatch


def supports(node):
    x, size = node.inputs[:2]
    out = node.outputs[0]
    if len(x.shape) != 4:
        return f"needs a 4-D NHWC input, got rank {len(x.shape)}"
    if not size.is_const:
        return "the output size must be constant"
    expected = (x.shape[0], *np.asarray(size.data).reshape(-1).tolist(), x.shape[3])
    if tuple(out.shape) != expected:
        return f"output tensor {out.index} is declared {list(out.shape)}, the size input makes {list(expected)}"
    flags = [node.options.get(k, False) for k in ("align_corners", "half_pixel_centers")]
    if node.op == "RESIZE_BILINEAR" and all(flags):
        return "half_pixel_centers requires align_corners to be false (as TFLite)"
    return None


def build(node, env):
    """One dispatch over the output, (W, H, slices * B) invocations of one vec4 each."""
    x, out = node.inputs[0], node.outputs[0]
    in4, out4 = bhwc(x.shape), bhwc(out.shape)
    align = bool(node.options.get("align_corners", False))
    bilinear = node.op == "RESIZE_BILINEAR"
    params = {"in_size": in4.as_ivec4(), "in_offset": env.arena(x), "out_size": out4.as_ivec4(),
              "out_channels": out4.c, "out_offset": env.arena(out),
              "scale": (float(reference.input_scale(in4.w, out4.w, align)),
                        float(reference.input_scale(in4.h, out4.h, align))),
              "half_pixel": 0.5 if node.options.get("half_pixel_centers", False) else 0.0}
    if not bilinear:
        params["align_corners"] = int(align)  # picks rounding over flooring
    defines = {"BILINEAR": int(bilinear)}
    reads, inplace = epilogue.apply(node, env, out, defines, params, (x,))
    return [Dispatch("resize", (out4.w, out4.h, out4.slices * out4.b), defines, params, reads=reads, writes=(out,),
                     inplace=inplace)]


SUPPORT = {"RESIZE_BILINEAR": supports, "RESIZE_NEAREST_NEIGHBOR": supports}
BUILD = {"RESIZE_BILINEAR": build, "RESIZE_NEAREST_NEIGHBOR": build}
EPILOGUE = {"RESIZE_BILINEAR": None, "RESIZE_NEAREST_NEIGHBOR": None}
FACTS = {"RESIZE_BILINEAR": OpFacts(arity=BINARY, noop_input=0),  # x, size
         "RESIZE_NEAREST_NEIGHBOR": OpFacts(arity=BINARY, integer_move=True, noop_input=0)}
