"""Shape propagation after an input is resized.

Only the nodes downstream of a resized input can change shape: the others keep the shapes the
model declares. Each downstream node's output shapes come from its op's output-shape rule
(ops.OUTPUT_SHAPES: input shapes, and input values where they are known exactly) without making
any array, checked against the size limits (a ModelError naming the node, in milliseconds,
before anything of that size exists). Where no rule exists, or the rule needs a value that is
not known exactly (a RESHAPE whose shape is a model input), and for the nodes that compute
integer values from shapes and constants (SHAPE, arithmetic on it), the node's reference kernel
runs once (the reference is the shape oracle) on stand-in values: constants as they are, values
computed upstream during this pass, and for anything else (a runtime input that was not resized,
an activation nothing upstream recomputed) zeros of its shape, or ones for integer tensors, so
that an integer DIV or a size computed from it does not fail on a stand-in zero. Integer values
that only depend on shapes and constants (SHAPE, arithmetic on it, a STRIDED_SLICE of it) are
computed exactly, so a RESHAPE to a shape computed from a resized input follows the resize.
When a node's shape depends on a runtime value that is unknown before invoke (a RESHAPE whose
shape is a model input) and the stand-in does not fit, the ModelError names the node and that
tensor.

The ops that call back into the interpreter (ops.RUNTIME_OPS: control flow, resource variables)
never run here: their rule gives their shapes (planning the subgraphs they call), or None, and
then their outputs keep the declared shapes as placeholders: they are dynamic tensors
(dynamic_tensors), whose shapes the invoke decides, as TFLite's dynamic tensors. So do the
outputs of a value-dependent node (value_dependent: runtime values decide its shape and the
model declares a placeholder shape_signature), and of every node that reads one: stand-ins
would give them shapes of their own.

declared_shape_errors compares the shapes a model declares with what the same rules give (our
Interpreter refuses a contradiction at allocate; on LiteRT's path the delegate leaves the node to
LiteRT, which computes the shape from the options).
"""
import math

import numpy as np

from . import ops
from .errors import ModelError
from .ops.checks import Unimplemented, check_output_elements, inferring_shapes
from .tflite.limits import MAX_TENSOR_ELEMENTS

# Ops whose output values depend only on their input's shape, never on its values.
_SHAPE_ONLY = {"SHAPE"}
# Inputs an output-shape rule refuses run the reference kernel (for its error message) on
# stand-ins of up to this many elements in all; larger ones take the rule's reason.
_KERNEL_FALLBACK_ELEMENTS = 1 << 22
# Integer values computed before invoke from shapes (dynamic_tensors): at most this many elements a node.
_SHAPE_VALUE_ELEMENTS = 1 << 12


def _elements(shape):
    return math.prod(map(int, shape))


def _stand_in(tensor):
    """A value of the tensor's current shape for a runtime value that is not known."""
    if tensor.dtype is None:
        raise ModelError(f"tensor {tensor.index} ({tensor.name!r}) has type {tensor.type_name}, which the "
                         "reference kernels cannot hold")
    fill = 1 if tensor.dtype.kind in "iu" else 0
    return np.full(tensor.shape, fill, tensor.dtype)


def propagate_shapes(graph, input_shapes, symbolic=True, run_node=ops.run_node):
    """Set graph input shapes from {tensor index: shape} and recompute the shape of every tensor
    downstream of a resized input, and of every tensor the model declares as a placeholder
    (placeholder(): its shape_signature has a -1), as TFLite's Prepare does at every allocation:
    a converter writes 1 for each unknown dimension, which is not the shape such a tensor gets
    even at the declared input shapes (SPACE_TO_BATCH_ND of a dynamic batch declared [1, ...]
    makes a batch of 2; Keras 3's Dense on a rank-3 input flattens it with a RESHAPE declared
    [1, 1], really [tokens, features], its shape computed from SHAPE(x)).
    Raises ModelError naming the node that cannot take them. `symbolic` False runs every such
    node's reference kernel on full-size stand-ins (the oracle the tests compare the output-shape
    rules against). run_node(node, inputs) -> outputs runs a node on stand-ins (the
    Interpreter's runs LiteRT's kernels for a node the reference lacks)."""
    changed, growth = set(), 1
    for tensor in graph.inputs:
        if tensor.index not in input_shapes:
            continue
        shape = tuple(int(d) for d in input_shapes[tensor.index])
        _check_size(tensor, shape)
        if shape != tuple(tensor.shape):
            growth = max(growth, -(-_elements(shape) // max(_elements(tensor.shape), 1)))
            tensor.shape = shape
            changed.add(id(tensor))
    if not changed and not any(placeholder(t) for t in graph.tensors if not t.is_const):
        return
    resized = bool(changed)  # else the placeholders' shapes are computed, nothing was resized
    # known: id(tensor) -> exact value (constants, and values computed from known values only).
    known = {id(t): t.data for t in graph.tensors if t.is_const}
    values = dict(known)  # id(tensor) -> value used for the next nodes (exact or stand-in based)
    unknown = set()  # id(tensor) of the tensors whose shapes the invoke decides (dynamic_tensors)
    for node in graph.nodes:
        present = [t for t in node.inputs if t is not None]
        affected = any(id(t) in changed for t in present) or any(t is not None and placeholder(t) for t in node.outputs)
        exact = all(id(t) in known for t in present) or (node.op in _SHAPE_ONLY and present)
        integer_out = all(t.dtype is not None and t.dtype.kind in "iub" for t in node.outputs)
        if any(id(t) in unknown for t in present) or not (exact and integer_out) and \
                value_dependent(node, lambda t: known.get(id(t))):
            # Declared shapes stay, as placeholders: stand-ins would give shapes of their own.
            unknown.update(id(t) for t in node.outputs if t is not None)
            continue
        if not affected and not (exact and integer_out and present):
            continue  # its shapes are the declared ones, and its values are not needed exactly
        if node.op in ops.RUNTIME_OPS:
            if _runtime_shapes(node, changed) is None:
                unknown.update(id(t) for t in node.outputs if t is not None)
            continue
        if symbolic and not (exact and integer_out):
            shapes = _rule_shapes(node, known, growth, resized)
            if shapes is not None:
                for tensor, shape in zip(node.outputs, shapes):
                    if tensor is not None:
                        values.pop(id(tensor), None)
                        if shape != tuple(tensor.shape):  # a rule sees shapes: the same ones, the same result
                            changed.add(id(tensor))
                            _set_shape(node, tensor, shape)
                continue
        if node.op in _SHAPE_ONLY:
            # Its value is its input's shape: a stand-in that holds no memory.
            inputs = [None if t is None else _shape_probe(t) for t in node.inputs]
        else:
            inputs = [None if t is None else values[id(t)] if id(t) in values else _stand_in(t)
                      for t in node.inputs]
        try:
            with inferring_shapes(growth), np.errstate(all="ignore"):
                outputs = run_node(node, inputs)
        except (ModelError, ValueError, IndexError, KeyError, TypeError, ZeroDivisionError, OverflowError) as exc:
            raise ModelError(_failure(node, exc, known, resized)) from None
        if len(outputs) != len(node.outputs):
            raise ModelError(f"operator {node.label} gave {len(outputs)} outputs for {_inputs(resized)}, "
                             f"the model declares {len(node.outputs)}")
        for tensor, value in zip(node.outputs, outputs):
            value = np.asarray(value)
            if affected or tuple(value.shape) != tuple(tensor.shape):
                changed.add(id(tensor))
            _set_shape(node, tensor, tuple(value.shape))
            values[id(tensor)] = value
            if exact:
                known[id(tensor)] = value


def _set_shape(node, tensor, shape):
    """Give a node's output tensor its new shape; ModelError naming the node when the model fixes
    that tensor's shape (an output with a buffer: graph.Tensor.fixed_shape), as LiteRT refuses it."""
    if tensor.fixed_shape and tuple(shape) != tuple(tensor.shape):
        raise ModelError(f"operator {node.label} cannot resize tensor {tensor.index} ({tensor.name!r}) from "
                         f"{list(tensor.shape)} to {list(shape)}: the model gives it a buffer, which fixes its "
                         "shape (LiteRT: 'Attempting to resize a fixed-size tensor')")
    tensor.shape = shape


def _runtime_shapes(node, changed):
    """Set the output shapes of a node of ops.RUNTIME_OPS from its rule and return them; where
    runtime values decide them (None), the declared shapes stay, as placeholders of dynamic tensors."""
    shapes = ops.output_shapes(node, [None if t is None else t.shape for t in node.inputs])
    for tensor, shape in zip(node.outputs, shapes or ()):
        if tensor is not None and tuple(tensor.shape) != shape:
            _set_shape(node, tensor, shape)
            changed.add(id(tensor))
    return shapes


def dynamic_tensors(graph):
    """{id(tensor)} of the tensors whose shapes only the invoke decides (TFLite's dynamic
    tensors): the outputs of a node of ops.RUNTIME_OPS whose rule gives None or shapes other
    than the declared ones (a loop whose carried tensors change shape, READ_VARIABLE), of a
    value-dependent node (value_dependent: a SLICE whose size the loop counter computes, as in
    the Keras RNN loop bodies the TF converter writes), and every output of a node that reads
    one. A ModelError of the rule (a called subgraph that cannot be planned) names the node."""
    dynamic, exact = set(), {}  # exact: id(tensor) -> value known before invoke (shape_values)
    for node in graph.nodes:
        if any(t is not None and id(t) in dynamic for t in node.inputs) or _decided_at_invoke(node) \
                or value_dependent(node, lambda t: _exact(t, exact)):
            dynamic.update(id(t) for t in node.outputs if t is not None)
        else:
            _shape_values(node, exact)
    return dynamic


def declared_shape_errors(graph, dynamic=frozenset()):
    """(node, message) for each node of `graph` whose declared output shape is not what its
    inputs and options give (ops.OUTPUT_SHAPES: a pool's stride or padding, a conv's, a
    RESHAPE's shape operand): a GPU kernel sizes its dispatches by the declared shapes, and a
    CPU kernel would compute the larger output before its shape is compared. Outputs declared
    without a shape are left to the kernels (ops.checks.check_output_elements), and so are
    `dynamic` ones ({id(tensor)}: their shapes are decided at invoke)."""
    for node in graph.nodes:
        if any(id(t) in dynamic for t in node.outputs):
            continue
        # A deferred constant is a folded weight, never a shape or size operand: left unknown.
        shapes = ops.output_shapes(node, [None if t is None else t.shape for t in node.inputs],
                                   [None if t is None or t.is_deferred else t.data for t in node.inputs])
        for k, (tensor, shape) in enumerate(zip(node.outputs, shapes or ())):
            if tensor is not None and len(tensor.shape) and tuple(tensor.shape) != tuple(shape):
                yield node, (f"operator {node.label}: output {k} (tensor {tensor.index}, {tensor.name!r}) is "
                             f"declared {list(tensor.shape)}, its inputs give {list(shape)}")
                break


def check_declared_shapes(graph, dynamic=frozenset()):
    """A ModelError for the first node of declared_shape_errors (our Interpreter's allocate)."""
    for _, message in declared_shape_errors(graph, dynamic):
        raise ModelError(message)


def _decided_at_invoke(node):
    if node.op not in ops.RUNTIME_OPS:
        return False
    try:
        shapes = ops.output_shapes(node, [None if t is None else t.shape for t in node.inputs])
    except ModelError as exc:
        raise exc if node.label in str(exc) else ModelError(f"operator {node.label}: {exc}") from None
    return shapes is None or any(t is not None and tuple(t.shape) != shape for t, shape in zip(node.outputs, shapes))


def placeholder(tensor):
    """Whether the model declares the tensor's shape as a placeholder: its shape_signature has an
    unknown (-1) dimension, which the converter writes where the shape depends on runtime values
    or on a dynamic batch (the shape holds 1 there)."""
    return tensor.shape_signature is not None and any(d < 0 for d in tensor.shape_signature)


def value_dependent(node, value_of):
    """Whether the node's output shapes depend on runtime values (its rule gives None for the
    input shapes and the input values known before invoke, value_of(tensor), None where not:
    asked only where the rule can matter) and the model declares one of them as a
    placeholder: TFLite makes such outputs dynamic (a SLICE or RESHAPE
    whose begin, size or shape operand is not constant) and prepares the nodes after them at
    invoke. An output declared with a known shape keeps it (checked at invoke); a node the
    reference refuses as possibly malformed (_refused), or that has no rule, keeps its declared
    shapes. A node LiteRT runs for us (SEGMENT_SUM, whose output segment_sum.cc sizes from runtime
    ids at invoke) follows its rule too: stand-in values would make up its shape."""
    if node.op in ops.RUNTIME_OPS or node.op not in ops.OUTPUT_SHAPES \
            or not any(t is not None and placeholder(t) for t in node.outputs) or _refused(node):
        return False
    values = [None if t is None else value_of(t) for t in node.inputs]
    return ops.output_shapes(node, [None if t is None else t.shape for t in node.inputs], values) is None


def _refused(node):
    """Whether the reference refuses the node for a reason other than lacking its kernel (for
    its op, or its variant: ops.checks.Unimplemented, which LiteRT's kernels run): a node that
    may be malformed, which allocate_tensors reports."""
    reason = ops.unsupported_reason(node)
    return reason is not None and node.op in ops.KERNELS and not isinstance(reason, Unimplemented)


def _exact(tensor, exact):
    """The value of `tensor` known before invoke (a constant, or computed by _shape_values), or None."""
    if tensor.is_const:
        return None if tensor.is_deferred else tensor.data  # a deferred one is a folded weight
    return exact.get(id(tensor))


def _shape_values(node, exact):
    """Compute the node's integer outputs into `exact` where they follow from shapes and known
    values only (SHAPE, arithmetic on it, a STRIDED_SLICE or PACK of it: what a dynamic-batch
    RESHAPE's shape operand is made of), so that value_dependent sees those values."""
    if node.op in ops.RUNTIME_OPS or not any(t is not None for t in node.inputs) \
            or not all(t is not None and t.dtype is not None and t.dtype.kind in "iub" for t in node.outputs):
        return
    if node.op in _SHAPE_ONLY:
        inputs = [None if t is None else _shape_probe(t) for t in node.inputs]
    else:
        inputs = [None if t is None else _exact(t, exact) for t in node.inputs]
        if any(x is None for t, x in zip(node.inputs, inputs) if t is not None):
            return
    if ops.unsupported_reason(node) is not None:
        return
    shapes = ops.output_shapes(node, [None if x is None else np.shape(x) for x in inputs], inputs)
    if shapes is None or sum(_elements(s) for s in shapes) > _SHAPE_VALUE_ELEMENTS:
        return
    try:
        with np.errstate(all="ignore"):
            outputs = ops.run_node(node, inputs)
    except (ModelError, ValueError, IndexError, KeyError, TypeError, ZeroDivisionError, OverflowError):
        return  # the invoke says why
    for tensor, value in zip(node.outputs, outputs):
        exact[id(tensor)] = np.asarray(value)


def _rule_shapes(node, known, growth, resized=True):
    """The node's output shapes from its op's rule (ops.OUTPUT_SHAPES), checked against the size
    limits; None when the op has no rule or runtime values (or inputs the kernel would refuse,
    for it to say why) decide."""
    if node.op not in ops.OUTPUT_SHAPES:
        return None
    shapes = [None if t is None else tuple(t.shape) for t in node.inputs]
    given = [None if t is None else known.get(id(t)) for t in node.inputs]
    try:
        result = ops.OUTPUT_SHAPES[node.op](node, shapes, given)
    except ModelError as exc:
        raise ModelError(_failure(node, exc, known, resized)) from None
    except (ValueError, TypeError, IndexError, KeyError, ZeroDivisionError, OverflowError) as exc:
        # Inputs the rule cannot take (shapes that do not broadcast, a wrong rank): the kernel
        # says why on small stand-ins; on large ones the rule's reason, before any array is made.
        if sum(_elements(s) for s in shapes if s is not None) <= _KERNEL_FALLBACK_ELEMENTS:
            return None
        raise ModelError(_failure(node, exc, known, resized)) from None
    result = None if result is None else [tuple(int(d) for d in shape) for shape in result]
    # An empty output of non-empty inputs: the kernel says why its window does not fit, or makes
    # it. Of an empty input (a batch resized to 0) it is what TFLite gives.
    empty_input = any(s is not None and _elements(s) == 0 for s in shapes)
    if result is None or len(result) != len(node.outputs) or \
            any(min(shape, default=1) < (0 if empty_input else 1) for shape in result):
        return None
    for k, (tensor, shape) in enumerate(zip(node.outputs, result)):
        if tensor is not None and _elements(shape) > MAX_TENSOR_ELEMENTS:
            raise ModelError(f"operator {node.label} cannot take {_inputs(resized)}: output {k} (tensor "
                             f"{tensor.index}) would have shape {list(shape)}, more than a tensor may hold "
                             f"({MAX_TENSOR_ELEMENTS:,} elements)")
    with inferring_shapes(growth):
        check_output_elements(node, result, sum(_elements(s) for s in shapes if s is not None))
    return result


def _shape_probe(tensor):
    """A read-only array of the tensor's shape whose elements all share one byte of memory."""
    dtype = tensor.dtype if tensor.dtype is not None else np.dtype(np.uint8)
    return np.broadcast_to(np.zeros((), dtype), tuple(tensor.shape))


def _check_size(tensor, shape):
    """ModelError before any array of `shape` is made when it holds more elements than a model's
    tensor may (the reader's limit): numpy's MemoryError would name no tensor."""
    if _elements(shape) > MAX_TENSOR_ELEMENTS:
        raise ModelError(f"input tensor {tensor.index} ({tensor.name!r}) resized to {list(shape)}: "
                         f"{_elements(shape):,} elements, more than a tensor may hold ({MAX_TENSOR_ELEMENTS:,})")


def _inputs(resized):
    """What a node's shapes were computed for: the inputs a resize gave, or the declared ones
    (a placeholder's shape is computed at every allocation)."""
    return "the resized input shapes" if resized else "its input shapes"


def _failure(node, exc, known, resized=True):
    """The message of a node that cannot take its (resized) input shapes, naming the runtime
    integer inputs its shape may depend on (their values are not known before invoke)."""
    message = f"operator {node.label} cannot take {_inputs(resized)}: {exc}"
    unknown = [t for t in node.inputs if t is not None and id(t) not in known and t.dtype is not None
               and t.dtype.kind in "iu" and t.quantization is None]
    if unknown:
        names = ", ".join(f"tensor {t.index} ({t.name!r})" for t in unknown)
        message += (f" (its output shape may depend on the values of {names}, which are not known "
                    "before invoke)")
    return message
