"""Rewrite a CONV_2D whose filter covers its whole input and gives one output pixel (a 1x1 conv
of a 1x1 input, or a VALID conv with an HxW filter on an HxW input: classifier and regression
heads) as a FULLY_CONNECTED, whose kernel splits the long sum over a workgroup. The filter
[O, H, W, I] flattened is exactly the FC weights over the input's row-major H x W x I."""
import numpy as np

from .. import kernels
from ..kernels.conv import EXPLICIT_PADDING, optional_input
from ...graph import Node
from ...ops.common import PADDING_VALID, dilations_of
from .common import new_constant


def apply(graph, log):
    for node in list(graph.nodes):
        if node.op != "CONV_2D" or tuple(node.outputs[0].shape[1:3]) != (1, 1):
            continue
        reason = _blocker(node)
        replacement = None if reason else _fully_connected(graph, node)
        reason = reason or next(filter(None, map(kernels.unsupported_reason, replacement)), None)
        if reason:
            log.skipped(node, reason)
            continue
        graph.replace_node(node, replacement)
        log.applied(node, "as FULLY_CONNECTED")


def _blocker(node):
    x, filt = node.inputs[:2]
    if node.options.get(EXPLICIT_PADDING):
        return "it has explicit padding"
    if not filt.is_const:
        return "its filter is computed at run time"
    if filt.shape[3] != x.shape[3]:
        return "it is a grouped convolution"
    if tuple(filt.shape[1:3]) != tuple(x.shape[1:3]):
        return f"its filter is {filt.shape[1]}x{filt.shape[2]}, not the input's {x.shape[1]}x{x.shape[2]}"
    if tuple(x.shape[1:3]) != (1, 1) and node.options.get("padding") != PADDING_VALID:
        return "a filter as large as the input with SAME padding pads it"
    if dilations_of(node) != (1, 1):
        return "it is dilated"
    return None


def _fully_connected(graph, node):
    """Nodes computing what `node` does: FULLY_CONNECTED with weights [O, H*W*I], the same bias
    and activation; over a 1x1 input with keep_num_dims (the output keeps [N, 1, 1, O]), else
    into a new [N, O] tensor that a RESHAPE (free: the same PHWC4 layout) gives the conv's shape."""
    x, filt, bias = node.inputs[0], node.inputs[1], optional_input(node, 2)
    out = node.outputs[0]
    weights = np.asarray(filt.data, np.float32).reshape(filt.shape[0], -1)
    weights_tensor = new_constant(graph, f"{filt.name}/fc", weights)
    one_pixel = tuple(x.shape[1:3]) == (1, 1)
    options = {"fused_activation_function": node.options.get("fused_activation_function", 0),
               "weights_format": 0, "keep_num_dims": one_pixel, "asymmetric_quantize_inputs": False}
    if one_pixel:
        return [Node(index=node.index, op="FULLY_CONNECTED", inputs=[x, weights_tensor, bias],
                     outputs=[out], options=options)]
    rows = graph.new_tensor(f"{out.name}/fc", (out.shape[0], out.shape[3]), out.dtype)
    return [Node(index=node.index, op="FULLY_CONNECTED", inputs=[x, weights_tensor, bias], outputs=[rows],
                 options=options),
            Node(index=node.index, op="RESHAPE", inputs=[rows, None], outputs=[out],
                 options={"new_shape": tuple(out.shape)})]
