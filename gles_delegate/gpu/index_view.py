"""The index view of a GPU partition: int64 tensors that hold int32 values, held as int32.

tf.argmax's default output type is int64, so a classifier or segmentation net converted from
TensorFlow often ends in an ARG_MAX with an int64 output, and a decoder gathers its next token's
embedding with it. The GPU has no 64-bit integers, but those tensors need none: int32_values.py
says which int64 tensors the model keeps within int32's range (ARG_MAX / ARG_MIN indices, CASTs
of narrower ints, moves of those, constants that fit). This view (as complex_view.py's, a copy of
the partition, the partition itself untouched) retypes each such tensor to int32, keeping its
index, name and shape (a constant's values narrowed), and the options that name a type to match:
an ARG_MAX writes int32 words, a GATHER reads int32 indices, a CAST of them reads int32. A
partition input of them is narrowed on upload (kernels/base.io_values), an output widened on
download (runtime.store_output).

A node touching any other int64 tensor (token ids from the user, an int64 sum) has no GPU kernel:
those may hold values past int32.
"""
import copy
import dataclasses

import numpy as np

from ..int32_values import within_int32

INT64, INT32 = np.dtype(np.int64), np.dtype(np.int32)
TFLITE_INT32 = 2  # TensorType INT32
TYPE_OPTIONS = ("output_type", "idx_out_type", "in_data_type", "out_data_type")  # options naming a tensor's type


def _int64_tensors(node):
    return [t for t in [*node.inputs, *node.outputs] if t is not None and t.dtype == INT64]


def narrows(node):
    """Whether `node` reads or writes an int64 tensor computed at run time, and every int64 tensor
    it touches is one the view holds as int32 (constants too: a GATHER's table, an EQUAL's
    operand, a RESHAPE's shape). A node whose only int64 tensors are constants keeps them: they
    are parameters its kernel reads as they are (REDUCE_WINDOW's window)."""
    touched = _int64_tensors(node)
    return any(not t.is_const for t in touched) and all(map(within_int32, touched))


def _narrowed(tensor):
    data = None if not tensor.is_const else np.asarray(tensor.data).astype(INT32)
    return dataclasses.replace(tensor, dtype=INT32, type_name="INT32", data=data)


def _view_node(node, views):
    """`node` reading and writing the narrowed twins of its int64 tensors (recorded in `views`,
    by the tensor's id), its type options saying int32 where they said int64."""
    for t in _int64_tensors(node):
        views.setdefault(id(t), _narrowed(t))

    def twin(t):
        return None if t is None else views.get(id(t), t)
    options = {k: (TFLITE_INT32 if k in TYPE_OPTIONS and v == 4 else v) for k, v in node.options.items()}
    return dataclasses.replace(node, inputs=[twin(t) for t in node.inputs],
                               outputs=[twin(t) for t in node.outputs], options=options)


def unsupported_reason(node, reason_of):
    """None when the GPU can run `node`: as it is, or through its index view where it narrows
    (reason_of: the reason of the next view down). Else why not."""
    if not narrows(node):
        return reason_of(node)
    reason = reason_of(_view_node(node, {}))
    return None if reason is None else f"int64 values held as int32: {reason}"


def index_view(graph):
    """The index view of a partition (the module docstring): a shallow copy of `graph` (a Graph,
    quant.FloatView or complex view, whose fields it keeps) whose narrowing nodes read and write
    int32 tensors of the same values; `graph` itself when no node narrows."""
    if not any(narrows(n) for n in graph.nodes):
        return graph
    views = {}
    nodes = [_view_node(n, views) if narrows(n) else n for n in graph.nodes]
    view = copy.copy(graph)
    view.nodes = nodes  # the setter indexes them anew
    view.inputs = [views.get(id(t), t) for t in graph.inputs]
    view.outputs = [views.get(id(t), t) for t in graph.outputs]
    view.tensors = list({id(t): t for n in nodes for t in [*n.inputs, *n.outputs] if t is not None}.values())
    return view
