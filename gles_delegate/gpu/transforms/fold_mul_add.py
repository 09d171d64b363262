"""Fold a MUL, ADD or SUB of a constant (a scalar or one value per channel) into the weights and
bias of the CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED or transposed convolution that computes
its input, when that node applies nothing after its sum (no activation, no epilogue); else,
where exact, into the CONV_2D, DEPTHWISE_CONV_2D or FULLY_CONNECTED that reads its output.

As an affine map y = x * scale + shift per channel: folded forward, W' = W * scale and
b' = b * scale + shift (per output channel). Folded backward, W' = W * scale per input channel
and b' = b + sum(W * shift); exact only when the consumer reads no padding, whose zeros the
shift never reached (a pure scale keeps zeros zero, so it folds whatever the padding).
"""
import numpy as np

from ..kernels import epilogue
from ..kernels.conv import EXPLICIT_PADDING, geometry, optional_input, reads_padding
from ...ops import conv as conv_reference
from ...ops.common import ACT_NONE, fused_activation
from .common import is_boundary, new_constant, only_reader_blocker, producer_of, readers_of

# op: (index of the weights, of the bias, axis of the weights' output channels)
PRODUCERS = {"CONV_2D": (1, 2, 0), "DEPTHWISE_CONV_2D": (1, 2, 3), "FULLY_CONNECTED": (1, 2, 0),
             "TRANSPOSE_CONV": (1, 3, 0), "Convolution2DTransposeBias": (1, 2, 0)}
CONSUMERS = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")


def apply(graph, log):
    for node in list(graph.nodes):
        if node.op not in ("MUL", "ADD", "SUB") or sum(t.is_const for t in node.inputs[:2]) != 1:
            continue
        value, affine, reason = _affine(node)
        if reason is None:
            target, forward = _into_producer(graph, node, value, affine)
            if forward:
                target, backward = _into_consumer(graph, node, value, affine)
                reason = backward and f"{forward}; {backward}"
        if reason:
            log.skipped(node, reason)
        else:
            log.applied(node, f"into the weights and bias of {target.label}")


def _affine(node):
    """(runtime input, affine, None), affine() giving (scale [C], shift [C]) of y = x * scale +
    shift, or (None, None, why not). The arrays are made only for a fold that happens: most
    such nodes have nothing to fold into (a chain of 100,000 ADDs made them all)."""
    a, b = node.inputs[:2]
    value, const = (b, a) if a.is_const else (a, b)
    if fused_activation(node) != ACT_NONE:
        return None, None, "it has a fused activation"
    channels = value.shape[-1] if value.shape else 1
    if tuple(node.outputs[0].shape) != tuple(value.shape) or const.size not in (1, channels) \
            or any(d != 1 for d in const.shape[:-1]):
        return None, None, f"constant {list(const.shape)} is not a scalar or one value per channel"

    def affine():
        c = np.broadcast_to(np.asarray(const.data, np.float32).reshape(-1), (channels,)).astype(np.float64)
        ones, zeros = np.ones(channels), np.zeros(channels)
        if node.op == "MUL":
            return c, zeros
        if node.op == "ADD":
            return ones, c
        return (ones, -c) if const is b else (-ones, c)  # x - c, or c - x
    return value, affine, None


def _weights(graph, node, index, data):
    """Replace input `index` of `node` by a new float32 constant holding `data`."""
    old = optional_input(node, index)
    name = f"{old.name if old is not None else node.outputs[0].name}/folded"
    tensor = new_constant(graph, name, data)
    inputs = list(node.inputs) + [None] * (index + 1 - len(node.inputs))
    inputs[index] = tensor
    graph.set_inputs(node, inputs)


def _bias(node, index, channels):
    bias = optional_input(node, index)
    return np.zeros(channels) if bias is None else np.asarray(bias.data, np.float64).reshape(-1)


def _into_producer(graph, node, value, affine):
    """Fold into the node computing `value`: (that node, None) once done, else (None, why not)."""
    producer = producer_of(graph, value)
    reason = _producer_blocker(graph, producer, value)
    if reason:
        return None, reason
    scale, shift = affine()
    w_index, b_index, axis = PRODUCERS[producer.op]
    weights = producer.inputs[w_index]
    shape = [1] * weights.data.ndim
    shape[axis] = -1
    _weights(graph, producer, w_index, np.asarray(weights.data, np.float64) * scale.reshape(shape))
    _weights(graph, producer, b_index, _bias(producer, b_index, len(scale)) * scale + shift)
    graph.remove_node(node)
    graph.set_outputs(producer, [node.outputs[0]])
    return producer, None


def _producer_blocker(graph, producer, value):
    if producer is None:
        return "its input is not computed in this partition"
    if producer.op not in PRODUCERS:
        return f"{producer.label} has no weights to fold it into"
    if fused_activation(producer) != ACT_NONE or epilogue.steps_of(producer):
        return f"{producer.label} applies an activation before it"
    if not producer.inputs[PRODUCERS[producer.op][0]].is_const:
        return f"the weights of {producer.label} are computed at run time"
    return only_reader_blocker(graph, value, producer)


def _into_consumer(graph, node, value, affine):
    """Fold into the one node reading the output: (that node, None) once done, else (None, why not)."""
    consumer, reason = _consumer(graph, node.outputs[0], affine)
    if reason:
        return None, reason
    scale, shift = affine()
    weights = np.asarray(consumer.inputs[1].data, np.float64)
    channel = _in_channel_of(consumer, weights, len(scale))
    if channel is None:
        return None, f"{consumer.label} does not read whole pixels per row"
    bias = _bias(consumer, 2, _out_channels(consumer)) + _per_output_sum(consumer, weights * shift[channel])
    _weights(graph, consumer, 1, weights * scale[channel])
    _weights(graph, consumer, 2, bias)
    graph.remove_node(node)
    graph.set_inputs(consumer, [value] + consumer.inputs[1:])
    return consumer, None


def _consumer(graph, out, affine):
    """(the one node reading `out` as its data input, None), or (None, why it cannot take the fold)."""
    readers = readers_of(graph, out)
    if is_boundary(graph, out) or len(readers) != 1:
        return None, "its output is read by other nodes too, or leaves the partition"
    consumer = readers[0]
    if consumer.op not in CONSUMERS or consumer.inputs[0] is not out:
        return None, f"{consumer.label} has no weights to fold it into"
    if not consumer.inputs[1].is_const:
        return None, f"the weights of {consumer.label} are computed at run time"
    if np.any(affine()[1] != 0) and _reads_padding(consumer):
        return None, f"{consumer.label} reads zero padding, which the shift never reached"
    return consumer, None


def _out_channels(node):
    w = node.inputs[1].shape
    return w[3] if node.op == "DEPTHWISE_CONV_2D" else w[0]


def _in_channel_of(node, weights, channels):
    """Per element of the weights, the input channel it multiplies, or None."""
    if node.op == "CONV_2D":
        # Output channel o of G groups reads channels (o // (O / G)) * I onwards (I = C / G).
        outputs, depth = weights.shape[0], weights.shape[3]
        first = np.arange(outputs) // (outputs // (channels // depth)) * depth
        return np.broadcast_to(first[:, None, None, None] + np.arange(depth), weights.shape)
    if node.op == "DEPTHWISE_CONV_2D":
        multiplier = weights.shape[3] // channels
        return np.broadcast_to(np.arange(weights.shape[3]) // multiplier, weights.shape)
    depth = weights.shape[1]  # FULLY_CONNECTED: a row of K values spans whole pixels
    return None if depth % channels else np.broadcast_to(np.arange(depth) % channels, weights.shape)


def _per_output_sum(node, contribution):
    """Sum of a weights-shaped array over everything but the output channel."""
    if node.op == "DEPTHWISE_CONV_2D":
        return contribution.sum(axis=(0, 1, 2))
    return contribution.reshape(contribution.shape[0], -1).sum(axis=1)


def _reads_padding(node):
    if node.op == "FULLY_CONNECTED":
        return False
    x, filt = node.inputs[0], node.inputs[1]
    strides, dilations = conv_reference.strides_of(node), conv_reference.dilations_of(node)
    oh, ow, top, left = geometry(node, x.shape[1:3], filt.shape[1:3], strides, dilations)
    return bool(node.options.get(EXPLICIT_PADDING)) or \
        reads_padding(x.shape[1], filt.shape[1], strides[0], dilations[0], oh, top) or \
        reads_padding(x.shape[2], filt.shape[2], strides[1], dilations[1], ow, left)
