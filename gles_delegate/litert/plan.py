"""What the delegate claims in one LiteRT subgraph: the same graph, constant folding,
partitioner, compiler and cache as this package's Interpreter, so the same nodes go to the GPU."""
import logging
from dataclasses import dataclass, field

from ..graph import Graph
from ..partition import boundary
from ..shape_propagation import dynamic_tensors, propagate_shapes
from ..fold_constants import densify_sparse_reads, fold_constants, fold_shapes

log = logging.getLogger("gles_delegate")


@dataclass
class SubgraphPlan:
    """One subgraph's compiled partitions. gpu_nodes: the operator indices they run; folded:
    the operators folded into constants (fp16 DEQUANTIZE, DENSIFY of weights, SHAPE of a fixed
    shape and what computes only on it) that only feed them, which are claimed too so LiteRT
    does not compute what our constants already hold.
    index, candidates, input_shapes: what plan_subgraph was given (a re-plan gives them again)."""
    graph: Graph
    index: int
    candidates: set
    input_shapes: dict
    partitions: list = field(default_factory=list)
    gpu_nodes: set = field(default_factory=set)
    folded: set = field(default_factory=set)

    @property
    def claimed(self):
        """Operator indices handed to ReplaceNodeSubsetsWithDelegateKernels, in execution order."""
        return sorted(self.gpu_nodes | self.folded)

    def release(self):
        for partition in self.partitions:
            partition.release()


def match_subgraph(model, nodes):
    """The index of the model subgraph whose operators are `nodes` {operator index: (inputs,
    outputs)} (LiteRT's execution plan, less nodes an earlier delegate replaced); None when no
    subgraph, or more than one, matches."""
    found = []
    for s, sg in enumerate(model.subgraphs):
        ops = sg.operators
        if all(k < len(ops) and (list(ops[k].inputs), list(ops[k].outputs)) == io for k, io in nodes.items()):
            found.append(s)
    if len(found) != 1:
        log.warning("GpuDelegate: LiteRT's subgraph of %d nodes matches %s of the model's subgraphs; "
                    "its nodes stay on LiteRT's CPU kernels", len(nodes), len(found) or "none")
        return None
    return found[0]


def plan_subgraph(delegate, model, index, candidates, input_shapes):
    """Partition and compile subgraph `index` of `model` with GpuDelegate `delegate`.

    candidates: the operator indices LiteRT still runs itself; input_shapes: {input tensor
    index: shape} as LiteRT holds them; those that differ from the model's (after
    resize_tensor_input) are propagated through the graph as the Interpreter does."""
    sg = model.subgraphs[index]
    graph = Graph.from_model(model, index)
    resized = {i: shape for i, shape in input_shapes.items() if shape != tuple(sg.tensors[i].shape)}
    propagate_shapes(graph, resized)
    densify_sparse_reads(graph)
    fold_constants(graph)
    fold_shapes(graph, dynamic_tensors(graph))
    partitions = delegate.partition(graph, [node for node in graph.nodes if node.index in candidates])
    gpu = {node.index for p in partitions for node in p.nodes}
    kept = {node.index for node in graph.nodes}
    folded = _claimed_folds(sg, gpu, set(candidates) - kept) if gpu else set()
    return SubgraphPlan(graph, index, set(candidates), dict(input_shapes), partitions, gpu, folded)


def replan_kernel(delegate, model, plan, nodes, shape_of):
    """The operators `nodes` (one LiteRT kernel's) of plan's subgraph compiled again at the shapes
    LiteRT now holds for the tensors they read (shape_of(tensor index) -> tuple): after a resize,
    LiteRT prepares the nodes before a kernel first, so those shapes are final, while nodes
    after it (whose shapes our reference might not infer) are not needed."""
    graph = Graph.from_model(model, plan.index)
    densify_sparse_reads(graph)
    fold_constants(graph)
    mine = [node for node in graph.nodes if node.index in nodes]
    spec = boundary(graph, mine)
    kernel = Graph(mine, spec.inputs, spec.outputs, graph.tensors)
    propagate_shapes(kernel, {t.index: shape_of(t.index) for t in spec.inputs})
    # The kernel's SHAPE chains (claimed as folds) fold again, at the shapes just propagated, and
    # leave the graph too: a node left between two others would cut their partition.
    graph.remove_nodes(fold_shapes(kernel, dynamic_tensors(kernel)))
    partitions = delegate.partition(graph, kernel.nodes)
    gpu = {node.index for p in partitions for node in p.nodes}
    return SubgraphPlan(graph, plan.index, set(nodes), plan.input_shapes, partitions, gpu, plan.folded & set(nodes))


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
