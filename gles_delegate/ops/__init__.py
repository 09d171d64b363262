"""Numpy reference kernels: the CPU fallback and the oracle the GPU kernels are tested against.

Each module holds one op family and exposes two plain dicts:
  KERNELS = {"OP_NAME": fn}   fn(node, inputs) -> list of output arrays, where `inputs` holds
                              one numpy array per node input (None for an omitted optional one)
  SUPPORT = {"OP_NAME": fn}   optional; fn(node) -> None if the kernel can run this exact node,
                              else a string saying why not (checked at allocate_tensors; for
                              a node that reads a dynamic tensor, at every invoke)
  OUTPUT_SHAPES = {"OP_NAME": fn}  the op's shape rule (every op but DENSIFY has one,
                              and so do the ops LiteRT's kernels run for us whose shape runtime
                              values decide: SEGMENT_SUM, RANDOM_UNIFORM, RANDOM_STANDARD_NORMAL):
                              shape_propagation.py computes shapes with it after a resize
                              without running kernels on full-size arrays;
                              fn(node, shapes, values) -> the output shapes, from the input shapes
                              and the input values where known (values[k] None: a runtime input);
                              None when runtime values decide. run_node checks them against the
                              model's declared shapes before the kernel allocates anything.
An op two modules run (hybrid and float CONV_2D) has one kernel in each, tried in ORDER; any other
op declared twice fails at import (gles_delegate/registry.py).
Variable tensors (LSTM state) arrive as the interpreter's own arrays and are updated in place.
A module may declare RUNTIME_OPS, the ops whose kernels call back into the interpreter through
node.runtime (control_flow.py: WHILE, IF, CALL_ONCE; variables.py: resource variables).
common.py holds the semantics the kernels share (padding, windows, fused activations,
quantization), checks.py what their SUPPORT checks share.
"""
import numpy as np

from .. import registry
from ..errors import ModelError
from .checks import check_output_elements, node_error
from . import (binary, control_flow, conv, conv3d, detection, elementwise, gather, generate, hybrid, layout, lstm,
               matmul, mediapipe, normalization, pool, quantize, reduce, reduce_window, reorder, resize, rnn, scan,
               segment, select, softmax, spectral, variables)

MODULES = (binary, conv, conv3d, elementwise, gather, generate, layout, lstm, matmul, mediapipe, normalization, pool,
           quantize, reduce, reduce_window, reorder, resize, rnn, scan, select, softmax, spectral, hybrid, control_flow,
           variables, detection, segment)
# Ops of several modules, in the order their kernels are tried (registry.candidates): hybrid's
# take the dynamic-range quantized nodes, conv's every other one.
ORDER = {op: (hybrid, conv) for op in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")}

CANDIDATES = registry.candidates(MODULES, "KERNELS", ORDER)
KERNELS, SUPPORT = {}, {}
for _op, _owners in CANDIDATES.items():
    _support, KERNELS[_op] = registry.resolve(_op, _owners, "KERNELS")
    if _support is not None:
        SUPPORT[_op] = _support
OUTPUT_SHAPES = registry.merge(MODULES, "OUTPUT_SHAPES")
# Ops whose kernels call back into the interpreter (node.runtime: subgraphs, resource
# variables): never folded, never run on stand-in values; their outputs are dynamic where
# their shape rule gives None or other shapes than the model declares (shape_propagation).
RUNTIME_OPS = frozenset().union(*(getattr(m, "RUNTIME_OPS", ()) for m in MODULES))


def unsupported_reason(node):
    """None if the reference kernels can run `node`, else why not."""
    if node.op not in KERNELS:
        return f"no reference kernel for {'custom op' if node.custom else 'op'} {node.op}"
    check = SUPPORT.get(node.op)
    return check(node) if check is not None else None


def output_shapes(node, shapes, values=None):
    """The output shapes of `node` for input `shapes` (None: omitted) and input `values` (None
    or a list with None where unknown), for the ops in OUTPUT_SHAPES; None when the op is not
    there, runtime values decide, or the inputs are malformed (the kernel then says why)."""
    function = OUTPUT_SHAPES.get(node.op)
    if function is None:
        return None
    values = list(values) if values is not None else [None] * len(shapes)
    try:
        result = function(node, [None if s is None else tuple(map(int, s)) for s in shapes], values)
    except ModelError:
        raise
    except (ValueError, TypeError, IndexError, KeyError, ZeroDivisionError, OverflowError):
        return None
    # A rule passes an omitted input's None shape through (SOFTMAX, DEQUANTIZE: gles-fuzz).
    if result is None or any(s is None for s in result):
        return None
    return [tuple(map(int, s)) for s in result]


def run_into(node, storage, only=None):
    """Run `node` on the reference kernels over `storage` ({tensor index: array}): its inputs
    read from there, its outputs copied into the arrays there (those of the indices in `only`,
    else all); a ModelError naming the node when an output comes out in another shape."""
    outputs = run_node(node, [None if t is None else storage[t.index] for t in node.inputs])
    for tensor, value in zip(node.outputs, outputs):
        if tensor is None or (only is not None and tensor.index not in only):
            continue
        target = storage[tensor.index]
        if np.shape(value) != target.shape:
            raise ModelError(f"operator {node.label} produced shape {list(np.shape(value))} for tensor "
                             f"{tensor.index}, the model declares {list(target.shape)}")
        np.copyto(target, value, casting="unsafe")


def _all_empty(node, shapes, inputs):
    """Whether an input and every output of `shapes` hold no element, and every output has a type."""
    return (any(x is not None and np.size(x) == 0 for x in inputs) and len(shapes) == len(node.outputs)
            and all(t is not None and t.dtype is not None and 0 in shape for t, shape in zip(node.outputs, shapes)))


def run_node(node, inputs, dynamic=False):
    """Run one node on the reference kernels; returns its output arrays. An output larger than
    the model declares fails before the kernel runs (checks.check_output_elements; `dynamic`:
    the outputs are dynamic tensors, bounded by the inputs' size instead); running out of
    memory, or a ModelError of a shared helper (common.py) that cannot know the node, is a
    ModelError naming the node."""
    shapes = output_shapes(node, [None if x is None else np.shape(x) for x in inputs], inputs)
    if shapes is not None:
        check_output_elements(node, shapes, sum(int(np.size(x)) for x in inputs if x is not None), dynamic)
        if _all_empty(node, shapes, inputs):
            # TFLite's kernels compute nothing for empty tensors (a batch resized to 0); ours
            # would reshape them with -1, which numpy refuses at size 0.
            return [np.zeros(shape, t.dtype) for t, shape in zip(node.outputs, shapes)]
    if node.op not in KERNELS:
        raise node_error(node, f"no reference kernel for op {node.op}")
    try:
        return KERNELS[node.op](node, inputs)
    except MemoryError as exc:
        raise node_error(node, f"out of memory computing its outputs (declared "
                               f"{[list(t.shape) for t in node.outputs if t is not None]}): {exc}") from None
    except ModelError as exc:
        if node.label in str(exc):
            raise
        raise node_error(node, str(exc)) from None
