"""Normalizations over the channels: L2_NORMALIZATION at any rank, LOCAL_RESPONSE_NORMALIZATION.

L2_NORMALIZATION over the last axis (the channels of the BHWC view, at every rank the
reference takes, 1 to phwc4.MAX_RANK): x / max(sqrt(sum of x^2), 1e-6) in one dispatch of
kernels_glsl/softmax.glsl (OP 2), whose variants (one invocation a pixel, or a workgroup a pixel
with many channel slices: [1, 512] embeddings) and highp sums softmax.py's row ops share. It
applies an epilogue (rules fuse_*: an activation, a scale, a quantized model's fake-quant step).

A quantized L2_NORMALIZATION runs through its float view (quant.py): the float kernel, then the
fake-quant step to TFLite's fixed output grid (scale 1/128: 128 x the normalized value, rounded
and clamped to [-128, 127], so a lone nonzero channel gives 127/128 as TFLite's integer kernel
does). The view divides by max(norm, 1e-6) where TFLite's integer kernel has no epsilon: the two
differ only where one input step is below 1e-6 (input scale < 1e-6).

LOCAL_RESPONSE_NORMALIZATION (4-D float32, as TFLite takes it): one dispatch of kernels_glsl/lrn.glsl,
each invocation one vec4 of the output, summing its window's squares from the neighbouring slices
(old ImageNet nets, Inception v1 and AlexNet, normalize so after their first convolutions).
"""
from . import epilogue, softmax
from ...ops import normalization as reference
from ...registry import UNARY, OpFacts
from ..phwc4 import bhwc
from .base import Dispatch

OP = "L2_NORMALIZATION"
LRN = "LOCAL_RESPONSE_NORMALIZATION"


def support(node):
    """The reference kernel's checks (arity, float32 here, rank >= 1, no fused activation, as
    TFLite requires) and an output of the input's shape."""
    return reference.SUPPORT[OP](node) or softmax.shape_reason(node)


def build(node, env):
    """One softmax.glsl Dispatch (OP 2) with the node's epilogue."""
    dispatch = softmax.row_dispatch(node, env, {"epsilon": float(reference.L2_EPSILON)})
    dispatch.reads, _ = epilogue.apply(node, env, node.outputs[0], dispatch.defines, dispatch.params, dispatch.reads)
    return [dispatch]


def lrn_support(node):
    """The reference kernel's checks (arity, 4-D float32, radius >= 0) and an output of the input's shape."""
    return reference.SUPPORT[LRN](node) or softmax.shape_reason(node)


def lrn_build(node, env):
    """One lrn.glsl Dispatch over the output's vec4s; the radius clamped to the channels (a wider
    window sums the whole axis anyway, and the template's channel bounds stay within int32)."""
    x, out = node.inputs[0], node.outputs[0]
    s4 = bhwc(x.shape)
    radius, bias, alpha, beta = reference.lrn_options(node)
    params = {"size": s4.as_ivec4(), "channels": s4.c, "radius": min(radius, s4.c), "bias": float(bias),
              "alpha": float(alpha), "beta": float(beta), "in_offset": env.arena(x), "out_offset": env.arena(out)}
    return [Dispatch("lrn", (s4.w, s4.h, s4.slices * s4.b), {}, params, reads=(x,), writes=(out,))]


SUPPORT = {OP: support, LRN: lrn_support}
BUILD = {OP: build, LRN: lrn_build}
EPILOGUE = {OP: None}
# No fused activation: TFLite requires NONE for L2 (epilogue steps instead); LRN's options have none.
FACTS = {OP: OpFacts(arity=UNARY), LRN: OpFacts(arity=UNARY)}
HIGH_RANK = {OP: None}  # the last axis stays the channels of every view
