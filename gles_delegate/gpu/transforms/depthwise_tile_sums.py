"""A squeeze-excite gate whose mean keeps a dispatch of its own (too large for the gate's one
workgroup: se_gate.MAX_FUSED_MEAN_ELEMENTS) takes it from the depthwise convolution before it
instead: the convolution's workgroups add up what they store (depthwise.TILE_SUMS, a second
output of a block's sums), and SE_GATE sums those few values per channel. The MEAN's dispatch
goes (EfficientNet-B0: 16 of them, each about what an empty dispatch costs)."""
import numpy as np

from ...graph import read_tensors
from ..kernels import depthwise, epilogue, squeeze_excite
from . import alias_reshape
from .common import only_reader_blocker, plain_reduction, producer_of

ENABLED = True  # rewrite_partition skips the rule when False, for A/B measurements (gles-profile --set gpu.transforms.depthwise_tile_sums.ENABLED=0)


def apply(graph, log):
    for gate in list(graph.nodes):
        if gate.op != squeeze_excite.OP:
            continue
        chain = _mean_chain(graph, gate.inputs[0])
        if chain is None:
            continue  # the gate sums its x itself: no MEAN to remove
        reason = _blocker(graph, chain, gate)
        if reason:
            log.skipped(chain[0], reason)
            continue
        _rewrite(graph, gate, chain)
        log.applied(chain[0], f"its sums come from {producer_of(graph, chain[0].inputs[0]).label}'s tile sums, "
                              f"read by {gate.label}")


def _mean_chain(graph, pooled):
    """[MEAN] or [MEAN, reshape] computing the gate's pooled input (se_gate's two forms), or None."""
    node = producer_of(graph, pooled)
    if node is not None and node.op in alias_reshape.OPS and not epilogue.steps_of(node):
        mean = producer_of(graph, node.inputs[0])
        return [mean, node] if mean is not None and mean.op == "MEAN" else None
    return [node] if node is not None and node.op == "MEAN" else None


def _blocker(graph, chain, gate):
    """Why the MEAN (and reshape) of `chain` cannot go, or None: each output is read by the next
    node alone, as its one input (not also as an operand of its epilogue steps: a residual MUL of
    the pooled vector fused into the gate's last layer), and stays in the partition; the MEAN's
    input is the first output of a DEPTHWISE_CONV_2D that writes no tile sums yet."""
    for node, reader in zip(chain, chain[1:] + [gate]):
        reason = only_reader_blocker(graph, node.outputs[0], node)
        if reason:
            return reason
        if sum(t is node.outputs[0] for t in read_tensors(reader)) > 1:
            return f"{reader.label} also reads the output of {node.label} as an operand of its epilogue steps"
    if not plain_reduction(chain[0]):
        return f"{chain[0].label} squares its input or applies epilogue steps, which tile sums would not"
    x = chain[0].inputs[0]
    conv = producer_of(graph, x)
    if conv is None or conv.op != "DEPTHWISE_CONV_2D" or conv.outputs[0] is not x:
        return f"tensor {x.index} is not the output of a DEPTHWISE_CONV_2D"
    if conv.options.get(depthwise.TILE_SUMS):
        return f"{conv.label} writes tile sums for another gate already"
    return None


def _rewrite(graph, gate, chain):
    """The convolution writes its tile sums; the gate reads them, dividing by H x W; the chain goes."""
    if not plain_reduction(chain[0]):
        return f"{chain[0].label} squares its input or applies epilogue steps, which tile sums would not"
    x = chain[0].inputs[0]
    conv = producer_of(graph, x)
    sums = graph.new_tensor(f"{x.name}/tile_sums", depthwise.tile_sums_shape(conv), np.float32)
    graph.set_options(conv, {**conv.options, depthwise.TILE_SUMS: True})
    graph.set_outputs(conv, [x, sums])
    graph.set_options(gate, {**gate.options, squeeze_excite.MEAN_COUNT: x.shape[1] * x.shape[2]})
    graph.set_inputs(gate, [sums] + gate.inputs[1:])
    graph.remove_nodes(chain)
