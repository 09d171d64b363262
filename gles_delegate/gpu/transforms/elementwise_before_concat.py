"""Move the elementwise nodes that read a CONCATENATION before it: one copy of them per
concatenated input, each with its part of the constants (a scalar stays whole, one value per
channel is cut at the input's channels) and of the other runtime operands (a residual ADD's other
tensor, read through a channel SLICE that slice_views makes a view), so that the rules after
(fold_mul_add, fuse_swish, fuse_activation, fuse_residual_add, fuse_elementwise) fold or fuse
each copy into the node that computes that input. A batch norm, swish and residual ADD after the
concatenation of a split pointwise convolution (MixNet, GhostNet) then cost no dispatch.

f(concat(a, b)) == concat(f(a), f(b)) for an elementwise f whose other operands are cut at the
same channels. The nodes moved are the concatenation's readers and, while more than one tensor
of theirs is read elsewhere, the readers of those (x * sigmoid(x), hard swish as four nodes):
at most MAX_GROUP, with one tensor read after them. Only where every input's producer can take
the copies as epilogue steps (else one dispatch would become several), and only on float32
tensors: in a quantized model the concatenation's own rounding to its output's grid would go.
"""
import numpy as np

from .. import kernels
from ...graph import Node
from ...ops.common import ACT_NONE, fused_activation
from ..kernels import epilogue, layout
from ..phwc4 import block_offset
from .common import is_boundary, new_constant, only_reader_blocker, producer_of, readers_of, runs_before
from .fuse_elementwise import BINARY

# rewrite_partition skips the rule when False (gles-profile --set gpu.transforms.elementwise_before_concat.ENABLED=0)
ENABLED = True
# PRELU / LEAKY_RELU carry parameters a copy would have to cut; CAST changes the dtype the
# concatenation would have to follow.
UNARY = tuple(op for op in epilogue.UNARY_OPS if op not in ("CAST", "PRELU", "LEAKY_RELU"))
MAX_GROUP = 6  # nodes moved together: hard swish written out is four


def apply(graph, log):
    for concat in list(graph.nodes):
        if concat.op != "CONCATENATION" or len(concat.inputs) < 2:
            continue
        groups = 0
        while True:  # the nodes after the moved ones then read the concatenation: again
            reason = _move_readers(graph, concat)
            if reason:
                break
            groups += 1
        if groups:
            log.applied(concat, f"moved the elementwise nodes after it before it ({groups} groups), "
                                f"one copy per input")
        else:
            log.skipped(concat, reason)


def _move_readers(graph, concat):
    """Move the group of elementwise nodes reading `concat` before it; None once done, else why
    not."""
    group, result, reason = _group(graph, concat)
    placed = parts = None
    if reason is None:
        placed, parts, reason = _copies(graph, concat, group, result)
    if reason:
        return reason
    for node, anchor in placed:
        graph.insert_before(node, anchor)
    graph.set_inputs(concat, parts)
    graph.set_outputs(concat, [result])
    for node in group:
        graph.remove_node(node)
    return None


def _group(graph, concat):
    """(the elementwise nodes to move, in order; the one tensor of theirs read after them, None),
    or (None, None, why not)."""
    value = concat.outputs[0]
    if fused_activation(concat) != ACT_NONE or epilogue.steps_of(concat):
        return None, None, "it applies an activation of its own"
    if is_boundary(graph, value) or not readers_of(graph, value):
        return None, None, "its output leaves the partition or nothing reads it"
    group, inside = [], {id(value)}
    frontier = list(readers_of(graph, value))
    while frontier:
        node = frontier.pop(0)
        if node in group:
            continue
        reason = _node_blocker(graph, node, value, inside, concat)
        if reason:
            return None, None, f"{node.label}: {reason}"
        group.append(node)
        inside.add(id(node.outputs[0]))
        if len(group) > MAX_GROUP:
            return None, None, f"more than {MAX_GROUP} elementwise nodes would move"
        escaping = [t for t in (n.outputs[0] for n in group) if _read_outside(graph, t, group)]
        if not frontier and len(escaping) > 1:  # grow until one tensor is read after the group
            frontier = [r for t in escaping for r in readers_of(graph, t) if r not in group]
            if not frontier:
                return None, None, "several of the moved nodes' outputs leave the partition"
    escaping = [t for t in (n.outputs[0] for n in group) if _read_outside(graph, t, group)]
    if len(escaping) != 1:
        return None, None, "nothing reads the moved nodes' result"
    if is_boundary(graph, escaping[0]):  # written in place, it would need a copy out of its own
        return None, None, "the moved nodes' result leaves the partition"
    group.sort(key=graph.position)
    return group, escaping[0], None


def _read_outside(graph, tensor, group):
    return is_boundary(graph, tensor) or any(r not in group for r in readers_of(graph, tensor))


def _node_blocker(graph, node, value, inside, concat):
    """Why `node`, a reader of the concatenation's output `value` or of a moved node, cannot
    move with them, or None."""
    if node.op not in UNARY and node.op not in BINARY:
        return "it is not an elementwise op"
    out = node.outputs[0]
    if tuple(out.shape) != tuple(value.shape):
        return "its output is not of the concatenation's shape (a broadcast)"
    channels = value.shape[-1]
    for t in node.inputs:
        if t is None or id(t) in inside:
            continue
        if t.is_const:
            if t.size not in (1, channels) or len(t.shape) > len(value.shape) or any(d != 1 for d in t.shape[:-1]):
                return f"constant {list(t.shape)} is not a scalar or one value per channel"
        elif tuple(t.shape) != tuple(value.shape) or not runs_before(graph, t, concat):
            return f"tensor {t.index} is computed at run time with another shape or after {concat.label}"
    if any(t.dtype != np.float32 or t.quantization is not None for t in (*filter(None, node.inputs), out)):
        return "a tensor is not float32 (a quantized model's)"
    return None


def _copies(graph, concat, group, result):
    """([(a new node, the node it goes before)]: the copies of the group and the SLICEs of their
    runtime operands; [the copies' results, per input of `concat`]; None), or (None, None, why
    not)."""
    rank = len(concat.outputs[0].shape)
    axis = concat.options.get("axis", 0) % rank
    if len({id(t) for t in concat.inputs}) != len(concat.inputs):
        return None, None, "it reads one tensor twice"
    for j, part in enumerate(concat.inputs):  # before any tensor is made for the copies
        reason = _producer_blocker(graph, part, len(group))
        if reason:
            return None, None, f"input {j}: {reason}"
    start, placed, parts = 0, [], []
    for j, part in enumerate(concat.inputs):
        width = part.shape[axis]
        made = {id(concat.outputs[0]): part}  # what each tensor of the group is for this input
        for node in group:
            for t in node.inputs:
                if t is None or id(t) in made:
                    continue
                made[id(t)], slicer, reason = _part_of(graph, t, axis, start, width, part)
                if reason:
                    return None, None, f"input {j}: {reason}"
                if slicer is not None:
                    placed.append((slicer, _earliest_place(graph, t)))
            out = graph.new_tensor(f"{node.outputs[0].name}/part{j}", part.shape, np.float32)
            copy = Node(index=node.index, op=node.op, inputs=[made[id(t)] if t is not None else None for t in node.inputs],
                        outputs=[out], version=node.version, options=dict(node.options))
            reason = kernels.unsupported_reason(copy)
            if reason:
                return None, None, f"the copy of {node.label} for input {j} cannot run: {reason}"
            made[id(node.outputs[0])] = out
            placed.append((copy, concat))
        parts.append(made[id(result)])
        start += width
    return placed, parts, None


def _producer_blocker(graph, part, steps):
    """Why the node computing `part` cannot take `steps` copies as epilogue steps, or None."""
    producer = producer_of(graph, part)
    if producer is None or is_boundary(graph, part):
        return "it is not computed in this partition"
    if len(producer.outputs) != 1:
        return f"{producer.label} has several outputs"
    reason = only_reader_blocker(graph, part, producer) or kernels.epilogue_reason(producer)
    if reason:
        return reason
    if epilogue.own_steps(producer) + len(epilogue.steps_of(producer)) + steps > epilogue.MAX_STEPS:
        return f"the epilogue of {producer.label} has no room for {steps} more steps"
    return None


def _part_of(graph, operand, axis, start, width, part):
    """(the copy's operand for channels [start, start + width) of the concatenated axis, the
    SLICE node computing it or None, None), or (None, None, why not): a constant cut where it
    holds one value per channel along that axis, else itself; a runtime tensor sliced, where the
    slice is a block of its storage (a view, no dispatch)."""
    last = axis == len(part.shape) - 1
    if operand.is_const:
        if not last or operand.size == 1:
            return operand, None, None
        data = np.asarray(operand.data)[..., start:start + width]
        name = f"{operand.name}/channels_{start}_{start + width}"
        return new_constant(graph, name, data, data.dtype), None, None
    begin = [0] * len(part.shape)
    begin[axis] = start
    out = graph.new_tensor(f"{operand.name}/part_{start}_{start + width}", part.shape, operand.dtype)
    slicer = Node(index=_producer_index(graph, operand), op="SLICE", outputs=[out],
                  inputs=[operand, new_constant(graph, f"{out.name}/begin", begin, np.int32),
                          new_constant(graph, f"{out.name}/size", part.shape, np.int32)])
    maps = layout.slice_maps(slicer) if layout.SUPPORT["SLICE"](slicer) is None else None
    if maps is None or block_offset(operand.shape, maps[0]) is None:
        return None, None, f"channels {start}..{start + width} of tensor {operand.index} are no block of its storage"
    return out, slicer, None


def _earliest_place(graph, tensor):
    """The node a SLICE of `tensor` goes before: the one after the node computing it (the first
    node for a partition input). Early, so that fuse_residual_add, which tries the operand
    computed last first, fuses the copy into the concatenated input's producer."""
    nodes, producer = graph.nodes, producer_of(graph, tensor)
    return nodes[0] if producer is None else nodes[nodes.index(producer) + 1]


def _producer_index(graph, tensor):
    """The index of the node computing `tensor` (what a SLICE of it is named after), else -1."""
    producer = producer_of(graph, tensor)
    return producer.index if producer is not None else -1
