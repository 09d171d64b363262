"""STABLEHLO_COMPOSITE nodes replaced by the nodes of their decomposition subgraphs, at
Graph.from_model, so that those nodes run where any node runs (on the GPU).

litert-torch's generative layers mark each RMS norm, layer norm ('odml.group_norm') and
scaled-dot-product attention as a composite: a named block whose decomposition (ordinary TFLite
ops in a subgraph of their own) is what LiteRT's composite kernel runs. Left as one node, each
was a CPU island between GPU partitions (LiteRT's kernels, or a ModelError without them). Inlined,
the graph computes what LiteRT computes: the decomposition's nodes, on the composite's inputs,
into its outputs.

A composite is inlined when its decomposition subgraph exists, is not one it is itself inside of
(a file may point a decomposition at itself), takes tensors of its inputs' types and shapes and
gives as many outputs, each written by one of its operators; nested composites are inlined too,
up to MAX_DEPTH deep and MAX_NODES nodes added to a graph. Any other stays a node (LiteRT's to run).
The inlined nodes carry the composite's index (errors name `#k`, the file's operator k), their
tensors fresh indices after the subgraph's and names under the composite's.
"""
from .graph import node_of, tensor_of

COMPOSITE = "STABLEHLO_COMPOSITE"
MAX_DEPTH = 8
MAX_NODES = 1 << 16


def inline(model, subgraph_index, nodes, tensors):
    """`nodes` (of subgraph `subgraph_index` of `model`) with their composites inlined; the
    decompositions' tensors are appended to `tensors`."""
    if not any(node.op == COMPOSITE and not node.custom for node in nodes):
        return nodes
    return _expand(model, nodes, tensors, (subgraph_index,), [MAX_NODES])


def _expand(model, nodes, tensors, stack, budget):
    result = []
    for node in nodes:
        index = _decomposition(model, node, stack)
        inlined = None if index is None else _inline_one(model, node, index, tensors, budget)
        if inlined is None:
            result.append(node)
        else:
            result += _expand(model, inlined, tensors, stack + (index,), budget)
    return result


def _decomposition(model, node, stack):
    """The decomposition subgraph index of a composite node that may be inlined here, else None."""
    if node.op != COMPOSITE or node.custom or len(stack) > MAX_DEPTH:
        return None
    index = node.options.get("decomposition_subgraph_index")
    if not isinstance(index, int) or not 0 <= index < len(model.subgraphs) or index in stack:
        return None
    return index


def _inline_one(model, node, index, tensors, budget):
    """The nodes of decomposition `index` on the composite `node`'s tensors, or None when its
    signature does not fit the node's (the composite then stays)."""
    body = model.subgraphs[index]
    if len(body.operators) > budget[0] or len(body.inputs) != len(node.inputs) \
            or len(body.outputs) != len(node.outputs) or len(set(body.outputs)) != len(body.outputs):
        return None
    written = {i for op in body.operators for i in op.outputs}
    local = {}
    for i, outer in zip(body.inputs, node.inputs):
        inner = body.tensors[i]
        if outer is None or tuple(inner.shape) != tuple(outer.shape) or tensor_of(model, index, i).dtype != outer.dtype:
            return None
        local[i] = outer
    for i, outer in zip(body.outputs, node.outputs):
        if i in local or i not in written:
            return None
        local[i] = outer
    budget[0] -= len(body.operators)
    prefix = f"{node.options.get('name') or COMPOSITE}#{node.index}/"
    lookup = _Lookup(model, index, local, tensors, prefix)
    return [node_of(model, node.index, op, lookup) for op in body.operators]


class _Lookup:
    """Tensor i of the decomposition: the composite's own where it is one of the signature's,
    else a fresh copy (made once, appended to the graph's tensors)."""

    def __init__(self, model, index, local, tensors, prefix):
        self.model, self.index, self.local, self.tensors, self.prefix = model, index, local, tensors, prefix

    def __getitem__(self, i):
        if i not in self.local:
            fresh = tensor_of(self.model, self.index, i, index=len(self.tensors),
                              name=self.prefix + self.model.subgraphs[self.index].tensors[i].name)
            self.tensors.append(fresh)
            self.local[i] = fresh
        return self.local[i]
