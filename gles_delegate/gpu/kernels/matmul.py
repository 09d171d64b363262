"""BATCH_MATMUL (float32, ranks 2 to 5, adj_x / adj_y, broadcast batch dimensions, each operand
computed at run time or constant): kernels_glsl/batch_matmul.glsl, one output vec4 (4 columns of
one row) per invocation, specialized by the adjoints and by which operands are constants.

A [..., R, C] operand of rank r lives in its BHWC view (gpu/phwc4.py): C is the channels, R the
W axis (rank >= 3) or the B axis (rank 2), the last batch dimension H and the others B (rank 5
merges two there). The kernel addresses every operand and the output through four strides in
vec4 elements, (outer batch, inner batch, row, slice): the inner batch is the last batch
dimension, the outer one the others flattened, each stride 0 where the operand broadcasts, so no
layout is copied first. An operand that broadcasts along some of the outer dims but not all
(rank 5: [2, 1, ...] against [2, 3, ...]) has no such stride and is refused."""
import numpy as np

from ...ops import matmul as reference
from ...registry import BINARY, OpFacts
from . import epilogue
from math import prod

from ..phwc4 import BHWC_AXES, bhwc, to_phwc4
from .base import Dispatch


def batch_dims(shape):
    """The (outer, inner) batch sizes of a [..., R, C] shape: its batch dimensions but the last
    flattened, and the last (1 where it has none)."""
    batch = tuple(shape[:-2])
    return prod(batch[:-1]), (batch[-1] if batch else 1)


def matrix_strides(shape, out_shape):
    """(outer batch, inner batch, row, slice) strides in vec4 elements of a [..., R, C] tensor of
    `shape` in PHWC4, its batch dimensions aligned right on the output's (out_shape) and 0 where
    it broadcasts (a dimension of 1, or none; its outer ones all, see outer_broadcast_reason).
    Its outer batch dimensions lie on B of its view, the inner one on H (rank >= 3)."""
    s4 = bhwc(shape)
    plane = s4.h * s4.w
    axis_strides = {0: s4.slices * plane, 1: s4.w, 2: 1}  # BHWC axis b, h, w -> elements
    axes = BHWC_AXES[len(shape)]
    (outer, inner), (out_outer, out_inner) = batch_dims(shape), batch_dims(out_shape)
    return (axis_strides[0] if outer == out_outer > 1 else 0, axis_strides[1] if inner == out_inner > 1 else 0,
            axis_strides[axes[-2]], plane)


def outer_broadcast_reason(operand, out_shape):
    """Why an operand's outer batch dimensions (all but the last) neither match the output's nor
    broadcast along every one of them (one stride each way), or None."""
    outer, out_outer = batch_dims(operand.shape)[0], batch_dims(out_shape)[0]
    if outer in (1, out_outer):
        return None
    return (f"operand {list(operand.shape)} broadcasts along some but not all of the batch dimensions "
            f"{list(out_shape[:-3])} that the output's view merges")


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
    return outer_broadcast_reason(lhs, expected) or outer_broadcast_reason(rhs, expected)


SUPPORT = {"BATCH_MATMUL": supports}
BUILD = {"BATCH_MATMUL": build}
EPILOGUE = {"BATCH_MATMUL": None}
HIGH_RANK = {"BATCH_MATMUL": None}  # rank 5 (TFLite's limit): outer_broadcast_reason
FACTS = {"BATCH_MATMUL": OpFacts(arity=BINARY)}
