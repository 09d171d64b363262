"""Fuse the gate of a squeeze-excite block, a MEAN over H and W followed by one or two
FULLY_CONNECTED layers (each with its activation and epilogue: the sigmoid of the gate), into
one SE_GATE node, which one dispatch computes (gpu/kernels/squeeze_excite.py)."""
import numpy as np

from ...graph import Node
from ...ops.common import fused_activation
from .. import kernels
from ..kernels import epilogue, squeeze_excite
from ..kernels.conv import optional_input
from ..kernels.layout import same_storage
from ..phwc4 import bhwc
from . import alias_reshape
from .common import fused_operands, plain_reduction, readers_of, sole_reader

ENABLED = True  # rewrite_partition skips the rule when False, for A/B measurements (gles-profile --set gpu.transforms.se_gate.ENABLED=0)
# One workgroup sums the mean alone: past this many vec4s of x per batch item the MEAN keeps its
# own dispatch, spread over the GPU, and SE_GATE reads the pooled vector (the layers still merge).
# On an H200 (docs/performance.md, gles-profile --set) a fused mean of 6K vec4s (selfie's 16x16x96)
# beat MEAN + FC + FC, one of 8K-28K (EfficientNet-B0's 28x28x144 ... 7x7x1152) lost to them.
MAX_FUSED_MEAN_ELEMENTS = 8192
# One workgroup also runs the layers: past this many weights (multiply-adds per batch item) a
# layer is a FULLY_CONNECTED of its own, split over workgroups (an EfficientNet's 1280 x 1000
# classifier head after its mean took 124 us as one SE_GATE, about 10 us as MEAN + FC).
MAX_FUSED_WEIGHTS = 131072


def apply(graph, log):
    operands = fused_operands(graph)
    for mean in list(graph.nodes):
        if mean.op != "MEAN" or not _over_plane(mean):
            continue
        if not plain_reduction(mean):
            log.skipped(mean, "it squares its input or applies epilogue steps, which the gate would not")
            continue
        reason = _fuse(graph, log, mean, operands)
        if reason:
            log.skipped(mean, reason)


def _over_plane(mean):
    """A MEAN of a [B, H, W, C] tensor over H and W (axes 1 and 2), to [B, 1, 1, C] or [B, C]."""
    x, axes = mean.inputs[:2]
    if len(x.shape) != 4 or not axes.is_const:
        return False
    return sorted({int(a) % 4 for a in np.asarray(axes.data).reshape(-1)}) == [1, 2]


def _layer_reason(fc, value):
    """Why FULLY_CONNECTED `fc` cannot be a layer of the gate reading `value`, or None."""
    if fc is None or fc.op != "FULLY_CONNECTED" or fc.inputs[0] is not value:
        return f"tensor {value.index} is not read by one FULLY_CONNECTED alone"
    weights, bias = fc.inputs[1], optional_input(fc, 2)
    if not weights.is_const or weights.dtype != np.float32 or len(weights.shape) != 2 \
            or weights.shape[1] != bhwc(value.shape).c:
        return f"{fc.label} has no constant float weights [U, {bhwc(value.shape).c}]"
    if bias is not None and not bias.is_const:
        return f"{fc.label} has a bias computed at run time"
    if weights.size > MAX_FUSED_WEIGHTS:
        return f"{fc.label} has {weights.size} weights, more than one workgroup runs well ({MAX_FUSED_WEIGHTS})"
    if len(fc.outputs) != 1:
        return f"{fc.label} has several outputs"
    return None


def _pooled(graph, mean, operands):
    """(the tensor of the mean's values that the gate's first layer reads, the reshape between
    them or None): the MEAN's output, or that of a reshape of it which moves no value in PHWC4
    (Keras' Reshape((1, 1, C)) between its global pooling and a 1x1 Conv2D)."""
    pooled = mean.outputs[0]
    reshape = sole_reader(graph, pooled, operands)
    if reshape is not None and reshape.op in alias_reshape.OPS and reshape.inputs[0] is pooled \
            and same_storage(pooled, reshape.outputs[0]) and not epilogue.steps_of(reshape):
        return reshape.outputs[0], reshape
    return pooled, None


def _fuse(graph, log, mean, operands):
    """Replace the gate starting at `mean` by an SE_GATE node and log it; returns why not, or None."""
    pooled, reshape = _pooled(graph, mean, operands)
    first = next((r for r in readers_of(graph, pooled) if r.op == "FULLY_CONNECTED" and r.inputs[0] is pooled), None)
    reason = _layer_reason(first, pooled)
    if reason:
        return reason
    x4 = bhwc(mean.inputs[0].shape)
    large = x4.slices * x4.h * x4.w > MAX_FUSED_MEAN_ELEMENTS
    absorb = sole_reader(graph, pooled, operands) is first and not large
    second = sole_reader(graph, first.outputs[0], operands)
    if second is not None and (_layer_reason(second, first.outputs[0]) or
                               first.inputs[1].size + second.inputs[1].size > MAX_FUSED_WEIGHTS or
                               squeeze_excite.hidden_reason(fused_activation(first), epilogue.steps_of(first))):
        second = None
    if not absorb and second is None:
        kept = f"the mean over {x4.h}x{x4.w}x{x4.c} keeps its own dispatch" if large else "the mean is read elsewhere"
        return f"{kept} and one layer follows: nothing merges"
    gate = _gate_node(mean, pooled, first, second, absorb)
    reason = kernels.unsupported_reason(gate)
    if reason:
        return reason
    graph.replace_node(second or first, [gate])
    graph.remove_node(first)
    if absorb:
        graph.remove_node(mean)
        if reshape is not None:
            graph.remove_node(reshape)
    layers = " + ".join(n.label for n in (first, second) if n is not None)
    if absorb:
        log.applied(mean, f"with {layers} as one SE_GATE dispatch")
    else:
        kept = f"the mean over {x4.h}x{x4.w}x{x4.c} keeps its own dispatch" if large else "the mean is read elsewhere"
        log.applied(mean, f"{layers} as one SE_GATE dispatch reading its output ({kept})")
    return None


def _gate_node(mean, pooled, first, second, absorb):
    """The SE_GATE node computing what `first` (and `second`) compute from the mean of x, reading
    x itself when it absorbs the MEAN, else `pooled`, the mean's values."""
    last = second or first
    inputs = [mean.inputs[0] if absorb else pooled, first.inputs[1], optional_input(first, 2)]
    options = {"fused_activation_function": fused_activation(last), epilogue.KEY: epilogue.steps_of(last)}
    if second is not None:
        inputs += [second.inputs[1], optional_input(second, 2)]
        options.update({squeeze_excite.HIDDEN_ACTIVATION: fused_activation(first),
                        squeeze_excite.HIDDEN_EPILOGUE: epilogue.steps_of(first)})
    return Node(index=(mean if absorb else first).index, op=squeeze_excite.OP, inputs=inputs,
                outputs=[last.outputs[0]], options=options)
