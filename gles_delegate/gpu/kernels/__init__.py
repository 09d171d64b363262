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

# Input / output counts of each op as TFLite defines them, checked before a kernel's own check
# (which may index node.inputs): op -> (accepted input counts, indices of inputs that may be
# omitted, output count or None for any); a kernel module's own ARITY dict adds to it.
# CONCATENATION takes any count of present inputs; an op not listed (the LSTMs, whose kernels run
# the reference's own arity check first) needs at least its first input present.
_UNARY = ("ABS", "ELU", "EXP", "GELU", "HARD_SWISH", "LEAKY_RELU", "LOG", "LOGISTIC", "NEG", "RELU", "RELU6",
          "RELU_0_TO_1", "RELU_N1_TO_1", "RSQRT", "SQRT", "TANH", "SOFTMAX", "LOG_SOFTMAX", "AVERAGE_POOL_2D",
          "MAX_POOL_2D", "DEPTH_TO_SPACE", "SPACE_TO_DEPTH", "SQUEEZE", "DEQUANTIZE", "QUANTIZE",
          "QUANTIZE_AND_DEQUANTIZE", "Landmarks2TransformMatrix")
_BINARY = ("ADD", "SUB", "MUL", "DIV", "MAXIMUM", "MINIMUM", "POW", "SQUARED_DIFFERENCE", "PRELU", "EXPAND_DIMS",
           "GATHER", "TRANSPOSE", "TILE", "MIRROR_PAD", "MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD",
           "RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR", "TransformTensorBilinear", "TransformLandmarks")
ARITY = {**{op: ((1,), (), 1) for op in _UNARY}, **{op: ((2,), (), 1) for op in _BINARY},
         **{op: ((2, 3), (2,), 1) for op in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")},
         "TRANSPOSE_CONV": ((3, 4), (3,), 1), "Convolution2DTransposeBias": ((3,), (), 1),
         "RESHAPE": ((1, 2), (1,), 1), "PAD": ((2, 3), (2,), 1), "PADV2": ((2, 3), (2,), 1),
         "SLICE": ((3,), (), 1), "STRIDED_SLICE": ((4,), (), 1), "SPLIT": ((2,), (), None),
         "SPLIT_V": ((3,), (), None)}
for _module in MODULES:  # a kernel module may state its ops' arity itself
    ARITY.update(getattr(_module, "ARITY", {}))


def arity_reason(node):
    """Why `node` does not have the inputs and outputs its op takes (counts, omitted inputs),
    or None: checked before a kernel's own check, which may assume them."""
    if not node.outputs or any(t is None for t in node.outputs):
        return f"{node.op} needs its outputs, got {len(node.outputs)} (some omitted)" if node.outputs \
            else f"{node.op} has no outputs"
    if node.op == "CONCATENATION":
        if not node.inputs or any(t is None for t in node.inputs):
            return "CONCATENATION needs at least one input and no omitted input"
        return None if len(node.outputs) == 1 else f"CONCATENATION takes 1 output, got {len(node.outputs)}"
    if node.op not in ARITY:
        return None if node.inputs and node.inputs[0] is not None else f"{node.op} lacks its first input"
    counts, optional, outputs = ARITY[node.op]
    if len(node.inputs) not in counts:
        return f"{node.op} takes {' or '.join(map(str, counts))} inputs, got {len(node.inputs)}"
    if outputs is not None and len(node.outputs) != outputs:
        return f"{node.op} takes {outputs} output{'s' if outputs > 1 else ''}, got {len(node.outputs)}"
    for k, tensor in enumerate(node.inputs):
        if tensor is None and k not in optional:
            return f"{node.op} input {k} is omitted" + (f" (only inputs {list(optional)} may be)" if optional else "")
    return None


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
    reason = arity_reason(node)
    if reason:
        return reason
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
