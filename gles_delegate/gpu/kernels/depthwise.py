"""DEPTHWISE_CONV_2D (v1, v2 with dilation, any channel multiplier): kernels_glsl/depthwise_conv2d.glsl,
specialized by kernel size, output tile (2 x 2 pixels per invocation where stride and dilation
are 1, so neighbouring outputs share their input loads), multiplier 1 or not, and padding."""
import numpy as np

from ...ops import conv as reference
from . import epilogue
from ...registry import OpFacts
from .base import Dispatch
from .conv import (MIN_INVOCATIONS, block_size, geometry, gpu_support, optional_input, output_shape, pack_bias,
                   reads_padding)


def pack_weights(filter_1hwc):
    """Filter [1, KH, KW, C] -> vec4 rows [ceil(C/4)][KH][KW] (channels zero-padded)."""
    _, kh, kw, c = filter_1hwc.shape
    padded = np.zeros((kh, kw, -(-c // 4) * 4), np.float32)
    padded[..., :c] = filter_1hwc[0]
    return padded.reshape(kh, kw, -1, 4).transpose(2, 0, 1, 3).reshape(-1, 4)


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
    tile_w, tile_h = tile_size(out4, strides, dilations)
    tiles_w, tiles_h = -(-out4.w // tile_w), -(-out4.h // tile_h)
    # Tiles past the output edge compute (and drop) pixels up to the tile grid's extent.
    padded = reads_padding(in4.h, kh, sh, dh, tiles_h * tile_h, pad_top) or \
        reads_padding(in4.w, kw, sw, dw, tiles_w * tile_w, pad_left)
    multiplier = out4.c // in4.c
    defines = {"KH": kh, "KW": kw, "TILE_W": tile_w, "TILE_H": tile_h, "MULTIPLIER_ONE": int(multiplier == 1),
               "PADDED": int(padded), **env.output_stage(node)}
    params = {"in_size": in4.as_ivec4(), "out_size": out4.as_ivec4(), "in_channels": in4.c,
              "out_channels": out4.c, "multiplier": multiplier,
              "in_offset": env.arena(x), "out_offset": env.arena(out),
              "weights_offset": env.constant(pack_weights(np.asarray(filt.data, np.float32))),
              "bias_offset": env.constant(pack_bias(None if bias is None else bias.data, out4.c)),
              "stride": (sw, sh), "dilation": (dw, dh), "pad": (pad_left, pad_top)}
    grid = (tiles_w, tiles_h, out4.b * out4.slices)
    reads, inplace = epilogue.apply(node, env, out, defines, params, (x,))
    return [Dispatch("depthwise_conv2d", grid, defines, params, reads=reads, writes=(out,), inplace=inplace)]


SUPPORT = {"DEPTHWISE_CONV_2D": gpu_support("DEPTHWISE_CONV_2D", 0, {1: "filter", 2: "bias"}, output_shape)}
BUILD = {"DEPTHWISE_CONV_2D": build}
EPILOGUE = {"DEPTHWISE_CONV_2D": None}
FACTS = {"DEPTHWISE_CONV_2D": OpFacts(arity=((2, 3), (2,), 1), fused_activation=True)}  # bias optional
