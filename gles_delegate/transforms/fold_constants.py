"""Fold nodes whose inputs are all constant (fp16 DEQUANTIZE, DENSIFY of weights) into constants."""
import functools

import numpy as np

from .. import ops
from ..graph import Deferred
from ..ops.checks import node_error


def is_foldable(node):
    """True when every input is constant (or omitted) and the reference kernels can run it."""
    return (all(t is None or (t.is_const and not t.is_variable) for t in node.inputs)
            and any(t is not None for t in node.inputs)
            and ops.unsupported_reason(node) is None)


def folded_value(node, tensor, value):
    """A kernel output as the read-only constant of `tensor`: its dtype, its declared shape (a
    ModelError naming the node if the value does not fit it). np.asarray: kernels may return
    numpy scalars, whose flags cannot be changed."""
    value = np.asarray(value).astype(tensor.dtype, copy=False)
    try:
        value = value.reshape(tensor.shape)
    except ValueError:
        raise node_error(node, f"folding gives output tensor {tensor.index} shape {list(value.shape)}, the "
                               f"model declares {list(tensor.shape)}") from None
    value.flags.writeable = False
    return value


def deferrable(node):
    """An fp16 DEQUANTIZE of weights: it cannot fail (same shape, a cast), so it can wait until
    something reads its output; other folds run now and report a malformed node at once."""
    return (node.op == "DEQUANTIZE" and node.inputs[0].dtype == np.float16
            and tuple(node.inputs[0].shape) == tuple(node.outputs[0].shape))


def _fold(node, tensor):
    value = ops.run_node(node, [None if t is None else t.data for t in node.inputs])[0]
    return folded_value(node, tensor, value)


def fold_constants(graph):
    """Evaluate constant-only nodes once with the reference kernels; their outputs become
    read-only constants and the nodes leave the graph (an fp16 DEQUANTIZE as a Deferred value,
    computed when first read). Returns the folded nodes."""
    folded = []
    for node in graph.nodes:  # in order: a fold's output is constant for the nodes after it
        if not is_foldable(node):
            continue
        if deferrable(node):
            node.outputs[0].data = Deferred(functools.partial(_fold, node, node.outputs[0]))
        else:
            outputs = ops.run_node(node, [None if t is None else t.data for t in node.inputs])
            for tensor, value in zip(node.outputs, outputs):
                tensor.data = folded_value(node, tensor, value)
        folded.append(node)
    gone = {id(n) for n in folded}
    graph.nodes = [n for n in graph.nodes if id(n) not in gone]  # one pass, not one per folded node
    return folded
