"""Fold nodes whose inputs are all constant (fp16 DEQUANTIZE, DENSIFY of weights) into constants."""
from .. import ops


def is_foldable(node):
    """True when every input is constant (or omitted) and the reference kernels can run it."""
    return (all(t is None or (t.is_const and not t.is_variable) for t in node.inputs)
            and any(t is not None for t in node.inputs)
            and ops.unsupported_reason(node) is None)


def fold_constants(graph):
    """Evaluate constant-only nodes once with the reference kernels; their outputs become
    read-only constants and the nodes leave the graph. Returns the folded nodes."""
    folded = []
    for node in list(graph.nodes):
        if not is_foldable(node):
            continue
        outputs = ops.run_node(node, [None if t is None else t.data for t in node.inputs])
        for tensor, value in zip(node.outputs, outputs):
            value = value.astype(tensor.dtype, copy=False).reshape(tensor.shape)
            value.flags.writeable = False
            tensor.data = value
        graph.remove_node(node)
        folded.append(node)
    return folded
