"""Run a FULLY_CONNECTED between a flattening RESHAPE and the RESHAPE that restores the leading
dims on the unflattened tensor, with keep_num_dims: Keras' Dense on a rank-3 or rank-4 input
(x [..., C] -> RESHAPE [rows, C] -> FULLY_CONNECTED [rows, U] -> RESHAPE [..., U]) computes the
same products as one FULLY_CONNECTED of x that keeps its dims, and the two RESHAPEs are copies on
the GPU (a rank-2 tensor's PHWC4 layout is not [1, H, W, C]'s). Three dispatches become one, and
the ops after the Dense (its bias ADD, its activation) can then join the FULLY_CONNECTED's
epilogue.
"""
import math

from ...graph import Node
from .. import kernels
from .common import fused_operands, sole_reader

ENABLED = True  # rewrite_partition skips the rule when False, for A/B measurements (gles-profile --set gpu.transforms.unflatten_dense.ENABLED=0)


def apply(graph, log):
    operands = fused_operands(graph)
    for fc in list(graph.nodes):
        if fc.op != "FULLY_CONNECTED" or fc.options.get("keep_num_dims") or len(fc.outputs) != 1:
            continue
        flatten = graph.producer_of(fc.inputs[0])
        if flatten is None or flatten.op != "RESHAPE" or len(flatten.inputs[0].shape) < 3:
            continue
        reason = _unflatten(graph, fc, flatten, operands)
        if reason:
            log.skipped(fc, reason)
        else:
            log.applied(fc, f"on the input of {flatten.label}, keeping its dims")


def _unflatten(graph, fc, flatten, operands):
    """Replace flatten -> fc -> its restoring RESHAPE by one FULLY_CONNECTED keeping x's dims;
    returns why not, or None once done."""
    x, flat, dense = flatten.inputs[0], flatten.outputs[0], fc.outputs[0]
    leading = tuple(x.shape[:-1])
    if tuple(flat.shape) != (math.prod(leading), x.shape[-1]):
        return f"{flatten.label} does not flatten {list(x.shape)} to [rows, {x.shape[-1]}]"
    restore = sole_reader(graph, dense, operands)
    if restore is None or restore.op != "RESHAPE":
        return "its output is not read by one RESHAPE alone"
    out = restore.outputs[0]
    if tuple(out.shape) != leading + (dense.shape[-1],):
        return f"{restore.label} does not restore the leading dims {list(leading)}"
    if sole_reader(graph, flat, operands) is None:
        return f"the output of {flatten.label} is also read elsewhere"
    node = Node(index=fc.index, op=fc.op, inputs=[x, *fc.inputs[1:]], outputs=[out], version=fc.version,
                options={**fc.options, "keep_num_dims": True})
    reason = kernels.unsupported_reason(node)
    if reason:
        return reason
    graph.replace_node(restore, [node])
    graph.remove_node(fc)
    graph.remove_node(flatten)
    return None
