"""What the rewrite rules share (not a rule): graph queries, removing a node that passes a tensor
through, and moving elementwise nodes into the epilogue of the node that produces their input."""
import dataclasses

import numpy as np

from ...graph import Node, option_operands, read_tensors
from ...ops.common import ACT_NONE, fused_activation
from .. import kernels
from ..kernels import epilogue, reduce
from ..kernels.layout import ALIAS, DATA_INPUT, IN_PLACE_INPUTS, JOINS, LANE_VIEWS, VIEW_OUTPUTS, stored_source
from ..kernels.variables import IN_PLACE


_I32 = np.dtype(np.int32)


def new_constant(graph, name, data, dtype=np.float32):
    """A read-only constant tensor a rule adds (folded weights, axes), numbered after every
    tensor of the model (Graph.new_tensor)."""
    data = np.array(data, dtype)
    data.flags.writeable = False
    return graph.new_tensor(name, data.shape, data.dtype, data)


def dense_variant(fc, inputs, output, keep_num_dims):
    """(a copy of FULLY_CONNECTED `fc` reading `inputs` and writing `output`, with
    keep_num_dims, None), or (None, why the GPU cannot run that copy)."""
    node = Node(index=fc.index, op=fc.op, inputs=list(inputs), outputs=[output], version=fc.version,
                options={**fc.options, "keep_num_dims": keep_num_dims})
    reason = kernels.unsupported_reason(node)
    return (None, reason) if reason else (node, None)


def plain_reduction(node):
    """Whether reduction `node` reduces its input as it is: no element squared or added to as it
    loads (kernels.reduce INPUT_SQUARED, INPUT_ADDEND), no epilogue steps on its result. A rule
    that replaces a MEAN by another kernel's sums keeps only such a one."""
    return not (epilogue.steps_of(node) or node.options.get(reduce.INPUT_SQUARED)
                or node.options.get(reduce.INPUT_ADDEND) is not None)


def is_boundary(graph, tensor):
    """A partition input or output: it must keep its identity."""
    return graph.is_graph_output(tensor) or graph.is_graph_input(tensor)


def constant_parameters(node):
    """Whether every input after the first (a RESHAPE's shape, a TRANSPOSE's permutation) is a
    constant or omitted."""
    return all(t.is_const for t in node.inputs[1:] if t is not None)


def readers_of(graph, tensor):
    """The nodes of the graph that read `tensor`, in execution order."""
    return graph.readers_of(tensor)


def producer_of(graph, tensor):
    """The node of the graph that writes `tensor`, or None (a partition input or a constant)."""
    return graph.producer_of(tensor)


def sole_reader(graph, tensor, operands):
    """The one node reading `tensor` through its inputs, when the tensor stays inside the
    partition and no node reads it as a fused operand (`operands`: fused_operands), else None."""
    readers = readers_of(graph, tensor)
    if is_boundary(graph, tensor) or id(tensor) in operands or len(readers) != 1:
        return None
    return readers[0]


def fuse_into_readers(graph, log, op, reader_of, fuse):
    """Fold every `op` node into the node reading its output: reader_of(graph, node, operands)
    gives (that reader, None), (None, why not) or (None, None) for a node that is no candidate
    (logged nowhere); fuse(graph, node, reader, operands) rewrites both and returns what the log
    says it did. `operands`: fused_operands, kept up to date by fuse."""
    operands = fused_operands(graph)
    for node in list(graph.nodes):
        if node.op != op:
            continue
        reader, reason = reader_of(graph, node, operands)
        if reason:
            log.skipped(node, reason)
        elif reader is not None:
            log.applied(node, fuse(graph, node, reader, operands))


def sole_plain_reader(graph, node, operands):
    """(the one node reading `node`'s output, None), or (None, why not): for folding a node into
    how its reader loads its output, the node must carry no fused activation or epilogue steps,
    and its output stay in the partition, read by one node and by no fused step (`operands`)."""
    if fused_activation(node) != ACT_NONE or epilogue.steps_of(node):
        return None, "it has a fused activation or epilogue steps"
    reader = sole_reader(graph, node.outputs[0], operands)
    if reader is None:
        return None, "its output is read by more than one node or leaves the partition"
    return reader, None


def only_reader_blocker(graph, tensor, who, readers=1):
    """Why `tensor` (the output of `who`) is read by more than `readers` nodes or leaves the
    partition, or None."""
    if graph.is_graph_output(tensor) or len(readers_of(graph, tensor)) > readers:
        return f"the output of {who.label} is also read elsewhere"
    return None


def bypass(graph, node, source, out):
    """Remove `node`, whose output `out` equals its input `source`: its readers read `source`;
    when `out` leaves the partition, `source`'s producer writes `out` instead. Returns why it
    cannot be removed, or None once it is."""
    if not graph.is_graph_output(out):
        graph.remove_node(node)
        graph.replace_uses(out, source)
        return None
    producer = producer_of(graph, source)
    # Any reader but `node` would lose it to the renaming: a node reading it as an input, or
    # through a removed layout op's map (graph.fused_reads counts those among its readers).
    if producer is None or is_boundary(graph, source) or any(r is not node for r in readers_of(graph, source)):
        return "its output leaves the partition and its input cannot be renamed"
    graph.remove_node(node)
    graph.set_outputs(producer, [out if t is source else t for t in producer.outputs])
    return None


def runs_before(graph, tensor, node):
    """True when `tensor` exists before `node` runs: a constant, a partition input, or the output
    of an earlier node."""
    if tensor.is_const or graph.is_graph_input(tensor):
        return True
    producer = graph.producer_of(tensor)
    return producer is not None and graph.position(producer) < graph.position(node)


def epilogue_blocker(graph, producer, value, node, steps, readers=1):
    """Why elementwise `node`, reading `value`, cannot become epilogue `steps` of `producer`
    (the node computing `value`), or None. The node's own epilogue moves along. readers: how
    many nodes read `value` (the ones the steps replace)."""
    return _producer_blocker(graph, producer, value, node, readers) or _steps_blocker(graph, producer, value, node,
                                                                                      steps)


def _producer_blocker(graph, producer, value, node, readers=1):
    """epilogue_blocker's checks that need no steps: the producer, the values, the readers."""
    if producer is None:
        return "its input is not computed in this partition"
    if node.op != "CAST" and any(t is not None and t.dtype == _I32 for t in (*node.inputs[:2], *node.outputs)):
        return "it computes on int32 values, which the integer kernel runs (epilogue steps are float math)"
    reason = kernels.epilogue_reason(producer)
    if reason:
        return f"{producer.label}: {reason}"
    if len(producer.outputs) != 1:
        return f"{producer.label} has several outputs"
    reason = only_reader_blocker(graph, value, producer, readers)
    if reason:
        return reason
    if tuple(node.outputs[0].shape) != tuple(value.shape):
        return f"its output {list(node.outputs[0].shape)} is larger than its input {list(value.shape)}"
    return None


def _steps_blocker(graph, producer, value, node, steps):
    """epilogue_blocker's checks of the steps: room in the producer's epilogue, operands it can read."""
    moved = tuple(steps) + epilogue.steps_of(node)
    room = epilogue.MAX_STEPS - epilogue.own_steps(producer)
    if len(epilogue.steps_of(producer)) + len(moved) > room:
        return f"the epilogue of {producer.label} is full ({room} steps)"
    for step in moved:
        if hasattr(step.operand, "shape"):
            reason = _operand_blocker(graph, step.operand, producer, value)
            if reason:
                return reason
    return None


def fuse_into_epilogue(graph, log, node, value):
    """Make elementwise `node`, reading `value`, steps of the epilogue of the node computing
    `value`, and log it APPLIED; returns None once done, else why it cannot be (the caller logs
    it: a rule may try another operand first)."""
    producer = producer_of(graph, value)
    reason = _producer_blocker(graph, producer, value, node)
    if reason is None:  # the node's steps only now: most nodes a rule looks at are blocked before
        steps = epilogue.node_steps(node, value)
        reason = _steps_blocker(graph, producer, value, node, steps)
    if reason is None:
        reason = _kernel_blocker(producer, node, steps)
    if reason is None:
        absorb(graph, producer, node, steps)
        log.applied(node, f"into the epilogue of {producer.label}")
    return reason


def _kernel_blocker(producer, node, steps):
    """Why no GPU kernel would run `producer` with the steps and writing the node's output (a
    comparison's kernel writes bool: a CAST of its output to int32 stays a node), or None."""
    fused = dataclasses.replace(producer, options=_absorbed_options(producer, node, steps), outputs=[node.outputs[0]])
    reason = kernels.unsupported_reason(fused)
    return f"{producer.label} would write {node.outputs[0].dtype.name}: {reason}" if reason else None


def absorb(graph, producer, node, steps):
    """Append `steps` (computing `node` from the producer's output) and the node's own epilogue
    to the producer's epilogue; the producer then writes the node's output and the node leaves
    the graph."""
    graph.set_options(producer, _absorbed_options(producer, node, steps))
    graph.remove_node(node)
    graph.set_outputs(producer, [node.outputs[0]])


def _absorbed_options(producer, node, steps):
    """The producer's options once it absorbed `node` as `steps` (see absorb)."""
    options = {**producer.options, epilogue.KEY: epilogue.steps_of(producer) + tuple(steps) + epilogue.steps_of(node)}
    if producer.op == "CAST":  # its own step names its own output's dtype, not the one it now writes
        options.setdefault(epilogue.CAST_OUTPUT, producer.outputs[0].dtype.name)
    return options


def _operand_blocker(graph, operand, producer, value):
    """Why `operand` of a fused step cannot be read by `producer`'s kernel at each position of
    `value` it writes, or None: it must broadcast without changing its layout and, computed at
    run time, exist before the producer runs (and not be the value itself). An operand computed
    later by a node whose own inputs exist by then is computed earlier instead (hoist)."""
    if operand is value:
        return f"it reads the output of {producer.label} twice"
    reason = epilogue.operand_reason(operand, value)
    if reason:
        return reason
    if not runs_before(graph, operand, producer) and not hoist(graph, operand, producer):
        return f"operand tensor {operand.index} is computed after {producer.label}, from tensors that are too"
    return None


def hoist(graph, tensor, node):
    """Move the node computing `tensor` to just before `node` when everything it reads exists
    by then (nodes may run in any order that computes inputs first); True once moved. Nodes
    with several outputs or state (variable tensors) stay where they are. What it reads
    includes its fused operands (an epilogue step's tensor: gles-fuzz-graphs seed 117 case 536
    moved a BATCH_MATMUL whose fused ADD read an L2_NORMALIZATION before that node, which then
    ran after it: the sum read a stale value)."""
    producer = producer_of(graph, tensor)
    if producer is None or len(producer.outputs) != 1 or \
            any(t is not None and t.is_variable for t in producer.inputs + producer.outputs):
        return False
    if any(not runs_before(graph, t, node) for t in read_tensors(producer)):
        return False
    graph.move_before(producer, node)
    return True


def fused_operands(graph):
    """ids of the tensors nodes read through their options rather than their inputs
    (graph.option_operands: epilogue operands, a convolution's input gate, a reduction's addend;
    not the sources layout ops read through a removed one's map, which are read as inputs are)."""
    return {id(t) for node in graph.nodes for t in option_operands(node)}


class StorageTree:
    """Which tensors of a graph share storage, as the rules have marked them so far: a free
    reshape's output is its input's storage (layout.ALIAS), an ASSIGN_VARIABLE written in place
    makes its value the variable's (variables.IN_PLACE), and a view (layout.VIEW_OUTPUTS,
    layout.IN_PLACE_INPUTS, layout.LANE_VIEWS) puts one storage inside another's at an offset.
    Each storage sits inside at most one other (its parent), never inside itself; the rules that
    make views (slice_views, concat_in_place, lane_views) ask view_blocker before each."""

    def __init__(self, graph):
        self.root, self.parent = {}, {}  # id(tensor) -> id of its storage's representative; storage -> parent
        for node in graph.nodes:
            if node.options.get(ALIAS) or (node.op == "ASSIGN_VARIABLE" and node.options.get(IN_PLACE)):
                a, b = (node.outputs[0], node.inputs[0]) if node.options.get(ALIAS) else node.inputs[:2]
                self._union(a, b)
        for node in graph.nodes:
            for tensor, whole in _placed(node):
                self.place(tensor, whole)
        # State: a variable tensor, and the storage of a resource variable (input 0 of its
        # READ_VARIABLE / ASSIGN_VARIABLE once gpu/variables.bind ran), with the value assigned
        # in place: a view would put the state inside another tensor's storage, which the next
        # invoke overwrites (and a READ before the assignment would read the new value).
        self.pinned = {self._find(id(t)) for t in graph.tensors if t.is_variable} | {
            self._find(id(n.inputs[0])) for n in graph.nodes if n.op in ("READ_VARIABLE", "ASSIGN_VARIABLE")}
        self.tensors = graph.tensors

    def _find(self, key):
        while self.root.get(key, key) != key:
            key = self.root[key]
        return key

    def _union(self, a, b):
        ra, rb = self._find(id(a)), self._find(id(b))
        if ra != rb:
            self.root[rb] = ra

    def place(self, tensor, whole):
        """Record that `tensor`'s storage lies inside `whole`'s."""
        self.parent[self._find(id(tensor))] = self._find(id(whole))

    def view_blocker(self, tensor, whole):
        """Why `tensor`'s storage cannot lie inside `whole`'s, or None: neither may be a
        constant or share a resource variable's storage, and `tensor`'s storage must lie
        inside no other yet, nor hold `whole`'s."""
        if tensor.is_const or whole.is_const:
            return "a constant is no arena storage"
        mine, theirs = self._find(id(tensor)), self._find(id(whole))
        if mine in self.pinned or theirs in self.pinned:
            return "it shares a resource variable's storage"
        if mine in self.parent:
            return f"tensor {tensor.index} is already a view of another tensor's storage"
        while theirs is not None:
            if theirs == mine:
                return f"tensor {whole.index} already lies in the storage of tensor {tensor.index}"
            theirs = self.parent.get(theirs)
        return None

    def outermost(self, tensor):
        """The id of the storage that holds `tensor`'s and lies in no other."""
        key = self._find(id(tensor))
        while key in self.parent:
            key = self.parent[key]
        return key

    def alone(self, tensor):
        """Whether `tensor`'s storage is its own: no other tensor shares it (an alias) and no
        view lies inside it."""
        mine = self._find(id(tensor))
        return mine not in self.parent.values() and \
            not any(t is not tensor and self._find(id(t)) == mine for t in self.tensors)


def _placed(node):
    """(tensor, the tensor whose storage holds it) of each view `node` makes (layout.VIEW_OUTPUTS,
    IN_PLACE_INPUTS, LANE_VIEWS)."""
    options = node.options
    if LANE_VIEWS not in options and IN_PLACE_INPUTS not in options and VIEW_OUTPUTS not in options:
        return ()  # most nodes (every node of the graph is asked, by each rule that makes views)
    lanes = [entry[0] for entry in options.get(LANE_VIEWS, ())]
    if node.op in JOINS:
        inputs = [j for j, _ in node.options.get(IN_PLACE_INPUTS, ())] + lanes
        return [(node.inputs[j], node.outputs[0]) for j in inputs]
    outputs = [k for k, _ in node.options.get(VIEW_OUTPUTS, ())] + lanes
    return [(node.outputs[k], stored_source(node, node.inputs[DATA_INPUT.get(node.op, 0)])) for k in outputs]
