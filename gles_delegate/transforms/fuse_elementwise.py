"""Fuse an elementwise node that is not an activation (EXP, LOG, SQRT, RSQRT, ABS, NEG, ELU,
GELU, or a binary op with a constant operand) into the epilogue of the node that produces its
input, so a chain of elementwise nodes runs as one shader."""
from ..gpu.kernels import epilogue
from .common import fuse_into_epilogue
from .fuse_activation import ACTIVATIONS

UNARY = tuple(op for op in epilogue.UNARY_CODES if op not in ACTIVATIONS and op != "GELU_EXACT")
BINARY = tuple(epilogue.BINARY_CODES)


def apply(graph, log):
    for node in list(graph.nodes):
        value = _value_input(node)
        if value is None:
            continue
        reason = fuse_into_epilogue(graph, log, node, value)
        if reason:
            log.skipped(node, reason)


def _value_input(node):
    """The input carried through the elementwise node (the runtime operand of a binary op with a
    constant), or None when the node is not this rule's."""
    if node.op in UNARY:
        return node.inputs[0]
    if node.op in BINARY:
        runtime = [t for t in node.inputs[:2] if not t.is_const]
        return runtime[0] if len(runtime) == 1 else None
    return None
