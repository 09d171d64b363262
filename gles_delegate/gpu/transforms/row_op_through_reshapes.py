"""Run a row-wise op between a RESHAPE and the RESHAPE that undoes it on the tensor before both:
a SOFTMAX (or LOG_SOFTMAX, L2_NORMALIZATION) normalizes each row of its last axis, so it gives
the same values however the leading dims are grouped. mobilevit's attention, as litert-torch
writes it, reshapes its [16, N, N] scores to [4, 4, N, N] for the SOFTMAX and back to [16, N, N]
for the next BATCH_MATMUL: both reshapes regroup the batch dims, which moves values in PHWC4 (a
copy dispatch each), and both go."""
import numpy as np

from ...ops.common import ACT_NONE, fused_activation
from ..kernels import epilogue
from .common import constant_parameters, fused_operands, sole_reader

ROW_OPS = ("SOFTMAX", "LOG_SOFTMAX", "L2_NORMALIZATION")


def apply(graph, log):
    operands = fused_operands(graph)
    for node in list(graph.nodes):
        if node.op not in ROW_OPS:
            continue
        found = _reshapes(graph, node, operands)
        if isinstance(found, str):
            log.skipped(node, found)
            continue
        inner, outer = found
        graph.set_inputs(node, [inner.inputs[0]])
        graph.set_outputs(node, [outer.outputs[0]])
        graph.remove_node(inner)
        graph.remove_node(outer)
        log.applied(node, f"on tensor {inner.inputs[0].index}, without {inner.label} and {outer.label}")


def _plain_reshape(node):
    """A RESHAPE of a constant (or no) shape input, without an activation or epilogue steps."""
    return (node is not None and node.op == "RESHAPE" and constant_parameters(node)
            and fused_activation(node) == ACT_NONE and not epilogue.steps_of(node))


def _reshapes(graph, node, operands):
    """(the RESHAPE before `node`, the one after it that undoes it), or why there are none."""
    x, out = node.inputs[0], node.outputs[0]
    inner = graph.producer_of(x)
    if not _plain_reshape(inner) or sole_reader(graph, x, operands) is not node:
        return "its input is not a RESHAPE's output read by it alone"
    outer = sole_reader(graph, out, operands)
    if not _plain_reshape(outer) or fused_activation(node) != ACT_NONE or epilogue.steps_of(node):
        return "its output is not read by a RESHAPE alone (or it has an activation or epilogue steps)"
    source, result = inner.inputs[0], outer.outputs[0]
    if tuple(result.shape) != tuple(source.shape) or not source.shape or source.shape[-1] != x.shape[-1]:
        return f"{outer.label} does not undo {inner.label}, or they regroup the last axis"
    if any(t.dtype != np.float32 or t.quantization is not None for t in (source, x, out, result)) or source.is_const:
        return "a tensor is not a float32 runtime tensor (a quantized model's, a constant)"
    return inner, outer
