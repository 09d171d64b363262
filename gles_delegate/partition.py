"""Split a graph into GPU partitions: runs of consecutive nodes a GPU kernel can run.

Like TFLite, every node the GPU cannot take is logged with the reason (the nodes refused for an
empty tensor in one line: an empty batch would log every node), the `max_delegated_partitions`
largest partitions are kept, and the rest run on the CPU.
"""
import logging
from dataclasses import dataclass

log = logging.getLogger("gles_delegate")


class EmptyTensor(str):
    """A reason a node stays off the GPU: a tensor it reads or writes is empty (an empty batch:
    nothing to compute). The nodes refused for it are logged in one line (split_empty)."""


@dataclass
class PartitionSpec:
    """Nodes of one partition (execution order) and its boundary tensors."""
    nodes: list
    inputs: list
    outputs: list


def find_partitions(graph, candidates, reason_of, max_partitions=1):
    """Partitions of `candidates` (the nodes no earlier delegate took) for this delegate.

    reason_of(node) -> None if the GPU can run the node, else why not.
    max_partitions: keep that many of the largest partitions (0: all of them).
    """
    candidate_ids = {id(n) for n in candidates}
    graph_inputs = {id(t) for t in graph.inputs}
    runs, current, refused = [], [], []
    for node in graph.nodes:
        reason = reason_of(node) if id(node) in candidate_ids else "taken by another delegate"
        if reason is None:
            reason = _writes_graph_input(node, graph_inputs)
        if reason is None:
            current.append(node)
            continue
        if id(node) in candidate_ids:
            refused.append((node, reason))
        if current:
            runs.append(current)
        current = []
    if current:
        runs.append(current)
    empty, others = split_empty(refused)
    for node, reason in others:
        log.warning("op code #%d (%s) cannot be handled by this delegate: %s", node.index, node.op, reason)
    if empty:
        log.warning("%s cannot be handled by this delegate: a tensor each reads or writes is empty (nothing to "
                    "compute)", span(empty))
    kept = sorted(runs, key=len, reverse=True)[:max_partitions or None]
    kept = [run for run in runs if any(run is k for k in kept)]  # back in execution order
    on_gpu = sum(len(run) for run in kept)
    log.info("%d operations will run on the GPU, and the remaining %d operations will run on the CPU.",
             on_gpu, len(graph.nodes) - on_gpu)
    return [boundary(graph, run) for run in kept]


def split_empty(refused):
    """(the nodes of `refused`, (node, reason) pairs, refused for an empty tensor (EmptyTensor);
    the other pairs), each in the order given."""
    return ([node for node, reason in refused if isinstance(reason, EmptyTensor)],
            [(node, reason) for node, reason in refused if not isinstance(reason, EmptyTensor)])


def span(nodes):
    """Nodes (in execution order) for a log line: 'op code #2 (CONV_2D)', or '136 operations, op
    codes #2 (CONV_2D) .. #245 (LOGISTIC)'."""
    first, last = nodes[0], nodes[-1]
    if len(nodes) == 1:
        return f"op code #{first.index} ({first.op})"
    return f"{len(nodes)} operations, op codes #{first.index} ({first.op}) .. #{last.index} ({last.op})"


def _writes_graph_input(node, graph_inputs):
    """Why a node that overwrites a graph input stays on the CPU, or None. TFLite accepts such a
    model (the node replaces what set_tensor gave); a GPU partition uploads its inputs before
    its first dispatch, so an earlier node of the partition reading that tensor would read
    whatever the later one leaves in the arena instead."""
    for t in node.outputs:
        if id(t) in graph_inputs:
            return f"it overwrites graph input tensor {t.index} ({t.name!r}): such a node runs on the CPU"
    return None


def boundary(graph, nodes):
    """The PartitionSpec of `nodes`: the tensors they read from outside and those read after them."""
    inside = {id(n) for n in nodes}
    produced = {id(t) for n in nodes for t in n.outputs}
    inputs, seen = [], set()
    for node in nodes:
        for t in node.inputs:
            if t is not None and not t.is_const and id(t) not in produced and id(t) not in seen:
                seen.add(id(t))
                inputs.append(t)
    read_outside = {id(t) for n in graph.nodes if id(n) not in inside for t in n.inputs if t is not None}
    outputs = [t for n in nodes for t in n.outputs
               if id(t) in read_outside or graph.is_graph_output(t)]
    # Variable tensors (LSTM state) are read and then updated in place by kernels: they are
    # uploaded every invoke (inputs above) and what the kernels wrote back is downloaded.
    outputs += [t for t in inputs if t.is_variable]
    return PartitionSpec(nodes=nodes, inputs=inputs, outputs=outputs)


def work(nodes):
    """Roughly the multiply-adds `nodes` compute: per node its output elements times the
    elements of its largest constant input per output channel (a convolution's or fully
    connected layer's kernel size), at least the elements it reads and writes."""
    total = 0
    for node in nodes:
        outputs = [t for t in node.outputs if t is not None]
        written = sum(t.size for t in outputs)
        weights = max((t.size for t in node.inputs if t is not None and t.is_const), default=0)
        channels = int(outputs[0].shape[-1]) if outputs and len(outputs[0].shape) else 1
        read = sum(t.size for t in node.inputs if t is not None)
        total += max(written * max(weights // max(channels, 1), 1), read + written)
    return total
