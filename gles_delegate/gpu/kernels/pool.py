"""AVERAGE_POOL_2D and MAX_POOL_2D: kernels_glsl/pool.glsl, one template for both.

A global pool (one output whose window covers the whole input, as in MediaPipe's selfie
segmentation: 128x128 windows) runs as a spatial reduction instead (reduce.py), which spreads each
window over a workgroup rather than looping over it in one invocation.

options["explicit_padding"] (rule merge_padding) is zero padding a PAD node added: those zeros
take part in the pool exactly as the PAD's did (they can win a max and count in an average),
unlike the node's own SAME padding, which TFLite's pools ignore.
"""
from ...ops import pool as reference
from ...registry import UNARY, OpFacts
from ..phwc4 import bhwc
from . import epilogue, reduce
from .base import Dispatch
from .conv import EXPLICIT_PADDING, geometry

OP_CODES = {"MAX_POOL_2D": 0, "AVERAGE_POOL_2D": 1}
# options[INTEGER_MEAN] = (scale, zero point) of an int8 / uint8 AVERAGE_POOL_2D's grid (quant.py's
# float view): TFLite's integer kernel rounds the mean of the raw integers, zero point included,
# half away from zero, where the view's fake-quant step would round the real mean: their ties
# differ (a raw mean of -9.5 on zero point -18 is -10 in TFLite, -9 rounded as a real). The kernel
# recovers each integer from its stored value and divides as TFLite does.
INTEGER_MEAN = "integer_mean"
AS_REDUCTION = {"MAX_POOL_2D": "MAX_POOL_2D", "AVERAGE_POOL_2D": "MEAN"}  # reduce.TEMPLATE_CODES
NO_PADDING = (0, 0, 0, 0)


def supports(node):
    """The reference kernel's checks (arity, rank 4, window, strides, padding, clamp activation,
    output shape) are exactly what the GPU kernel needs too."""
    return reference.SUPPORT[node.op](node)


def _geometry(node):
    """(filter (h, w), strides (h, w), output (h, w), padding before (top, left))."""
    x = node.inputs[0]
    window = (node.options["filter_height"], node.options["filter_width"])
    strides = (node.options["stride_h"], node.options["stride_w"])
    oh, ow, top, left = geometry(node, x.shape[1:3], window, strides, (1, 1))
    return window, strides, (oh, ow), (top, left)


def is_global(node):
    """One output whose window, unpadded, covers the whole input."""
    window, _, out_hw, pads = _geometry(node)
    in_hw = node.inputs[0].shape[1:3]
    return out_hw == (1, 1) and pads == (0, 0) and window[0] >= in_hw[0] and window[1] >= in_hw[1] \
        and node.options.get(EXPLICIT_PADDING, NO_PADDING) == NO_PADDING


def epilogue_reason(node):
    """A global pool runs as a reduction, which applies no epilogue."""
    return "a global pool runs as a reduction, which takes no epilogue" if is_global(node) else None


def build(node, env):
    """One pool.glsl Dispatch over the output [N, OH, OW, C], one vec4 per invocation; a global
    pool is a reduction (reduce.reduction) instead."""
    x, out = node.inputs[0], node.outputs[0]
    stage = env.output_stage(node)
    if is_global(node):
        return reduce.reduction(x, out, {1, 2}, AS_REDUCTION[node.op], env, node, stage)
    window, strides, _, pads = _geometry(node)
    in4, out4 = bhwc(x.shape), bhwc(out.shape)
    top, left, bottom, right = node.options.get(EXPLICIT_PADDING, NO_PADDING)
    params = {"in_size": in4.as_ivec4(), "out_size": out4.as_ivec4(), "channels": out4.c,
              "window": window[::-1], "stride": strides[::-1], "pad": pads[::-1],  # (x, y) order
              "zeros_begin": (-left, -top), "zeros_end": (in4.w + right, in4.h + bottom),
              "in_offset": env.arena(x), "out_offset": env.arena(out)}
    defines = {"OP": OP_CODES[node.op], "INTEGER_MEAN": int(INTEGER_MEAN in node.options), **stage}
    if INTEGER_MEAN in node.options:
        params["q_scale"], params["q_zero"] = node.options[INTEGER_MEAN]
    reads, inplace = epilogue.apply(node, env, out, defines, params, (x,))
    return [Dispatch("pool", (out4.w, out4.h, out4.slices * out4.b), defines, params, reads=reads, writes=(out,),
                     inplace=inplace)]


SUPPORT = {op: supports for op in OP_CODES}
BUILD = {op: build for op in OP_CODES}
EPILOGUE = {op: epilogue_reason for op in OP_CODES}
FACTS = {"MAX_POOL_2D": OpFacts(arity=UNARY, fused_activation=True, integer_move=True),
         "AVERAGE_POOL_2D": OpFacts(arity=UNARY, fused_activation=True)}
