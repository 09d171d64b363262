"""The complex view of a GPU partition: complex64 tensors held as pairs of float32.

The GPU kernels run float32 tensors. As quant.py's float view runs quantized partitions on them,
this view runs partitions with complex64 tensors: a complex64 tensor of shape S is held as a
float32 tensor of shape S + [2] (real, imaginary), which is the memory of a complex64 numpy array,
so a partition's complex64 inputs and outputs pass through its I/O buffer as they are, through
as_floats() (gpu/runtime.py), with no conversion node. complex_view() builds that view of a
partition, the partition itself untouched:

  (a) every complex64 tensor becomes a float32 tensor of shape S + [2] that keeps its index and
      name (a constant: its pairs);
  (b) RFFT2D writes the view of its output, COMPLEX_ABS / REAL / IMAG read the view of their
      input (PAIR_OPS): gpu/kernels/spectral.py runs these view nodes;
  (c) a layout op moving complex64 values (AXIS_RULES) becomes the same op on the views, its axis
      operands rewritten so that the pair axis, the last, moves whole: axes counted from the end
      made non-negative, shapes, begins, sizes, strides, permutations and multiples extended by
      the pair axis. unsupported_reason() checks each such node on an iota: its view must move
      every pair where the node moves the value, else it has none;
  (d) a CAST of complex64 to float32 keeps the real part (cast.cc: static_cast<float>(std::real)):
      its view is REAL's;
  (e) any other node touching a complex64 tensor has no view: its op would mix the real and
      imaginary parts (a complex product, a reduction, a cast to complex64 or to an integer) or
      has no rule here.
A model's complex128 tensors have no view: their nodes stay on the CPU.
"""
import copy
import dataclasses

import numpy as np

from .. import ops
from ..errors import ModelError
from ..graph import Tensor
from ..ops.checks import normalized_axis

C64, F32 = np.dtype(np.complex64), np.dtype(np.float32)
PAIR_OPS = ("RFFT2D", "COMPLEX_ABS", "REAL", "IMAG")  # their GPU kernels take the view as it is


class NoView(ValueError):
    """A node that has no complex view; the message says why."""


def touches_complex(node):
    """Whether any tensor of `node` is complex64 (its view differs from it, or it has none)."""
    return any(t is not None and t.dtype == C64 for t in [*node.inputs, *node.outputs])


def view_shape(tensor):
    """The shape the GPU holds `tensor` in: S + (2,) for a complex64 tensor of shape S."""
    return tuple(tensor.shape) + ((2,) if tensor.dtype == C64 else ())


def as_floats(array):
    """A complex64 array as its float32 view [..., 2] (real, imaginary; no copy: the array must
    be C-contiguous, as storage arrays are), any other array as it is."""
    if array.dtype != C64:
        return array
    return array.reshape(array.shape or (1,)).view(F32).reshape(array.shape + (2,))  # numpy views no 0-d array


def as_complex(values):
    """The complex64 array [...] whose pairs a float32 array [..., 2] holds."""
    return np.ascontiguousarray(values, F32).view(C64).reshape(np.shape(values)[:-1])


# -- the axis rules of the layout ops (c) ---------------------------------------------------------
def _operand(node, k):
    """Constant input k of `node` as an int64 array (an axis, shape, begin ... operand)."""
    tensor = node.inputs[k] if k < len(node.inputs) else None
    if tensor is None or not tensor.is_const:
        raise NoView(f"its input {k} must be a constant (the view rewrites it)")
    return np.asarray(tensor.data).astype(np.int64)


def _axis(node, axis, rank):
    """A possibly negative axis of a rank-`rank` complex tensor, made non-negative (counted from
    the end, it would name the pair axis of the view)."""
    try:
        return normalized_axis(node, int(axis), rank)
    except ModelError as exc:
        raise NoView(str(exc)) from None


def _appended(*tails):
    """The rule of an op whose inputs 1, 2, ... hold a value per axis (begins, sizes, strides,
    multiples): tails[k - 1] appended to input k for the pair axis."""
    def rule(node, rank):
        return {k: np.append(_operand(node, k), tail) for k, tail in enumerate(tails, 1)}, {}
    return rule


def _reshape(node, rank):
    """The output's shape with the pair axis, as the option and as the (constant) shape input."""
    shape = list(node.outputs[0].shape) + [2]
    if len(node.inputs) < 2 or node.inputs[1] is None:
        return {}, {"new_shape": shape}
    _operand(node, 1)  # a run-time shape: no view
    return {1: np.array(shape)}, {"new_shape": shape}


def _squeeze(node, rank):
    dims = node.options.get("squeeze_dims") or []  # none: every dim of size 1 (never the pair axis)
    return {}, {"squeeze_dims": [_axis(node, d, rank) for d in dims]}


def _expand_dims(node, rank):
    axis = _operand(node, 1)
    return {1: np.full(axis.shape, _axis(node, axis.reshape(-1)[0], rank + 1))}, {}


def _transpose(node, rank):
    return {1: np.append(_operand(node, 1), rank)}, {}  # the pair axis stays last


def _strided_slice(node, rank):
    """One more slice spec, all of the pair axis (masked), where the specs name every axis (or
    hold an ellipsis); fewer specs leave the trailing axes, the pair axis too, whole."""
    count = _operand(node, 1).size
    spec = (1 << count) - 1
    ellipsis = node.options.get("ellipsis_mask", 0) & spec
    new_axes = bin(node.options.get("new_axis_mask", 0) & spec & ~ellipsis).count("1")
    if not ellipsis and count - new_axes < rank:
        return {}, {}
    bit = 1 << count
    options = {name: node.options.get(name, 0) | bit for name in ("begin_mask", "end_mask")}
    return _appended(0, 0, 1)(node, rank)[0], options


# op -> rule(node, rank of its complex data) -> ({input k: new constant}, {option: new value}):
# the layout ops LiteRT runs on complex64 (GATHER, CONCATENATION, PAD, SPLIT, PACK, REVERSE_V2 it
# refuses to prepare for complex64).
AXIS_RULES = {
    "RESHAPE": _reshape, "SQUEEZE": _squeeze, "EXPAND_DIMS": _expand_dims, "TRANSPOSE": _transpose,
    "SLICE": _appended(0, 2), "STRIDED_SLICE": _strided_slice, "TILE": _appended(1),
}


# -- building the view ------------------------------------------------------------------------
class _Builder:
    """Maps tensors to their views (complex64 -> float32 pairs at the same index; the others as
    they are) and numbers the new operand constants from `next_index`."""

    def __init__(self, next_index):
        self.next_index = next_index
        self.views = {}

    def view(self, tensor):
        if tensor is None or tensor.dtype != C64:
            return tensor
        if id(tensor) not in self.views:
            signature = tensor.shape_signature
            self.views[id(tensor)] = Tensor(
                index=tensor.index, name=tensor.name, shape=view_shape(tensor), dtype=F32,
                data=_read_only(as_floats(np.ascontiguousarray(tensor.data))) if tensor.is_const else None,
                shape_signature=None if signature is None else tuple(signature) + (2,), type_name="FLOAT32")
        return self.views[id(tensor)]

    def constant(self, like, value):
        """A new constant operand in place of `like` (int operands keep their type)."""
        dtype = value.dtype if value.dtype == F32 else like.dtype
        tensor = Tensor(index=self.next_index, name=f"{like.name}/complex_view", shape=value.shape, dtype=dtype,
                        data=_read_only(value.astype(dtype)), type_name=like.type_name)
        self.next_index += 1
        return tensor


def _read_only(array):
    array = np.ascontiguousarray(array)
    array.flags.writeable = False
    return array


def _view_node(b, node):
    """The view of one node (the node itself when it touches no complex64 tensor); NoView when
    it has none."""
    if not touches_complex(node):
        return node
    if node.op in PAIR_OPS:
        operands, options = {}, {}
    elif node.op == "CAST" and node.inputs[0].dtype == C64 and node.outputs[0].dtype == F32:
        return dataclasses.replace(node, op="REAL", version=1, inputs=[b.view(node.inputs[0])],
                                   outputs=list(node.outputs), options={})
    elif node.op in AXIS_RULES:
        rank = len(next(t for t in [*node.inputs, *node.outputs] if t is not None and t.dtype == C64).shape)
        operands, options = AXIS_RULES[node.op](node, rank)
    else:
        raise NoView(f"{node.op} has no rule for complex64 tensors, which the GPU holds as pairs of floats "
                     "(an op that is no layout op would mix the real and imaginary parts)")
    inputs = [b.constant(t, operands[k]) if k in operands else b.view(t) for k, t in enumerate(node.inputs)]
    return dataclasses.replace(node, inputs=inputs, outputs=[b.view(t) for t in node.outputs],
                               options={**node.options, **options})


def _pairs_reason(node, view):
    """Why `view` does not move each pair where `node` moves its complex value, or None: both
    run on iotas in place of their complex inputs (the view on their pairs 2i, 2i + 1)."""
    values, pairs, start = [], [], 0
    for t, v in zip(node.inputs, view.inputs):
        if t is not None and t.dtype == C64:
            iota = np.arange(start, start + t.size).reshape(t.shape)
            start += t.size
            values.append(iota)
            pairs.append(_pairs_of(iota))
        else:
            values.append(_operand_value(t))
            pairs.append(_operand_value(v))
    try:
        expected = [_pairs_of(v) for v in ops.run_node(node, values)]
        moved = ops.run_node(view, pairs)
    except (ValueError, IndexError, TypeError) as exc:  # ModelError included
        return f"its view cannot run: {exc}"
    if len(moved) != len(expected) or any(not np.array_equal(m, e) for m, e in zip(moved, expected)):
        return "its view would not move the real and imaginary parts of each value together"
    return None


def _operand_value(tensor):
    """An input as _pairs_reason runs it: a constant's data, zeros for a run-time input."""
    return None if tensor is None else tensor.data if tensor.is_const else np.zeros(tensor.shape, tensor.dtype)


def _pairs_of(values):
    """The pairs (2v, 2v + 1) of an iota's values v."""
    return 2 * np.asarray(values)[..., None] + np.array([0, 1])


def unsupported_reason(node, reason_of):
    """None when the GPU can run `node`: as it is if no tensor of it is complex64, else its
    complex view (checked on an iota for a layout op, _pairs_reason). reason_of: the GPU
    registry's unsupported_reason. Else why not."""
    if not touches_complex(node):
        return reason_of(node)
    try:
        view = _view_node(_Builder(0), node)
    except NoView as exc:
        return f"no complex view: {exc}"
    reason = _pairs_reason(node, view) if node.op in AXIS_RULES else None
    if reason:
        return f"no complex view: {reason}"
    reason = reason_of(view)
    return None if reason is None else f"complex view {view.op}: {reason}"


def complex_view(graph, tensor_count=0):
    """The complex view of a partition (the module docstring): a shallow copy of `graph` (a Graph,
    or quant.FloatView, whose fields it keeps) with its nodes, inputs, outputs and tensors
    replaced by their views; `graph` itself when nothing in it is complex64. New constants are
    numbered from past `tensor_count` (the model's tensor count) and the graph's indices. Raises
    NoView for a node without a view (check with unsupported_reason first)."""
    if not any(touches_complex(n) for n in graph.nodes):
        return graph
    b = _Builder(max(graph.next_index, tensor_count))
    nodes = [_view_node(b, n) for n in graph.nodes]
    view = copy.copy(graph)
    view.nodes = nodes  # the setter indexes them anew
    view.inputs, view.outputs = [b.view(t) for t in graph.inputs], [b.view(t) for t in graph.outputs]
    view.tensors = list({id(t): t for n in nodes for t in [*n.inputs, *n.outputs] if t is not None}.values())
    view.next_index = b.next_index
    return view
