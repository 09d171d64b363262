"""BATCH_MATMUL (float32, ranks 2 to 5, adj_x / adj_y, broadcast batch dimensions, each operand
computed at run time or constant): kernels_glsl/batch_matmul.glsl, one output vec4 (4 columns of
one row) per invocation, specialized by the adjoints and by which operands are constants.

A [..., R, C] operand of rank r lives in its BHWC view (gpu/phwc4.py): C is the channels, R the
W axis (rank >= 3) or the B axis (rank 2), the last batch dimension H and the others B (rank 5
merges two there). The kernel addresses every operand and the output through four strides in
vec4 elements, (outer batch, inner batch, row, slice): the inner batch is the last batch
dimension, the outer one the others flattened, each stride 0 where the operand broadcasts, so no
layout is copied first. An operand that broadcasts along some of the outer dims but not all
(rank 5: [2, 1, ...] against [2, 3, ...]) has no such stride and is refused.

The same four strides let an operand be a view of another tensor and the output be written
into one (options[VIEWS], rule matmul_through_layout): an attention block's head split
([1, T, H * D] -> [1, H, T, D], the transposed key too) and head merge are then no copies.
Only views whose vec4s are whole vec4s of the stored tensor qualify (fit_view)."""
from dataclasses import dataclass

import numpy as np

from ...ops import matmul as reference
from ...registry import BINARY, OpFacts
from . import epilogue
from math import prod

from ..phwc4 import BHWC_AXES, bhwc, to_phwc4
from .base import Dispatch

# options[VIEWS]: {"lhs" | "rhs": View, "out": View} (rule matmul_through_layout): the node reads
# that operand from, or writes its output into, `View.tensor` through strides; its inputs and
# outputs are then those tensors, and `View.shape` the operand's or output's own shape.
VIEWS = "matmul_views"


@dataclass(frozen=True)
class View:
    """A matrix operand or output of `shape` ([..., R, C]) held in `tensor` (PHWC4): its element
    (outer batch o, inner batch i, row r, slice s) is vec4 element base + (o, i, r, s) . strides
    of `tensor`, lanes in order; `transposed`: the stored matrix is the operand's transpose (its
    adjoint flag flips)."""
    tensor: object
    shape: tuple
    base: int
    strides: tuple
    transposed: bool = False


def vec4_elements(shape, flat_index):
    """(vec4 element, lane) arrays: where the row-major index `flat_index` (an int array) of a
    tensor of `shape` lives in its PHWC4 layout."""
    s4 = bhwc(shape)
    c, rest = flat_index % s4.c, flat_index // s4.c
    w, rest = rest % s4.w, rest // s4.w
    h, b = rest % s4.h, rest // s4.h
    return ((b * s4.slices + c // 4) * s4.h + h) * s4.w + w, c % 4


def fit_view(stored_shape, positions):
    """(base, (outer, inner, row, slice) strides) of a stored matrix whose element [..., r, c]
    is the row-major index positions[..., r, c] of a tensor of `stored_shape`, or None: its
    columns must come in whole, lane-aligned vec4s of that tensor (C a multiple of 4), laid
    out with one stride per axis."""
    cols = positions.shape[-1]
    if cols % 4 or positions.size == 0:
        return None
    outer, inner = batch_dims(positions.shape)
    element, lane = vec4_elements(stored_shape, positions.reshape(outer, inner, positions.shape[-2], cols))
    if not np.array_equal(lane, np.broadcast_to(np.arange(cols) % 4, lane.shape)):
        return None
    groups = element.reshape(*element.shape[:-1], cols // 4, 4)
    if not (groups == groups[..., :1]).all():
        return None
    slices = groups[..., 0]
    base = int(slices.flat[0])
    strides = tuple(int(np.take(slices, 1, axis=k).flat[0]) - base if slices.shape[k] > 1 else 0 for k in range(4))
    grid = np.indices(slices.shape)
    if not np.array_equal(slices, base + sum(g * s for g, s in zip(grid, strides))):
        return None
    return base, strides


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


def shapes(node):
    """The (lhs, rhs, output) shapes of BATCH_MATMUL `node`, those of its views where it has them."""
    views = node.options.get(VIEWS, {})
    tensors = (*node.inputs[:2], node.outputs[0])
    return tuple(tuple(views[k].shape) if k in views else tuple(t.shape) for k, t in zip(("lhs", "rhs", "out"), tensors))


def _addressing(env, views, key, tensor, shape, out_shape):
    """(offset, base, constant?, strides, transposed?) of an operand or the output (`key`)."""
    view = views.get(key)
    if view is not None:
        return env.arena(view.tensor), view.base, False, view.strides, view.transposed
    offset, const = _operand(env, tensor) if key != "out" else (env.arena(tensor), False)
    return offset, 0, const, matrix_strides(shape, out_shape), False


def build(node, env):
    """One batch_matmul.glsl Dispatch over the output [..., M, N]: a grid of (N slices, M rows,
    batches) invocations."""
    lhs, rhs = node.inputs
    out = node.outputs[0]
    lhs_shape, rhs_shape, out_shape = shapes(node)
    views = node.options.get(VIEWS, {})
    adj_x, adj_y = reference.adjoints(node)
    outer, inner = batch_dims(out_shape)
    rows, cols = out_shape[-2:]
    lhs_offset, lhs_base, lhs_const, lhs_strides, lhs_flip = _addressing(env, views, "lhs", lhs, lhs_shape, out_shape)
    rhs_offset, rhs_base, rhs_const, rhs_strides, rhs_flip = _addressing(env, views, "rhs", rhs, rhs_shape, out_shape)
    out_offset, out_base, _, out_strides, _ = _addressing(env, views, "out", out, out_shape, out_shape)
    defines = {"ADJ_X": int(adj_x != lhs_flip), "ADJ_Y": int(adj_y != rhs_flip), "LHS_CONST": int(lhs_const),
               "RHS_CONST": int(rhs_const)}
    params = {"lhs_strides": lhs_strides, "rhs_strides": rhs_strides, "out_strides": out_strides,
              "out_size": bhwc(out.shape).as_ivec4(),
              "depth": lhs_shape[-2] if adj_x else lhs_shape[-1], "cols": cols, "batch_inner": inner,
              "lhs_offset": lhs_offset, "rhs_offset": rhs_offset, "out_offset": out_offset,
              "lhs_base": lhs_base, "rhs_base": rhs_base, "out_base": out_base}
    runtime = tuple(t for t in (lhs, rhs) if not t.is_const)
    reads, inplace = epilogue.apply(node, env, out, defines, params, runtime)
    return [Dispatch("batch_matmul", (-(-cols // 4), rows, outer * inner), defines, params, reads=reads,
                     writes=(out,), inplace=inplace)]


def supports(node):
    """The reference's checks (types, ranks, shapes), then float32 and an output of the shape the
    op computes (the kernel indexes the output by it); both operands constant is a node to fold."""
    if VIEWS in node.options:  # the rule that made the views checked the node first
        return None
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
