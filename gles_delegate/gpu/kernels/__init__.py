"""GPU kernel registry: which op each kernel module runs, and whether it can run a given node.

Each module exposes SUPPORT = {"OP": fn(node) -> None | reason} and BUILD = {"OP": fn(node, env)
-> [Dispatch]} (see base.py). A node goes to the GPU only when its kernel says it can run that
exact node; the checks every kernel shares (float32 tensors of rank <= 4) are made here.
A module whose kernels apply epilogue steps (epilogue.py) to their output also exposes
EPILOGUE = {"OP": None, or fn(node) -> None | reason for a kernel that does so only for some nodes}.
"""
import numpy as np

from . import (binary, conv, depthwise, elementwise, fully_connected, layout, lstm, mediapipe, pool, quantize,
               reduce, resize, softmax, transpose_conv)

MODULES = (binary, conv, depthwise, elementwise, fully_connected, layout, lstm, mediapipe, pool, quantize,
           reduce, resize, softmax, transpose_conv)

SUPPORT = {}
BUILD = {}
EPILOGUE = {}
for _module in MODULES:
    SUPPORT.update(_module.SUPPORT)
    BUILD.update(_module.BUILD)
    EPILOGUE.update(getattr(_module, "EPILOGUE", {}))

MAX_RANK = 4


def _tensor_reason(tensor, role):
    if tensor.dtype != np.float32:
        return f"{role} tensor {tensor.index} is {tensor.dtype}, the GPU runs float32 tensors"
    if len(tensor.shape) > MAX_RANK:
        return f"{role} tensor {tensor.index} has rank {len(tensor.shape)} > {MAX_RANK}"
    if 0 in tensor.shape:
        return f"{role} tensor {tensor.index} is empty"
    return None


def unsupported_reason(node):
    """None if a GPU kernel can run `node`, else why not (what TFLite logs per node)."""
    if node.op not in SUPPORT:
        return f"no GPU kernel for {'custom op ' if node.custom else ''}{node.op}"
    for tensor in node.outputs:
        reason = _tensor_reason(tensor, "output")
        if reason:
            return reason
    for tensor in node.inputs:
        if tensor is not None and not tensor.is_const:
            reason = _tensor_reason(tensor, "input")
            if reason:
                return reason
    return SUPPORT[node.op](node)


def epilogue_reason(node):
    """None if the kernel running `node` applies epilogue steps to its output, else why not."""
    if node.op not in EPILOGUE:
        return f"the {node.op} kernel applies no epilogue"
    check = EPILOGUE[node.op]
    return None if check is None else check(node)
