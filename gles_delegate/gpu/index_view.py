"""The index view of a GPU partition: the int64 indices ARG_MAX / ARG_MIN write held as int32.

tf.argmax's default output type is int64, so a classifier or segmentation net converted from
TensorFlow often ends in an ARG_MAX with an int64 output. The GPU has no 64-bit integers, but
these outputs need none: an index along one axis lies in [0, axis size), and every tensor the GPU
holds has fewer than 2^31 elements. This view (as complex_view.py's, a copy of the partition,
the partition itself untouched) retypes the int64 output of each ARG_MAX / ARG_MIN node to int32,
keeping its index, name and shape, with the node's output_type option to match; the kernel writes
int32 words and the download widens them into the tensor's int64 storage (runtime.store_output).

Only these outputs are narrowed. Any other int64 tensor (token ids, a CAST to int64, an int64
sum) may hold values past int32, so a node writing or reading one has no GPU kernel; that keeps a
node that reads an ARG_MAX's int64 output on the CPU too, so a narrowed tensor is always one of
its partition's outputs.
"""
import copy
import dataclasses

import numpy as np

INT64, INT32 = np.dtype(np.int64), np.dtype(np.int32)
NARROWED_OPS = ("ARG_MAX", "ARG_MIN")
TFLITE_INT32 = 2  # TensorType INT32: ARG_MAX / ARG_MIN's output_type option


def narrows(node):
    """Whether `node` writes an index the view holds as int32 (an int64 ARG_MAX / ARG_MIN output)."""
    return node.op in NARROWED_OPS and len(node.outputs) == 1 and node.outputs[0].dtype == INT64


def _narrowed(tensor):
    return dataclasses.replace(tensor, dtype=INT32, type_name="INT32")


def _view_node(node, views):
    """The node writing its narrowed output (recorded in `views`, by the tensor's id)."""
    out = node.outputs[0]
    views.setdefault(id(out), _narrowed(out))
    return dataclasses.replace(node, outputs=[views[id(out)]],
                               options={**node.options, "output_type": TFLITE_INT32})


def unsupported_reason(node, reason_of):
    """None when the GPU can run `node`: as it is, or through its index view where it narrows
    (reason_of: the reason of the next view down). Else why not."""
    if not narrows(node):
        return reason_of(node)
    reason = reason_of(_view_node(node, {}))
    return None if reason is None else f"int64 indices held as int32: {reason}"


def index_view(graph):
    """The index view of a partition (the module docstring): a shallow copy of `graph` (a Graph,
    quant.FloatView or complex view, whose fields it keeps) whose narrowing nodes write int32
    tensors of the same indices; `graph` itself when no node narrows."""
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
