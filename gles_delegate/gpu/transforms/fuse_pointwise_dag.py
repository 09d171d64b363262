"""Fuse a connected, convex group of pointwise nodes of one output shape into one POINTWISE_DAG
node (gpu/kernels/pointwise.py), one dispatch that stores every tensor of the group read outside
it: the elementwise DAG of a recurrent cell (litert-torch's unrolled LSTM: the gate SLICEs of the
recurrent FULLY_CONNECTED, their LOGISTIC / TANH and the MUL / ADD of the cell state, which the
epilogues fuse as chains only, 5 dispatches in 3 barrier phases per step) runs between two
FULLY_CONNECTEDs in one.

Members: a node the elementwise kernel runs (its first input read at the output position, then
its own op and its epilogue as steps: elementwise.build), and a SLICE / STRIDED_SLICE with
epilogue steps whose output is one contiguous block of its input's PHWC4 storage (a channel range
of a batch-1 tensor at a multiple of 4: a load at an offset). Groups grow in graph order: a node
joins the groups of the members whose outputs it reads when the union stays convex (no path
leaves it and comes back: the group runs as one dispatch) and within the template's slots, inputs
and outputs. The group's nodes go; the fused node takes the last one's place, and nodes between
them that read the group move after it. Tensors only the group read are no longer stored: a
capture computes them on the reference kernels (interpreter: fused_away).
"""
import numpy as np

from ...graph import Node, fused_reads, read_tensors
from ...ops.common import ACT_NONE, fused_activation
from .. import kernels
from ..kernels import binary, elementwise, epilogue, layout, pointwise
from ..kernels.base import INT32
from ..kernels.pointwise import INPUT, REG, SCALAR, Input, Program, Ref, Slot
from ..phwc4 import block_offset
from .common import is_boundary, readers_of

ENABLED = True  # rewrite_partition skips the rule when False (gles-profile --set gpu.transforms.fuse_pointwise_dag.ENABLED=0)
SLICES = ("SLICE", "STRIDED_SLICE")
# The ops whose kernel reads its first input at the output position and applies steps (elementwise.build).
ELEMENTWISE = frozenset(op for module in (elementwise, binary) for op, build in module.BUILD.items()
                        if build is elementwise.build)
# Layout options other rules set: such a slice reads through a map or shares storage.
_LAYOUT_KEYS = (layout.READ_THROUGH, layout.VIEW_OUTPUTS, layout.IN_PLACE_INPUTS, layout.LANE_VIEWS, layout.ALIAS)


def apply(graph, log):
    members, why = {}, {}
    for node in graph.nodes:
        member, reason = _member(node)
        if member is not None:
            members[node] = member
        elif reason:
            log.skipped(node, reason)
    for group in _groups(graph, members, why):
        reason = _fuse(graph, group, members) if len(group) > 1 else \
            why.get(group[0]) or "no pointwise node of its shape reads it or feeds it"
        for node in group:
            if reason:
                log.skipped(node, reason)
                continue
            more = f"; it joined no more: {why[node]}" if why.get(node) else ""
            log.applied(node, f"with {', '.join(n.label for n in group if n is not node)} into one {pointwise.OP}{more}")


# -- members ---------------------------------------------------------------------------------------
def _member(node):
    """((value, shift, block, steps), None) for a node the group kernel computes as `steps`
    (epilogue Steps) applied to `value` (a tensor read at the output position, or with `block`
    its PHWC4 storage from vec4 element `shift` on); (None, why not) for an elementwise node or
    a slice with epilogue steps it cannot take; (None, None) for any other node (a plain slice
    only moves values: rule slice_views may make it a view)."""
    if node.op in SLICES and epilogue.steps_of(node):
        reason = _slice_blocker(node)
        x = node.inputs[0]
        return (None, reason) if reason else \
            ((x, block_offset(x.shape, layout.slice_maps(node)[0]), True, epilogue.steps_of(node)), None)
    if node.op not in ELEMENTWISE:
        return None, None
    reason = _elementwise_blocker(node)
    if reason:
        return None, reason
    x = node.inputs[0]
    return (x, 0, False, tuple(epilogue.node_steps(node, x)) + epilogue.steps_of(node)), None


def _elementwise_blocker(node):
    """Why elementwise `node` cannot join a group, or None. (Its kernel's support check is not
    asked again: an epilogue may have made it write another dtype than its op does, a CAST's.)"""
    if fused_activation(node) not in (ACT_NONE, *epilogue.ACTIVATION_STEPS):
        return "its fused activation has no epilogue step"
    return _tensors_blocker(node, read_tensors(node))


def _slice_blocker(node):
    """Why a SLICE / STRIDED_SLICE with epilogue steps cannot join a group (as a load at an
    offset), or None."""
    if any(key in node.options for key in _LAYOUT_KEYS) or len(node.outputs) != 1:
        return "it reads through a removed layout op or shares storage"
    x = node.inputs[0]
    maps = layout.slice_maps(node)
    if x.is_const or maps is None or block_offset(x.shape, maps[0]) is None:
        return "its output is no contiguous block of its input's PHWC4 storage (a channel range at a multiple of 4)"
    return _tensors_blocker(node, [x, *fused_reads(node)])  # not its begin / size / strides


def _tensors_blocker(node, values):
    """Why `values` (the tensors `node` computes on) or its outputs keep it out of a group, or
    None: int32 values (bits, which the float steps do not compute on) or a resource variable's
    storage."""
    tensors = [*values, *node.outputs]
    if any(t.dtype == INT32 for t in tensors):  # also what makes the integer kernel run an op
        return "it reads or writes int32 values (the integer kernel's)"
    if any(t.is_variable for t in tensors):
        return "it touches a resource variable"
    return None


# -- groups ----------------------------------------------------------------------------------------
def _groups(graph, members, why):
    """The groups of `members` (lists of nodes in graph order; singletons too), grown in graph
    order; why[node]: why a node joined not every group next to it, or None."""
    groups, group_of = [], {}
    for node in graph.nodes:
        if node not in members:
            continue
        joined, why[node] = _join(graph, node, groups, _near_groups(graph, node, members, group_of), members)
        merged = sorted([n for k in joined for n in groups[k]] + [node], key=graph.position)
        for k in joined:
            groups[k] = None
        groups.append(merged)
        for n in merged:
            group_of[n] = len(groups) - 1
    return [g for g in groups if g is not None]


def _near_groups(graph, node, members, group_of):
    """Indices of the groups holding members whose outputs `node` reads, of its output shape."""
    shape = tuple(node.outputs[0].shape)
    near = []
    for t in read_tensors(node):
        producer = graph.producer_of(t)
        if producer in members and tuple(producer.outputs[0].shape) == shape and group_of[producer] not in near:
            near.append(group_of[producer])
    return near


def _join(graph, node, groups, near, members):
    """(the indices of the groups of `near` that `node` joins, why it joins no other or None):
    from the latest group on, each whose union with it and those taken is a group."""
    taken, reason = [], None
    for k in sorted(near, reverse=True):
        nodes = sorted([n for j in (*taken, k) for n in groups[j]] + [node], key=graph.position)
        blocker = _group_blocker(graph, nodes, members)
        if blocker is None:
            taken.append(k)
        else:
            reason = blocker
    return taken, reason


def _group_blocker(graph, nodes, members):
    """Why `nodes` (in graph order) cannot run as one group, or None: the template's limits, and
    no path that leaves the group and comes back into it."""
    program, _, outputs = _program(graph, nodes, members)
    if len(program.slots) > pointwise.MAX_SLOTS or len(program.inputs) > pointwise.MAX_INPUTS or \
            len(outputs) > pointwise.MAX_OUTPUTS:
        return (f"with {', '.join(n.label for n in nodes)} it would need {len(program.slots)} steps, "
                f"{len(program.inputs)} inputs and {len(outputs)} outputs (at most {pointwise.MAX_SLOTS}, "
                f"{pointwise.MAX_INPUTS}, {pointwise.MAX_OUTPUTS})")
    leaving = [t.index for t in outputs if is_boundary(graph, t)]
    if len(leaving) > 1:
        # compiler.fuse_output_stores stores one output of a dispatch straight into the I/O
        # buffer (as float32); another would go through the arena, rounded in half storage.
        return (f"with {', '.join(n.label for n in nodes)} it would store {len(leaving)} partition outputs "
                f"(tensors {leaving}): a dispatch stores one straight into the I/O buffer")
    _, around = _downstream(graph, nodes)
    if around is not None:
        return (f"a path from {', '.join(n.label for n in nodes)} leaves them through {around.label} and comes back "
                f"(one dispatch cannot run both ends)")
    return None


def _downstream(graph, nodes):
    """(the nodes outside `nodes` (in graph order) that read what they compute, directly or not,
    and run before the last of them; one of those that feeds one of `nodes` back, or None)."""
    inside, last = set(nodes), graph.position(nodes[-1])
    found, stack = set(), list(nodes)
    while stack:
        node = stack.pop()
        for t in node.outputs:
            for reader in readers_of(graph, t) if t is not None else ():
                if reader in inside:
                    if node not in inside:
                        return sorted(found, key=graph.position), node
                elif reader not in found and graph.position(reader) < last:
                    found.add(reader)
                    stack.append(reader)
    return sorted(found, key=graph.position), None


# -- the program -----------------------------------------------------------------------------------
def _program(graph, nodes, members):
    """(Program, the fused node's inputs, its outputs) computing `nodes` (in graph order): per
    member its steps, one slot each, on registers where the unfused graph passed a tensor
    between members (rounded as its store did: Ref.stored); its outputs, the members' outputs
    read outside the group or leaving the partition."""
    inside = set(nodes)
    inputs, position, entries, slots, register = [], {}, {}, [], {}

    def entry(tensor, shift=0, block=False, padded_c=False):
        if id(tensor) not in position:
            position[id(tensor)] = len(inputs)
            inputs.append(tensor)
        return Ref(INPUT, entries.setdefault(Input(position[id(tensor)], shift, block, padded_c), len(entries)))

    def operand(step):
        x = step.operand
        if x is None or isinstance(x, float):
            return Ref(SCALAR, value=x or 0.0)
        if id(x) in register:
            return Ref(REG, register[id(x)], stored=True)
        if x.is_const and x.size == 1:  # as epilogue.py's steps take it: a param, no memory read
            return Ref(SCALAR, value=float(np.asarray(x.data, np.float32).reshape(-1)[0]))
        return entry(x, padded_c=step.padded_c)

    for node in nodes:
        x, shift, block, steps = members[node]
        value = Ref(REG, register[id(x)]) if id(x) in register else entry(x, shift, block)
        for step in steps:
            # A step that starts a node rounds the value it reads (a register; a load is stored already).
            slots.append(Slot(step.op, value._replace(stored=step.stored and value.kind == REG), operand(step),
                              step.swap))
            value = Ref(REG, len(slots) - 1)
        register[id(node.outputs[0])] = value.index
    outputs = [n.outputs[0] for n in nodes if is_boundary(graph, n.outputs[0])
               or any(r not in inside for r in readers_of(graph, n.outputs[0]))]
    return Program(tuple(entries), tuple(slots), tuple(register[id(t)] for t in outputs)), inputs, outputs


# -- the rewrite -----------------------------------------------------------------------------------
def _fuse(graph, group, members):
    """Replace `group` by one POINTWISE_DAG node; None once done, else why not (fusing an
    earlier group may have put a path around this one, and moved some of its nodes)."""
    group = sorted(group, key=graph.position)
    program, inputs, outputs = _program(graph, group, members)
    later, back = _downstream(graph, group)
    if back is not None:
        return f"a path leaves the group through {back.label} and comes back"
    if not outputs:
        return "nothing reads what the group computes"
    fused = Node(index=group[0].index, op=pointwise.OP, inputs=inputs, outputs=outputs,
                 options={pointwise.PROGRAM: program})
    reason = kernels.unsupported_reason(fused)
    if reason:
        return f"{pointwise.OP}: {reason}"
    # The fused node runs where the last member ran; nodes between the members that read the
    # group's results move after it (none of them feeds the group: it is convex).
    for node in (*group[:-1], *later):
        graph.remove_node(node)
    graph.replace_node(group[-1], [fused, *later])
    return None
