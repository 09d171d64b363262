"""BATCH_MATMUL (float32, ranks 2 to 4, adj_x / adj_y, broadcast batch dimensions, each operand
computed at run time or constant): kernels_glsl/batch_matmul.glsl, one output vec4 (4 columns of
one row) per invocation, specialized by the adjoints and by which operands are constants.

A [..., R, C] operand of rank r lives in its BHWC view (gpu/phwc4.py): C is the channels, R the
W axis (rank 3, 4) or the B axis (rank 2), the batch dimensions H and B. The kernel addresses
every operand and the output through four strides in vec4 elements, (outer batch, inner batch,
row, slice), the batch strides 0 where the operand broadcasts, so no layout is copied first."""
import numpy as np

from ...ops import matmul as reference
from ...registry import BINARY, OpFacts
from . import epilogue
from ..phwc4 import BHWC_AXES, bhwc, to_phwc4
from .base import Dispatch

BATCH_SLOTS = 2  # output batch dimensions the kernel indexes (outer, inner): ranks up to 4


def batch_dims(out_shape):
    """The output's (outer, inner) batch dimensions: its shape[:-2] right-aligned in two slots."""
    dims = (1,) * BATCH_SLOTS + tuple(out_shape[:-2])
    return dims[-BATCH_SLOTS:]


def matrix_strides(shape, out_shape):
    """(outer batch, inner batch, row, slice) strides in vec4 elements of a [..., R, C] tensor of
    `shape` in PHWC4, its batch dimensions aligned right on the output's (out_shape) and 0 where
    it broadcasts (a dimension of 1, or none)."""
    s4 = bhwc(shape)
    plane = s4.h * s4.w
    axis_strides = {0: s4.slices * plane, 1: s4.w, 2: 1}  # BHWC axis b, h, w -> elements
    dim_strides = [axis_strides[axis] for axis in BHWC_AXES[len(shape)][:-1]]
    batch = [0] * BATCH_SLOTS
    out_batch = batch_dims(out_shape)
    for i in range(1, len(shape) - 1):  # batch dimension -i of both (right-aligned)
        if shape[-2 - i] == out_batch[-i] > 1:
            batch[-i] = dim_strides[-1 - i]
    return (*batch, dim_strides[-1], plane)


def _operand(env, tensor):
    """(offset: an arena or constant reference, whether it is a constant) of one operand."""
    if tensor.is_const:
        return env.constant(to_phwc4(np.asarray(tensor.data, np.float32))), True
    return env.arena(tensor), False


def build(node, env):
    """One batch_matmul.glsl Dispatch over the output [..., M, N]: a grid of (N slices, M rows,
    batches) invocations."""
    lhs, rhs = node.inputs
    out = node.outputs[0]
    adj_x, adj_y = reference.adjoints(node)
    outer, inner = batch_dims(out.shape)
    rows, cols = out.shape[-2:]
    lhs_offset, lhs_const = _operand(env, lhs)
    rhs_offset, rhs_const = _operand(env, rhs)
    defines = {"ADJ_X": int(adj_x), "ADJ_Y": int(adj_y), "LHS_CONST": int(lhs_const), "RHS_CONST": int(rhs_const)}
    params = {"lhs_strides": matrix_strides(lhs.shape, out.shape), "rhs_strides": matrix_strides(rhs.shape, out.shape),
              "out_strides": matrix_strides(out.shape, out.shape), "out_size": bhwc(out.shape).as_ivec4(),
              "depth": lhs.shape[-2] if adj_x else lhs.shape[-1], "cols": cols, "batch_inner": inner,
              "lhs_offset": lhs_offset, "rhs_offset": rhs_offset, "out_offset": env.arena(out)}
    runtime = tuple(t for t in (lhs, rhs) if not t.is_const)
    reads, inplace = epilogue.apply(node, env, out, defines, params, runtime)
    return [Dispatch("batch_matmul", (-(-cols // 4), rows, outer * inner), defines, params, reads=reads,
                     writes=(out,), inplace=inplace)]


def supports(node):
    """The reference's checks (types, ranks, shapes), then float32 and an output of the shape the
    op computes (the kernel indexes the output by it); both operands constant is a node to fold."""
    reason = reference.SUPPORT["BATCH_MATMUL"](node)
    if reason:
        return reason
    lhs, rhs = node.inputs
    if lhs.dtype != np.float32 or rhs.dtype != np.float32:
        return f"operands {lhs.dtype} x {rhs.dtype}: the GPU kernel runs float32"
    if lhs.is_const and rhs.is_const:
        return "both operands are constant (fold the node first)"
    expected = reference.OUTPUT_SHAPES["BATCH_MATMUL"](node, [tuple(lhs.shape), tuple(rhs.shape)], None)[0]
    if tuple(node.outputs[0].shape) != expected:
        return f"output tensor {node.outputs[0].index} has shape {list(node.outputs[0].shape)}, the op computes " \
               f"{list(expected)}"
    return None


SUPPORT = {"BATCH_MATMUL": supports}
BUILD = {"BATCH_MATMUL": build}
EPILOGUE = {"BATCH_MATMUL": None}
FACTS = {"BATCH_MATMUL": OpFacts(arity=BINARY)}
