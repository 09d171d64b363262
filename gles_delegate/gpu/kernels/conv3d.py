"""CONV_3D and CONV_3D_TRANSPOSE (float32; constant filter, optional bias and, for the transpose,
constant output_shape; SAME / VALID, strides and dilations per dim, fused clamp activation):
kernels_glsl/conv3d.glsl over the merged-batch view of their rank-5 tensors ([N, D, H, W, C] as
(N * D) x H x W x C, phwc4.py), specialized by op, kernel size and output slices per invocation.
TFLite's GPU delegate has neither: a video model's or a 3D U-Net's convolutions run on its CPU."""
from dataclasses import dataclass

import numpy as np

from ...ops import conv3d as reference
from ...registry import OpFacts
from . import epilogue
from .base import Dispatch
from .conv import blocking, gpu_support, optional_input, pack_bias, pack_weights


@dataclass
class Operands:
    """A 3D convolution, whichever op: input [N, D, H, W, C], filter as [O, KD, KH, KW, C], bias [O]
    or None, padding before per dim (depth, height, width), output shape."""
    x: object
    filter_o: np.ndarray
    bias: object
    pads: tuple
    out_shape: tuple


def operands(node):
    """The Operands of a CONV_3D or CONV_3D_TRANSPOSE node (SUPPORT passed)."""
    if node.op == "CONV_3D":
        x, filt, bias = node.inputs[0], node.inputs[1], optional_input(node, 2)
        out, pads = reference.geometry(node, x.shape[1:4], filt.shape[:3])  # filter [KD, KH, KW, C, O]
        return Operands(x, np.asarray(filt.data, np.float32).transpose(4, 0, 1, 2, 3), bias, pads,
                        (x.shape[0], *out, filt.shape[4]))
    x, filt, bias = node.inputs[2], node.inputs[1], optional_input(node, 3)
    out = reference.transpose_output_shape(node)
    _, pads = reference.geometry(node, out[1:4], filt.shape[:3])  # filter [KD, KH, KW, O, C]
    return Operands(x, np.asarray(filt.data, np.float32).transpose(3, 0, 1, 2, 4), bias, pads, out)


def output_shape(node):
    """[N, OD, OH, OW, O] of the node."""
    return operands(node).out_shape


def build(node, env):
    """One conv3d.glsl Dispatch over the output: a grid of (OW, OH, N x OD x groups of OUT_SLICES
    output slices) invocations."""
    op, out = operands(node), node.outputs[0]
    in4, out4 = env.shape4(op.x), env.shape4(out)
    o, kd, kh, kw, c = op.filter_o.shape
    (sd, sh, sw), (dd, dh, dw) = reference.strides(node), reference.dilations(node)
    out_slices, _ = blocking(out4.slices, out4.w, out4.h * out4.b, pixel_choices=(1,))
    defines = {"KD": kd, "KH": kh, "KW": kw, "OUT_SLICES": out_slices, "TRANSPOSED": int(node.op != "CONV_3D"),
               **env.output_stage(node)}
    weights = pack_weights(op.filter_o.reshape(o, kd * kh, kw, c), out_slices)  # depth and height: one axis
    params = {"in_size": in4.as_ivec4(), "out_size": out4.as_ivec4(), "out_channels": out4.c,
              "in_depth": op.x.shape[1], "out_depth": out.shape[1],
              "in_offset": env.arena(op.x), "out_offset": env.arena(out),
              "weights_offset": env.constant(weights),
              "bias_offset": env.constant(pack_bias(None if op.bias is None else op.bias.data, out4.c)),
              "stride": (sw, sh), "dilation": (dw, dh), "pad": (op.pads[2], op.pads[1]),
              "stride_d": sd, "dilation_d": dd, "pad_d": op.pads[0]}
    grid = (out4.w, out4.h, out4.b * -(-out4.slices // out_slices))
    reads, inplace = epilogue.apply(node, env, out, defines, params, (op.x,))
    return [Dispatch("conv3d", grid, defines, params, reads=reads, writes=(out,), inplace=inplace)]


SUPPORT = {"CONV_3D": gpu_support("CONV_3D", 0, {1: "filter", 2: "bias"}, output_shape, reference),
           "CONV_3D_TRANSPOSE": gpu_support("CONV_3D_TRANSPOSE", 2, {0: "output_shape", 1: "filter", 3: "bias"},
                                            output_shape, reference)}
BUILD = {"CONV_3D": build, "CONV_3D_TRANSPOSE": build}
EPILOGUE = {"CONV_3D": None, "CONV_3D_TRANSPOSE": None}
HIGH_RANK = {"CONV_3D": None, "CONV_3D_TRANSPOSE": None}  # rank-5 tensors: the merged-batch view is what they index
FACTS = {"CONV_3D": OpFacts(arity=((2, 3), (2,), 1), fused_activation=True),  # bias optional
         "CONV_3D_TRANSPOSE": OpFacts(arity=((3, 4), (3,), 1), fused_activation=True)}
