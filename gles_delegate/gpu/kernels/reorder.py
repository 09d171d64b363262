"""REVERSE_SEQUENCE and MATRIX_SET_DIAG of float32, bool or int32 tensors up to rank 4
(kernels_glsl/reorder.glsl): one dispatch each, every element copied from where the reference
takes it (ops/reorder.py), so the outputs are the reference's exactly. REVERSE_SEQUENCE takes
runtime or constant int32 seq_lengths (TensorFlow's bidirectional RNNs reverse each sequence
by its length); a length past the dimension fails the invoke naming the node, as TFLite's does.
MATRIX_SET_DIAG's diagonal may be a runtime tensor or a constant."""
import numpy as np

from ...ops import reorder as reference
from ...ops.checks import node_error
from ...registry import OpFacts
from ..phwc4 import bhwc
from .base import Dispatch

OP_CODES = {"REVERSE_SEQUENCE": 0, "MATRIX_SET_DIAG": 1}
MOVED_DTYPES = (np.dtype(np.float32), np.dtype(np.bool_), np.dtype(np.int32))
RANK = 4


def supports(node):
    """The reference's checks; float32, bool or int32 values; rank <= 4; int32 seq_lengths."""
    reason = reference.SUPPORT[node.op](node)
    if reason:
        return reason
    x, aux = node.inputs
    if x.dtype not in MOVED_DTYPES:
        return f"{node.op} of {x.dtype} (the GPU moves float32, bool, int32)"
    if len(x.shape) > RANK:
        return f"rank {len(x.shape)} (the kernel takes up to {RANK})"
    if node.op == "REVERSE_SEQUENCE" and aux.dtype != np.int32:
        return f"{aux.dtype} seq_lengths (the GPU reads int32)"
    if x.is_const:
        return "a constant input (the node folds when the other is constant too)"
    return None


def build(node, env):
    """One reorder.glsl dispatch over the output."""
    x, aux = node.inputs
    out = node.outputs[0]
    lead = RANK - len(x.shape)
    x4, a4, out4 = bhwc(x.shape), bhwc(aux.shape), bhwc(out.shape)
    params = {"out_size": out4.as_ivec4(), "out_channels": out4.c, "out_offset": env.arena(out),
              "in_size": x4.as_ivec4(), "in_channels": x4.c, "in_offset": env.arena(x),
              "aux_size": a4.as_ivec4(), "aux_channels": a4.c, "aux_offset": env.source(aux),
              "dims": (1,) * lead + tuple(int(d) for d in x.shape)}
    defines = {"OP": OP_CODES[node.op], "AUX_CONST": int(aux.is_const)}
    if node.op == "REVERSE_SEQUENCE":
        params.update(seq_dim=lead + int(node.options.get("seq_dim", 0)),
                      batch_dim=lead + int(node.options.get("batch_dim", 0)),
                      status_offset=env.status_word(str(node_error(
                          node, f"a seq_length exceeds dimension {node.options.get('seq_dim', 0)}"))))
        defines["IO_STATUS"] = 1
    else:
        params["diagonal"] = int(min(x.shape[-2:]))
    reads = tuple(t for t in (x, aux) if not t.is_const)
    return [Dispatch("reorder", (out4.w, out4.h, out4.slices * out4.b), defines, params, reads=reads, writes=(out,))]


SUPPORT = {op: supports for op in OP_CODES}
BUILD = {op: build for op in OP_CODES}
FLOAT_VIEW = {op: None for op in OP_CODES}  # bool and int32 values, int32 seq_lengths
FACTS = {op: OpFacts(arity=((2,), (), 1), integer_move=True) for op in OP_CODES}
