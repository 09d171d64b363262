"""Numpy reference kernels: the CPU fallback and the oracle the GPU kernels are tested against.

Each module holds one op family and exposes two plain dicts:
  KERNELS = {"OP_NAME": fn}   fn(node, inputs) -> list of output arrays, where `inputs` holds
                              one numpy array per node input (None for an omitted optional one)
  SUPPORT = {"OP_NAME": fn}   optional; fn(node) -> None if the kernel can run this exact node,
                              else a string saying why not (checked at allocate_tensors)
Variable tensors (LSTM state) arrive as the interpreter's own arrays and are updated in place.
common.py holds the semantics the kernels share (padding, windows, fused activations,
quantization), checks.py what their SUPPORT checks share.
"""
from . import (binary, conv, elementwise, lstm, mediapipe, pool, quantize, reduce, resize, shape,
               softmax)

_MODULES = (binary, conv, elementwise, lstm, mediapipe, pool, quantize, reduce, resize, shape, softmax)

KERNELS = {}
SUPPORT = {}
for _module in _MODULES:
    KERNELS.update(_module.KERNELS)
    SUPPORT.update(getattr(_module, "SUPPORT", {}))


def unsupported_reason(node):
    """None if the reference kernels can run `node`, else why not."""
    if node.op not in KERNELS:
        return f"no reference kernel for {'custom op' if node.custom else 'op'} {node.op}"
    check = SUPPORT.get(node.op)
    return check(node) if check is not None else None


def run_node(node, inputs):
    """Run one node on the reference kernels; returns its output arrays."""
    return KERNELS[node.op](node, inputs)
