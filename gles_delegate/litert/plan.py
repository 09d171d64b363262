"""What the delegate claims in one LiteRT subgraph: the same graph, constant folding,
partitioner, compiler and cache as this package's Interpreter, so the same nodes go to the GPU."""
import logging
from dataclasses import dataclass, field

from .. import ops
from ..callee_subgraphs import small_loop_caller
from ..errors import ModelError
from ..graph import REDUCTION_BODIES, Graph
from ..partition import boundary
from ..placement import litert_side
from ..tflite.schema import BUILTIN_OP_CODES
from ..shape_propagation import declared_shape_errors, dynamic_tensors, propagate_shapes
from ..fold_constants import densify_sparse_reads, fold_constants, fold_shapes

log = logging.getLogger("gles_delegate")
CUSTOM = BUILTIN_OP_CODES["CUSTOM"]
COMPOSITE = "STABLEHLO_COMPOSITE"


@dataclass
class SubgraphPlan:
    """One subgraph's compiled partitions. gpu_nodes: the operator indices they run; folded:
    the operators folded into constants (fp16 DEQUANTIZE, DENSIFY of weights, SHAPE of a fixed
    shape and what computes only on it) that only feed them, which are claimed too so LiteRT
    does not compute what our constants already hold; pending: the operators invalid at the
    declared shapes of a dynamic input (its -1 held as 1), claimed all the same: the kernel that
    holds them compiles them at its first prepare, at the shapes the input was resized to.
    index, candidates, input_shapes: what plan_subgraph was given (a re-plan gives them again)."""
    graph: Graph
    index: int
    candidates: set
    input_shapes: dict
    partitions: list = field(default_factory=list)
    gpu_nodes: set = field(default_factory=set)
    folded: set = field(default_factory=set)
    pending: set = field(default_factory=set)

    @property
    def claimed(self):
        """Operator indices handed to ReplaceNodeSubsetsWithDelegateKernels, in execution order."""
        return sorted(self.gpu_nodes | self.folded | self.pending)

    def release(self):
        for partition in self.partitions:
            partition.release()


def match_subgraph(model, nodes, codes):
    """The index of the model subgraph whose operators are `nodes` {operator index: (inputs,
    outputs)} (LiteRT's execution plan, less nodes an earlier delegate replaced) with the
    builtin op `codes` {operator index: code} (an IF's two branches often differ only there);
    None when no subgraph, or more than one, matches."""
    found = []
    for s, sg in enumerate(model.subgraphs):
        ops = sg.operators
        if all(k < len(ops) and (list(ops[k].inputs), list(ops[k].outputs)) == io and op_code(ops[k]) == codes[k]
               for k, io in nodes.items()):
            found.append(s)
    if len(found) != 1:
        # Reduction bodies (a reduce window's one ADD) are alike and never run: LiteRT reads their op.
        quiet = found and set(found) <= _reduction_bodies(model)
        (log.debug if quiet else log.warning)(
            "GpuDelegate: LiteRT's subgraph of %d nodes matches %s of the model's subgraphs; its nodes stay on "
            "LiteRT's CPU kernels", len(nodes), len(found) or "none")
        return None
    return found[0]


def _reduction_bodies(model):
    """The subgraph indices that ops of graph.REDUCTION_BODIES name as their body."""
    return {op.options.get(REDUCTION_BODIES[op.op]) for sg in model.subgraphs for op in sg.operators
            if not op.custom and op.op in REDUCTION_BODIES}


def op_code(op):
    """The builtin code LiteRT registers for OperatorDef `op` (CUSTOM for a custom op)."""
    return CUSTOM if op.custom else BUILTIN_OP_CODES.get(op.op)


def plan_subgraph(delegate, model, index, candidates, input_shapes):
    """Partition and compile subgraph `index` of `model` with GpuDelegate `delegate`.

    candidates: the operator indices LiteRT still runs itself; input_shapes: {input tensor
    index: shape} as LiteRT holds them; those that differ from the model's (after
    resize_tensor_input) are propagated through the graph as the Interpreter does."""
    sg = model.subgraphs[index]
    graph = Graph.from_model(model, index, single_producers=False)
    caller = small_loop_caller(model, index) if index else None
    if caller is not None:
        log.info("GpuDelegate: subgraph %d is left to LiteRT's kernels: %s calls it, and its subgraphs compute "
                 "little a call (callee_subgraphs.CALLEE_WORK_MAX): a GPU partition there would cost a call into "
                 "Python per iteration", index, caller)
        candidates = ()
    resized = {i: shape for i, shape in input_shapes.items() if shape != tuple(sg.tensors[i].shape)}
    candidates = set(candidates) - _decline_rewritten(graph)
    declined, pending = _decline_unplannable(graph, resized, set() if resized else _placeholder_readers(graph))
    pending &= candidates
    candidates -= declined | pending
    densify_sparse_reads(graph)
    fold_constants(graph)
    dynamic = dynamic_tensors(graph)
    if fold_shapes(graph, dynamic) and dynamic:
        dynamic = dynamic_tensors(graph)
    candidates -= _decline_contradicted(graph, dynamic)
    candidates -= _decline_composites(graph, sg, delegate.unsupported_reason)
    while True:
        # What we do not claim LiteRT runs: placement='fastest' times partitions against it.
        partitions = delegate.partition(graph, [node for node in graph.nodes if node.index in candidates],
                                        cpu=litert_side(graph))
        split = _split_composites(graph, sg, partitions)
        if not split:
            break
        for partition in partitions:  # rare: a compile failure moved a node of a composite off the GPU
            partition.release()
        candidates -= split
    gpu = {node.index for p in partitions for node in p.nodes}
    kept = {node.index for node in graph.nodes}
    folded = _claimed_folds(sg, gpu | pending, set(candidates) - kept) if gpu | pending else set()
    return SubgraphPlan(graph, index, set(candidates) | pending, dict(input_shapes), partitions, gpu, folded,
                        pending)


def _composites(graph, sg):
    """{operator index: its nodes in `graph`} of the file's STABLEHLO_COMPOSITE operators that
    Graph.from_model inlined (composites.py: their nodes carry the composite's index)."""
    indices = {k for k, op in enumerate(sg.operators) if op.op == COMPOSITE and not op.custom}
    found = {}
    for node in graph.nodes:
        if node.index in indices and node.op != COMPOSITE:
            found.setdefault(node.index, []).append(node)
    return found


def _decline_composites(graph, sg, reason_of):
    """The indices of the inlined composites a node of which no GPU kernel runs. LiteRT's graph
    holds the composite as one node: the delegate claims it whole, with every node of its
    decomposition in GPU partitions, or leaves it to LiteRT (which runs the decomposition)."""
    return {k for k, nodes in _composites(graph, sg).items() if any(reason_of(n) is not None for n in nodes)}


def _split_composites(graph, sg, partitions):
    """The inlined composites `partitions` hold only some nodes of, or cut inside (a tensor only
    the decomposition has, past the file's tensors, on a partition's boundary)."""
    claimed = {id(n) for p in partitions for n in p.nodes}
    split = {k for k, nodes in _composites(graph, sg).items() if len({id(n) in claimed for n in nodes}) > 1}
    count = len(sg.tensors)
    for p in partitions:
        spec = boundary(graph, p.nodes)
        inner = {id(t) for t in (*spec.inputs, *spec.outputs) if t.index >= count}
        split |= {n.index for n in p.nodes for t in (*n.inputs, *n.outputs) if t is not None and id(t) in inner}
    return split


def replan_kernel(delegate, model, plan, nodes, shape_of):
    """The operators `nodes` (one LiteRT kernel's) of plan's subgraph compiled again at the shapes
    LiteRT now holds for the tensors they read (shape_of(tensor index) -> tuple): after a resize,
    LiteRT prepares the nodes before a kernel first, so those shapes are final, while nodes
    after it (whose shapes our reference might not infer) are not needed.

    The claimed folds (plan.folded) that compute the kernel's constants fold again at the new
    shapes, also those LiteRT put in another kernel (which runs nothing: our constants are its
    outputs); the graph holds no claimed fold, as plan_subgraph's does not, since such a node left
    between two of the kernel's would cut their partition."""
    graph = Graph.from_model(model, plan.index)
    densify_sparse_reads(graph)
    fold_constants(graph)
    sources = _fold_sources(graph, nodes, plan.folded)
    mine = [node for node in graph.nodes if node.index in nodes or node.index in sources]
    spec = boundary(graph, mine)
    # A fold's value is a constant here; the other kernels that read it fold it themselves.
    computed = {id(t) for node in mine if node.index in sources for t in node.outputs}
    outputs = [t for t in spec.outputs if id(t) not in computed]
    kernel = Graph(mine, spec.inputs, outputs, graph.tensors)
    propagate_shapes(kernel, {t.index: shape_of(t.index) for t in spec.inputs})
    graph.remove_nodes(fold_shapes(kernel, dynamic_tensors(kernel)))
    unfolded = [node for node in kernel.nodes if node.index in sources]
    if unfolded:
        raise RuntimeError(f"operator {unfolded[0].label}, which computes a constant of this kernel, does not "
                           "fold at the new input shapes (its value is decided at invoke)")
    graph.remove_nodes([node for node in graph.nodes if node.index in plan.folded and node.index not in nodes])
    partitions = delegate.partition(graph, kernel.nodes)
    gpu = {node.index for p in partitions for node in p.nodes}
    return SubgraphPlan(graph, plan.index, set(nodes), plan.input_shapes, partitions, gpu, plan.folded)


def _decline_rewritten(graph):
    """Remove from `graph`, and return the indices of, the operators writing a tensor another
    operator writes too and every operator reading what they compute. Our Interpreter refuses
    such a model (Graph.check_order); LiteRT runs it where its memory plan allows, so those
    operators stay on LiteRT's CPU kernels, as they would without the delegate."""
    rewritten = graph.rewritten_tensors()
    if not rewritten:
        return set()
    gone = _downstream(graph, [node for _, writers in rewritten for node in writers])
    tensor, writers = rewritten[0]
    log.warning("GpuDelegate: tensor %d (%r) is written by %s; %d operator(s) from there on (%s) stay on LiteRT's "
                "CPU kernels", tensor.index, tensor.name, " and ".join(n.label for n in writers), len(gone),
                ", ".join(n.label for n in gone[:8]))
    graph.remove_nodes(gone)
    return {n.index for n in gone}


def _decline_unplannable(graph, resized, placeholder_readers):
    """Propagate `resized` through `graph`, leaving out the nodes it cannot take; returns
    (declined, pending), their indices. LiteRT applies a delegate when the Interpreter is built,
    at the declared shapes, where a dynamic dimension is a placeholder 1 (shape_signature -1): a
    node can be invalid there (a RESHAPE of [1, 4] to [B // 8, 8, 4], a 512-sample convolution of
    a [1, 1] signal) though LiteRT runs it once the input is resized. Such a node, and what reads
    its outputs (their shapes are unknown), is pending where it reads a placeholder input,
    directly or not (`placeholder_readers`: those nodes' indices, none once an input was
    resized): claimed, and compiled at the first prepare of the kernel LiteRT makes of it, at the
    resized shapes (at the declared ones it fails there, as LiteRT's own kernels do). The others
    are declined: they stay on LiteRT's CPU kernels, which allocate_tensors() prepares at the
    real shapes. The nodes leave `graph` either way."""
    declined, pending = set(), set()
    while True:
        try:
            propagate_shapes(graph, resized)
            return declined, pending
        except ModelError as exc:
            failed = [n for n in graph.nodes if f"operator {n.label}" in str(exc)]
            gone = _downstream(graph, failed[:1] or graph.nodes)
            claimable = bool(failed) and failed[0].index in placeholder_readers and all(
                not n.custom and n.op in ops.KERNELS for n in gone)
            fate = "are claimed, compiled at the shapes the input is resized to" if claimable else \
                "stay on LiteRT's CPU kernels"
            log.warning("GpuDelegate: at the shapes LiteRT declares, %s; %d operator(s) from there on (%s) %s", exc,
                        len(gone), ", ".join(n.label for n in gone[:8]), fate)
            (pending if claimable else declined).update(n.index for n in gone)
            graph.remove_nodes(gone)


def _placeholder_readers(graph):
    """The indices of the nodes of `graph` that read, directly or not, an input whose shape
    signature holds a -1 (LiteRT declares it at 1)."""
    placeholders = {id(t) for t in graph.inputs if t.shape_signature is not None and -1 in t.shape_signature}
    readers = [n for n in graph.nodes if any(t is not None and id(t) in placeholders for t in n.inputs)]
    return {n.index for n in _downstream(graph, readers)} if readers else set()


def _decline_contradicted(graph, dynamic):
    """The indices of the nodes of `graph` whose declared output shapes their inputs and options
    contradict (shape_propagation.declared_shape_errors: a pool whose stride gives [1, 4, 4, 4]
    declared [1, 8, 8, 4]), and of every node that reads what they compute. Our Interpreter
    refuses such a model; LiteRT runs it, giving those outputs the shapes the options give, so
    they stay on LiteRT's CPU kernels: a GPU kernel would compute at the declared shape."""
    errors = list(declared_shape_errors(graph, dynamic))
    if not errors:
        return set()
    gone = _downstream(graph, [node for node, _ in errors])
    others = f" (and {len(errors) - 1} other operator(s))" if len(errors) > 1 else ""
    log.warning("GpuDelegate: %s%s; LiteRT computes those shapes from the options: %d operator(s) from there on "
                "(%s) stay on LiteRT's CPU kernels", errors[0][1], others, len(gone),
                ", ".join(n.label for n in gone[:8]))
    return {n.index for n in gone}


def _downstream(graph, start):
    """`start` (nodes of `graph`) and every node that reads what they compute, in graph order."""
    reached = {id(n) for n in start}
    computed = {id(t) for n in start for t in n.outputs if t is not None}
    for node in graph.nodes:
        if id(node) not in reached and any(t is not None and id(t) in computed for t in node.inputs):
            reached.add(id(node))
            computed |= {id(t) for t in node.outputs if t is not None}
    return [n for n in graph.nodes if id(n) in reached]


def _fold_sources(graph, nodes, folded):
    """The claimed folds outside `nodes` whose values the operators `nodes` read, directly or
    through other such folds (operator indices)."""
    producer = {id(t): n for n in graph.nodes for t in n.outputs if t is not None}
    sources, todo = set(), [n for n in graph.nodes if n.index in nodes]
    while todo:
        for t in todo.pop().inputs:
            node = producer.get(id(t)) if t is not None else None
            if node is not None and node.index in folded and node.index not in nodes | sources:
                sources.add(node.index)
                todo.append(node)
    return sources


def _claimed_folds(sg, gpu, folded):
    """The folded operators (indices in `folded`) whose outputs only claimed operators read and
    that are no subgraph output; chains (DENSIFY -> DEQUANTIZE) in reverse order."""
    readers = {}
    for k, op in enumerate(sg.operators):
        for t in op.inputs:
            readers.setdefault(t, set()).add(k)
    claimed, outputs = set(gpu), set(sg.outputs)
    for k in sorted(folded, reverse=True):
        op = sg.operators[k]
        if all(t not in outputs and readers.get(t, set()) <= claimed for t in op.outputs):
            claimed.add(k)
    return claimed - gpu
