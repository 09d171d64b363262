"""Run a mixed-kernel depthwise block (MixNet's MixedConv2d: channel groups of one tensor, sliced
or split off, each through a DEPTHWISE_CONV_2D of its own kernel size, concatenated back in
order along the channels) as one DEPTHWISE_CONV_2D of the whole tensor: its filter is each
group's filter placed in a kernel large enough for all of them, where the group's padding puts
it (TFLite's SAME padding, or a merged PAD's, differs by kernel size), and its taps outside a
group's own kernel are skipped per channel (depthwise.TAP_WINDOWS: a zero weight times an
infinite input would be NaN where the group's convolution never read that pixel). The slices,
the k convolutions and the concatenation's copies become one dispatch."""
import numpy as np

from .. import kernels
from ...graph import Node
from ...ops import conv as reference
from ...ops.common import ACT_NONE, PADDING_SAME, PADDING_VALID, fused_activation, spatial_geometry
from ..kernels import epilogue, layout
from ..kernels.conv import EXPLICIT_PADDING, INPUT_GATE, geometry, optional_input
from ..kernels.depthwise import TAP_WINDOWS, TILE_SUMS
from .common import is_boundary, new_constant, only_reader_blocker, producer_of, readers_of

# rewrite_partition skips the rule when False (gles-profile --set gpu.transforms.mixed_depthwise.ENABLED=0)
ENABLED = True
SLICING = ("SLICE", "STRIDED_SLICE", "SPLIT", "SPLIT_V")


def apply(graph, log):
    for concat in list(graph.nodes):
        if concat.op != "CONCATENATION" or len(concat.inputs) < 2:
            continue
        groups, reason = _groups(graph, concat)
        fused = None
        if reason is None:
            fused, reason = _fused_node(graph, concat, groups)
        if reason:
            log.skipped(concat, reason)
            continue
        graph.replace_node(concat, [fused])
        for convolution, slicer in groups:
            graph.remove_node(convolution)
            if not any(readers_of(graph, t) or is_boundary(graph, t) for t in slicer.outputs):
                graph.remove_node(slicer)
        kernel_sizes = ", ".join(f"{c.inputs[1].shape[1]}x{c.inputs[1].shape[2]}" for c, _ in groups)
        log.applied(concat, f"with {', '.join(c.label for c, _ in groups)} ({kernel_sizes}) as one "
                            f"{fused.inputs[1].shape[1]}x{fused.inputs[1].shape[2]} {fused.label}")


def _groups(graph, concat):
    """([(DEPTHWISE_CONV_2D, the node slicing its input)] per input of `concat`, None), or
    (None, why not): each input a depthwise convolution's output read by nothing else, each
    convolution's input channels [a, b) of one tensor, the groups in order covering it."""
    out = concat.outputs[0]
    if len(out.shape) != 4 or concat.options.get("axis") not in (3, -1):
        return None, "it does not concatenate the channels of a 4-D tensor"
    groups, source, start = [], None, 0
    for j, value in enumerate(concat.inputs):
        convolution = producer_of(graph, value)
        reason = _convolution_blocker(graph, convolution, value)
        if reason:
            return None, f"input {j}: {reason}"
        slicer, x, channels = _channel_range(graph, convolution.inputs[0])
        if slicer is None or channels[0] != start or (source is not None and x is not source):
            return None, (f"input {j}: the input of {convolution.label} is not channels {start}.. of "
                          f"{'the tensor the other groups slice' if source is not None else 'a tensor'}")
        groups.append((convolution, slicer))
        source, start = x, channels[1]
    if start != source.shape[3]:
        return None, f"the groups cover channels 0..{start} of tensor {source.index}'s {source.shape[3]}"
    return groups, None


def _convolution_blocker(graph, convolution, value):
    """Why `value` is not a group's output: a float DEPTHWISE_CONV_2D with multiplier 1, constant
    weights and nothing applied after it (a fused activation aside), read by the concatenation
    alone; or None."""
    if convolution is None or convolution.op != "DEPTHWISE_CONV_2D":
        return "it is not computed by a DEPTHWISE_CONV_2D"
    x, filt, bias = convolution.inputs[0], convolution.inputs[1], optional_input(convolution, 2)
    if filt.shape[3] != x.shape[3] or not filt.is_const or (bias is not None and not bias.is_const):
        return f"{convolution.label} has a channel multiplier or runtime weights"
    if any(t.dtype != np.float32 or t.quantization for t in (x, filt, value)):
        return f"{convolution.label} is not a float32 convolution"
    if epilogue.steps_of(convolution) or set(convolution.options) & {TAP_WINDOWS, INPUT_GATE, TILE_SUMS}:
        return f"{convolution.label} applies epilogue steps or reads or writes more than its own tensors"
    return only_reader_blocker(graph, value, convolution)


def _channel_range(graph, part):
    """(the node slicing `part` off, its source, (first, end channel)) when `part` is a range of
    the channels of a 4-D tensor (the node stays where something else reads it); else
    (None, None, None)."""
    slicer = producer_of(graph, part)
    if slicer is None or slicer.op not in SLICING:
        return None, None, None
    if fused_activation(slicer) != ACT_NONE or epilogue.steps_of(slicer) or layout.SUPPORT[slicer.op](slicer):
        return None, None, None
    x = slicer.inputs[layout.DATA_INPUT.get(slicer.op, 0)]
    if layout.stored_source(slicer, x) is not x or len(x.shape) != 4:
        return None, None, None
    index_map = layout.slice_maps(slicer)[slicer.outputs.index(part)]
    first = int(index_map.flat[0]) % x.shape[3]
    iota = np.arange(int(np.prod(x.shape))).reshape(x.shape)
    if index_map.shape[:3] != x.shape[:3] or not np.array_equal(index_map, iota[..., first:first + part.shape[3]]):
        return None, None, None
    return slicer, x, (first, first + part.shape[3])


def _fused_node(graph, concat, groups):
    """(the one DEPTHWISE_CONV_2D computing `concat`'s output from the groups' source, None), or
    (None, why not)."""
    first = groups[0][0]
    x, out = groups[0][1].inputs[layout.DATA_INPUT.get(groups[0][1].op, 0)], concat.outputs[0]
    strides, dilations = reference.strides_of(first), reference.dilations_of(first)
    activations = {fused_activation(c) for c, _ in groups}
    if any((reference.strides_of(c), reference.dilations_of(c)) != (strides, dilations) for c, _ in groups):
        return None, "the groups' convolutions differ in stride or dilation"
    if len(activations) != 1 or (activations != {ACT_NONE} and fused_activation(concat) != ACT_NONE):
        return None, "the groups' convolutions and the concatenation apply different activations"
    places = [geometry(c, x.shape[1:3], c.inputs[1].shape[1:3], strides, dilations) for c, _ in groups]
    if len({place[:2] for place in places}) != 1:
        return None, "the groups' outputs differ in height or width"
    windows, reason = _windows(groups, places, dilations)
    if reason:
        return None, reason
    filt, bias = _filter_and_bias(graph, groups, windows, out.shape[3], first.index)
    [activation] = activations
    options = {"stride_h": strides[0], "stride_w": strides[1], "dilation_h_factor": dilations[0],
               "dilation_w_factor": dilations[1], "depth_multiplier": 1, TAP_WINDOWS: windows,
               "fused_activation_function": activation if activation != ACT_NONE else fused_activation(concat)}
    reasons = []
    for padding in _paddings(places, x, filt.shape[1:3], strides, dilations):
        fused = Node(index=first.index, op="DEPTHWISE_CONV_2D", inputs=[x, filt, bias], outputs=[out],
                     version=max(c.version for c, _ in groups), options={**options, **padding})
        reason = kernels.unsupported_reason(fused)
        if reason is None:
            return fused, None
        reasons.append(reason)
    return None, f"the fused convolution cannot run: {reasons[-1]}"


def _windows(groups, places, dilations):
    """(((end channel, top tap, left tap, KH, KW) per group), None): where each group's kernel
    lies in the fused one, so that its first tap reads the pixel its own padding made it read
    (places: each group's conv.geometry, (out_h, out_w, pad_top, pad_left)); or (None, why not)."""
    top, left = max(p[2] for p in places), max(p[3] for p in places)
    windows, end = [], 0
    for (convolution, _), (_, _, t, l) in zip(groups, places):
        kh, kw = convolution.inputs[1].shape[1:3]
        if (top - t) % dilations[0] or (left - l) % dilations[1]:
            return None, f"{convolution.label}'s padding is not a whole number of dilated taps from the others'"
        end += convolution.inputs[0].shape[3]
        windows.append((end, (top - t) // dilations[0], (left - l) // dilations[1], kh, kw))
    return tuple(windows), None


def _filter_and_bias(graph, groups, windows, channels, index):
    """The fused filter [1, KH, KW, C] (each group's taps in its window, zeros elsewhere) and bias
    [C], as constants."""
    kh = max(top + h for _, top, _, h, _ in windows)
    kw = max(left + w for _, _, left, _, w in windows)
    filt, bias, start = np.zeros((1, kh, kw, channels), np.float32), np.zeros(channels, np.float32), 0
    for (convolution, _), (end, top, left, h, w) in zip(groups, windows):
        filt[0, top:top + h, left:left + w, start:end] = np.asarray(convolution.inputs[1].data, np.float32)[0]
        own_bias = optional_input(convolution, 2)
        if own_bias is not None:
            bias[start:end] = np.asarray(own_bias.data, np.float32)
        start = end
    return (new_constant(graph, f"mixed_depthwise_{index}_filter", filt),
            new_constant(graph, f"mixed_depthwise_{index}_bias", bias))


def _paddings(places, x, kernel_hw, strides, dilations):
    """The padding options of the fused node to try: SAME, where its padding over the fused
    kernel puts every group's taps where theirs were (places: as _windows); else VALID with the
    explicit padding before the first tap (bottom / right: what keeps the output's size)."""
    (oh, ow), top, left = places[0][:2], max(p[2] for p in places), max(p[3] for p in places)
    if spatial_geometry(x.shape[1:3], kernel_hw, strides, dilations, PADDING_SAME) == (oh, ow, top, left):
        yield {"padding": PADDING_SAME}
    kh, kw = kernel_hw
    bottom = max(0, (oh - 1) * strides[0] + (kh - 1) * dilations[0] + 1 - x.shape[1] - top)
    right = max(0, (ow - 1) * strides[1] + (kw - 1) * dilations[1] + 1 - x.shape[2] - left)
    yield {"padding": PADDING_VALID, EXPLICIT_PADDING: (top, left, bottom, right)}
