"""Merge a PAD / PADV2 that adds zeros along H and W only into the explicit padding of the
CONV_2D, DEPTHWISE_CONV_2D, MAX_POOL_2D or AVERAGE_POOL_2D that reads it.

The kernels read options["explicit_padding"] = (top, left, bottom, right) as zeros around the
input, then apply the node's own SAME / VALID padding to the padded size: what PAD + node did.
For the pools those zeros take part (a max sees them, an average counts them) as the PAD's did,
unlike the pools' own padding, which TFLite ignores; so the merge is exact whatever the input's
sign. TFLite's GPU delegate merges into MAX_POOL only when the padded input is known
non-negative, because its pool kernel has only the ignoring kind of padding.
"""
import numpy as np

from ..kernels.conv import EXPLICIT_PADDING
from .common import only_reader_blocker, readers_of

CONSUMERS = ("CONV_2D", "DEPTHWISE_CONV_2D", "MAX_POOL_2D", "AVERAGE_POOL_2D")


def apply(graph, log):
    # Last PAD first: PAD -> PAD -> CONV merges the second, then the first into the same node.
    for node in reversed(list(graph.nodes)):
        if node.op not in ("PAD", "PADV2"):
            continue
        pads, reason = _hw_zero_padding(node)
        consumer = None
        if reason is None:
            consumer, reason = _consumer(graph, node)
        if reason:
            log.skipped(node, reason)
            continue
        top, left, bottom, right = consumer.options.get(EXPLICIT_PADDING, (0, 0, 0, 0))
        consumer.options[EXPLICIT_PADDING] = (top + pads[0], left + pads[1], bottom + pads[2], right + pads[3])
        graph.remove_node(node)
        graph.set_inputs(consumer, [node.inputs[0] if t is node.outputs[0] else t for t in consumer.inputs])
        log.applied(node, f"into {consumer.label} as explicit padding {consumer.options[EXPLICIT_PADDING]}")


def _hw_zero_padding(node):
    """((top, left, bottom, right), None) for zero padding of H and W of a 4-D input, else
    (None, why not)."""
    x, paddings = node.inputs[0], node.inputs[1]
    if len(x.shape) != 4 or not paddings.is_const:
        return None, "not a constant padding of a 4-D tensor"
    value = node.inputs[2] if len(node.inputs) > 2 else None
    if value is not None and (not value.is_const or np.any(np.asarray(value.data) != 0)):
        return None, "it pads with a value other than zero"
    p = np.asarray(paddings.data).reshape(4, 2)
    if np.any(p[[0, 3]] != 0) or np.any(p < 0):
        return None, "it pads the batch or the channels"
    return (int(p[1, 0]), int(p[2, 0]), int(p[1, 1]), int(p[2, 1])), None


def _consumer(graph, node):
    """(the one node reading the padded tensor, as its data input, None) or (None, why not)."""
    out = node.outputs[0]
    reason = only_reader_blocker(graph, out, node)
    readers = readers_of(graph, out)
    if reason or not readers:
        return None, reason or "nothing in the partition reads it"
    consumer = readers[0]
    if consumer.op not in CONSUMERS or consumer.inputs[0] is not out:
        return None, f"{consumer.label} has no padding to merge it into"
    return consumer, None
