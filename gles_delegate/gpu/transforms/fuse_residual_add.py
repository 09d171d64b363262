"""Fuse a binary op of two tensors computed at run time (a residual ADD, and its fused
activation) into the epilogue of the node that computes one of them; that node's kernel reads
the other operand at each position it writes."""
from ..kernels import epilogue
from .common import fuse_into_epilogue

OPS = tuple(epilogue.BINARY_CODES)


def apply(graph, log):
    for node in list(graph.nodes):
        if node.op not in OPS or any(t.is_const for t in node.inputs[:2]):
            continue
        a, b = node.inputs[:2]
        if a is b:
            log.skipped(node, "both operands are one tensor")
            continue
        reasons = []
        # The operand computed last first: the other one then already exists when it runs.
        for value in sorted((a, b), key=lambda t: _position(graph, t), reverse=True):
            reason = fuse_into_epilogue(graph, log, node, value)
            if reason is None:
                break
            reasons.append(f"tensor {value.index}: {reason}")
        else:
            log.skipped(node, "; ".join(reasons))


def _position(graph, tensor):
    """Where the node computing `tensor` runs (below every node for a partition input)."""
    producer = graph.producer_of(tensor)
    return -1 if producer is None else graph.position(producer)
