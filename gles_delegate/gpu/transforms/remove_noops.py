"""Remove nodes that pass their input through unchanged: those of an op whose GPU kernel states a
noop_input (OpFacts: RESHAPE, SQUEEZE, TRANSPOSE, SLICE, PAD, TILE, GATHER, single-input
CONCATENATION, a resize to the same size, ...) when the reference maps an iota on that input onto
itself; ADD / SUB of zero, MUL / DIV by one."""
import numpy as np

from ... import ops
from .. import kernels
from ...ops.common import ACT_NONE, fused_activation
from .common import bypass

NEUTRAL = {"ADD": (0.0, True), "SUB": (0.0, False), "MUL": (1.0, True), "DIV": (1.0, False)}  # (value, either side)
MAX_PROBE = 1 << 24  # float32 counts exactly up to here


def apply(graph, log):
    filled = {}  # (id(constant), value) -> whether it holds only that value: many nodes read one constant
    for node in list(graph.nodes):
        if not _candidate(node):
            continue
        source, reason = _passed_through(node, filled)
        if reason is None:
            reason = bypass(graph, node, source, node.outputs[0])
        if reason:
            log.skipped(node, reason)
        else:
            log.applied(node, f"readers of tensor {node.outputs[0].index} read tensor {source.index}")


def _candidate(node):
    """Nodes that could pass a value through: a value-moving op whose output has its data
    input's shape, or arithmetic with a constant operand."""
    if node.op in NEUTRAL:
        return any(t is not None and t.is_const for t in node.inputs[:2])
    k = kernels.facts(node.op).noop_input
    if k is None or len(node.outputs) != 1:
        return False
    source = node.inputs[k] if len(node.inputs) > k else None
    return source is not None and tuple(source.shape) == tuple(node.outputs[0].shape)


def _passed_through(node, filled):
    """(the input the node's output equals, None), or (None, why it is not a no-op). filled: the
    memo of _neutral_operand."""
    if fused_activation(node) != ACT_NONE:
        return None, "it has a fused activation"
    if node.op in NEUTRAL:
        return _neutral_operand(node, filled)
    k = kernels.facts(node.op).noop_input
    source, out = node.inputs[k], node.outputs[0]
    if source.is_const or source.dtype != out.dtype:
        return None, "its input is a constant, or of another type"
    if source.size > MAX_PROBE:
        return None, "too large to check"
    return (source, None) if _maps_iota_to_itself(node, k) else (None, "it rearranges its input")


def _maps_iota_to_itself(node, k):
    """Run the reference on 1, 2, 3, ... in place of the data input: an identity returns it,
    exactly (a resize whose coordinates or weights were inexact would not)."""
    source = node.inputs[k]
    probe = np.arange(1, source.size + 1, dtype=np.float32).reshape(source.shape)
    values = [probe if j == k else (None if t is None else t.data) for j, t in enumerate(node.inputs)]
    if node.op == "CONCATENATION" and len(node.inputs) != 1:
        return False
    if any(v is None for j, v in enumerate(values) if j != k and node.inputs[j] is not None):
        return False  # another input is computed at run time
    try:
        result = ops.run_node(node, values)[0]
    except (ValueError, IndexError, TypeError):
        return False
    return np.shape(result) == probe.shape and np.array_equal(np.asarray(result, np.float32), probe)


def _neutral_operand(node, filled):
    """ADD / SUB of zeros, MUL / DIV by ones (the constant on the right, or for ADD / MUL on
    either side), not growing the output: (the other input, None), else (None, why not).
    filled: {(id(constant), value): (constant, whether it holds only that value)}, kept by the caller."""
    value, commutes = NEUTRAL[node.op]
    a, b = node.inputs[:2]
    for const, other in ((b, a), (a, b)) if commutes else ((b, a),):
        if const is not None and const.is_const and not other.is_const \
                and tuple(other.shape) == tuple(node.outputs[0].shape) and _filled_with(const, value, filled):
            return other, None
    return None, f"no constant operand of {value:g} that leaves the other unchanged"


def _filled_with(const, value, filled):
    """Whether every element of constant tensor `const` is `value` (as float32), memoized in
    `filled` (the constant kept there, so that its id stays its own)."""
    key = (id(const), value)
    if key not in filled:
        filled[key] = (const, bool(np.all(np.asarray(const.data, np.float32) == value)))
    return filled[key][1]
