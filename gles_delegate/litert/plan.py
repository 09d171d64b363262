"""What the delegate claims in one LiteRT subgraph: the same graph, constant folding,
partitioner, compiler and cache as this package's Interpreter, so the same nodes go to the GPU."""
import logging
from dataclasses import dataclass, field

from ..graph import Graph
from ..shapes import propagate_shapes
from ..transforms.fold_constants import fold_constants

log = logging.getLogger("gles_delegate")


@dataclass
class SubgraphPlan:
    """One subgraph's compiled partitions. gpu_nodes: the operator indices they run; folded:
    the operators folded into constants (fp16 DEQUANTIZE, DENSIFY of weights) that only feed
    them, which are claimed too so LiteRT does not compute what our constants already hold."""
    graph: Graph
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


def plan_subgraph(delegate, model, subgraph_index, plan_nodes, input_shapes):
    """Partition and compile subgraph `subgraph_index` of `model` with GpuDelegate `delegate`.

    plan_nodes: the operator indices LiteRT still runs itself (the candidates);
    input_shapes: {input tensor index: shape} of the inputs LiteRT holds at another shape than
    the model states (after resize_tensor_input), propagated as the Interpreter does."""
    graph = Graph.from_model(model, subgraph_index)
    if input_shapes:
        propagate_shapes(graph, input_shapes)
    fold_constants(graph)
    candidates = [node for node in graph.nodes if node.index in plan_nodes]
    partitions = delegate.partition(graph, candidates)
    gpu = {node.index for p in partitions for node in p.nodes}
    kept = {node.index for node in graph.nodes}
    folded = _claimed_folds(model.subgraphs[subgraph_index], gpu, set(plan_nodes) - kept) if gpu else set()
    return SubgraphPlan(graph, partitions, gpu, folded)


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
