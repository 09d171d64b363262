"""L2_NORMALIZATION over the last axis (the channels of the BHWC view, at every rank the
reference takes, 1 to phwc4.MAX_RANK): x / max(sqrt(sum of x^2), 1e-6) in one dispatch of
kernels_glsl/softmax.glsl (OP 2), whose variants (one invocation a pixel, or a workgroup a pixel
with many channel slices: [1, 512] embeddings) and highp sums softmax.py's row ops share. It
applies an epilogue (rules fuse_*: an activation, a scale, a quantized model's fake-quant step).

A quantized L2_NORMALIZATION runs through its float view (quant.py): the float kernel, then the
fake-quant step to TFLite's fixed output grid (scale 1/128: 128 x the normalized value, rounded
and clamped to [-128, 127], so a lone nonzero channel gives 127/128 as TFLite's integer kernel
does). The view divides by max(norm, 1e-6) where TFLite's integer kernel has no epsilon: the two
differ only where one input step is below 1e-6 (input scale < 1e-6).
"""
from . import epilogue, softmax
from ...ops import normalization as reference
from ...registry import UNARY, OpFacts

OP = "L2_NORMALIZATION"


def support(node):
    """The reference kernel's checks (arity, float32 here, rank >= 1, no fused activation, as
    TFLite requires) and an output of the input's shape."""
    return reference.SUPPORT[OP](node) or softmax.shape_reason(node)


def build(node, env):
    """One softmax.glsl Dispatch (OP 2) with the node's epilogue."""
    dispatch = softmax.row_dispatch(node, env, {"epsilon": float(reference.L2_EPSILON)})
    dispatch.reads, _ = epilogue.apply(node, env, node.outputs[0], dispatch.defines, dispatch.params, dispatch.reads)
    return [dispatch]


SUPPORT = {OP: support}
BUILD = {OP: build}
EPILOGUE = {OP: None}
FACTS = {OP: OpFacts(arity=UNARY)}  # no fused activation: TFLite requires NONE (epilogue steps instead)
HIGH_RANK = {OP: None}  # the last axis stays the channels of every view
