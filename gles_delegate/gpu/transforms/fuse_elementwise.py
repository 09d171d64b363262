"""Fuse an elementwise node that is not an activation (EXP, LOG, SQRT, RSQRT, ABS, NEG, ELU,
GELU, a binary op with a constant operand, or a quantized model's per-tensor fake-quant step)
into the epilogue of the node that produces its input, so a chain of elementwise nodes runs as
one shader."""
from ..kernels import epilogue
from .common import fuse_into_epilogue
from .fuse_activation import ACTIVATIONS

UNARY = tuple(op for op in epilogue.UNARY_OPS if op not in ACTIVATIONS)
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
    if node.op in UNARY or epilogue.is_fusable_fake_quant(node):
        return node.inputs[0]
    if node.op in BINARY:
        runtime = [t for t in node.inputs[:2] if not t.is_const]
        return runtime[0] if len(runtime) == 1 else None
    return None
