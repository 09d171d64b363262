"""Elementwise unary ops (activations and math functions): kernels_glsl/unary.glsl, one template
specialized by an op code. PRELU's slope broadcasts over the input like a binary operand."""
import numpy as np

from ...ops import elementwise as reference
from ..layout import bhwc, to_phwc4
from .base import Dispatch
from .binary import aligned_shape4

OP_CODES = {"RELU": 0, "RELU6": 1, "RELU_N1_TO_1": 2, "RELU_0_TO_1": 3, "LEAKY_RELU": 4, "PRELU": 4,
            "LOGISTIC": 5, "TANH": 6, "EXP": 7, "LOG": 8, "SQRT": 9, "RSQRT": 10, "ABS": 11, "NEG": 12,
            "HARD_SWISH": 13, "ELU": 14, "GELU": 15}
GELU_EXACT = 16
ALPHA_PARAM, ALPHA_CONST, ALPHA_ARENA = 0, 1, 2


def supports(node):
    """The reference kernel's checks (arity, dtypes; PRELU's alpha broadcasts to the input, so
    its BHWC view does too), and an output of the input's shape."""
    reason = reference.SUPPORT[node.op](node)
    if reason:
        return reason
    if node.inputs[0].shape != node.outputs[0].shape:
        return f"output shape {list(node.outputs[0].shape)} differs from input {list(node.inputs[0].shape)}"
    return None


def _op_code(node):
    if node.op == "GELU" and not node.options.get("approximate", False):
        return GELU_EXACT
    return OP_CODES[node.op]


def _alpha(node, env, params):
    """Slope of LEAKY_RELU (a float param) or PRELU (a broadcast tensor); returns (defines, reads)."""
    if node.op == "LEAKY_RELU":
        params["alpha"] = float(node.options.get("alpha", 0.0))
        return {"ALPHA_SOURCE": ALPHA_PARAM}, ()
    x, alpha = node.inputs[:2]
    s4 = aligned_shape4(alpha, len(x.shape))
    params["alpha_size"] = s4.as_ivec4()
    defines = {"ALPHA_SCALAR_C": int(s4.c == 1 and bhwc(x.shape).c > 1)}
    if alpha.is_const:
        data = np.asarray(alpha.data, np.float32).reshape(s4.b, s4.h, s4.w, s4.c)
        params["alpha_offset"] = env.constant(to_phwc4(data))
        return {**defines, "ALPHA_SOURCE": ALPHA_CONST}, ()
    params["alpha_offset"] = env.arena(alpha)
    return {**defines, "ALPHA_SOURCE": ALPHA_ARENA}, (alpha,)


def build(node, env):
    x, out = node.inputs[0], node.outputs[0]
    s4 = bhwc(x.shape)
    params = {"size": s4.as_ivec4(), "channels": s4.c, "in_offset": env.arena(x), "out_offset": env.arena(out)}
    defines, reads = {"OP": _op_code(node)}, ()
    if node.op in ("LEAKY_RELU", "PRELU"):
        more, reads = _alpha(node, env, params)
        defines.update(more)
    return [Dispatch("unary", (s4.w, s4.h, s4.slices * s4.b), defines, params,
                     reads=(x,) + reads, writes=(out,))]


SUPPORT = {op: supports for op in OP_CODES}
BUILD = {op: build for op in OP_CODES}
