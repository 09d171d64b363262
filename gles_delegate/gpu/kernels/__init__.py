"""GPU kernel registry: which op each kernel module runs, and whether it can run a given node.

Each module exposes SUPPORT = {"OP": fn(node) -> None | reason} and BUILD = {"OP": fn(node, env)
-> [Dispatch]} (see base.py), and FACTS = {"OP": registry.OpFacts(...)}: the op's arity, checked
here before the kernel's own check (which may index node.inputs), and what rewrite rules and
quant.py need to know of it. A node goes to the GPU only when its kernel says it can run that
exact node; the checks every kernel shares (float32 tensors of rank <= 4, or up to
phwc4.MAX_RANK where the kernel allows) are made here.
A module whose kernels apply epilogue steps (epilogue.py) to their output also exposes
EPILOGUE = {"OP": None, or fn(node) -> None | reason for a kernel that does so only for some nodes}.
A module whose kernels take bool / int32 tensors (base.py: bool as 0.0 / 1.0, int32 as its bits)
exposes FLOAT_VIEW = {"OP": None}: those ops' runtime tensors may be bool / int32 too (for every
candidate of the op: several modules may say so), and each candidate's SUPPORT checks which.
A module whose kernels take tensors of rank 5 to phwc4.MAX_RANK through their BHWC view (phwc4.py:
the leading dims merged into B) exposes HIGH_RANK = {"OP": None}: its SUPPORT checks what the view
allows (an axis or a broadcast across merged dims it cannot index is refused there, with why).
Two modules may run one op only as candidates in a stated ORDER (gles_delegate/registry.py).
"""
import numpy as np

from ... import registry
from ...partition import EmptyTensor
from ..phwc4 import MAX_RANK
from .base import VIEW_DTYPES
from . import (binary, conv, conv3d, depthwise, elementwise, float_divmod, fully_connected, gather, integer, layer_norm,
               layout, lstm, matmul, mediapipe, normalization, one_hot, pointwise, pool, quantize, reduce,
               reduce_window, reorder, resize, scan, segment, select, softmax, spectral, squeeze_excite,
               transpose_conv, variables)

MODULES = (binary, conv, conv3d, depthwise, elementwise, float_divmod, fully_connected, gather, integer, layer_norm,
           layout, lstm, matmul, mediapipe, normalization, one_hot, pointwise, pool, quantize, reduce, reduce_window,
           reorder, resize, scan, segment, select, softmax, spectral, squeeze_excite, transpose_conv, variables)
# op -> its kernel modules in the order tried, for an op of several (registry.candidates):
# GATHER with constant indices (layout.py), else with runtime ones (gather.py); float arithmetic,
# comparisons and reductions (binary.py, elementwise.py, reduce.py), else int32 ones (integer.py);
# float FLOOR_DIV / FLOOR_MOD (float_divmod.py), else int32 ones.
ORDER = {"GATHER": (layout, gather),
         **{op: (binary, integer) for op in integer.BINARY_CODES if op in binary.OP_CODES},
         **{op: (float_divmod, integer) for op in float_divmod.OP_CODES},
         **{op: (elementwise, integer) for op in integer.UNARY_CODES},
         **{op: (reduce, integer) for op in integer.REDUCTIONS}}

CANDIDATES = registry.candidates(MODULES, "BUILD", ORDER)
SUPPORT, BUILD = {}, {}
for _op, _owners in CANDIDATES.items():
    SUPPORT[_op], BUILD[_op] = registry.resolve(_op, _owners, "BUILD")
RUNNER = {op: registry.runner_of(op, owners) for op, owners in CANDIDATES.items()}  # op -> (node -> its module)
FACTS = registry.merge(MODULES, "FACTS")
NO_FACTS = registry.OpFacts()
FLOAT_VIEW = frozenset(op for module in MODULES for op in getattr(module, "FLOAT_VIEW", {}))
HIGH_RANK = frozenset(op for module in MODULES for op in getattr(module, "HIGH_RANK", {}))

VIEW_RANK = 4  # the rank every kernel takes; its module's HIGH_RANK lets an op take up to MAX_RANK


def facts(op):
    """The OpFacts its kernel module states for `op` (all defaults for an op without a GPU kernel)."""
    return FACTS.get(op, NO_FACTS)


def arity_reason(node):
    """Why `node` does not have the inputs and outputs its op takes (counts, omitted inputs),
    or None: checked before a kernel's own check, which may assume them."""
    if (not node.outputs and _output_count(node.op) != 0) or any(t is None for t in node.outputs):
        return f"{node.op} needs its outputs, got {len(node.outputs)} (some omitted)" if node.outputs \
            else f"{node.op} has no outputs"
    if node.op in ("CONCATENATION", "PACK"):  # any count of inputs
        if not node.inputs or any(t is None for t in node.inputs):
            return f"{node.op} needs at least one input and no omitted input"
        return None if len(node.outputs) == 1 else f"{node.op} takes 1 output, got {len(node.outputs)}"
    if facts(node.op).arity is None:
        return None if node.inputs and node.inputs[0] is not None else f"{node.op} lacks its first input"
    counts, optional, outputs = facts(node.op).arity
    if len(node.inputs) not in counts:
        return f"{node.op} takes {' or '.join(map(str, counts))} inputs, got {len(node.inputs)}"
    if outputs is not None and len(node.outputs) != outputs:
        return f"{node.op} takes {outputs} output{'s' if outputs > 1 else ''}, got {len(node.outputs)}"
    for k, tensor in enumerate(node.inputs):
        if tensor is None and k not in optional:
            return f"{node.op} input {k} is omitted" + (f" (only inputs {list(optional)} may be)" if optional else "")
    return None


def _output_count(op):
    """The output count its OpFacts.arity states (0: ASSIGN_VARIABLE), or None."""
    return facts(op).arity[2] if facts(op).arity else None


def _rank_reason(tensor, role, op):
    """Why `tensor` has a rank the kernel of `op` cannot take, or None."""
    rank = len(tensor.shape)
    if rank > MAX_RANK:
        return f"{role} tensor {tensor.index} has rank {rank} > {MAX_RANK}, the highest the GPU views as BHWC"
    if rank > VIEW_RANK and op not in HIGH_RANK:
        return f"{role} tensor {tensor.index} has rank {rank}: the GPU's {op} kernel takes ranks <= {VIEW_RANK}"
    return None


def _tensor_reason(tensor, role, float_view):
    if tensor.dtype != np.float32 and not (float_view and tensor.dtype in VIEW_DTYPES):
        kinds = "float32, bool and int32" if float_view else "float32"
        return f"{role} tensor {tensor.index} is {tensor.dtype}, the GPU runs {kinds} tensors here"
    if 0 in tensor.shape:
        return EmptyTensor(f"{role} tensor {tensor.index} is empty")
    return None


def unsupported_reason(node):
    """None if a GPU kernel can run `node`, else why not (what TFLite logs per node)."""
    if node.op not in SUPPORT:
        return f"no GPU kernel for {'custom op ' if node.custom else ''}{node.op}"
    reason = arity_reason(node)
    if reason:
        return reason
    float_view = node.op in FLOAT_VIEW
    for tensor in node.outputs:
        reason = _rank_reason(tensor, "output", node.op) or _tensor_reason(tensor, "output", float_view)
        if reason:
            return reason
    for tensor in node.inputs:
        # A constant is packed through its view too (a constant operand, a layout op's source).
        reason = None if tensor is None else _rank_reason(tensor, "input", node.op)
        if reason is None and tensor is not None and not tensor.is_const:
            reason = _tensor_reason(tensor, "input", float_view)
        if reason:
            return reason
    return SUPPORT[node.op](node)


def epilogue_reason(node):
    """None if the kernel running `node` applies epilogue steps to its output, else why not."""
    module = RUNNER[node.op](node) if node.op in RUNNER else None
    if node.op not in getattr(module, "EPILOGUE", {}):
        return f"the {node.op} kernel applies no epilogue"
    check = module.EPILOGUE[node.op]
    return None if check is None else check(node)
