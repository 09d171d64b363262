"""SOFTMAX and LOG_SOFTMAX over the last axis (the channels of the BHWC view, at any rank):
kernels_glsl/softmax.glsl. A pixel with many channel slices (e.g. [1, 1001] logits) is spread over
a workgroup; otherwise one invocation handles one pixel. The template also runs L2_NORMALIZATION
(normalization.py), through row_dispatch."""
from ...ops import softmax as reference
from ...registry import UNARY, OpFacts
from ..phwc4 import bhwc
from .base import Dispatch

LOG = {"SOFTMAX": 0, "LOG_SOFTMAX": 1}
# The template's OP: these ops and L2_NORMALIZATION (normalization.py).
TEMPLATE_CODES = {**LOG, "L2_NORMALIZATION": 2}
# A workgroup handles one pixel when it has at least this many slices (16 slices = 64 channels)
# and there are few enough pixels that one invocation each would not fill the GPU anyway.
PARALLEL_MIN_SLICES = 16
PARALLEL_MAX_PIXELS = 8192
# Invocations (x, y) sharing one pixel in the parallel variant: one workgroup (the template stays
# correct for any other, the workgroup clamped to small devices included).
PARALLEL_LANES = (16, 8)


def shape_reason(node):
    """Why the output of a row op (one of x's shape) has another shape, or None."""
    x, out = node.inputs[0], node.outputs[0]
    if tuple(out.shape) != tuple(x.shape):
        return f"output shape {list(out.shape)} differs from input {list(x.shape)}"
    return None


def supports(node):
    """The reference kernel's checks (arity, dtypes, rank >= 1) and an output of the input's shape."""
    return reference.SUPPORT[node.op](node) or shape_reason(node)


def row_dispatch(node, env, params):
    """One softmax.glsl Dispatch of node's op (a key of TEMPLATE_CODES) over the last axis of its
    input: a workgroup per pixel when it has many channel slices (PARALLEL), else one invocation
    per pixel. params: the op's own (beta, epsilon)."""
    x, out = node.inputs[0], node.outputs[0]
    s4 = bhwc(x.shape)
    pixels = s4.b * s4.h * s4.w
    parallel = s4.slices >= PARALLEL_MIN_SLICES and pixels <= PARALLEL_MAX_PIXELS
    params = {"size": s4.as_ivec4(), "channels": s4.c, "in_offset": env.arena(x), "out_offset": env.arena(out),
              **params}
    grid = PARALLEL_LANES + (pixels,) if parallel else (s4.w, s4.h, s4.b)
    return Dispatch("softmax", grid, {"OP": TEMPLATE_CODES[node.op], "PARALLEL": int(parallel)}, params,
                    reads=(x,), writes=(out,), workgroup=PARALLEL_LANES + (1,) if parallel else None)


def build(node, env):
    """The softmax.glsl Dispatch of a SOFTMAX (its beta) or a LOG_SOFTMAX (beta 1)."""
    beta = float(node.options.get("beta", 0.0)) if node.op == "SOFTMAX" else 1.0
    return [row_dispatch(node, env, {"beta": beta})]


SUPPORT = {op: supports for op in LOG}
BUILD = {op: build for op in LOG}
FACTS = {op: OpFacts(arity=UNARY) for op in LOG}
HIGH_RANK = {op: None for op in LOG}  # the last axis stays the channels of every view
