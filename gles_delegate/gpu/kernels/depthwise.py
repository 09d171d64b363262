"""DEPTHWISE_CONV_2D (v1, v2 with dilation, any channel multiplier): kernels_glsl/depthwise_conv2d.glsl,
specialized by kernel size, output tile (2 x 2 pixels per invocation where stride and dilation
are 1, so neighbouring outputs share their input loads), multiplier 1 or not, and padding.

With options[TILE_SUMS] (rule depthwise_tile_sums) the node has a second output, the sums of its
output over blocks of TILE_BLOCK invocations, [B, blocks down, blocks across, C]: each workgroup
adds up what it stored, so a mean over H x W that reads them (SE_GATE's) needs no dispatch of
its own.

With options[TAP_WINDOWS] (rule mixed_depthwise) the channels come in groups whose own kernels
are windows of the filter: each lane skips the taps outside its group's window.

With options[PASS_THROUGH] (rule residual_through_concat: a GhostNet module's concatenation
[x, depthwise(x)] plus a residual), a tensor r of x's shape, the node has a second output, x + r,
stored pixel by pixel from the input the convolution reads (stride 1, multiplier 1, the output's
size): the other half of the residual ADD, whose dispatch goes."""
import copy

import numpy as np

from ...graph import PASS_THROUGH_KEY
from ...ops import conv as reference
from . import epilogue
from ...registry import OpFacts
from ..phwc4 import bhwc
from .base import Dispatch
from .conv import (MIN_INVOCATIONS, block_size, geometry, gpu_support, optional_input, output_shape, pack_bias,
                   reads_padding)

TILE_SUMS = "tile_sums"  # node.options key: True when outputs[1] is the tile sums
# node.options key (rule mixed_depthwise): ((end channel, first row, first column, rows, columns),
# ...) per channel group, in channel order: the window of the filter's taps each group's own
# kernel occupies; the kernel skips the others per channel.
TAP_WINDOWS = "tap_windows"
PASS_THROUGH = PASS_THROUGH_KEY  # node.options key (rule residual_through_concat): r, outputs[1] = x + r
# Invocations (across, down) whose stored values one tile sum adds up: the workgroup, fixed
# because the sums' shape depends on it; 64 invocations fit every GLES 3.1 device (128 at least).
TILE_BLOCK = (8, 8)
# Weights go to registers first (PRELOAD_WEIGHTS) only for kernels of at most this many taps: on
# the H100 a 9x9 array of vec4s beside the tap windows' masks spilled (MixNet's fused 9x9 blocks
# took 3x as long: mixnet_s 1.21 -> 0.85 ms loading each weight at its tap); 7x7 kept its speed.
PRELOAD_TAPS_MAX = 49
# TAP_WINDOWS: skip the patch pixels no lane of a slice uses (SKIP_TAPS) only on grids of at
# least this many invocations; below, the GPU is latency-bound and branch-free loads overlap.
SKIP_TAPS_MIN_INVOCATIONS = MIN_INVOCATIONS


def pack_weights(filter_1hwc):
    """Filter [1, KH, KW, C] -> vec4 rows [ceil(C/4)][KH][KW] (channels zero-padded)."""
    _, kh, kw, c = filter_1hwc.shape
    padded = np.zeros((kh, kw, -(-c // 4) * 4), np.float32)
    padded[..., :c] = filter_1hwc[0]
    return padded.reshape(kh, kw, -1, 4).transpose(2, 0, 1, 3).reshape(-1, 4)


def pack_windows(windows, kernel_hw, channels):
    """TAP_WINDOWS -> vec4 rows [ceil(C/4)][4]: per slice, each lane's first row, end row, first
    column and end column of taps (a padded lane's window is empty: first past the kernel, end 0,
    so that no min / max over a slice's lanes sees it)."""
    kh, kw = kernel_hw
    slices = -(-channels // 4)
    rows = np.tile(np.array([kh, 0, kw, 0], np.float32)[:, None], (slices, 1, 4))
    start = 0
    for end, top, left, h, w in windows:
        lanes = np.arange(start, end)
        rows[lanes // 4, :, lanes % 4] = (top, top + h, left, left + w)
        start = end
    return rows.reshape(-1, 4)


def tile_size(out4, strides, dilations):
    """(TILE_W, TILE_H): 2 along an axis with unit stride and dilation whose extent wastes little,
    else 1; backs off (width first) while the grid has fewer than MIN_INVOCATIONS invocations."""
    (sh, sw), (dh, dw) = strides, dilations
    tile_w = block_size(out4.w, (2, 1)) if sw == dw == 1 else 1
    tile_h = block_size(out4.h, (2, 1)) if sh == dh == 1 else 1
    while tile_w * tile_h > 1 and -(-out4.w // tile_w) * -(-out4.h // tile_h) * out4.slices * out4.b < MIN_INVOCATIONS:
        if tile_w > 1:
            tile_w = 1
        else:
            tile_h = 1
    return tile_w, tile_h


def _tiles(node):
    """(TILE_W, TILE_H, tiles across, tiles down) of the node's output."""
    out4 = bhwc(node.outputs[0].shape)
    tile_w, tile_h = tile_size(out4, reference.strides_of(node), reference.dilations_of(node))
    return tile_w, tile_h, -(-out4.w // tile_w), -(-out4.h // tile_h)


def tile_sums_shape(node):
    """[B, blocks down, blocks across, C]: the shape of the node's tile sums (TILE_SUMS)."""
    out = node.outputs[0].shape
    _, _, tiles_w, tiles_h = _tiles(node)
    return out[0], -(-tiles_h // TILE_BLOCK[1]), -(-tiles_w // TILE_BLOCK[0]), out[3]


def build(node, env):
    """One depthwise_conv2d.glsl Dispatch over the output [N, OH, OW, C*M]: a grid of
    (tiles across, tiles down, batch x output slices) invocations of TILE_W x TILE_H pixels."""
    x, filt, bias = node.inputs[0], node.inputs[1], optional_input(node, 2)
    out = node.outputs[0]
    in4, out4 = env.shape4(x), env.shape4(out)
    kh, kw = filt.shape[1:3]
    strides, dilations = reference.strides_of(node), reference.dilations_of(node)
    (sh, sw), (dh, dw) = strides, dilations
    _, _, pad_top, pad_left = geometry(node, (in4.h, in4.w), (kh, kw), strides, dilations)
    tile_w, tile_h, tiles_w, tiles_h = _tiles(node)
    # Tiles past the output edge compute (and drop) pixels up to the tile grid's extent.
    padded = reads_padding(in4.h, kh, sh, dh, tiles_h * tile_h, pad_top) or \
        reads_padding(in4.w, kw, sw, dw, tiles_w * tile_w, pad_left)
    multiplier = out4.c // in4.c
    sums = node.outputs[1] if node.options.get(TILE_SUMS) else None
    residual = node.options.get(PASS_THROUGH)
    windows = node.options.get(TAP_WINDOWS)
    invocations = tiles_w * tiles_h * out4.b * out4.slices
    defines = {"KH": kh, "KW": kw, "TILE_W": tile_w, "TILE_H": tile_h, "MULTIPLIER_ONE": int(multiplier == 1),
               "PADDED": int(padded), "TILE_SUMS": int(sums is not None), "TAP_WINDOWS": int(windows is not None),
               "SKIP_TAPS": int(invocations >= SKIP_TAPS_MIN_INVOCATIONS),
               "PRELOAD_WEIGHTS": int(kh * kw <= PRELOAD_TAPS_MAX), "PASS_THROUGH": int(residual is not None),
               **env.output_stage(node)}
    params = {"in_size": in4.as_ivec4(), "out_size": out4.as_ivec4(), "in_channels": in4.c,
              "out_channels": out4.c, "multiplier": multiplier,
              "in_offset": env.arena(x), "out_offset": env.arena(out),
              "weights_offset": env.constant(pack_weights(np.asarray(filt.data, np.float32))),
              "bias_offset": env.constant(pack_bias(None if bias is None else bias.data, out4.c)),
              "stride": (sw, sh), "dilation": (dw, dh), "pad": (pad_left, pad_top)}
    if windows is not None:
        params["windows_offset"] = env.constant(pack_windows(windows, (kh, kw), out4.c))
    grid = (tiles_w, tiles_h, out4.b * out4.slices)
    reads, inplace = epilogue.apply(node, env, out, defines, params, (x,))
    if residual is not None:
        return [_pass_through(node, env, grid, defines, params, reads)]
    if sums is None:
        return [Dispatch("depthwise_conv2d", grid, defines, params, reads=reads, writes=(out,), inplace=inplace)]
    params.update({"sums_offset": env.arena(sums), "sums_size": env.shape4(sums).as_ivec4()})
    return [Dispatch("depthwise_conv2d", grid, defines, params, reads=reads, writes=(out, sums), inplace=inplace,
                     workgroup=(*TILE_BLOCK, 1))]


def _pass_through(node, env, grid, defines, params, reads):
    """The dispatch of a node with PASS_THROUGH: also stores x + r as outputs[1] (no output
    takes an operand's storage: r is read at two places)."""
    residual, passed = node.options[PASS_THROUGH], node.outputs[1]
    epilogue.tensor_source(residual, passed, env).put("residual", defines, params)
    params["passed_offset"] = env.arena(passed)
    reads = reads if any(residual is r for r in reads) else reads + (residual,)
    return Dispatch("depthwise_conv2d", grid, defines, params, reads=reads, writes=(node.outputs[0], passed))


_checks = gpu_support("DEPTHWISE_CONV_2D", 0, {1: "filter", 2: "bias"}, output_shape)


def _pass_through_reason(node):
    """Why a node with PASS_THROUGH cannot store x + r beside its output, or None."""
    residual = node.options.get(PASS_THROUGH)
    if residual is None:
        return None
    x, out = node.inputs[0], node.outputs[0]
    shape = tuple(x.shape)
    if node.options.get(TILE_SUMS) or len(node.outputs) != 2 or tuple(node.outputs[1].shape) != shape:
        return f"a pass-through needs 2 outputs, the second of x's shape {list(shape)}, and no tile sums"
    if tuple(out.shape) != shape or reference.strides_of(node) != (1, 1) or tuple(residual.shape) != shape:
        return f"a pass-through needs stride 1, multiplier 1, an output and a residual of x's shape {list(shape)}"
    return None


def _windows_reason(node):
    """Why the node's TAP_WINDOWS do not tile its channels (multiplier 1) with windows inside
    its filter, or None."""
    windows = node.options.get(TAP_WINDOWS)
    if windows is None:
        return None
    _, kh, kw, channels = node.inputs[1].shape
    ends = [window[0] for window in windows]
    inside = all(min(window) >= 0 and top + rows <= kh and left + columns <= kw
                 for window in windows for _, top, left, rows, columns in [window])
    if channels != node.inputs[0].shape[3] or ends != sorted(set(ends)) or ends[-1] != channels or not inside:
        return f"tap windows {windows} do not tile the {channels} channels of a {kh}x{kw} filter"
    return None


def support(node):
    """The reference kernel's checks and the GPU's (conv.gpu_support); one output, or two with
    TILE_SUMS (the output and its tile sums) or PASS_THROUGH (the output and x + r); TAP_WINDOWS
    that tile the channels."""
    reason = _windows_reason(node) or _pass_through_reason(node)
    if reason:
        return reason
    if node.options.get(PASS_THROUGH) is not None:
        return _convolution_checks(node)
    sums = bool(node.options.get(TILE_SUMS))
    if len(node.outputs) != 1 + sums:
        what = "DEPTHWISE_CONV_2D with tile sums takes 2 outputs" if sums else "DEPTHWISE_CONV_2D takes 1 output"
        return f"{what}, got {len(node.outputs)}"
    if not sums:
        return _checks(node)
    expected = tile_sums_shape(node)
    if tuple(node.outputs[1].shape) != expected:
        return f"tile sums tensor {node.outputs[1].index} is not {list(expected)}"
    return _convolution_checks(node)


def _convolution_checks(node):
    """_checks of TFLite's op, whose checks take its one output (a fused second one aside)."""
    convolution = copy.copy(node)
    convolution.outputs = node.outputs[:1]
    return _checks(convolution)


SUPPORT = {"DEPTHWISE_CONV_2D": support}
BUILD = {"DEPTHWISE_CONV_2D": build}
EPILOGUE = {"DEPTHWISE_CONV_2D": None}
# Bias optional; the output count is support()'s to check (a second one holds the tile sums).
FACTS = {"DEPTHWISE_CONV_2D": OpFacts(arity=((2, 3), (2,), None), fused_activation=True)}
