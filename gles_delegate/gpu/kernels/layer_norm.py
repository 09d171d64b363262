"""LAYER_NORM, a fused op only the rewrite rule fuse_layer_norm makes: a layer normalization over
the last axis (the channels of the BHWC view, at any rank), which converters write as eight or
more nodes (MEAN, SQUARED_DIFFERENCE, MEAN, ADD, RSQRT and the MUL / ADD / SUB / NEG that scale
and shift), in one dispatch of kernels_glsl/layer_norm.glsl.

Node: inputs [x, gamma, beta], x float32 [..., C], gamma and beta constant [C]; one output of
x's shape; options `epsilon` (the constant the variance is offset by before its RSQRT) and `center`
(default True; False: an RMS normalization, x * rsqrt(mean(x^2) + epsilon) * gamma + beta, which
the rule fuse_rms_norm makes). Like every kernel with an output stage, it applies a fused
activation and an epilogue (rules fuse_*).
"""
import numpy as np

from . import epilogue
from ...registry import OpFacts
from ..phwc4 import bhwc
from .base import Dispatch
from .conv import MIN_INVOCATIONS, pack_bias

OP = "LAYER_NORM"
EPSILON = "epsilon"  # node.options keys
CENTER = "center"
# A workgroup of up to this many lanes per pixel shares its passes where one invocation per pixel
# would leave the GPU idle (fewer than MIN_INVOCATIONS): at least 4 lanes, each 2 slices or more.
MAX_LANES = 32


def lanes_per_pixel(pixels, slices):
    """Lanes sharing one pixel's passes (a power of 2; 1: one invocation per pixel)."""
    lanes = 1
    while lanes < MAX_LANES and 4 * lanes <= slices and 2 * lanes * pixels <= MIN_INVOCATIONS:
        lanes *= 2
    return lanes if lanes >= 4 else 1


def support(node):
    """Why the kernel cannot run `node`, or None: constant gamma and beta of x's channels, an
    output of x's shape, a finite epsilon."""
    if node.custom:
        return f"custom op {OP} is not the fused op of that name"
    x, out = node.inputs[0], node.outputs[0]
    channels = x.shape[-1] if len(x.shape) else 0
    for name, tensor in zip(("gamma", "beta"), node.inputs[1:]):
        if not tensor.is_const or tuple(tensor.shape) != (channels,):
            return f"{name} must be a constant [{channels}], got tensor {tensor.index} of shape {list(tensor.shape)}"
    if tuple(out.shape) != tuple(x.shape):
        return f"output shape {list(out.shape)} differs from input {list(x.shape)}"
    if not np.isfinite(node.options.get(EPSILON, np.nan)):
        return f"epsilon {node.options.get(EPSILON)} is not a finite number"
    return None


def build(node, env):
    """One layer_norm.glsl Dispatch: one invocation per pixel, or a workgroup of lanes per pixel
    where the pixels are few (lanes_per_pixel)."""
    (x, gamma, beta), out = node.inputs, node.outputs[0]
    s4 = bhwc(x.shape)
    params = {"size": s4.as_ivec4(), "channels": s4.c, "epsilon": float(node.options[EPSILON]),
              "in_offset": env.arena(x), "out_offset": env.arena(out),
              "gamma_offset": env.constant(pack_bias(gamma.data, s4.c)),
              "beta_offset": env.constant(pack_bias(beta.data, s4.c))}
    pixels = s4.w * s4.h * s4.b
    lanes = lanes_per_pixel(pixels, s4.slices)
    defines = {**env.output_stage(node), "CENTER": int(node.options.get(CENTER, True)), "LANES": lanes}
    reads, _ = epilogue.apply(node, env, out, defines, params, (x,))
    if lanes > 1:
        return [Dispatch("layer_norm", (lanes, pixels, 1), defines, params, reads=reads, writes=(out,),
                         workgroup=(lanes, 1, 1))]
    return [Dispatch("layer_norm", (s4.w, s4.h, s4.b), defines, params, reads=reads, writes=(out,))]


SUPPORT = {OP: support}
BUILD = {OP: build}
EPILOGUE = {OP: None}
FACTS = {OP: OpFacts(arity=((3,), (), 1), fused_activation=True)}
HIGH_RANK = {OP: None}  # the last axis stays the channels of every view
