"""Fold nodes whose inputs are all constant (fp16 DEQUANTIZE, DENSIFY of weights) into constants,
and SHAPE or ZEROS_LIKE of a tensor whose shape an allocation fixes (fold_shapes); give sparse
weights that an op reads directly a DENSIFY of their own first (densify_sparse_reads)."""
import functools

import numpy as np

from . import ops
from .graph import Deferred, Node
from .ops.checks import node_error


def is_foldable(node):
    """True when every input is constant (or omitted) and the reference kernels can run it; never
    for the ops that call back into the interpreter (control flow, resource variables)."""
    return (node.op not in ops.RUNTIME_OPS and all(t is None or (t.is_const and not t.is_variable) for t in node.inputs)
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
    """Folds of weights that wait until something reads their output: an fp16 DEQUANTIZE (a
    cast, it cannot fail) and a DENSIFY (tens of ms of a start on the models that have sparse
    weights). A DENSIFY can fail on malformed index arrays: the interpreter computes at
    allocate_tensors the deferred values its CPU steps and outputs need, and a GPU compile reads
    the others, so that stays a ModelError of allocate_tensors. Only a partition loaded from the
    serialization cache never reads them: the cold start that stored it did, from the same bytes
    (the entry's key holds their sha256). Other folds run now."""
    if node.op == "DENSIFY":
        return True
    return (node.op == "DEQUANTIZE" and node.inputs[0].dtype == np.float16
            and tuple(node.inputs[0].shape) == tuple(node.outputs[0].shape))


def _fold(node, tensor):
    value = ops.run_node(node, [None if t is None else t.data for t in node.inputs])[0]
    return folded_value(node, tensor, value)


def densify_sparse_reads(graph):
    """Put a DENSIFY before every node but a DENSIFY that reads a sparse constant (TFLite's
    FULLY_CONNECTED takes sparse weights itself; the reference and GPU kernels take dense ones),
    one per sparse tensor, the reader then reading its output: fold_constants folds it like any
    DENSIFY of weights. A sparse kernel computes the dense op's sums without the zero terms:
    exactly the same integers in int8, the same real numbers in float (summed in another
    order). A DENSIFY takes its reader's operator index, which its errors name (malformed index
    arrays: a ModelError at allocate_tensors). Returns the DENSIFY nodes added."""
    dense, added = {}, []
    for node in list(graph.nodes):
        sparse = [t for t in node.inputs if t is not None and t.sparsity is not None and t.is_const]
        if node.op == "DENSIFY" or not sparse:
            continue
        for tensor in sparse:
            if id(tensor) not in dense:
                out = graph.new_tensor(f"{tensor.name}/densified", tensor.shape, tensor.dtype,
                                       quantization=tensor.quantization)
                densify = Node(index=node.index, op="DENSIFY", inputs=[tensor], outputs=[out])
                graph.insert_before(densify, node)
                added.append(densify)
                dense[id(tensor)] = out
        graph.set_inputs(node, [dense.get(id(t), t) if t is not None else None for t in node.inputs])
    return added


def fold_constants(graph):
    """Evaluate constant-only nodes once with the reference kernels; their outputs become
    read-only constants and the nodes leave the graph (fp16 DEQUANTIZE and DENSIFY as Deferred
    values, computed when first read: see deferrable). Returns the folded nodes."""
    folded = []
    graph_inputs = {id(t) for t in graph.inputs}
    for node in graph.nodes:  # in order: a fold's output is constant for the nodes after it
        # A node that overwrites a graph input runs at every invoke, as in TFLite: the input
        # takes set_tensor's value until then (and stays settable).
        if not is_foldable(node) or any(id(t) in graph_inputs for t in node.outputs):
            continue
        if deferrable(node):
            node.outputs[0].data = Deferred(functools.partial(_fold, node, node.outputs[0]))
        else:
            outputs = ops.run_node(node, [None if t is None else t.data for t in node.inputs])
            for tensor, value in zip(node.outputs, outputs):
                tensor.data = folded_value(node, tensor, value)
        folded.append(node)
    graph.remove_nodes(folded)
    return folded


# Ops whose output depends on their input's shape alone: node, that shape -> the output's value.
SHAPE_ONLY = {"SHAPE": lambda node, shape: np.array(shape),
              "ZEROS_LIKE": lambda node, shape: np.zeros(shape, node.outputs[0].dtype)}


def fold_shapes(graph, dynamic):
    """Fold each SHAPE (or ZEROS_LIKE: tf.linalg.band_part's) node whose input's shape this
    allocation fixes (its id is not in `dynamic`, shape_propagation.dynamic_tensors) into a
    constant, then what only computes on such constants (fold_constants): the SHAPE ->
    STRIDED_SLICE -> PACK chain a dynamic-batch Keras model computes a RESHAPE's shape with, whose
    int ops would otherwise run on the CPU and cut the GPU's partition at every squeeze-excite
    block. The value holds until the next allocate_tensors, which plans again from the model
    (after resize_tensor_input, say). A node whose output is a graph output stays a node.
    Returns the folded nodes."""
    graph_outputs = {id(t) for t in graph.outputs}
    # One the reference refuses stays a node, for allocate_tensors' checks to name it.
    shapes = [n for n in graph.nodes if n.op in SHAPE_ONLY and n.inputs and n.inputs[0] is not None
              and id(n.inputs[0]) not in dynamic and n.outputs and n.outputs[0] is not None
              and id(n.outputs[0]) not in graph_outputs and ops.unsupported_reason(n) is None]
    for node in shapes:
        node.outputs[0].data = folded_value(node, node.outputs[0], SHAPE_ONLY[node.op](node, node.inputs[0].shape))
    graph.remove_nodes(shapes)
    return shapes + (fold_constants(graph) if shapes else [])
