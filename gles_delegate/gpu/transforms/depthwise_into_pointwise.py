"""Fuse a DEPTHWISE_CONV_2D into the pointwise CONV_2D that alone reads its output (the separable
convolution of MobileNets and MediaPipe's detectors): the CONV_2D reads the depthwise
convolution's input and computes each depthwise value as it loads it (conv.INPUT_DEPTHWISE), and
the depthwise dispatch and its output tensor go away. Each block of the CONV_2D's output slices
computes the values it loads itself, so a pair is fused only while the recomputed taps (beyond
computing each depthwise value once) stay within MAX_RECOMPUTED_TAPS: wide outputs on large
planes keep their two dispatches."""
from ...ops.common import ACT_NONE, ACT_TANH, fused_activation
from ..kernels import epilogue
from ..kernels.conv import INPUT_DEPTHWISE, INPUT_GATE, depthwise_repeats
from ..kernels.depthwise import TILE_SUMS
from ..phwc4 import bhwc
from .common import fuse_into_readers, sole_reader

ENABLED = True  # rewrite_partition skips the rule when False, for A/B measurements (gles-profile --set gpu.transforms.depthwise_into_pointwise.ENABLED=0)
# The most vec4 tap products (batch x pixels x slices x taps of the depthwise convolution, once
# per block of the CONV_2D's output slices after the first) a fused pair may compute beyond the
# depthwise convolution's own.
MAX_RECOMPUTED_TAPS = 1 << 20


def apply(graph, log):
    fuse_into_readers(graph, log, "DEPTHWISE_CONV_2D", _pointwise, _fuse)


def _fuse(graph, node, pointwise, operands):
    pointwise.options[INPUT_DEPTHWISE] = node
    graph.remove_node(node)
    graph.set_inputs(pointwise, [node.inputs[0]] + pointwise.inputs[1:])
    return f"into {pointwise.label}, which computes it as it loads its input"


def _pointwise(graph, node, operands):
    """(the CONV_2D that can compute depthwise convolution `node` as it loads its input, None),
    or (None, why not)."""
    x, out = node.inputs[0], node.outputs[0]
    if x.shape[-1] != out.shape[-1]:
        return None, f"its channel multiplier is {out.shape[-1] // x.shape[-1]}, not 1"
    if node.options.get(TILE_SUMS) or len(node.outputs) != 1:
        return None, "it writes tile sums too"
    if epilogue.steps_of(node):
        return None, "it has epilogue steps"
    if not ACT_NONE <= fused_activation(node) <= ACT_TANH:
        return None, f"its fused activation {fused_activation(node)} is not one the kernel applies"
    reader = sole_reader(graph, out, operands)
    if reader is None:
        return None, "its output is read by more than one node or leaves the partition"
    if reader.op != "CONV_2D" or any(t is out for t in reader.inputs[1:]):
        return None, f"{reader.label} does not read it as a convolution's input"
    if reader.options.get(INPUT_GATE) is not None or reader.options.get(INPUT_DEPTHWISE) is not None:
        return None, f"{reader.label} transforms its input already"
    repeats = depthwise_repeats(reader, out)
    if repeats is None:
        return None, f"{reader.label} is not an ungrouped 1x1 convolution of stride 1 without padding"
    out4, filt = bhwc(out.shape), node.inputs[1]
    extra = (repeats - 1) * out4.b * out4.h * out4.w * out4.slices * filt.shape[1] * filt.shape[2]
    if extra > MAX_RECOMPUTED_TAPS:
        return None, (f"{reader.label} would compute each of its values {repeats} times (once per block of "
                      f"output slices): {extra} more tap products than the {MAX_RECOMPUTED_TAPS} allowed")
    return reader, None
