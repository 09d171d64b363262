"""GATHER with indices computed at run time (kernels_glsl/gather.glsl): the second GATHER
candidate, after layout.py's, which takes constant indices (kernels.ORDER). The indices are int32
in the float view (base.py): exact for every index of an axis of up to 2^24 (half storage: 2^11)
elements, and an index past that is out of range either way. An out-of-range index fails
TFLite's invoke; the shader reads 0 for it and flags its status word (KernelEnv.status_word),
which fails ours with the reference's ModelError, whether the indices came from outside the
partition or were computed inside it."""
import numpy as np

from ...ops import layout as reference
from ..phwc4 import bhwc, to_phwc4
from .base import Dispatch, exact_int_reason

VALUE_DTYPES = (np.dtype(np.float32), np.dtype(np.bool_))


def _axis(node):
    return node.options.get("axis", 0) % len(node.inputs[0].shape)


def supports(node):
    """The reference's checks; batch_dims 0; runtime int32 indices; float32 or bool params;
    an axis whose indices float32 storage holds exactly (half storage: checked in build)."""
    reason = reference.SUPPORT["GATHER"](node)
    if reason:
        return reason
    params, indices = node.inputs
    if indices.is_const or indices.dtype != np.int32:
        return "this kernel takes runtime int32 indices"
    if node.options.get("batch_dims", 0):
        return "batch_dims is not 0"
    if params.dtype not in VALUE_DTYPES:
        return f"GATHER of {params.dtype} values: int32 values are exact in the float view only to 2^24"
    if len(params.shape) == 0:
        return "GATHER from a scalar"
    if max(len(t.shape) for t in (params, indices, node.outputs[0])) > 4:  # layout.py's HIGH_RANK
        return "runtime indices gather tensors of rank <= 4"
    return exact_int_reason(params.shape[_axis(node)], "the indices")


def build(node, env):
    """One gather.glsl dispatch, one invocation per vec4 of the output."""
    (params, indices), out = node.inputs, node.outputs[0]
    axis = _axis(node)
    env.require_exact_indices(node, params.shape[axis], "the indices")
    p4, i4, o4 = bhwc(params.shape), bhwc(indices.shape), bhwc(out.shape)
    inner = int(np.prod(params.shape[axis + 1:], dtype=np.int64))
    status = env.status_word(str(reference.gather_index_error(node, params.shape[axis])))
    values = {"out_size": o4.as_ivec4(), "out_channels": o4.c, "out_offset": env.arena(out),
              "in_size": p4.as_ivec4(), "in_channels": p4.c, "idx_size": i4.as_ivec4(), "idx_channels": i4.c,
              "idx_offset": env.arena(indices), "outer_stride": indices.size * inner, "inner": inner,
              "axis_size": int(params.shape[axis]), "status_offset": status}
    if params.is_const:
        data = np.asarray(params.data, np.float32).reshape(p4.b, p4.h, p4.w, p4.c)
        values["in_offset"] = env.constant(to_phwc4(data))
    else:
        values["in_offset"] = env.arena(params)
    reads = (indices,) if params.is_const else (params, indices)
    defines = {"SOURCE_CONST": int(params.is_const), "IO_STATUS": 1}
    return [Dispatch("gather", (o4.w, o4.h, o4.slices * o4.b), defines, values, reads=reads, writes=(out,))]


# GATHER's FACTS and FLOAT_VIEW entry are layout.py's (one per op).
SUPPORT = {"GATHER": supports}
BUILD = {"GATHER": build}
