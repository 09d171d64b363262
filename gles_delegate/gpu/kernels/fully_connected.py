"""FULLY_CONNECTED (constant weights, DEFAULT format, optional bias, keep_num_dims, inputs of any
rank <= 4 flattened in TFLite's row-major order): kernels_glsl/fully_connected.glsl, specialized
by the split of K over a workgroup and by how input rows map onto PHWC4 pixels."""
import numpy as np

from . import epilogue
from ...registry import OpFacts
from .base import Dispatch
from .conv import gpu_support, k_split, optional_input, pack_bias


def pack_weights(weights_uk):
    """Weights [U, K] -> vec4 rows [ceil(U/4)][ceil(K/4)][4]: row j of chunk k4 holds units
    4 * slice + 0..3 for input value 4 * k4 + j (zero-padded)."""
    u, k = weights_uk.shape
    padded = np.zeros((-(-u // 4) * 4, -(-k // 4) * 4), np.float32)
    padded[:u, :k] = weights_uk
    return padded.reshape(-1, 4, padded.shape[1] // 4, 4).transpose(0, 2, 3, 1).reshape(-1, 4)


def flatten_mode(in_channels, depth):
    """FLATTEN of the template: 0 a row is one pixel, 1 rows cross pixels slice-aligned, 2 gather."""
    if in_channels == depth:
        return 0
    return 1 if in_channels % 4 == 0 and depth % 4 == 0 else 2


def build(node, env):
    """One fully_connected.glsl Dispatch: a grid of (K_SPLIT lanes, output slices, rows)
    invocations; the lanes of one output vec4 share a workgroup and split the sum over K."""
    x, weights, bias = node.inputs[0], node.inputs[1], optional_input(node, 2)
    out = node.outputs[0]
    in4, out4 = env.shape4(x), env.shape4(out)
    units, depth = weights.shape
    rows, chunks = x.size // depth, -(-depth // 4)
    split = k_split(chunks, rows * out4.slices)
    defines = {"K_SPLIT": split, "FLATTEN": flatten_mode(in4.c, depth), **env.output_stage(node)}
    params = {"in_size": in4.as_ivec4(), "out_size": out4.as_ivec4(), "in_channels": in4.c, "depth": depth,
              "chunks": chunks, "out_channels": units, "in_offset": env.arena(x), "out_offset": env.arena(out),
              "weights_offset": env.constant(pack_weights(np.asarray(weights.data, np.float32))),
              "bias_offset": env.constant(pack_bias(None if bias is None else bias.data, units))}
    workgroup = (split, max(1, min(out4.slices, 64 // split)), 1)
    reads, inplace = epilogue.apply(node, env, out, defines, params, (x,))
    return [Dispatch("fully_connected", (split, out4.slices, rows), defines, params, reads=reads, writes=(out,),
                     workgroup=workgroup, inplace=inplace)]


def output_shape(node):
    """TFLite's FC output: [rows, U], or the input's leading dimensions + [U] with keep_num_dims."""
    x, (units, depth) = node.inputs[0], node.inputs[1].shape
    if node.options.get("keep_num_dims", False):
        return tuple(x.shape[:-1]) + (units,)
    return x.size // depth, units


SUPPORT = {"FULLY_CONNECTED": gpu_support("FULLY_CONNECTED", 0, {1: "weights", 2: "bias"}, output_shape)}
BUILD = {"FULLY_CONNECTED": build}
EPILOGUE = {"FULLY_CONNECTED": None}
FACTS = {"FULLY_CONNECTED": OpFacts(arity=((2, 3), (2,), 1), fused_activation=True)}  # bias optional
