"""SE_GATE, a fused op only the rewrite rule se_gate makes: a squeeze-excite block's gate (the mean
over H x W, one or two small FULLY_CONNECTED layers with their activations and epilogues) in one
dispatch of kernels_glsl/se_gate.glsl, one workgroup per batch item.

Node: inputs [x, weights 1, bias 1] or [x, weights 1, bias 1, weights 2, bias 2] (biases may be
omitted), x [B, H, W, C] (or an already pooled [B, 1, 1, C] / [B, C]: its "mean" over one pixel
is x itself), weights [U, K] constant; one output [B, 1, 1, U] or [B, U] of the last layer.
Options: the last layer's `fused_activation_function` and `epilogue` (any steps), and, with two
layers, the first one's `hidden_activation` (a fused activation code) and `hidden_epilogue`
(steps without a tensor operand, at most HIDDEN_MAX_STEPS). With `mean_count` (rule
depthwise_tile_sums) x holds sums over blocks of a plane of that many pixels, not the pixels:
the mean is their sum over H x W divided by it.

The sums keep the unfused kernels' order where that costs nothing: a layer splits K over the
lanes exactly as fully_connected.py would (conv.k_split), and the mean folds a slice's H x W in
reduce.py's order whenever one slice's lanes fit in shared memory (every slice of up to 16
channels) or the reduction is short. Values the unfused graph stored (the mean, the hidden
layer) are rounded to half in half storage as that store did.
"""
from dataclasses import dataclass

import numpy as np

from . import epilogue
from ...ops.common import ACT_NONE
from ...registry import OpFacts
from ..phwc4 import Shape4, bhwc
from .base import Dispatch
from .conv import k_split, optional_input, pack_bias
from .fully_connected import pack_weights
from .reduce import PARALLEL_LANES, PARALLEL_MAX_OUTPUTS, PARALLEL_MIN_ELEMENTS

OP = "SE_GATE"
HIDDEN_ACTIVATION, HIDDEN_EPILOGUE = "hidden_activation", "hidden_epilogue"  # node.options keys
MEAN_COUNT = "mean_count"  # node.options key: the pixels x's H x W values add up (default H x W)
HIDDEN_MAX_STEPS = 4   # what the template holds for the first of two layers
LANES = 512            # invocations of the workgroup (clamped to the device's limits)
# Workgroups per batch item: one per OUTPUT_SLICES_PER_GROUP output slices of the last layer, at
# most MAX_OUTPUT_GROUPS (each computes the mean and the first layer whole: on a GPU of fewer
# cores than groups that work would queue). On the H200, EfficientNet-B0's gates of 672 and 1152
# channels took 14.5-17.5 us alone and 13.3-14.8 in 3 or more groups; 3 and 9 gave the same
# invoke time, 2.3 % under 1 group (docs/performance.md, round 10).
OUTPUT_SLICES_PER_GROUP = 32
MAX_OUTPUT_GROUPS = 3
MEAN_SLOTS = 512       # shared vec4s the mean's partial sums may take
# GL_MAX_COMPUTE_SHARED_MEMORY_SIZE's minimum in OpenGL ES 3.1: a plan within it runs anywhere.
SHARED_BYTES = 16384
REDUCE_LANES = PARALLEL_LANES[0] * PARALLEL_LANES[1]  # lanes per output of reduce.py's parallel variant


@dataclass(frozen=True)
class Layout:
    """How a workgroup shares the work: `mean_lanes` lanes per input slice sum its H x W;
    `splits` lanes per output slice of each layer sum its K; `regions` the first shared vec4 of
    the mean's partial sums, of each layer's partial sums and of the hidden values; `shared` the
    vec4s in all."""
    mean_lanes: int
    splits: tuple
    regions: dict
    shared: int


def layers(node):
    """[(weights, bias or None)] of the node's one or two layers."""
    return [(node.inputs[k], optional_input(node, k + 1)) for k in range(1, len(node.inputs), 2)]


def _mean_lanes(x4, slices_budget):
    """Lanes per input slice summing its H x W: reduce.py's 128 (or its one, for short
    reductions) when that fits, so the mean is the unfused MEAN's to the bit; else as many as
    fit (a power of two)."""
    plane = x4.h * x4.w
    if plane < PARALLEL_MIN_ELEMENTS or x4.b * x4.slices > PARALLEL_MAX_OUTPUTS:
        return 1
    lanes = REDUCE_LANES
    while lanes > 1 and x4.slices * lanes > slices_budget:
        lanes //= 2
    return lanes


def plan(node):
    """The node's Layout, or why its vectors do not fit in SHARED_BYTES of shared memory."""
    x4 = bhwc(node.inputs[0].shape)
    dims = [(-(-w.shape[1] // 4), -(-w.shape[0] // 4)) for w, _ in layers(node)]  # (chunks, slices)
    splits = tuple(k_split(chunks, x4.b * slices) for chunks, slices in dims)
    mean_lanes = _mean_lanes(x4, MEAN_SLOTS)
    limit = SHARED_BYTES // 16
    while True:
        layout = _regions(x4.slices * mean_lanes, dims, splits, mean_lanes)
        if layout.shared <= limit or (mean_lanes == 1 and max(splits) == 1):
            break
        if mean_lanes > 1:
            mean_lanes //= 2
        else:
            splits = tuple(max(1, s // 2) for s in splits)
    if layout.shared > limit:
        return f"its vectors need {16 * layout.shared} bytes of shared memory, more than {SHARED_BYTES}"
    return layout


def _regions(mean_slots, dims, splits, mean_lanes):
    """Layout of the shared array: the mean's partial sums first (the mean of slice s is left in
    slot s * mean_lanes), then the first layer's partial sums and, with two, the hidden values;
    the last of two layers reuses the mean's region, no longer read by then."""
    partials = [slices * split for (_, slices), split in zip(dims, splits)]
    if len(dims) == 1:
        regions = {"MEAN": 0, "PARTIAL1": mean_slots, "LAST": mean_slots}
        return Layout(mean_lanes, splits, regions, mean_slots + partials[0])
    first = max(mean_slots, partials[1])
    regions = {"MEAN": 0, "PARTIAL1": first, "HIDDEN": first + partials[0], "PARTIAL2": 0, "LAST": 0}
    return Layout(mean_lanes, splits, regions, first + partials[0] + dims[0][1])


def _scalar(step):
    """The float operand of an operand-free step (0 for none), or None for a tensor operand."""
    x = step.operand
    if x is None or isinstance(x, float):
        return float(x or 0.0)
    if getattr(x, "is_const", False) and x.size == 1:
        return float(np.asarray(x.data, np.float32).reshape(-1)[0])
    return None


def hidden_reason(activation, steps):
    """Why the first of two layers' output stage (its fused activation code and epilogue steps)
    cannot run in the template, which has only scalar operands for its steps, or None."""
    if activation != ACT_NONE and activation not in epilogue.ACTIVATION_STEPS:
        return f"the first layer's fused activation {activation} has no epilogue step"
    if len(steps) > HIDDEN_MAX_STEPS:
        return f"the first layer's epilogue has {len(steps)} steps, more than {HIDDEN_MAX_STEPS}"
    for step in steps:
        if _scalar(step) is None:
            return f"the first layer's epilogue step {step} reads a tensor"
    return None


def support(node):
    """Why the kernel cannot run `node`, or None: one or two layers of constant weights whose
    sizes chain from x's channels to the output's, a first layer's epilogue of scalar steps,
    and vectors that fit in shared memory."""
    if node.custom:
        return f"custom op {OP} is not the fused op of that name"
    x, out = node.inputs[0], node.outputs[0]
    channels = bhwc(x.shape).c
    for k, (weights, bias) in enumerate(layers(node)):
        if not weights.is_const or len(weights.shape) != 2 or weights.shape[1] != channels:
            return f"layer {k + 1} needs constant weights [U, {channels}], got tensor {weights.index}"
        if bias is not None and (not bias.is_const or tuple(bias.shape) != (weights.shape[0],)):
            return f"layer {k + 1} needs a constant bias [{weights.shape[0]}], got tensor {bias.index}"
        channels = weights.shape[0]
    batch = bhwc(x.shape).b
    if bhwc(out.shape) != Shape4(batch, 1, 1, channels):
        return f"output {list(out.shape)} is not [{batch}, 1, 1, {channels}]"
    reason = hidden_reason(node.options.get(HIDDEN_ACTIVATION, ACT_NONE),
                           tuple(node.options.get(HIDDEN_EPILOGUE, ()))) if len(node.inputs) > 3 else None
    layout = plan(node)
    return reason or (layout if isinstance(layout, str) else None)


def _hidden_stage(node, defines, params):
    """Defines and params of the first of two layers' output stage (its activation as an
    epilogue op code, -1 for none, then its operand-free steps)."""
    activation = epilogue.ACTIVATION_STEPS.get(node.options.get(HIDDEN_ACTIVATION, ACT_NONE))
    defines["HIDDEN_ACT"] = -1 if activation is None else epilogue.UNARY_CODES[activation]
    hidden = tuple(node.options.get(HIDDEN_EPILOGUE, ()))
    defines["H_COUNT"] = len(hidden)
    for k, step in enumerate(hidden):
        code = epilogue.UNARY_CODES.get(step.op, None)
        defines.update({f"H{k}_OP": code if code is not None else epilogue.BINARY_BASE + epilogue.BINARY_CODES[step.op],
                        f"H{k}_SWAP": int(step.swap), f"H{k}_STORED": int(step.stored)})
        params[f"h{k}_value"] = _scalar(step)


def build(node, env):
    """One se_gate.glsl Dispatch: a grid of (LANES, output groups, batch), workgroups of LANES."""
    x, out = node.inputs[0], node.outputs[0]
    x4, out4 = env.shape4(x), env.shape4(out)
    layout = plan(node)
    groups = max(1, min(MAX_OUTPUT_GROUPS, out4.slices // OUTPUT_SLICES_PER_GROUP))
    defines = {"LAYERS": len(layers(node)), "OUTPUT_GROUPS": groups, "MEAN_LANES": layout.mean_lanes,
               "SHARED": layout.shared,
               **{f"K_SPLIT{k + 1}": s for k, s in enumerate(layout.splits)},
               **{f"{name}_BASE": at for name, at in layout.regions.items()}, **env.output_stage(node)}
    params = {"in_size": x4.as_ivec4(), "out_size": out4.as_ivec4(), "out_channels": out4.c,
              "in_offset": env.arena(x), "out_offset": env.arena(out),
              "mean_count": int(node.options.get(MEAN_COUNT, x4.h * x4.w))}
    for k, (weights, bias) in enumerate(layers(node)):
        units = weights.shape[0]
        params[f"w{k + 1}_offset"] = env.constant(pack_weights(np.asarray(weights.data, np.float32)))
        params[f"b{k + 1}_offset"] = env.constant(pack_bias(None if bias is None else bias.data, units))
        params[f"units{k + 1}"] = units
    if len(layers(node)) == 2:
        _hidden_stage(node, defines, params)
    reads, _ = epilogue.apply(node, env, out, defines, params, (x,))
    return [Dispatch("se_gate", (LANES, groups, x4.b), defines, params, reads=reads, writes=(out,),
                     workgroup=(LANES, 1, 1))]


SUPPORT = {OP: support}
BUILD = {OP: build}
EPILOGUE = {OP: None}
FACTS = {OP: OpFacts(arity=((3, 5), (2, 4), 1), fused_activation=True)}
