"""Broadcasting binary ops (ADD, SUB, MUL, DIV, MAXIMUM, MINIMUM, SQUARED_DIFFERENCE, POW):
kernels_glsl/binary.glsl, specialized by op, operand kinds and fused activation."""
import numpy as np

from ..layout import bhwc, to_phwc4
from .base import Dispatch

OP_CODES = {"ADD": 0, "SUB": 1, "MUL": 2, "DIV": 3, "MAXIMUM": 4, "MINIMUM": 5,
            "SQUARED_DIFFERENCE": 6, "POW": 7}


def aligned_shape4(tensor, rank):
    """BHWC view of an operand after numpy's right-aligned broadcasting to `rank` dimensions."""
    return bhwc((1,) * (rank - len(tensor.shape)) + tuple(tensor.shape))


def supports(node):
    out = node.outputs[0]
    a, b = node.inputs[:2]
    for operand in (a, b):
        s4, o4 = aligned_shape4(operand, len(out.shape)), bhwc(out.shape)
        dims = zip((s4.b, s4.h, s4.w, s4.c), (o4.b, o4.h, o4.w, o4.c))
        if any(d not in (1, o) for d, o in dims):
            return f"operand shape {list(operand.shape)} does not broadcast to {list(out.shape)}"
        # A runtime operand is stored in its own PHWC4 layout; broadcasting reads it through the
        # right-aligned view, which is a different element order when the two views differ
        # (e.g. [N, C] is stored as Nx1x1xC but broadcasts against rank 3 as 1x1xNxC).
        if not operand.is_const and s4 != bhwc(operand.shape):
            return f"runtime operand {list(operand.shape)} broadcast against rank {len(out.shape)} changes its layout"
    return None


def build(node, env):
    out = node.outputs[0]
    rank, out4 = len(out.shape), bhwc(out.shape)
    defines = {"OP": OP_CODES[node.op], "ACTIVATION": env.activation(node)}
    params = {"out_size": out4.as_ivec4(), "out_channels": out4.c, "out_offset": env.arena(out)}
    reads = []
    for name, operand in zip("ab", node.inputs[:2]):
        s4 = aligned_shape4(operand, rank)
        scalar_c = s4.c == 1 and out4.c > 1
        params[f"{name}_size"] = s4.as_ivec4()
        defines[f"{name.upper()}_SCALAR_C"] = int(scalar_c)
        defines[f"{name.upper()}_CONST"] = int(operand.is_const)
        if operand.is_const:
            data = np.asarray(operand.data, np.float32).reshape(s4.b, s4.h, s4.w, s4.c)
            params[f"{name}_offset"] = env.constant(to_phwc4(data))
        else:
            params[f"{name}_offset"] = env.arena(operand)
            reads.append(operand)
    return [Dispatch("binary", (out4.w, out4.h, out4.slices * out4.b), defines, params,
                     reads=tuple(reads), writes=(out,))]


SUPPORT = {op: supports for op in OP_CODES}
BUILD = {op: build for op in OP_CODES}
