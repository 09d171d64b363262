"""CONV_2D: kernels_glsl/conv2d.glsl, specialized by kernel size, blocking (output slices and
pixels per invocation), a split of the input channels over a workgroup (deep layers on small
planes), a pointwise variant for 1x1 stride-1 convolutions, and whether any tap reads the zero
padding; grouped convolutions (G = C / the filter's input channels) through per-dispatch
params, each block of output slices reading the window of input slices its groups span; a
channel gate multiplying the input as it is loaded (INPUT_GATE, rule channel_gate). Also
what the other convolution kernels (depthwise.py, fully_connected.py, transpose_conv.py) share:
support checks, blocking, weight and bias packing."""
import numpy as np

from ...graph import INPUT_GATE_KEY
from ...ops import conv as reference
from ...ops.common import spatial_geometry
from ...registry import OpFacts
from . import epilogue
from ..workgroups import TARGET_INVOCATIONS, choose_workgroup
from .base import Dispatch

# Blocking backs off until the grid has at least this many invocations (fewer leave a big GPU
# idle), and never goes past 2 output slices x 2 pixels: on an H200, 4 slices or 4 pixels per
# invocation measured slower in every MobileNet-sized 1x1 and 3x3 layer (more registers, fewer
# invocations), and 2 x 2 was within noise of the best.
MIN_INVOCATIONS = 32768  # an H200 keeps ~270K invocations in flight: 6144 left 1x1 convs on 14x14x512 latency-bound (66 us)
SLICE_CHOICES = PIXEL_CHOICES = (2, 1)
MAX_SPLIT = 16  # lanes sharing one output block in split-K kernels (a workgroup axis)
# Split K only while every lane still sums at least this many vec4 steps. 4 rather than 8: on an
# H200 the summed per-dispatch GPU time fell 5-8 % on EfficientNet-B0, MobileNetV3-small,
# selfie_segmentation, hand_landmark_lite and iris_landmark, and MobileNet v1 kept its time
# (two runs of `gles-profile MODELS --set gpu.kernels.conv.CHUNKS_PER_LANE=4`, docs/performance.md).
CHUNKS_PER_LANE = 4
# Where the blocked grid is too small to fill the GPU, split K over lanes that share a blocked
# output (each lane still reuses every load for 2 x 2 outputs) instead of first backing the
# blocking off to 1 x 1 and then splitting. Shared memory: at most TARGET_INVOCATIONS (128) lanes
# x 4 vec4 = 8 KB a workgroup, half the 16 KB every GLES 3.1 device has. False: the old order.
BLOCKED_SPLIT = True
# node.options[EXPLICIT_PADDING] = (top, left, bottom, right): zero padding of the input that a
# PAD node added before the rewrite rule merge_padding folded it into this node.
EXPLICIT_PADDING = "explicit_padding"
# node.options[INPUT_GATE] = a runtime tensor [B, 1, 1, C] (or [B, C]) that multiplies the input
# per batch and channel as it is loaded: a squeeze-excite MUL the rewrite rule channel_gate
# fused into this convolution (the input tensor is the MUL's other operand).
INPUT_GATE = INPUT_GATE_KEY


def optional_input(node, index):
    """The node's input tensor `index`, None when absent or omitted (reference.optional_input)."""
    return reference.optional_input(node.inputs, index)


def gpu_support(op, data, constants, output_shape, references=reference):
    """SUPPORT for `op`: the reference kernel's checks (shapes, options, types; of its module
    `references`), then the GPU's own: input `data` is computed at run time (it lives in the
    arena), the inputs at `constants` ({index: role}) are constant when present (packed at
    compile time), and the output tensor has the shape output_shape(node) computes (the kernel
    indexes the output by it)."""
    check = references.SUPPORT[op]

    def support(node):
        reason = check(node)
        if reason is not None:
            return reason
        if node.inputs[data].is_const:
            return f"input tensor {node.inputs[data].index} is constant (fold the node first)"
        for index, role in constants.items():
            tensor = optional_input(node, index)
            if tensor is not None and not tensor.is_const:
                return f"{role} tensor {tensor.index} is computed at run time; the GPU needs a constant"
        expected, out = tuple(output_shape(node)), node.outputs[0]
        if tuple(out.shape) != expected:
            return f"output tensor {out.index} has shape {list(out.shape)}, the op computes {list(expected)}"
        return None
    return support


def block_size(extent, choices):
    """The largest block (of slices or pixels) from `choices` (ending in 1) that wastes at most
    1/8 of `extent` on the padded last block."""
    return next(b for b in choices if (-extent % b) * 8 <= extent or b == 1)


def blocking(slices, pixels, rows_and_batches, pixel_choices=None):
    """(output slices, pixels) per invocation: as much reuse as divides evenly (pixel blocks from
    `pixel_choices`, default PIXEL_CHOICES), backing off (slices first: pixel blocks read weights
    once for several pixels) while the grid would have fewer than MIN_INVOCATIONS invocations."""
    out_slices = block_size(slices, SLICE_CHOICES)
    block = block_size(pixels, pixel_choices or PIXEL_CHOICES)

    def invocations():
        return -(-slices // out_slices) * -(-pixels // block) * rows_and_batches
    while invocations() < MIN_INVOCATIONS and max(out_slices, block) > 1:
        if out_slices > 1:
            out_slices //= 2
        else:
            block //= 2
    return out_slices, block


def k_split(slices, outputs, taps=1):
    """Lanes per output (a power of two <= MAX_SPLIT) summing a dot product over `taps` x
    `slices` vec4 steps, the lanes taking every split-th slice: 1 when the `outputs` already fill
    the GPU (MIN_INVOCATIONS), else as many as keep every lane CHUNKS_PER_LANE steps and a slice."""
    split = 1
    while (split < MAX_SPLIT and outputs * split < MIN_INVOCATIONS and slices >= 2 * split
           and taps * slices >= 2 * split * CHUNKS_PER_LANE):
        split *= 2
    return split


def conv_blocking(slices, pixels, rows_and_batches, window_of, taps, blocks_split=True):
    """(output slices, pixels, lanes) per output block of a convolution with `taps` kernel taps
    whose block of o output slices reads window_of(o) input slices: the blocked grid split over
    lanes when that fills the GPU (BLOCKED_SPLIT, and `blocks_split`), else blocking backed off
    (blocking()) and split only once it is 1 x 1."""
    def outputs(out_slices, block):
        return -(-slices // out_slices) * -(-pixels // block) * rows_and_batches
    if BLOCKED_SPLIT and blocks_split:
        out_slices, block = block_size(slices, SLICE_CHOICES), block_size(pixels, PIXEL_CHOICES)
        blocked = outputs(out_slices, block)
        split = k_split(window_of(out_slices), blocked, taps)
        if split > 1 and blocked * split >= MIN_INVOCATIONS:
            return out_slices, block, split
    out_slices, block = blocking(slices, pixels, rows_and_batches)
    split = k_split(window_of(1), outputs(1, 1), taps) if out_slices == block == 1 else 1
    return out_slices, block, split


def split_workgroup(split, blocks, layers, limits):
    """Workgroup (x, split, z) of a split-K kernel whose grid is (blocks, rows x split, layers):
    the lanes of one output along y, about TARGET_INVOCATIONS in all, x and z halved until it
    fits the device's GL_MAX_COMPUTE_WORK_GROUP_INVOCATIONS (`limits`). The compiler's clamp
    would halve y too, which conv2d.glsl refuses: OpenGL ES 3.1 guarantees 128 invocations,
    and x alone may take 16 (NARROW_X) beside 16 lanes."""
    x, z, _ = choose_workgroup((blocks, layers, 1), {}, target=max(1, TARGET_INVOCATIONS // split))
    most = int(limits.get("max_workgroup_invocations") or x * split * z)
    while x * split * z > most and x * z > 1:
        x, z = (x, z // 2) if z > 1 else (x // 2, z)
    return x, split, z


def pack_weights(filter_ohwi, out_slices):
    """Filter [O, KH, KW, I] -> vec4 rows [group][KH][KW][ceil(I/4)][out_slices][4], where row r
    of block o holds output channels 4 * (group * out_slices + o) + 0..3 for input channel
    4 * slice + r (zero past O and I)."""
    o, kh, kw, i = filter_ohwi.shape
    groups = -(-o // (4 * out_slices))
    padded = np.zeros((groups * out_slices * 4, kh, kw, -(-i // 4) * 4), np.float32)
    padded[:o, :, :, :i] = filter_ohwi
    blocks = padded.reshape(groups, out_slices, 4, kh, kw, -1, 4)  # g, o, c, ky, kx, s, r
    return blocks.transpose(0, 3, 4, 5, 1, 6, 2).reshape(-1, 4)


def pack_bias(bias, channels):
    """Bias [channels] (None: zeros) -> one vec4 row per output slice."""
    rows = np.zeros(-(-channels // 4) * 4, np.float32)
    if bias is not None:
        rows[:channels] = np.asarray(bias, np.float32)
    return rows.reshape(-1, 4)


def group_window(out_slices, out_channels, group_channels):
    """(first input slice of each block of `out_slices` output slices, the most input slices one
    block reads) of a convolution of groups (output channels, input channels) `group_channels`:
    the input slices the block's channels' groups span (conv2d.glsl computes the same first
    slice)."""
    group_out, group_in = group_channels
    starts = np.arange(0, out_channels, 4 * out_slices)
    ends = np.minimum(starts + 4 * out_slices, out_channels)
    first = starts // group_out * group_in // 4
    last = -(-((ends - 1) // group_out + 1) * group_in // 4)
    return first, int(np.max(last - first))


def pack_grouped_weights(filter_ohwi, out_slices, in_channels):
    """pack_weights of a grouped filter [O, KH, KW, C / G], each block of output slices keeping
    only the input slices its groups read (group_window): vec4 rows
    [block][KH][KW][window][out_slices][4], zero past the input's slices."""
    o, kh, kw, depth = filter_ohwi.shape
    groups = in_channels // depth
    full = np.zeros((o, kh, kw, in_channels), np.float32)
    for g in range(groups):  # the block-diagonal filter over every input channel
        rows = slice(g * (o // groups), (g + 1) * (o // groups))
        full[rows, :, :, g * depth:(g + 1) * depth] = filter_ohwi[rows]
    slices = -(-in_channels // 4)
    first, window = group_window(out_slices, o, (o // groups, depth))
    packed = pack_weights(full, out_slices).reshape(len(first), kh, kw, slices, -1, 4)
    packed = np.concatenate([packed, np.zeros_like(packed[:, :, :, :window])], axis=3)
    return np.stack([packed[b, :, :, f:f + window] for b, f in enumerate(first)]).reshape(-1, 4)


def geometry(node, in_hw, filter_hw, strides, dilations):
    """(out_h, out_w, pad_top, pad_left) of a windowed node: its explicit zero padding, if any,
    then its own SAME / VALID padding computed on the padded size (what PAD + the node did)."""
    top, left, bottom, right = node.options.get(EXPLICIT_PADDING, (0, 0, 0, 0))
    padded = (in_hw[0] + top + bottom, in_hw[1] + left + right)
    oh, ow, pad_top, pad_left = spatial_geometry(padded, filter_hw, strides, dilations, node.options["padding"])
    return oh, ow, pad_top + top, pad_left + left


def reads_padding(in_size, kernel, stride, dilation, out_size, pad_before):
    """Whether some tap of the output extent falls outside [0, in_size) along one axis."""
    last = (out_size - 1) * stride - pad_before + (kernel - 1) * dilation
    return pad_before > 0 or last >= in_size


def build(node, env):
    """One conv2d.glsl Dispatch over the output [N, OH, OW, O]: a grid of (pixel blocks, rows,
    batch x output slice groups) invocations, weights and bias packed as constants."""
    x, filt, bias = node.inputs[0], node.inputs[1], optional_input(node, 2)
    out = node.outputs[0]
    in4, out4 = env.shape4(x), env.shape4(out)
    kh, kw = filt.shape[1:3]
    (sh, sw), (dh, dw) = reference.strides_of(node), reference.dilations_of(node)
    _, _, pad_top, pad_left = geometry(node, (in4.h, in4.w), (kh, kw), (sh, sw), (dh, dw))
    padded = reads_padding(in4.h, kh, sh, dh, out4.h, pad_top) or reads_padding(in4.w, kw, sw, dw, out4.w, pad_left)
    pointwise = kh == kw == 1 and sh == sw == 1 and not padded  # explicit padding moves the pixels
    rows, extent = (1, out4.h * out4.w) if pointwise else (out4.h, out4.w)
    # A grouped convolution's block reads the input slices of its groups only; an ungrouped one
    # reads them all (one group of O outputs over C inputs: window = every slice).
    group_channels = (out4.c // (in4.c // filt.shape[3]), filt.shape[3])
    grouped = group_channels[1] != in4.c

    def window_of(out_slices):
        return group_window(out_slices, out4.c, group_channels)[1] if grouped else in4.slices
    # A grouped convolution backs its blocking off first, then splits (no blocked split).
    out_slices, pixels, split = conv_blocking(out4.slices, extent, rows * out4.b, window_of, kh * kw,
                                              blocks_split=not grouped)
    window = window_of(out_slices)
    groups = -(-out4.slices // out_slices)
    blocks, layers = -(-extent // pixels), out4.b * groups
    weights = np.asarray(filt.data, np.float32)
    packed = pack_grouped_weights(weights, out_slices, in4.c) if grouped else pack_weights(weights, out_slices)
    defines = {"KH": kh, "KW": kw, "OUT_SLICES": out_slices, "PIXELS": pixels, "K_SPLIT": split,
               "POINTWISE": int(pointwise),
               "PADDED": int(padded), **env.output_stage(node)}
    params = {"in_size": in4.as_ivec4(), "out_size": out4.as_ivec4(), "out_channels": out4.c,
              "in_offset": env.arena(x), "out_offset": env.arena(out), "group_channels": group_channels,
              "window": window, "weights_offset": env.constant(packed),
              "bias_offset": env.constant(pack_bias(None if bias is None else bias.data, out4.c)),
              "stride": (sw, sh), "dilation": (dw, dh), "pad": (pad_left, pad_top)}
    workgroup = split_workgroup(split, blocks, layers, env.limits) if split > 1 else None
    gate = node.options.get(INPUT_GATE)
    defines["GATED"] = int(gate is not None)
    if gate is not None:
        params["gate_offset"] = env.arena(gate)
    reads, inplace = epilogue.apply(node, env, out, defines, params, (x,) + ((gate,) if gate is not None else ()))
    return [Dispatch("conv2d", (blocks, rows * split, layers), defines, params, reads=reads, writes=(out,),
                     workgroup=workgroup, inplace=inplace)]


def output_shape(node):
    """[N, OH, OW, O] of a CONV_2D node (also DEPTHWISE_CONV_2D's, with O its filter's last dim)."""
    x, filt = node.inputs[0], node.inputs[1]
    channels = filt.shape[3] if node.op == "DEPTHWISE_CONV_2D" else filt.shape[0]
    oh, ow, _, _ = geometry(node, x.shape[1:3], filt.shape[1:3], reference.strides_of(node),
                            reference.dilations_of(node))
    return x.shape[0], oh, ow, channels


SUPPORT = {"CONV_2D": gpu_support("CONV_2D", 0, {1: "filter", 2: "bias"}, output_shape)}
BUILD = {"CONV_2D": build}
EPILOGUE = {"CONV_2D": None}
FACTS = {"CONV_2D": OpFacts(arity=((2, 3), (2,), 1), fused_activation=True)}  # bias optional
