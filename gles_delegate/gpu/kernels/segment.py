"""UNSORTED_SEGMENT_SUM / PROD / MAX / MIN of float32 or int32 data (kernels_glsl/segment.glsl):
one dispatch, each output element folding the data rows whose segment id is its own, in row
order from the op's identity, as TFLite's reference kernel folds them (so an int32 fold is exact
and wraps; a float32 sum or product rounds in TFLite's order). Every output element walks every
id: ids times outputs, which MAX_WORK bounds. Segment ids runtime or constant (int32, their
bits); num_segments constant (it fixes the output's shape). An id past num_segments fails the
invoke naming the node, as the reference does."""
import numpy as np

from ...ops import segment as reference
from ...ops.checks import node_error
from ...registry import OpFacts
from ..phwc4 import bhwc
from .base import Dispatch

OP_CODES = {"UNSORTED_SEGMENT_SUM": 0, "UNSORTED_SEGMENT_PROD": 1, "UNSORTED_SEGMENT_MAX": 2,
            "UNSORTED_SEGMENT_MIN": 3}
MAX_WORK = 1 << 26  # ids x output elements: a driver may reset a GPU kept busy by more


def supports(node):
    """The reference's checks; a constant num_segments; at most MAX_WORK ids x outputs."""
    reason = reference.SUPPORT[node.op](node)
    if reason:
        return reason
    data, ids, num = node.inputs
    if not num.is_const:
        return "num_segments must be constant"
    if data.is_const:
        return "constant data (the node folds when its ids are constant too)"
    work = ids.size * node.outputs[0].size
    if work > MAX_WORK:
        return (f"{ids.size} segment ids x {node.outputs[0].size} outputs (each output walks every id: at most "
                f"{MAX_WORK})")
    return None


def build(node, env):
    """One segment.glsl dispatch over the output."""
    data, ids, _ = node.inputs
    out = node.outputs[0]
    d4, i4, o4 = bhwc(data.shape), bhwc(ids.shape), bhwc(out.shape)
    status = env.status_word(str(node_error(node, f"a segment id is not below num_segments {out.shape[0]}")))
    params = {"out_size": o4.as_ivec4(), "out_channels": o4.c, "out_offset": env.arena(out),
              "in_size": d4.as_ivec4(), "in_channels": d4.c, "in_offset": env.arena(data),
              "idx_size": i4.as_ivec4(), "idx_channels": i4.c, "idx_offset": env.source(ids),
              "rows": int(ids.size), "inner": int(np.prod(out.shape[1:], dtype=np.int64)),
              "segments": int(out.shape[0]), "status_offset": status}
    defines = {"SEGMENT_OP": OP_CODES[node.op], "INT_VALUES": int(data.dtype == np.int32),
               "IDX_CONST": int(ids.is_const), "IO_STATUS": 1}
    reads = tuple(t for t in (data, ids) if not t.is_const)
    return [Dispatch("segment", (o4.w, o4.h, o4.slices * o4.b), defines, params, reads=reads, writes=(out,))]


SUPPORT = {op: supports for op in OP_CODES}
BUILD = {op: build for op in OP_CODES}
FLOAT_VIEW = {op: None for op in OP_CODES}  # int32 data and ids, as their bits
HIGH_RANK = {op: None for op in OP_CODES}  # row-major reads and writes, whatever the view merged
FACTS = {op: OpFacts(arity=((3,), (), 1)) for op in OP_CODES}
