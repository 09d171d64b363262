"""Rewrite an AVERAGE_POOL_2D whose one window covers the whole unpadded input as a MEAN over H
and W (keep_dims), the canonical form of a global average the reduction kernel runs."""
import numpy as np

from .. import kernels
from ..kernels.pool import is_global
from ...graph import Node
from ...ops.common import ACT_NONE, fused_activation
from .common import new_constant


def apply(graph, log):
    for node in list(graph.nodes):
        if node.op != "AVERAGE_POOL_2D" or not is_global(node):
            continue
        if fused_activation(node) != ACT_NONE:
            log.skipped(node, "it has a fused activation, which MEAN has not")
            continue
        axes = new_constant(graph, f"{node.outputs[0].name}/mean_axes", [1, 2], np.int32)
        mean = Node(index=node.index, op="MEAN", inputs=[node.inputs[0], axes], outputs=list(node.outputs),
                    options={"keep_dims": True})
        reason = kernels.unsupported_reason(mean)
        if reason:
            log.skipped(node, reason)
            continue
        graph.replace_node(node, [mean])
        log.applied(node, "as MEAN over axes [1, 2]")
