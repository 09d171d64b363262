"""Integer arithmetic and comparisons of int32 tensors (kernels_glsl/integer.glsl): ADD, SUB, MUL,
DIV, FLOOR_DIV, FLOOR_MOD, MAXIMUM, MINIMUM, SQUARED_DIFFERENCE, the comparisons (a bool output,
0.0 / 1.0), ABS and NEG, broadcasting as the float kernels do (epilogue.operand_reason). The
operands are read as their bits (base.py: the int view) and computed in 32-bit integer arithmetic,
so every int32 value is exact and overflow wraps, as TFLite's kernels compute it on the CPU (C++
int32, two's complement). ADD / SUB / MUL / DIV clamp to their fused activation's integer range.
A zero divisor fails TFLite's invoke; the shader writes 0 there and flags a status word
(KernelEnv.status_word), which fails ours with the reference's words.

SUM, REDUCE_PROD, REDUCE_MAX and REDUCE_MIN of int32 tensors (kernels_glsl/int_reduce.glsl, a
count of a mask's ones, say: torch's (x > 0).sum(), tf.reduce_sum of a cast mask): each output
element combines its elements one invocation, exact and wrapping as TFLite's.

These are the second candidates of their ops (kernels.ORDER), after the float kernels, which
refuse runtime int32 operands; float_divmod.py's before FLOOR_DIV and FLOOR_MOD."""
import numpy as np

from ... import ops
from ...ops.checks import node_error
from ...ops.common import activation_bounds, fused_activation
from ...registry import BINARY, OpFacts
from ..phwc4 import bhwc
from . import epilogue
from . import reduce as reduce_kernel
from .base import Dispatch

# Op codes of integer.glsl (INT_OP); binary ops below 32, comparisons from 16, unary from 32.
BINARY_CODES = {"ADD": 0, "SUB": 1, "MUL": 2, "DIV": 3, "FLOOR_DIV": 4, "FLOOR_MOD": 5, "MAXIMUM": 6,
                "MINIMUM": 7, "SQUARED_DIFFERENCE": 8, "GREATER": 16, "GREATER_EQUAL": 17, "LESS": 18,
                "LESS_EQUAL": 19, "EQUAL": 20, "NOT_EQUAL": 21}
UNARY_CODES = {"ABS": 32, "NEG": 33}
CODES = {**BINARY_CODES, **UNARY_CODES}
# What a zero divisor fails the invoke with (ops/binary.py's words).
DIVIDES = {"DIV": "integer division by zero", "FLOOR_DIV": "division by zero", "FLOOR_MOD": "integer division by zero"}
ACTIVATED = ("ADD", "SUB", "MUL", "DIV")  # ops/binary.py ARITHMETIC: the ones with a fused activation


def supports(node):
    """The reference's checks; int32 operands; each operand readable at every output position."""
    reason = ops.SUPPORT[node.op](node)
    if reason:
        return reason
    operands = node.inputs[:1 if node.op in UNARY_CODES else 2]
    if any(t.dtype != np.int32 for t in operands):
        return f"the integer kernel takes int32 operands, got {operands[0].dtype}"
    return epilogue.operands_reason(operands, node.outputs[0], moves_int=True)


def build(node, env):
    """One integer.glsl dispatch over the output."""
    out = node.outputs[0]
    out4 = bhwc(out.shape)
    operands = node.inputs[:1 if node.op in UNARY_CODES else 2]
    defines, params = epilogue.sources(operands, "ab", out, env)
    defines.update(INT_OP=CODES[node.op], EP_COUNT=0)  # EP_COUNT: epilogue.glsl's ep_fetch, no steps
    params.update(out_size=out4.as_ivec4(), out_channels=out4.c, out_offset=env.arena(out))
    if node.op in ACTIVATED:
        low, high = activation_bounds(fused_activation(node), np.int32)
        params.update(clamp_low=int(low), clamp_high=int(high))
        defines["INT_CLAMP"] = 1
    if node.op in DIVIDES:
        params["status_offset"] = env.status_word(str(node_error(node, DIVIDES[node.op])))
        defines["IO_STATUS"] = 1
    runtime = tuple(dict.fromkeys(t for t in operands if not t.is_const))
    return [Dispatch("integer", (out4.w, out4.h, out4.slices * out4.b), defines, params, reads=runtime,
                     writes=(out,), inplace=tuple(t for t in runtime if epilogue.same_layout(t, out)))]


# -- reductions -------------------------------------------------------------------------------
REDUCTIONS = {"SUM": 0, "REDUCE_PROD": 1, "REDUCE_MAX": 2, "REDUCE_MIN": 3}  # int_reduce.glsl's INT_REDUCE
# An output element loops over all it combines: a driver may reset a GPU kept busy by more.
MAX_REDUCED = 1 << 16


def reduce_supports(node):
    """The reference's checks; an int32 input of rank <= 4; constant axes in range; at most
    MAX_REDUCED elements an output."""
    reason = ops.SUPPORT[node.op](node)
    if reason:
        return reason
    x = node.inputs[0]
    if x.dtype != np.int32:
        return f"the integer reduction takes int32, got {x.dtype}"
    if len(x.shape) > 4:  # kernels.unsupported_reason lets rank 5 through for reduce.py's float kernel
        return f"input tensor {x.index} has rank {len(x.shape)}: the integer reduction takes ranks <= 4"
    axes = reduce_kernel.reduced_axes(node)
    if isinstance(axes, str):
        return axes
    count = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    if count > MAX_REDUCED:
        return f"{count} elements an output (each invocation combines them: at most {MAX_REDUCED})"
    return None


def reduce_build(node, env):
    """One int_reduce.glsl dispatch over the output."""
    x, out = node.inputs[0], node.outputs[0]
    axes = reduce_kernel.reduced_axes(node)
    dims = (1,) * (4 - len(x.shape)) + tuple(int(d) for d in x.shape)
    reduced = {a + 4 - len(x.shape) for a in axes}
    x4, out4 = bhwc(x.shape), bhwc(out.shape)
    params = {"out_size": out4.as_ivec4(), "out_channels": out4.c, "out_offset": env.arena(out),
              "in_size": x4.as_ivec4(), "in_channels": x4.c, "in_offset": env.arena(x), "in_dims": dims,
              "kept_dims": tuple(1 if a in reduced else d for a, d in enumerate(dims)),
              "reduced_dims": tuple(d if a in reduced else 1 for a, d in enumerate(dims)),
              "count": int(np.prod([dims[a] for a in reduced], dtype=np.int64))}
    return [Dispatch("int_reduce", (out4.w, out4.h, out4.slices * out4.b), {"INT_REDUCE": REDUCTIONS[node.op]},
                     params, reads=(x,), writes=(out,))]


SUPPORT = {**{op: supports for op in CODES}, **{op: reduce_supports for op in REDUCTIONS}}
BUILD = {**{op: build for op in CODES}, **{op: reduce_build for op in REDUCTIONS}}
FLOAT_VIEW = {op: None for op in (*CODES, *REDUCTIONS)}  # int32 operands, as their bits
HIGH_RANK = {op: None for op in CODES}  # a broadcast across merged dims: epilogue.operand_reason
# The float kernels state the facts of the ops both run (one entry per op).
FACTS = {"FLOOR_DIV": OpFacts(arity=BINARY), "FLOOR_MOD": OpFacts(arity=BINARY)}
