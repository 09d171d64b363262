"""Shape propagation after an input is resized: each node's output shapes come from running its
reference kernel once on zero inputs of the new shapes (the reference is the shape oracle)."""
import numpy as np

from . import ops
from .errors import ModelError


def propagate_shapes(graph, input_shapes):
    """Set graph input shapes from {tensor index: shape} and recompute every activation's shape."""
    for tensor in graph.inputs:
        if tensor.index in input_shapes:
            tensor.shape = tuple(input_shapes[tensor.index])
    values = {}
    for node in graph.nodes:
        inputs = []
        for t in node.inputs:
            if t is None:
                inputs.append(None)
            elif t.is_const:
                inputs.append(t.data)
            else:
                inputs.append(values.get(t.index, np.zeros(t.shape, t.dtype)))
        try:
            outputs = ops.run_node(node, inputs)
        except (ValueError, IndexError) as exc:
            raise ModelError(f"operator {node.label} cannot take the resized shapes: {exc}") from None
        for tensor, value in zip(node.outputs, outputs):
            tensor.shape = tuple(value.shape)
            values[tensor.index] = value
