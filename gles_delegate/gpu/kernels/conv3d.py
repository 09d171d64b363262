"""CONV_3D (float32; constant filter [KD, KH, KW, C, O] and optional bias; SAME / VALID, strides and
dilations per dim, fused clamp activation): kernels_glsl/conv3d.glsl over the merged-batch view of
its rank-5 tensors ([N, D, H, W, C] as (N * D) x H x W x C, phwc4.py), specialized by kernel size and
output slices per invocation. TFLite's GPU delegate has no CONV_3D: a video model's 3D convolutions
run on its CPU."""
import numpy as np

from ...ops import conv3d as reference
from ...registry import OpFacts
from . import epilogue
from .base import Dispatch
from .conv import blocking, gpu_support, optional_input, pack_bias, pack_weights


def output_shape(node):
    """[N, OD, OH, OW, O] of the node."""
    x, w = node.inputs[0], node.inputs[1]
    out, _ = reference.geometry(node, x.shape[1:4], w.shape[:3])
    return (x.shape[0], *out, w.shape[4])


def packed_filter(filt, out_slices):
    """Filter [KD, KH, KW, C, O] -> pack_weights' rows, its depth and height taps as one axis."""
    kd, kh, kw, c, o = filt.shape
    return pack_weights(np.asarray(filt, np.float32).transpose(4, 0, 1, 2, 3).reshape(o, kd * kh, kw, c), out_slices)


def build(node, env):
    """One conv3d.glsl Dispatch over the output: a grid of (OW, OH, N x OD x groups of OUT_SLICES
    output slices) invocations."""
    x, filt, bias, out = node.inputs[0], node.inputs[1], optional_input(node, 2), node.outputs[0]
    in4, out4 = env.shape4(x), env.shape4(out)
    kd, kh, kw = filt.shape[:3]
    (_, pads) = reference.geometry(node, x.shape[1:4], filt.shape[:3])
    (sd, sh, sw), (dd, dh, dw) = reference.strides(node), reference.dilations(node)
    out_slices, _ = blocking(out4.slices, out4.w, out4.h * out4.b, pixel_choices=(1,))
    defines = {"KD": kd, "KH": kh, "KW": kw, "OUT_SLICES": out_slices, **env.output_stage(node)}
    params = {"in_size": in4.as_ivec4(), "out_size": out4.as_ivec4(), "out_channels": out4.c,
              "in_depth": x.shape[1], "out_depth": out.shape[1],
              "in_offset": env.arena(x), "out_offset": env.arena(out),
              "weights_offset": env.constant(packed_filter(filt.data, out_slices)),
              "bias_offset": env.constant(pack_bias(None if bias is None else bias.data, out4.c)),
              "stride": (sw, sh), "dilation": (dw, dh), "pad": (pads[2], pads[1]),
              "stride_d": sd, "dilation_d": dd, "pad_d": pads[0]}
    grid = (out4.w, out4.h, out4.b * -(-out4.slices // out_slices))
    reads, inplace = epilogue.apply(node, env, out, defines, params, (x,))
    return [Dispatch("conv3d", grid, defines, params, reads=reads, writes=(out,), inplace=inplace)]


SUPPORT = {"CONV_3D": gpu_support("CONV_3D", 0, {1: "filter", 2: "bias"}, output_shape, reference)}
BUILD = {"CONV_3D": build}
EPILOGUE = {"CONV_3D": None}
HIGH_RANK = {"CONV_3D": None}  # its tensors are rank 5: the merged-batch view is the layout it indexes
FACTS = {"CONV_3D": OpFacts(arity=((2, 3), (2,), 1), fused_activation=True)}  # bias optional
