"""GATHER and EMBEDDING_LOOKUP with indices computed at run time (kernels_glsl/gather.glsl). For
GATHER this is the second candidate, after layout.py's, which takes constant indices
(kernels.ORDER); EMBEDDING_LOOKUP is a GATHER along axis 0 of its value (input 1) by its lookup
(input 0). The indices are int32, read as their bits (base.py: the int view), so every index is
exact; float32, bool and int32 values are moved as they are stored. An out-of-range index fails
TFLite's invoke; the shader reads 0 for it and flags its status word (KernelEnv.status_word), which
fails ours with the reference's ModelError, whether the indices came from outside the partition
or were computed inside it."""
import numpy as np

from ...ops import gather as lookup_reference
from ...ops import layout as reference
from ...ops.checks import node_error
from ...registry import OpFacts
from ..phwc4 import bhwc, to_phwc4
from .base import Dispatch, stored_values

VALUE_DTYPES = (np.dtype(np.float32), np.dtype(np.bool_), np.dtype(np.int32))


def _operands(node):
    """(params, indices, axis) of a GATHER or an EMBEDDING_LOOKUP node."""
    if node.op == "EMBEDDING_LOOKUP":
        return node.inputs[1], node.inputs[0], 0
    return node.inputs[0], node.inputs[1], node.options.get("axis", 0) % len(node.inputs[0].shape)


def supports(node):
    """The reference's checks; batch_dims 0; runtime int32 indices; float32, bool or int32 values
    of the output's dtype (a hybrid EMBEDDING_LOOKUP of 8-bit rows stays on the CPU); ranks <= 4."""
    checks = lookup_reference.SUPPORT if node.op == "EMBEDDING_LOOKUP" else reference.SUPPORT
    reason = checks[node.op](node)
    if reason:
        return reason
    params, indices, _ = _operands(node)
    if indices.is_const or indices.dtype != np.int32:
        return "this kernel takes runtime int32 indices"
    if node.options.get("batch_dims", 0):
        return "batch_dims is not 0"
    if params.dtype not in VALUE_DTYPES or params.dtype != node.outputs[0].dtype:
        return f"{node.op} of {params.dtype} values into {node.outputs[0].dtype} (the GPU moves float32, bool, int32)"
    if len(params.shape) == 0:
        return "GATHER from a scalar"
    if max(len(t.shape) for t in (params, indices, node.outputs[0])) > 4:  # layout.py's HIGH_RANK
        return "runtime indices gather tensors of rank <= 4"
    return None


def _index_error(node, params, axis):
    """The error an out-of-range index fails the invoke with (the reference's words)."""
    if node.op == "EMBEDDING_LOOKUP":
        return node_error(node, f"an embedding_lookup index is out of range for shape {list(params.shape)}")
    return reference.gather_index_error(node, params.shape[axis])


def build(node, env):
    """One gather.glsl dispatch, one invocation per vec4 of the output."""
    params, indices, axis = _operands(node)
    out = node.outputs[0]
    p4, i4, o4 = bhwc(params.shape), bhwc(indices.shape), bhwc(out.shape)
    inner = int(np.prod(params.shape[axis + 1:], dtype=np.int64))
    status = env.status_word(str(_index_error(node, params, axis)))
    values = {"out_size": o4.as_ivec4(), "out_channels": o4.c, "out_offset": env.arena(out),
              "in_size": p4.as_ivec4(), "in_channels": p4.c, "idx_size": i4.as_ivec4(), "idx_channels": i4.c,
              "idx_offset": env.arena(indices), "outer_stride": indices.size * inner, "inner": inner,
              "axis_size": int(params.shape[axis]), "status_offset": status}
    if params.is_const:
        data = stored_values(params.data).reshape(p4.b, p4.h, p4.w, p4.c)
        values["in_offset"] = env.constant(to_phwc4(data))
    else:
        values["in_offset"] = env.arena(params)
    reads = (indices,) if params.is_const else (params, indices)
    defines = {"SOURCE_CONST": int(params.is_const), "IO_STATUS": 1}
    return [Dispatch("gather", (o4.w, o4.h, o4.slices * o4.b), defines, values, reads=reads, writes=(out,))]


# GATHER's FACTS and FLOAT_VIEW entry are layout.py's (one per op).
SUPPORT = {"GATHER": supports, "EMBEDDING_LOOKUP": supports}
BUILD = {"GATHER": build, "EMBEDDING_LOOKUP": build}
FLOAT_VIEW = {"EMBEDDING_LOOKUP": None}
# EMBEDDING_LOOKUP copies stored values (its hybrid 8-bit variant stays on the CPU).
FACTS = {"EMBEDDING_LOOKUP": OpFacts(arity=((2,), (), 1), integer_move=True)}
