"""GATHER and EMBEDDING_LOOKUP, GATHER_ND and SCATTER_ND with runtime or constant indices
(kernels_glsl/gather.glsl); DYNAMIC_UPDATE_SLICE at runtime or constant start indices
(kernels_glsl/update_slice.glsl: a copy of the operand with the update in its box). SCATTER_ND
(TensorFlow's scatter_nd: a point cloud's pillars into a grid) sums the updates each output
element's index rows name, in index order as TFLite does, walking every row: index rows times
output elements. For GATHER this is the second candidate, after layout.py's, which takes the
constant indices that make a strided view of the input (kernels.ORDER); other constant ones (rows
of 2-D indices, batch_dims) come here. EMBEDDING_LOOKUP is a GATHER along axis
0 of its value (input 1) by its lookup (input 0); GATHER_ND picks, per row of its indices, the
slice of params at that row's leading coordinates (what litert-torch writes for torch.gather and
index_select). The indices are int32, read as their bits (base.py: the int view), so every index
is exact; float32, bool and int32 values are moved as they are stored. An out-of-range index
fails TFLite's invoke; the shader reads 0 for it and flags its status word
(KernelEnv.status_word), which fails ours with a ModelError naming the node, whether the indices
came from outside the partition or were computed inside it."""
import numpy as np

from ...errors import ModelError
from ...ops import gather as lookup_reference
from ...ops import layout as reference
from ...ops.checks import node_error
from ...registry import OpFacts
from ..phwc4 import bhwc
from .base import Dispatch

VALUE_DTYPES = (np.dtype(np.float32), np.dtype(np.bool_), np.dtype(np.int32))


def _operands(node):
    """(params, indices, axis, batch_dims) of a GATHER or an EMBEDDING_LOOKUP node (GATHER_ND:
    axis 0, the first of the dims an index row picks), axis and batch_dims as TFLite resolves them."""
    if node.op == "EMBEDDING_LOOKUP":
        return node.inputs[1], node.inputs[0], 0, 0
    if node.op == "GATHER_ND":
        return node.inputs[0], node.inputs[1], 0, 0
    params, indices = node.inputs[:2]
    return (params, indices, *reference.gather_dims(node, params.shape, indices.shape))


def supports(node):
    """The reference's checks; int32 indices, runtime or constant (a GATHER by constant indices
    is layout.py's first, where they make a strided view); float32, bool or int32 values of the
    output's dtype (a hybrid EMBEDDING_LOOKUP of 8-bit rows stays on the CPU); GATHER_ND rows of
    at most 4 dims. Any rank up to phwc4.MAX_RANK
    (HIGH_RANK): every tensor is read by its row-major index, which the BHWC view keeps."""
    checks = reference.SUPPORT if node.op == "GATHER" else lookup_reference.SUPPORT
    reason = checks[node.op](node)
    if reason:
        return reason
    try:
        params, indices, _, _ = _operands(node)
    except ModelError as error:  # axis or batch_dims out of range: the reference says so at invoke
        return str(error)
    if indices.dtype != np.int32:
        return "this kernel takes int32 indices"
    if node.op == "GATHER_ND" and len(indices.shape) == 0:
        return "GATHER_ND indices must have rank >= 1"
    if params.dtype not in VALUE_DTYPES or params.dtype != node.outputs[0].dtype:
        return f"{node.op} of {params.dtype} values into {node.outputs[0].dtype} (the GPU moves float32, bool, int32)"
    if len(params.shape) == 0:
        return "GATHER from a scalar"
    if node.op == "GATHER_ND" and indices.shape[-1] > 4:
        return f"GATHER_ND index rows of {indices.shape[-1]} dims (the kernel's nd_dims holds 4)"
    return None


def _index_error(node, params, axis):
    """The error an out-of-range index fails the invoke with (the reference's words; GATHER_ND's
    without the row, which the shader does not report)."""
    if node.op == "EMBEDDING_LOOKUP":
        return node_error(node, f"an embedding_lookup index is out of range for shape {list(params.shape)}")
    if node.op == "GATHER_ND":
        depth = node.inputs[1].shape[-1]
        return node_error(node, f"a gather_nd index is out of range for shape {list(params.shape[:depth])}")
    return reference.gather_index_error(node, params.shape[axis])


def _picked(node, params, indices, axis, batch_dims):
    """GATHER / EMBEDDING_LOOKUP: {outer_stride, axis_size, outer_per_batch, rows_per_batch};
    GATHER_ND: {depth, nd_dims}; and inner, the elements after the dims an index picks."""
    if node.op != "GATHER_ND":
        inner = int(np.prod(params.shape[axis + 1:], dtype=np.int64))
        rows = int(np.prod(indices.shape[batch_dims:], dtype=np.int64))  # index rows of one batch item
        return {"outer_stride": rows * inner, "axis_size": int(params.shape[axis]), "inner": inner,
                "outer_per_batch": int(np.prod(params.shape[batch_dims:axis], dtype=np.int64)),
                "rows_per_batch": rows}
    depth = int(indices.shape[-1])
    dims = [int(d) for d in params.shape[:depth]] + [1] * (4 - depth)
    return {"depth": depth, "nd_dims": tuple(dims), "inner": int(np.prod(params.shape[depth:], dtype=np.int64))}


def build(node, env):
    """One gather.glsl dispatch, one invocation per vec4 of the output."""
    params, indices, axis, batch_dims = _operands(node)
    out = node.outputs[0]
    p4, i4, o4 = bhwc(params.shape), bhwc(indices.shape), bhwc(out.shape)
    status = env.status_word(str(_index_error(node, params, axis)))
    values = {"out_size": o4.as_ivec4(), "out_channels": o4.c, "out_offset": env.arena(out),
              "in_size": p4.as_ivec4(), "in_channels": p4.c, "in_offset": env.source(params),
              "idx_size": i4.as_ivec4(), "idx_channels": i4.c, "idx_offset": env.source(indices),
              "status_offset": status, **_picked(node, params, indices, axis, batch_dims)}
    reads = tuple(t for t in (params, indices) if not t.is_const)
    defines = {"SOURCE_CONST": int(params.is_const), "IDX_CONST": int(indices.is_const),
               "ND": int(node.op == "GATHER_ND"), "SCATTER": 0, "IO_STATUS": 1}
    return [Dispatch("gather", (o4.w, o4.h, o4.slices * o4.b), defines, values, reads=reads, writes=(out,))]


# -- SCATTER_ND --------------------------------------------------------------------------------
def scatter_supports(node):
    """The reference's checks; int32 index rows of at most 4 dims, runtime or constant; float32
    updates (summed: highp, in index order); a constant shape."""
    reason = lookup_reference.SUPPORT["SCATTER_ND"](node)
    if reason:
        return reason
    indices, updates, shape = node.inputs
    if updates.dtype != np.float32:
        return f"SCATTER_ND of {updates.dtype} updates (the GPU sums float32)"
    if not shape.is_const:
        return "the shape (input 2) must be constant"
    if len(indices.shape) == 0 or indices.shape[-1] > 4:
        return f"SCATTER_ND index rows of shape {list(indices.shape)} (the kernel takes rows of 1 to 4 dims)"
    return None


def scatter_build(node, env):
    """One gather.glsl dispatch (SCATTER) over the output."""
    indices, updates, _ = node.inputs
    out = node.outputs[0]
    depth = int(indices.shape[-1])
    o4, u4, i4 = bhwc(out.shape), bhwc(updates.shape), bhwc(indices.shape)
    status = env.status_word(str(node_error(node, f"a scatter_nd index is out of range for shape "
                                                  f"{list(out.shape[:depth])}")))
    values = {"out_size": o4.as_ivec4(), "out_channels": o4.c, "out_offset": env.arena(out),
              "upd_size": u4.as_ivec4(), "upd_channels": u4.c, "upd_offset": env.source(updates),
              "idx_size": i4.as_ivec4(), "idx_channels": i4.c, "idx_offset": env.source(indices),
              "status_offset": status, "depth": depth, "rows": int(indices.size // depth),
              "nd_dims": tuple(int(d) for d in out.shape[:depth]) + (1,) * (4 - depth),
              "inner": int(np.prod(out.shape[depth:], dtype=np.int64))}
    defines = {"SCATTER": 1, "UPDATE_CONST": int(updates.is_const), "IDX_CONST": int(indices.is_const),
               "IO_STATUS": 1}
    reads = tuple(t for t in (indices, updates) if not t.is_const)
    return [Dispatch("gather", (o4.w, o4.h, o4.slices * o4.b), defines, values, reads=reads, writes=(out,))]


# -- DYNAMIC_UPDATE_SLICE ----------------------------------------------------------------------
def update_slice_supports(node):
    """The reference's checks; int32 start indices (runtime or constant); float32, bool or int32
    values; ranks <= 4."""
    reason = lookup_reference.SUPPORT["DYNAMIC_UPDATE_SLICE"](node)
    if reason:
        return reason
    operand, update, start = node.inputs
    if start.dtype != np.int32:
        return "the GPU's DYNAMIC_UPDATE_SLICE takes int32 start indices"
    if operand.dtype not in VALUE_DTYPES:
        return f"DYNAMIC_UPDATE_SLICE of {operand.dtype} (the GPU moves float32, bool, int32)"
    if len(operand.shape) > 4 or len(update.shape) != len(operand.shape) or \
            any(u > o for u, o in zip(update.shape, operand.shape)):
        return f"an update {list(update.shape)} of an operand {list(operand.shape)} (rank <= 4, the update inside)"
    return None


def _padded(shape):
    return (1,) * (4 - len(shape)) + tuple(int(d) for d in shape)


def update_slice_build(node, env):
    """One update_slice.glsl dispatch over the output (a copy of the operand, the update in place)."""
    operand, update, start = node.inputs
    out = node.outputs[0]
    o4, s4, u4, i4 = bhwc(out.shape), bhwc(operand.shape), bhwc(update.shape), bhwc(start.shape)
    values = {"out_size": o4.as_ivec4(), "out_channels": o4.c, "out_offset": env.arena(out),
              "in_size": s4.as_ivec4(), "in_channels": s4.c, "in_offset": env.source(operand),
              "upd_size": u4.as_ivec4(), "upd_channels": u4.c, "upd_offset": env.source(update),
              "idx_size": i4.as_ivec4(), "idx_channels": i4.c, "idx_offset": env.source(start),
              "dims": _padded(operand.shape), "upd_dims": _padded(update.shape), "lead": 4 - len(operand.shape)}
    defines = {"OPERAND_CONST": int(operand.is_const), "UPDATE_CONST": int(update.is_const),
               "IDX_CONST": int(start.is_const)}
    reads = tuple(t for t in node.inputs if not t.is_const)
    return [Dispatch("update_slice", (o4.w, o4.h, o4.slices * o4.b), defines, values, reads=reads, writes=(out,))]


# GATHER's FACTS and FLOAT_VIEW entry are layout.py's (one per op).
OPS = ("GATHER", "EMBEDDING_LOOKUP", "GATHER_ND")
SUPPORT = {**{op: supports for op in OPS}, "DYNAMIC_UPDATE_SLICE": update_slice_supports,
           "SCATTER_ND": scatter_supports}
BUILD = {**{op: build for op in OPS}, "DYNAMIC_UPDATE_SLICE": update_slice_build, "SCATTER_ND": scatter_build}
FLOAT_VIEW = {"EMBEDDING_LOOKUP": None, "GATHER_ND": None, "DYNAMIC_UPDATE_SLICE": None, "SCATTER_ND": None}
HIGH_RANK = {op: None for op in (*OPS, "SCATTER_ND")}  # row-major reads and writes, whatever the view merged
# They copy stored values (EMBEDDING_LOOKUP's hybrid 8-bit variant stays on the CPU).
FACTS = {"EMBEDDING_LOOKUP": OpFacts(arity=((2,), (), 1), integer_move=True),
         "GATHER_ND": OpFacts(arity=((2,), (), 1), integer_move=True),
         "DYNAMIC_UPDATE_SLICE": OpFacts(arity=((3,), (), 1), integer_move=True),
         "SCATTER_ND": OpFacts(arity=((3,), (), 1))}
