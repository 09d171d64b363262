"""Rewrite a 1x1 CONV_2D on a 1x1 input (a classifier or squeeze-excite head) as a
FULLY_CONNECTED, whose kernel splits the input channels over a workgroup."""
import numpy as np

from ..gpu import kernels
from ..gpu.kernels.conv import EXPLICIT_PADDING, optional_input
from ..graph import Node
from .common import new_constant


def apply(graph, log):
    for k, node in enumerate(graph.nodes):
        if node.op != "CONV_2D" or tuple(node.inputs[0].shape[1:3]) != (1, 1):
            continue
        reason = _blocker(node)
        fc = None if reason else _fully_connected(graph, node)
        reason = reason or kernels.unsupported_reason(fc)
        if reason:
            log.skipped(node, reason)
            continue
        graph.nodes[k] = fc
        log.applied(node, "as FULLY_CONNECTED")


def _blocker(node):
    x, filt = node.inputs[:2]
    if tuple(filt.shape[1:3]) != (1, 1):
        return f"its filter is {filt.shape[1]}x{filt.shape[2]}, not 1x1"
    if node.options.get(EXPLICIT_PADDING) or tuple(node.outputs[0].shape[1:3]) != (1, 1):
        return "its output is not 1x1"
    if not filt.is_const:
        return "its filter is computed at run time"
    return None


def _fully_connected(graph, node):
    """The FULLY_CONNECTED node computing what `node` does: weights [O, I], the same bias and
    activation, and keep_num_dims so the output keeps its [N, 1, 1, O] shape."""
    x, filt, bias = node.inputs[0], node.inputs[1], optional_input(node, 2)
    weights = np.asarray(filt.data, np.float32).reshape(filt.shape[0], filt.shape[3])
    weights_tensor = new_constant(graph, f"{filt.name}/fc", weights)
    options = {"fused_activation_function": node.options.get("fused_activation_function", 0),
               "weights_format": 0, "keep_num_dims": True, "asymmetric_quantize_inputs": False}
    return Node(index=node.index, op="FULLY_CONNECTED", inputs=[x, weights_tensor, bias],
                outputs=list(node.outputs), options=options)
