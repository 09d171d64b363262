"""Differential random-graph fuzzer: random valid models (float32, int32, int8 / uint8 quantized,
stateful), run on LiteRT and on this package, for silent wrong outputs of the GPU delegate's
rewrite rules and kernels and of the reference kernels.

    gles-fuzz-graphs [--cases N] [--minutes M] [--seed S] [--case K] [--paths abcde]
                     [--families float,int32,quant,state,signal,resize,edge,cells]
                     [--min-nodes N] [--max-nodes N] [--precision fp32|fp16|fp16_fp32acc]
                     [--no-minimize] [--out DIR] [--json FILE] [--set MODULE.NAME=VALUE ...]
                     [--minimum-limits] [--workgroups heuristic|random]

Each case is drawn from one generator family (--families; weights FAMILIES, drawn from a stream
of their own so that a float case is the model it was before the other families): 'float' below,
and 'int32', 'quant', 'state', 'signal', 'resize' and 'edge' (tools/fuzz_graph_families.py's
docstring: int32 index arithmetic and runtime gather indices, int8 / uint8 graphs, resource
variables across invokes, L2_NORMALIZATION and RFFT2D, PACK / UNPACK / BROADCAST_TO / CUMSUM;
tools/fuzz_graph_resize.py's: float32 graphs over dynamic input dimensions). Every case runs its Spec.steps: two invokes on different inputs (a stale result
or a cache shows on the second), for 'state' three, reset_all_variables and one more, for 'resize'
an invoke, then four resizes (resize_tensor_input of every input, allocate_tensors), each followed
by an invoke: other sizes, sizes of 1, the first sizes, the same again; every invoke's outputs
are compared, on one interpreter per path. Any exception from a path's first resize on (a
ResizeFailure naming the shapes and its cause) is a finding, however clean: LiteRT alone ran
every resize of the case.

A float case is a model written with our writer (gles_delegate.tflite.ModelBuilder) from a seeded
generator that tracks every shape: 1-2 float32 inputs of rank 2-4 with small shapes (channel
counts mostly not multiples of 4), then a DAG of --min-nodes to --max-nodes nodes, each reading
any earlier tensor (fan-out, outputs also read later, several model outputs), drawn from CONV_2D
(1x1 / 3x3 / 5x5, stride 1 / 2, SAME / VALID, dilation 1 / 2, fused RELU / RELU6 / none),
DEPTHWISE_CONV_2D (multiplier 1 / 2), FULLY_CONNECTED (keep_num_dims both ways), ADD / MUL / SUB
(broadcast constants and two runtime tensors), DIV by a constant, MAXIMUM, MINIMUM,
SQUARED_DIFFERENCE, LOGISTIC, TANH, HARD_SWISH, RELU, RELU6, ABS, NEG, EXP, ELU, GELU, LEAKY_RELU,
PRELU, MEAN / SUM / REDUCE_MAX (keep_dims both ways), SOFTMAX, CONCATENATION (any axis, 2-4
inputs, slices of one tensor among them, one tensor more than once), SLICE, STRIDED_SLICE
(masks, strides 2, 3 and -1, shrink_axis), SPLIT, SPLIT_V, RESHAPE, SQUEEZE, EXPAND_DIMS,
TRANSPOSE, PAD, PADV2, GATHER (constant indices), TILE, AVERAGE_POOL_2D, MAX_POOL_2D (global
too), RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR (align_corners, half_pixel_centers), BATCH_MATMUL
(adj_x / adj_y, constant, runtime and one tensor twice), SQUARE, SIN, COS, RELU_0_TO_1, RELU_N1_TO_1,
LOG and SQRT (of EXP, LOGISTIC or |x| + a margin), the steps CEIL, FLOOR, ROUND, SIGN, POW (positive
bases; any base to an integer exponent; constant or runtime exponents), ADD_N, REDUCE_MIN,
REDUCE_PROD, LOG_SOFTMAX, MIRROR_PAD (REFLECT, SYMMETRIC), REVERSE_V2, DEPTH_TO_SPACE,
SPACE_TO_DEPTH, SPACE_TO_BATCH_ND -> (a window op) -> BATCH_TO_SPACE_ND, TRANSPOSE_CONV (SAME /
VALID, bias or none, fused clamp), UNIDIRECTIONAL_SEQUENCE_LSTM (Keras' 24 inputs, the state in
variable tensors the invokes carry over, CIFG and peephole sometimes), LESS / GREATER ->
LOGICAL_AND / LOGICAL_OR / LOGICAL_NOT -> SELECT_V2 or CAST to float32 (the bool tensors only
inside that builder), and the patterns the rewrite rules fuse (gpu/transforms/): swish,
squeeze-excite gates (MEAN or a global pool -> FC / 1x1 CONV -> LOGISTIC -> MUL, Keras' reshaped
form too), batch norms around convolutions, PAD before a VALID
window, residual ADDs, mixed-kernel depthwise blocks, split pointwise convolutions and what follows their
concatenation, Keras' flattened Dense, a softmax between
reshapes, attention (BATCH_MATMUL, SOFTMAX, heads split by RESHAPE / TRANSPOSE), layer and RMS
normalizations, MediaPipe's pooled shortcut padded in channels, an ADD only a MEAN reads. Not
generated: a fused activation on CONCATENATION (LiteRT's builtin kernel refuses it, XNNPACK
ignores it) and a CONV_2D without bias (LiteRT requires it).

Paths, on the same seeded inputs (input_values: floats as tools/common.seeded_inputs draws them,
integers within the bounds the generator tracked, one in ten an edge value):
  a  LiteRT alone (ai_edge_litert Interpreter): the reference; it always runs (its builtin kernels
     where XNNPACK fails to prepare the model, and for models with variables, which XNNPACK 2.3
     crashes on)
  b  this package's Interpreter without a delegate (cpu_backend='reference': the numpy kernels)
  c  this package's Interpreter with GpuDelegate(precision=--precision, max_delegated_partitions=0)
     (every GPU partition kept; CPU nodes on the numpy reference)
  d  LiteRT's Interpreter with the same GpuDelegate in experimental_delegates
  e  this package's Interpreter without a delegate as users run it (cpu_backend='auto': LiteRT's
     kernels in sub-models, or the model file whole on LiteRT where it holds state that
     sub-models cannot carry: gles_delegate/whole_model.py)
Every output of b, c, d is compared with a's: an integer output must be equal (a quantized one
within gles-parity's QUANTIZED_STEPS, one step, or the steps one step of a requantization near a
tie grows to through the ops after it, tools/fuzz_quant_bounds.py; a DEQUANTIZE's float output
within one step of its input's scale too, or that bound), a complex one is compared as its float
pairs; a float finding is an
output whose max |ours - LiteRT| exceeds rtol x max |LiteRT| (rtol: gles-parity's TOLERANCES,
1e-4 at fp32), widened, as
gles-parity does, to twice LiteRT's own spread on that output (its XNNPACK run against its
builtin reference kernels, or its optimized builtin ones where those lack an op, and against its
optimized builtin kernels; unbounded, so not judged, where they disagree on whether an element is
finite) where that is larger, and to FLOOR_ULPS (16) float32 ulps of the largest value any tensor the output is
computed from through float tensors holds in LiteRT's run (an output that cancels to rounding
noise, x - mean(x) over equal values, cannot be held closer; see floors), plus at fp16 and
fp16_fp32acc a bound on what half storage moves it (tools/fuzz_half_bounds.py: each input,
weight and stored result rounded to half, propagated node by node; a sum that cancels keeps its
terms' rounding; an output it cannot bound, where a value it depends on exceeds half's range or
an RSQRT's input may be 0, is not judged; nor is an output past a step, CEIL / FLOOR / ROUND / SIGN
or a comparison of floats, whose input lies within STEP_ULPS float32 ulps of a jump: near_step);
NaN or infinity where LiteRT has a finite
value; a shape or dtype that differs; or an exception other than a clean refusal (a ModelError,
or a ValueError / TypeError that a raise statement raised: Python's own TypeError from unpacking
None is a finding; on the GPU paths c and d, only where path b fails too: a delegate that cannot
run a node leaves it to the CPU), which is counted and listed. A model
LiteRT refuses (either kernel set) is skipped and counted, as is one whose LiteRT float outputs
are not finite or exceed 1e6 in magnitude (degenerate: no tolerance means anything there).

What the small models alone do not reach: --set changes a constant of the package for the run
(gpu.runtime.DIRECT_IO_MAX_BYTES=-1 and gpu.io_loads.MIN_IO_BYTES=-1 put every partition's I/O in
device memory, which needs 64 KiB otherwise); --minimum-limits plans the GPU paths for OpenGL ES
3.1's guaranteed limits, without persistent mapping (gpu/context.limited_to); --workgroups random
has them tune, each dispatch on a workgroup picked at random (random_workgroups).

Each finding is written to --out (default: a new temporary directory) as
<kind>-s<seed>-c<case>-<path>.tflite with a one-line .json beside it (its `reproduce` line:
`gles-fuzz-graphs --seed S --case K` with every option of the run that changes the case or how
it runs), then, unless --no-minimize, minimised:
nodes are cut (their outputs become model inputs), bypassed or dropped, and outputs dropped,
while the same finding persists; the smallest model is written as ...-min.tflite, and for a GPU
path the rewrite rules are tried off (rewrite_rules=False, then each rule's ENABLED switch alone)
to name the rule at fault, and the first node over tolerance is located by comparing every
intermediate (experimental_preserve_all_tensors) against LiteRT's builtin kernels (a hint: see
first_bad_node). A finding of path d in a case where path c has one of the same kind refers to
that one instead of being minimised again.
Exit status: 0 without findings, 1 with findings, 2 on bad usage.
"""
import argparse
import collections
import contextlib
import copy
import json
import logging
import math
import os
import random
import shlex
import signal
import sys
import tempfile
import time
import traceback
import warnings
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gles_delegate import GpuDelegate, GpuDelegateOptions, Interpreter, ModelError
from gles_delegate.gpu import compiler, workgroup_tuner
from gles_delegate.gpu.context import ES31_MINIMUM_LIMITS, limited_to
from gles_delegate.gpu.workgroups import CANDIDATES, choose_workgroup, clamp_workgroup
from gles_delegate.ops.lstm import INPUT_NAMES as LSTM_INPUTS
from gles_delegate.tflite import ModelBuilder
from gles_delegate.tools import common, fuzz_half_bounds, fuzz_quant_bounds
from gles_delegate.tools.parity_report import QUANTIZED_STEPS, TOLERANCES, compare

PATHS = "abcde"
PATH_NAMES = {"a": "LiteRT", "b": "reference", "c": "GPU delegate", "d": "LiteRT + GPU delegate",
              "e": "LiteRT's kernels in ours"}
CLEAN_ERRORS = (ModelError, ValueError, TypeError)
SPREAD_FACTOR = 2            # as gles-parity: twice LiteRT's own kernel sets' difference
DEGENERATE_MAGNITUDE = 1e6   # LiteRT outputs past this (or not finite): the case is skipped
MAX_ELEMENTS = 3072          # no generated tensor holds more
CHANNELS = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 13, 16, 20)
CHANNEL_WEIGHTS = (1, 2, 4, 2, 4, 4, 2, 2, 3, 1, 3, 1, 1)
NONE, RELU, RELU6 = 0, 1, 3          # ActivationFunctionType
SAME, VALID = 0, 1                   # Padding
MINIMIZE_TRIALS = 400        # runs the minimiser may spend on one finding
# Generator families and their weights: float32 graphs of the rewrite rules' ops (this module);
# int32 index arithmetic, int8 / uint8 quantized graphs, resource variables across invokes and
# L2 norms / FFTs, PACK / UNPACK / BROADCAST_TO / CUMSUM (tools/fuzz_graph_families.py); float32 graphs
# resized between invokes (tools/fuzz_graph_resize.py).
FAMILIES = {"float": 4, "int32": 2, "quant": 2, "state": 1.5, "signal": 1, "resize": 2, "edge": 1, "cells": 1}
FLOOR_ULPS = 16              # floors(): the least absolute bound, in ulps of the largest value upstream
# Ops whose output jumps at a point of their input; near_step: where LiteRT's input lies within
# STEP_ULPS float32 ulps of the largest value upstream of a jump, the outputs past it are not judged.
STEP_OPS = {"CEIL", "FLOOR", "ROUND", "SIGN", "LESS", "GREATER", "LESS_EQUAL", "GREATER_EQUAL", "EQUAL", "NOT_EQUAL"}
STEP_ULPS = 64


# -- the model description -----------------------------------------------------------------------
@dataclass
class TensorSpec:
    shape: tuple
    kind: str                 # 'input' | 'const' | 'value' | 'variable' (LSTM state, is_variable)
    data: np.ndarray = None   # a constant's values
    dtype: object = np.float32
    quant: tuple = None       # (scale(s), zero point(s), quantized dimension) of a quantized tensor
    type_name: str = None     # a TFLite type numpy has no dtype for ('RESOURCE')
    bounds: tuple = None      # an integer tensor's (low, high) values: an input's are drawn from them

    @property
    def is_float(self):
        """Float or complex values, not quantized: what rounds."""
        return np.dtype(self.dtype).kind in "fc" and self.quant is None and self.type_name is None


@dataclass
class NodeSpec:
    op: str
    inputs: list              # tensor ids, -1: an omitted optional input
    outputs: list
    options: dict = field(default_factory=dict)


@dataclass
class Spec:
    """A model as the generator writes it: tensors by id, nodes in execution order."""
    tensors: dict = field(default_factory=dict)
    nodes: list = field(default_factory=list)
    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    next_id: int = 0
    variables: dict = field(default_factory=dict)  # shared name -> the constant CALL_ONCE's init assigns
    # per case, in order: 'invoke' (on new inputs), 'reset', or a resize ({symbol: size}: each input
    # resized to input_shapes() of those sizes, then allocate_tensors; the 'resize' family's)
    steps: tuple = ("invoke", "invoke")
    family: str = "float"                          # which generator wrote it (FAMILIES)

    def add(self, tensor):
        self.tensors[self.next_id] = tensor
        self.next_id += 1
        return self.next_id - 1

    def build(self):
        """The .tflite bytes, and {tensor id: index in the model}."""
        b = ModelBuilder()
        index = {}
        for t in self.inputs:
            spec = self.tensors[t]
            shape, signature = self.declared(t)
            index[t] = b.input(f"in{t}", shape, spec.dtype, quantization=spec.quant, shape_signature=signature)
        if self.variables:
            b.op("CALL_ONCE", [], [], init_subgraph_index=self._init_subgraph(b).index)
        for node in self.nodes:
            for t in node.inputs + node.outputs:
                if t < 0 or t in index:
                    continue
                spec = self.tensors[t]
                if spec.kind == "const":
                    index[t] = b.const(f"c{t}", spec.data, quantization=spec.quant)
                elif spec.kind == "variable":  # state a kernel updates in place (an LSTM's): no data
                    index[t] = b.tensor(f"v{t}", spec.shape, spec.dtype, is_variable=True)
                else:
                    shape, signature = self.declared(t)
                    index[t] = b.tensor(f"t{t}", shape, spec.dtype, quantization=spec.quant,
                                        type_name=spec.type_name, shape_signature=signature)
            b.op(node.op, [index[t] if t >= 0 else -1 for t in node.inputs], [index[t] for t in node.outputs],
                 **node.options)
        for t in self.outputs:
            b.output(index[t])
        return b.build(), index

    def declared(self, t):
        """The shape and shape_signature (None: none) the model declares for runtime tensor t."""
        return self.tensors[t].shape, None

    def input_shapes(self, sizes):
        """Per model input, its shape at a resize step's sizes (Spec.steps); a family that resizes
        (tools/fuzz_graph_resize.py) says how."""
        raise NotImplementedError(f"the {self.family!r} family has no resize steps")

    def _init_subgraph(self, b):
        """The subgraph CALL_ONCE runs first: each variable assigned its initial constant."""
        init = b.subgraph("init")
        for name, t in self.variables.items():
            handle = init.tensor(f"handle_{name}", (), type_name="RESOURCE")
            init.op("VAR_HANDLE", [], [handle], container="", shared_name=name)
            spec = self.tensors[t]
            init.op("ASSIGN_VARIABLE", [handle, init.const(f"init_{name}", spec.data, quantization=spec.quant)], [])
        return init

    def ops(self):
        return [n.op for n in self.nodes]

    def text(self):
        """One line per node: '#k OP(inputs) -> outputs [shape]'."""
        def name(t):
            if t < 0:
                return "-"
            spec = self.tensors[t]
            return f"c{t}" if spec.kind == "const" else f"t{t}"

        def typed(t):
            spec = self.tensors[t]
            kind = spec.type_name or ("" if spec.is_float else np.dtype(spec.dtype).name)
            quant = f" q{tuple(np.round(np.ravel(q), 6).tolist() for q in spec.quant[:2])}" if spec.quant else ""
            return f"{name(t)} {list(spec.shape)}" + (f" {kind}" if kind else "") + quant
        lines = [f"inputs: {', '.join(typed(t) for t in self.inputs)}"]
        lines += [f"variable {n}: init {typed(t)}" for n, t in self.variables.items()]
        for k, n in enumerate(self.nodes):
            options = {key: value for key, value in n.options.items() if value not in (0, False, None)}
            lines.append(f"#{k} {n.op}({', '.join(name(t) for t in n.inputs)}) -> "
                         f"{', '.join(typed(t) for t in n.outputs)}" + (f" {options}" if options else ""))
        lines.append(f"outputs: {', '.join(name(t) for t in self.outputs)}")
        return "\n".join(lines)


def _size(shape):
    return int(np.prod(shape, dtype=np.int64)) if len(shape) else 1


# -- the generator -------------------------------------------------------------------------------
class Generator:
    """Writes one random model into a Spec, every shape tracked so LiteRT accepts it."""

    def __init__(self, rng, min_nodes, max_nodes):
        self.rng, self.spec = rng, Spec()
        self.target = int(rng.integers(min_nodes, max_nodes + 1))
        self.values = []  # runtime float tensors (inputs and node outputs) of rank 2-4, in order

    # helpers
    def choice(self, options, weights=None):
        if weights is not None:
            p = np.asarray(weights, np.float64)
            return options[int(self.rng.choice(len(options), p=p / p.sum()))]
        return options[int(self.rng.integers(len(options)))]

    def chance(self, p):
        return bool(self.rng.random() < p)

    def channels(self):
        return self.choice(CHANNELS, CHANNEL_WEIGHTS)

    def shape_of(self, t):
        return self.spec.tensors[t].shape

    def const(self, array):
        array = np.asarray(array)
        return self.spec.add(TensorSpec(tuple(array.shape), "const", array))

    def ints(self, values):
        return self.const(np.asarray(values, np.int32))

    def weights(self, shape, fan_in):
        return self.const((self.rng.standard_normal(shape) / math.sqrt(max(fan_in, 1))).astype(np.float32))

    def uniform(self, shape, low, high):
        return self.const(self.rng.uniform(low, high, shape).astype(np.float32))

    def node(self, op, inputs, shapes, **options):
        """Add a node with outputs of `shapes` typed as its first runtime input (float32 in a float
        graph; the layout ops of an int32 or quantized graph keep their input's type, and the
        union of their inputs' bounds); returns their ids (each offered to register)."""
        runtime = [self.spec.tensors[t] for t in inputs if t >= 0 and self.spec.tensors[t].kind != "const"]
        like = {}
        if runtime and not runtime[0].is_float:
            bounds = [r.bounds for r in runtime if np.dtype(r.dtype) == np.dtype(runtime[0].dtype)]
            like = {"dtype": runtime[0].dtype, "quant": runtime[0].quant,
                    "bounds": None if None in bounds else (min(b[0] for b in bounds), max(b[1] for b in bounds))}
        return self.typed(op, inputs, [TensorSpec(tuple(int(d) for d in shape), "value", **like) for shape in shapes],
                          **options)

    def typed(self, op, inputs, outputs, **options):
        """Add a node whose outputs are the TensorSpecs `outputs`; returns their ids."""
        ids = [self.spec.add(t) for t in outputs]
        for t in ids:
            self.register(t)
        self.spec.nodes.append(NodeSpec(op, list(inputs), list(ids), options))  # a copy: builders edit the list
        return ids

    def register(self, t):
        """Offer a new tensor to the pools later nodes read: here float32 tensors of rank 2-4."""
        spec = self.spec.tensors[t]
        if spec.is_float and np.dtype(spec.dtype) == np.float32 and 2 <= len(spec.shape) <= 4:
            self.values.append(t)

    def one(self, op, inputs, shape, **options):
        return self.node(op, inputs, [shape], **options)[0]

    def pick(self, accept=lambda shape: True):
        """A runtime tensor whose shape `accept`s: often the newest, else any earlier one."""
        eligible = [t for t in self.values if accept(self.shape_of(t))]
        if not eligible:
            return None
        if self.chance(0.45):
            return eligible[-1]
        return eligible[int(self.rng.integers(len(eligible)))]

    def alike(self, t):
        """The runtime tensors of t's shape, t among them (in the order made)."""
        return [u for u in self.values if self.shape_of(u) == self.shape_of(t)]

    def activation(self, p=0.35):
        return self.choice((RELU, RELU6)) if self.chance(p) else NONE

    def fits(self, shape):
        return all(d >= 1 for d in shape) and _size(shape) <= MAX_ELEMENTS

    # the model
    def generate(self):
        for _ in range(1 if self.chance(0.7) else 2):
            self.add_input()
        builders, weights = zip(*BUILDERS)
        tries = 0
        while len(self.spec.nodes) < self.target and tries < 400:
            tries += 1
            builder = self.choice(builders, weights)
            builder(self)  # one that does not apply adds nothing (or valid nodes only)
        self.choose_outputs()
        return self.spec

    def add_input(self):
        t = self.spec.add(TensorSpec(self.input_shape(), "input"))
        self.spec.inputs.append(t)
        self.register(t)

    def input_shape(self):
        """A model input's shape: rank 2-4, small, batch 1 or 2."""
        rank = self.choice((2, 3, 4), (1, 1, 3))
        batch = 2 if self.chance(0.15) else 1
        if rank == 4:
            shape = (batch, int(self.rng.integers(1, 10)), int(self.rng.integers(1, 10)), self.channels())
        elif rank == 3:
            shape = (batch, int(self.rng.integers(1, 12)), self.channels())
        else:
            shape = (int(self.rng.integers(1, 9)), self.channels())
        return shape

    def choose_outputs(self):
        read = {t for n in self.spec.nodes for t in n.inputs}
        produced = [t for n in self.spec.nodes for t in n.outputs if not self.spec.tensors[t].type_name]
        outputs = [produced[-1]]
        for t in produced[:-1]:
            if t not in read and self.chance(0.6):       # a leaf: else it stays dead code
                outputs.append(t)
            elif t in read and self.chance(0.08):        # an output that later nodes also read
                outputs.append(t)
        if len(outputs) > 5:
            keep = sorted(self.rng.choice(len(outputs) - 1, 4, replace=False) + 1)
            outputs = [outputs[0]] + [outputs[k] for k in keep]
        self.spec.outputs = sorted(set(outputs), key=outputs.index)


def _rank4(shape):
    return len(shape) == 4


def _window_out(size, kernel, stride, padding, dilation=1):
    span = (kernel - 1) * dilation + 1
    return -(-size // stride) if padding == SAME else (size - span) // stride + 1


# Builders: each adds nodes to g and returns True, or returns False having added nothing.
def conv2d(g, x=None, out_channels=None, kernel=None, stride=None, padding=None, act=None):
    x = x if x is not None else g.pick(_rank4)
    if x is None:
        return False
    n, h, w, c = g.shape_of(x)
    kernel = kernel or g.choice((1, 3, 5), (5, 5, 1))
    stride = stride or g.choice((1, 2), (3, 1))
    dilation = 2 if kernel == 3 and g.chance(0.08) else 1
    padding = padding if padding is not None else g.choice((SAME, VALID))
    if padding == VALID and min(h, w) < (kernel - 1) * dilation + 1:
        padding = SAME
    o = out_channels or g.channels()
    shape = (n, _window_out(h, kernel, stride, padding, dilation), _window_out(w, kernel, stride, padding, dilation), o)
    if not g.fits(shape):
        return False
    bias = g.uniform(o, -0.2, 0.2)  # LiteRT's CONV_2D requires its bias
    return g.one("CONV_2D", [x, g.weights((o, kernel, kernel, c), kernel * kernel * c), bias], shape, padding=padding,
          stride_w=stride, stride_h=stride, dilation_w_factor=dilation, dilation_h_factor=dilation,
          fused_activation_function=g.activation() if act is None else act)


def depthwise(g, x=None, kernel=None, stride=None, padding=None, act=None, multiplier=None):
    x = x if x is not None else g.pick(_rank4)
    if x is None:
        return False
    n, h, w, c = g.shape_of(x)
    kernel = kernel or g.choice((1, 3, 5), (1, 6, 2))
    stride = stride or g.choice((1, 2), (3, 1))
    padding = padding if padding is not None else g.choice((SAME, VALID), (2, 1))
    if padding == VALID and min(h, w) < kernel:
        padding = SAME
    m = multiplier or (2 if g.chance(0.15) else 1)
    dilation = 2 if kernel == 3 and stride == 1 and padding == SAME and g.chance(0.1) else 1
    shape = (n, _window_out(h, kernel, stride, padding), _window_out(w, kernel, stride, padding), c * m)
    if not g.fits(shape):
        return False
    filt = g.weights((1, kernel, kernel, c * m), kernel * kernel)
    return g.one("DEPTHWISE_CONV_2D", [x, filt, g.uniform(c * m, -0.2, 0.2)],
          shape, padding=padding, stride_w=stride, stride_h=stride, depth_multiplier=m, dilation_w_factor=dilation,
          dilation_h_factor=dilation, fused_activation_function=g.activation() if act is None else act)


def fully_connected(g, x=None, units=None, keep=None, act=None):
    x = x if x is not None else g.pick()
    if x is None:
        return False
    shape = g.shape_of(x)
    c = shape[-1]
    u = units or g.channels()
    keep = g.chance(0.5) if keep is None else keep
    out = tuple(shape[:-1]) + (u,) if keep else (_size(shape[:-1]), u)
    if not g.fits(out):
        return False
    bias = g.uniform(u, -0.2, 0.2) if g.chance(0.8) else -1
    return g.one("FULLY_CONNECTED", [x, g.weights((u, c), c), bias], out, keep_num_dims=keep,
                 fused_activation_function=g.activation() if act is None else act)


def binary_const(g):
    x = g.pick()
    if x is None:
        return False
    shape = g.shape_of(x)
    op = g.choice(("ADD", "MUL", "SUB", "DIV", "MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE"), (4, 4, 4, 1, 1, 1, 1))
    kind = g.choice(("scalar", "vector", "channel", "full", "broadcast"))
    if kind == "scalar":
        cshape = ()
    elif kind == "vector":
        cshape = (1,)
    elif kind == "channel":
        cshape = (shape[-1],) if g.chance(0.5) else (1,) * (len(shape) - 1) + (shape[-1],)
    elif kind == "full":
        cshape = shape
    else:
        cshape = tuple(d if g.chance(0.5) else 1 for d in shape)
        cshape = cshape[int(g.rng.integers(0, 2)):] if len(cshape) > 1 else cshape  # sometimes one rank lower
    low, high = (0.5, 1.5) if op in ("MUL", "DIV") else (-1.0, 1.0)
    c = g.uniform(cshape, low, high)
    if op == "MUL" and g.chance(0.3):
        c = g.uniform(cshape, -1.5, 1.5)
    inputs = [x, c] if g.chance(0.75) or op == "DIV" else [c, x]  # divide by the constant only (never by ~0)
    options = {"fused_activation_function": g.activation(0.2)} if op in ("ADD", "MUL", "SUB", "DIV") else {}
    out = _broadcast(shape, cshape)
    if not g.fits(out):
        return False
    g.one(op, inputs, out, **options)
    return True


def _broadcasts_onto(small, big):
    return len(small) <= len(big) and _broadcast(small, big) == tuple(big)


def binary_runtime(g):
    x = g.pick()
    if x is None:
        return False
    shape = g.shape_of(x)
    same = [t for t in g.values if t != x and g.shape_of(t) == shape]
    broadcast = [t for t in g.values if t != x and g.shape_of(t) != shape and _broadcasts_onto(g.shape_of(t), shape)]
    if same and g.chance(0.7):
        y = g.choice(same)
    elif broadcast and g.chance(0.6):
        y = g.choice(broadcast)
    elif same or broadcast:
        y = g.choice(same + broadcast)
    else:
        y = x  # x op x: one tensor read twice by one node
    op = g.choice(("ADD", "MUL", "SUB", "MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE"), (6, 4, 4, 1, 1, 1))
    inputs = [x, y] if g.chance(0.6) else [y, x]
    options = {"fused_activation_function": g.activation(0.2)} if op in ("ADD", "MUL", "SUB") else {}
    g.one(op, inputs, shape, **options)
    return True


def unary(g, x=None, op=None):
    x = x if x is not None else g.pick()
    if x is None:
        return False
    op = op or g.choice(("LOGISTIC", "TANH", "HARD_SWISH", "RELU", "RELU6", "ABS", "NEG", "EXP", "ELU", "GELU",
                         "LEAKY_RELU", "PRELU"), (6, 4, 4, 4, 2, 1, 1, 1, 1, 1, 1, 1))
    shape = g.shape_of(x)
    if op == "GELU":
        return g.one(op, [x], shape, approximate=g.chance(0.5))
    if op == "LEAKY_RELU":
        return g.one(op, [x], shape, alpha=g.choice((0.1, 0.2, 0.01)))
    if op == "PRELU":  # a constant slope per channel, sometimes of the input's rank
        alpha = (shape[-1],) if g.chance(0.5) else (1,) * (len(shape) - 1) + (shape[-1],)
        return g.one(op, [x, g.uniform(alpha, -0.5, 0.5)], shape)
    return g.one(op, [x], shape)


def mean(g, x=None, axes=None, keep=None, op="MEAN"):
    x = x if x is not None else g.pick()
    if x is None:
        return False
    shape = g.shape_of(x)
    rank = len(shape)
    if axes is None:
        pattern = g.choice(("spatial", "last", "random"), (2, 2, 1))
        if pattern == "spatial" and rank == 4:
            axes = [1, 2]
        elif pattern == "last" or rank < 3:
            axes = [rank - 1]
        else:
            axes = sorted(int(a) for a in g.rng.choice(rank, int(g.rng.integers(1, rank)), replace=False))
    keep = g.chance(0.6) if keep is None else keep
    out = tuple(1 if k in axes else d for k, d in enumerate(shape)) if keep else \
        tuple(d for k, d in enumerate(shape) if k not in axes)
    if len(out) < 2:
        keep, out = True, tuple(1 if k in axes else d for k, d in enumerate(shape))
    written = [a - rank if g.chance(0.2) else a for a in axes]  # negative axes sometimes
    return g.one(op, [x, g.ints(written)], out, keep_dims=keep)


def reduction(g):
    """SUM, REDUCE_MAX, REDUCE_MIN or REDUCE_PROD (MEAN has a builder of its own); a product over
    the last axis of at most 13 (a product of many values under- or overflows)."""
    op = g.choice(("SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD"), (2, 2, 1, 1))
    if op != "REDUCE_PROD":
        return mean(g, op=op)
    x = g.pick(lambda s: s[-1] <= 13)
    return x is not None and mean(g, x, [len(g.shape_of(x)) - 1], op=op)


def softmax(g, x=None):
    x = x if x is not None else g.pick()
    if x is None:
        return False
    return g.one("SOFTMAX", [x], g.shape_of(x), beta=g.choice((1.0, 1.0, 1.0, 0.5, 2.0)))


def _slices_along(g, x, axis, count):
    """Slices of x along `axis` covering it in order (SLICE, STRIDED_SLICE, SPLIT or SPLIT_V), or None."""
    shape = g.shape_of(x)
    d = shape[axis]
    if d < count:
        return None
    cuts = sorted(int(c) for c in g.rng.choice(np.arange(1, d), count - 1, replace=False)) if count > 1 else []
    bounds = [0] + cuts + [d]
    sizes = [b - a for a, b in zip(bounds, bounds[1:])]
    how = g.choice(("SLICE", "STRIDED_SLICE", "SPLIT", "SPLIT_V"))
    if how in ("SPLIT", "SPLIT_V") and np.dtype(g.spec.tensors[x].dtype) == np.bool_:
        how = "SLICE"  # LiteRT 2.3's split.cc / split_v.cc refuse bool at prepare
    rank = len(shape)
    if how == "SPLIT" and d % count == 0:
        part = tuple(d // count if k == axis else s for k, s in enumerate(shape))
        written = axis - rank if g.chance(0.2) else axis
        return g.node("SPLIT", [g.ints(written), x], [part] * count, num_splits=count)
    if how in ("SPLIT", "SPLIT_V"):
        written = list(sizes)
        if g.chance(0.3):
            written[int(g.rng.integers(count))] = -1
        parts = [tuple(s if k == axis else e for k, e in enumerate(shape)) for s in sizes]
        return g.node("SPLIT_V", [x, g.ints(written), g.ints(axis)], parts, num_splits=count)
    outs = []
    for a, s in zip(bounds, sizes):
        part = tuple(s if k == axis else e for k, e in enumerate(shape))
        begin = [a if k == axis else 0 for k in range(rank)]
        if how == "SLICE":
            size = [s if k == axis else (-1 if g.chance(0.3) else e) for k, e in enumerate(shape)]
            outs.append(g.one("SLICE", [x, g.ints(begin), g.ints(size)], part))
        else:
            end = [a + s if k == axis else e for k, e in enumerate(shape)]
            end_mask = sum(1 << k for k in range(rank) if k != axis and g.chance(0.5))
            outs.append(g.one("STRIDED_SLICE", [x, g.ints(begin), g.ints(end), g.ints([1] * rank)], part,
                              begin_mask=0, end_mask=end_mask, ellipsis_mask=0, new_axis_mask=0, shrink_axis_mask=0,
                              offset=False))
    return outs


def concatenation(g):
    x = g.pick()
    if x is None:
        return False
    shape = g.shape_of(x)
    rank = len(shape)
    axis = rank - 1 if g.chance(0.5) else int(g.rng.integers(rank))
    parts = None
    how = g.choice(("partners", "slices", "self"), (3, 3, 1))
    if how == "slices" and shape[axis] >= 2:
        count = int(g.rng.integers(2, min(4, shape[axis]) + 1))
        parts = _slices_along(g, x, axis, count)
        if parts is not None:
            for k in range(len(parts)):  # work on some of the pieces before joining them (float ones)
                if g.chance(0.3) and g.spec.tensors[parts[k]].is_float:
                    parts[k] = unary(g, parts[k])
            if g.chance(0.3):
                parts = [parts[k] for k in g.rng.permutation(len(parts))]
    if parts is None and how == "partners":
        partners = [t for t in g.values if len(g.shape_of(t)) == rank and
                    all(a == b for k, (a, b) in enumerate(zip(g.shape_of(t), shape)) if k != axis)]
        count = int(g.rng.integers(2, 5))
        parts = [x] + [g.choice(partners) for _ in range(count - 1)]
    if parts is None:
        parts = [x] * int(g.rng.integers(2, 4))  # one tensor concatenated with itself
    out = tuple(sum(g.shape_of(p)[axis] for p in parts) if k == axis else d for k, d in enumerate(shape))
    if not g.fits(out):
        return False
    written = axis - rank if g.chance(0.25) else axis
    # No fused activation: LiteRT's builtin kernel refuses one, and XNNPACK's ignores it.
    g.one("CONCATENATION", parts, out, axis=written, fused_activation_function=NONE)
    return True


def slice_op(g):
    x = g.pick()
    if x is None:
        return False
    shape = g.shape_of(x)
    begin, size, out = [], [], []
    for d in shape:
        b = int(g.rng.integers(0, d)) if g.chance(0.6) else 0
        s = int(g.rng.integers(1, d - b + 1))
        if g.chance(0.2):
            s = d - b
            size.append(-1)
        else:
            size.append(s)
        begin.append(b)
        out.append(s)
    if tuple(out) == shape and g.chance(0.7):
        return False
    g.one("SLICE", [x, g.ints(begin), g.ints(size)], tuple(out))
    return True


def strided_slice(g):
    x = g.pick()
    if x is None:
        return False
    shape = g.shape_of(x)
    rank = len(shape)
    begin, end, strides, out = [], [], [], []
    begin_mask = end_mask = shrink = 0
    shrinkable = [k for k in range(rank) if rank > 2 and g.chance(0.15)][:1]
    for k, d in enumerate(shape):
        if k in shrinkable:
            b = int(g.rng.integers(d))
            begin.append(b), end.append(b + 1), strides.append(1)
            shrink |= 1 << k
            continue
        stride = g.choice((1, 1, 1, 2, 3, -1))
        if stride > 0:
            b = int(g.rng.integers(0, d))
            e = int(g.rng.integers(b + 1, d + 1))
            if g.chance(0.2):
                begin_mask |= 1 << k
                b_eff = 0
            else:
                b_eff = b
            if g.chance(0.2):
                end_mask |= 1 << k
                e_eff = d
            else:
                e_eff = e
            n = len(range(b_eff, e_eff, stride))
        else:
            b = int(g.rng.integers(0, d))
            e = int(g.rng.integers(0, b + 1))
            if g.chance(0.4):
                end_mask |= 1 << k
                n = len(range(b, -1, stride))
            else:
                n = len(range(b, e, stride))
            if n == 0:
                return False
        begin.append(b), end.append(e), strides.append(stride), out.append(n)
    if any(n < 1 for n in out) or len(out) < 2:
        return False
    g.one("STRIDED_SLICE", [x, g.ints(begin), g.ints(end), g.ints(strides)], tuple(out), begin_mask=begin_mask,
          end_mask=end_mask, ellipsis_mask=0, new_axis_mask=0, shrink_axis_mask=shrink, offset=False)
    return True


def split(g):
    x = g.pick()
    if x is None:
        return False
    shape = g.shape_of(x)
    axes = [k for k, d in enumerate(shape) if d >= 2]
    if not axes:
        return False
    axis = g.choice(axes)
    parts = _slices_along(g, x, axis, int(g.rng.integers(2, min(4, shape[axis]) + 1)))
    return parts is not None


def _factor(g, size, rank):
    """A random shape of `rank` dims whose product is `size`."""
    dims = [1] * rank
    n, p = size, 2
    primes = []
    while n > 1:
        while n % p == 0:
            primes.append(p)
            n //= p
        p += 1
    for prime in primes:
        dims[int(g.rng.integers(rank))] *= prime
    return tuple(dims)


def reshape(g, x=None, target=None):
    x = x if x is not None else g.pick()
    if x is None:
        return False
    shape = g.shape_of(x)
    size = _size(shape)
    if target is None:
        pattern = g.choice(("random", "flatten", "rows", "split_last"))
        if pattern == "flatten":
            target = (shape[0], size // shape[0])
        elif pattern == "rows":
            target = (size // shape[-1], shape[-1])
        elif pattern == "split_last" and len(shape) < 4 and shape[-1] % 2 == 0:
            target = tuple(shape[:-1]) + (2, shape[-1] // 2)
        else:
            target = _factor(g, size, int(g.rng.integers(2, 5)))
    written = list(target)
    if g.chance(0.25):
        written[int(g.rng.integers(len(written)))] = -1
    return g.one("RESHAPE", [x, g.ints(written)], target, new_shape=list(target))


def transpose(g, x=None, perm=None):
    x = x if x is not None else g.pick()
    if x is None:
        return False
    shape = g.shape_of(x)
    if perm is None:
        perm = [int(p) for p in g.rng.permutation(len(shape))]
        if perm == sorted(perm):
            perm = perm[::-1]
    return g.one("TRANSPOSE", [x, g.ints(perm)], tuple(shape[p] for p in perm))


def pad(g, x=None, paddings=None):
    x = x if x is not None else g.pick()
    if x is None:
        return False
    shape = g.shape_of(x)
    if paddings is None:
        paddings = []
        for k in range(len(shape)):
            p = 0.15 if k == 0 else 0.6
            paddings.append([int(g.rng.integers(0, 3)) if g.chance(p) else 0 for _ in range(2)])
    out = tuple(d + a + b for d, (a, b) in zip(shape, paddings))
    if not g.fits(out):
        return False
    if g.chance(0.25):  # a constant pad value other than zero
        value = g.const(np.float32(g.choice((0.0, 1.0, -0.5, 2.5))))
        return g.one("PADV2", [x, g.ints(paddings), value], out)
    return g.one("PAD", [x, g.ints(paddings)], out)


def pool(g, x=None, op=None, size=None, stride=None, padding=None):
    x = x if x is not None else g.pick(_rank4)
    if x is None:
        return False
    n, h, w, c = g.shape_of(x)
    op = op or g.choice(("AVERAGE_POOL_2D", "MAX_POOL_2D"))
    if size is None and g.chance(0.15):  # a global pool
        fh, fw, stride, padding = h, w, 1, VALID
    else:
        fh = fw = size or g.choice((2, 3))
        stride = stride or g.choice((1, 2))
        padding = padding if padding is not None else g.choice((SAME, VALID))
        if padding == VALID and min(h, w) < fh:
            padding = SAME
    shape = (n, _window_out(h, fh, stride, padding), _window_out(w, fw, stride, padding), c)
    g.one(op, [x], shape, padding=padding, stride_w=stride, stride_h=stride, filter_width=fw, filter_height=fh,
          fused_activation_function=g.activation(0.15))
    return True


def _broadcast(a, b):
    """The broadcast of shapes a and b, or None."""
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    if any(x != y and 1 not in (x, y) for x, y in zip(a, b)):
        return None
    return tuple(max(x, y) for x, y in zip(a, b))


def batch_matmul(g):
    x = g.pick()
    if x is None:
        return False
    shape = g.shape_of(x)
    adj_x = g.chance(0.25)
    m, k = (shape[-1], shape[-2]) if adj_x else (shape[-2], shape[-1])
    how = g.choice(("const", "self", "other"))
    adj_y = g.chance(0.4)
    if how == "self":  # x^T x or x x^T: one tensor as both operands
        y, adj_y, n = x, not adj_x, m
    elif how == "other":
        y = g.pick(lambda s: len(s) >= 2 and (s[-1] if adj_y else s[-2]) == k and
                   _broadcast(s[:-2], shape[:-2]) is not None)
        if y is None:
            return False
        n = g.shape_of(y)[-2] if adj_y else g.shape_of(y)[-1]
    else:
        n = g.channels()
        crank = int(g.rng.integers(2, len(shape) + 1))
        lead = tuple(1 for _ in range(crank - 2)) if g.chance(0.5) else tuple(shape[len(shape) - crank:-2])
        y = g.weights(lead + ((n, k) if adj_y else (k, n)), k)
    out = _broadcast(shape[:-2], g.shape_of(y)[:-2]) + (m, n)
    if not g.fits(out) or len(out) > 4:
        return False
    return g.one("BATCH_MATMUL", [x, y], out, adj_x=adj_x, adj_y=adj_y, asymmetric_quantize_inputs=False)


def resize(g):
    x = g.pick(_rank4)
    if x is None:
        return False
    n, h, w, c = g.shape_of(x)
    op = g.choice(("RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR"))
    size = (int(g.choice((2 * h, h, max(1, h // 2), h + 1, 3))), int(g.choice((2 * w, w, max(1, w // 2), w + 2))))
    mode = g.choice(("plain", "align_corners", "half_pixel"))
    out = (n,) + size + (c,)
    if not g.fits(out):
        return False
    return g.one(op, [x, g.ints(size)], out, align_corners=mode == "align_corners",
                 half_pixel_centers=mode == "half_pixel")


def squeeze_or_expand(g):
    x = g.pick()
    if x is None:
        return False
    shape = g.shape_of(x)
    ones = [k for k, d in enumerate(shape) if d == 1]
    if ones and len(shape) > 2 and g.chance(0.5):
        dims = [g.choice(ones)]
        return g.one("SQUEEZE", [x], tuple(d for k, d in enumerate(shape) if k not in dims),
                     squeeze_dims=[k - len(shape) if g.chance(0.3) else k for k in dims])
    if len(shape) == 4:
        return False
    axis = int(g.rng.integers(0, len(shape) + 1))
    out = shape[:axis] + (1,) + shape[axis:]
    written = axis - len(shape) - 1 if g.chance(0.3) else axis
    return g.one("EXPAND_DIMS", [x, g.ints(written)], out)


def gather(g):
    """GATHER of constant indices (a layout op: read_through_layout reads through it)."""
    x = g.pick()
    if x is None:
        return False
    shape = g.shape_of(x)
    axis = int(g.rng.integers(len(shape)))
    count = int(g.rng.integers(1, 2 * shape[axis] + 1))
    indices = g.rng.integers(0, shape[axis], count)
    if g.chance(0.3):
        indices = np.arange(shape[axis])[::-1]  # a reversal
    out = shape[:axis] + (len(indices),) + shape[axis + 1:]
    if not g.fits(out):
        return False
    written = axis - len(shape) if g.chance(0.2) else axis
    return g.one("GATHER", [x, g.ints(indices)], out, axis=written, batch_dims=0)


def tile(g):
    x = g.pick()
    if x is None:
        return False
    shape = g.shape_of(x)
    multiples = [g.choice((1, 1, 2, 3)) for _ in shape]
    out = tuple(d * m for d, m in zip(shape, multiples))
    if not g.fits(out) or out == shape:
        return False
    return g.one("TILE", [x, g.ints(multiples)], out)


# Patterns the rewrite rules look for.
def swish(g, x=None):
    x = x if x is not None else g.pick()
    if x is None:
        return False
    if g.chance(0.6) and len(g.shape_of(x)) == 4:
        x = conv2d(g, x, act=NONE) or depthwise(g, x, act=NONE) or x
    s = unary(g, x, "LOGISTIC")
    g.one("MUL", [x, s] if g.chance(0.6) else [s, x], g.shape_of(x), fused_activation_function=NONE)
    return True


def squeeze_excite(g):
    x = g.pick(_rank4)
    if x is None:
        return False
    n, h, w, c = g.shape_of(x)
    r = max(1, c // g.choice((2, 4))) if g.chance(0.7) else g.channels()
    style = g.choice(("fc", "conv", "keras", "pool"))
    if style == "pool":
        squeezed = g.one("AVERAGE_POOL_2D", [x], (n, 1, 1, c), padding=VALID, stride_w=1, stride_h=1,
                         filter_width=w, filter_height=h, fused_activation_function=NONE)
    else:
        squeezed = mean(g, x, [1, 2], keep=style != "keras")
    if style in ("fc", "keras"):
        hidden = fully_connected(g, squeezed, r, keep=True, act=g.choice((RELU, RELU6, NONE)))
        gate = fully_connected(g, hidden, c, keep=True, act=NONE)
    else:
        hidden = conv2d(g, squeezed, r, 1, 1, SAME, act=g.choice((RELU, RELU6, NONE)))
        gate = conv2d(g, hidden, c, 1, 1, SAME, act=NONE)
    gate = unary(g, gate, g.choice(("LOGISTIC", "LOGISTIC", "HARD_SWISH")))
    if style == "keras":
        gate = reshape(g, gate, (n, 1, 1, c))
    target = x
    if g.chance(0.2):
        same = [t for t in g.values if g.shape_of(t) == (n, h, w, c) and t != x]
        target = g.choice(same) if same else x
    y = g.one("MUL", [target, gate] if g.chance(0.7) else [gate, target], (n, h, w, c), fused_activation_function=NONE)
    if g.chance(0.4):
        conv2d(g, y, kernel=1, stride=1)  # a 1x1 projection alone reads the gated tensor
    return True


def conv_batch_norm(g):
    x = g.pick(_rank4)
    if x is None:
        return False
    if g.chance(0.3):
        scaled = g.one("MUL", [x, g.uniform((g.shape_of(x)[-1],), 0.5, 1.5)], g.shape_of(x),
                       fused_activation_function=NONE)
        x = g.one("ADD", [scaled, g.uniform((), -0.3, 0.3)], g.shape_of(x), fused_activation_function=NONE)
    y = conv2d(g, x, act=NONE) if g.chance(0.7) else depthwise(g, x, act=NONE)
    if not y:
        return True
    c = g.shape_of(y)[-1]
    y = g.one("MUL", [y, g.uniform((c,), 0.5, 1.5)], g.shape_of(y), fused_activation_function=NONE)
    y = g.one(g.choice(("ADD", "SUB")), [y, g.uniform((c,), -0.3, 0.3)], g.shape_of(y),
              fused_activation_function=g.activation(0.4))
    return True


def pad_window(g):
    x = g.pick(_rank4)
    if x is None:
        return False
    p = [int(g.rng.integers(0, 3)) for _ in range(4)]
    channels = [0, int(g.rng.integers(1, 3))] if g.chance(0.1) else [0, 0]
    padded = pad(g, x, [[0, 0], p[:2], p[2:], channels])
    if not padded:
        return False
    what = g.choice(("conv", "depthwise", "pool"))
    if what == "conv":
        conv2d(g, padded, padding=VALID)
    elif what == "depthwise":
        depthwise(g, padded, padding=VALID)
    else:
        pool(g, padded, padding=VALID)
    return True


def residual(g):
    x = g.pick(_rank4)
    if x is None:
        return False
    c = g.shape_of(x)[-1]
    y = conv2d(g, x, c, g.choice((1, 3)), 1, SAME) if g.chance(0.6) else depthwise(g, x, stride=1, padding=SAME,
                                                                                 multiplier=1)
    if not y:
        return False
    g.one("ADD", [y, x] if g.chance(0.5) else [x, y], g.shape_of(x), fused_activation_function=g.activation(0.4))
    return True


def mixed_depthwise(g):
    x = g.pick(lambda s: _rank4(s) and s[-1] >= 2)
    if x is None:
        return False
    c = g.shape_of(x)[-1]
    count = int(g.rng.integers(2, min(3, c) + 1))
    parts = _slices_along(g, x, 3, count)
    stride, act = g.choice((1, 1, 2)), g.activation(0.3)
    outs = []
    for k, part in enumerate(parts):
        outs.append(depthwise(g, part, kernel=(3, 5, 7)[k], stride=stride, padding=SAME, act=act, multiplier=1))
    shape = g.shape_of(outs[0])
    g.one("CONCATENATION", outs, shape[:3] + (sum(g.shape_of(o)[3] for o in outs),), axis=3,
          fused_activation_function=NONE)
    return True


def split_pointwise(g):
    """MixNet's grouped pointwise convolution as litert-torch writes it (1x1 CONV_2Ds of one
    input, concatenated along the channels), then what follows it there: a batch norm, an
    activation, a swish, a residual ADD of a tensor of the concatenation's shape."""
    x = g.pick(_rank4)
    if x is None:
        return False
    outs = [conv2d(g, x, g.channels(), 1, 1, SAME, NONE) for _ in range(int(g.rng.integers(2, 4)))]
    if not all(outs):
        return True
    shape = g.shape_of(outs[0])[:3] + (sum(g.shape_of(o)[3] for o in outs),)
    y = g.one("CONCATENATION", outs, shape, axis=g.choice((3, -1)), fused_activation_function=NONE)
    if g.chance(0.7):
        y = g.one("SUB", [y, g.uniform((shape[3],), -0.3, 0.3)], shape, fused_activation_function=NONE)
        y = g.one("MUL", [y, g.uniform((shape[3],), 0.5, 1.5)], shape, fused_activation_function=g.activation(0.5))
    if g.chance(0.5):
        y = g.one("MUL", [y, unary(g, y, "LOGISTIC")], shape, fused_activation_function=NONE)
    same = g.pick(lambda s: tuple(s) == shape) if g.chance(0.5) else None
    if same is not None:
        g.one("ADD", [y, same] if g.chance(0.5) else [same, y], shape, fused_activation_function=g.activation(0.3))
    return True


def keras_dense(g):
    x = g.pick(lambda s: len(s) >= 3)
    if x is None:
        return False
    shape = g.shape_of(x)
    flat = reshape(g, x, (_size(shape[:-1]), shape[-1]))
    u = g.channels()
    fc = fully_connected(g, flat, u, keep=False, act=NONE)
    if fc is False:
        return True
    y = reshape(g, fc, tuple(shape[:-1]) + (u,))
    if g.chance(0.5):
        g.one("ADD", [y, g.uniform((u,), -0.3, 0.3)], g.shape_of(y), fused_activation_function=g.activation(0.5))
    return True


def row_op_in_reshapes(g):
    x = g.pick(lambda s: len(s) >= 2 and _size(s[:-1]) >= 2)
    if x is None:
        return False
    shape = g.shape_of(x)
    regrouped = _factor(g, _size(shape[:-1]), int(g.rng.integers(1, 3))) + (shape[-1],)
    r = reshape(g, x, regrouped)
    s = softmax(g, r)
    reshape(g, s, shape)
    return True


def attention(g):
    heads = g.choice((1, 2))
    d = g.choice((2, 3, 4, 5, 8)) * heads
    x = g.pick(lambda s: len(s) in (2, 3) and s[-2] <= 24 and g.fits(s[:-1] + (d,)) and
               g.fits(s[:-2] + (heads, s[-2], s[-2])))
    if x is None:
        return False
    shape = g.shape_of(x)
    q, k, v = (fully_connected(g, x, d, keep=True, act=NONE) for _ in range(3))
    if heads > 1 and len(shape) == 3:
        b, t = shape[0], shape[1]
        dh = d // heads
        q, k, v = (transpose(g, reshape(g, y, (b, t, heads, dh)), [0, 2, 1, 3]) for y in (q, k, v))
    qs, ks = g.shape_of(q), g.shape_of(k)
    scores = g.one("BATCH_MATMUL", [q, k], qs[:-1] + (ks[-2],), adj_x=False, adj_y=True,
                   asymmetric_quantize_inputs=False)
    scores = g.one("MUL", [scores, g.const(np.float32(1 / math.sqrt(d // heads)))], g.shape_of(scores),
                   fused_activation_function=NONE)
    p = softmax(g, scores)
    o = g.one("BATCH_MATMUL", [p, v], g.shape_of(p)[:-1] + (g.shape_of(v)[-1],), adj_x=False, adj_y=False,
              asymmetric_quantize_inputs=False)
    if heads > 1 and len(shape) == 3:
        o = reshape(g, transpose(g, o, [0, 2, 1, 3]), (shape[0], shape[1], d))
    return True


def layer_norm(g):
    x = g.pick(lambda s: s[-1] >= 2)
    if x is None:
        return False
    shape = g.shape_of(x)
    m = mean(g, x, [len(shape) - 1], keep=True)
    ms = g.shape_of(m)
    sq = g.one("SQUARED_DIFFERENCE", [x, m], shape)
    var = mean(g, sq, [len(shape) - 1], keep=True)
    eps = g.one("ADD", [var, g.const(np.float32(1e-3))], ms, fused_activation_function=NONE)
    r = g.one("RSQRT", [eps], ms)
    centred = g.one("SUB", [x, m], shape, fused_activation_function=NONE)
    y = g.one("MUL", [centred, r], shape, fused_activation_function=NONE)
    if g.chance(0.7):
        y = g.one("MUL", [y, g.uniform((shape[-1],), 0.5, 1.5)], shape, fused_activation_function=NONE)
        g.one("ADD", [y, g.uniform((shape[-1],), -0.3, 0.3)], shape, fused_activation_function=NONE)
    return True


def rms_norm(g):
    x = g.pick()
    if x is None:
        return False
    shape = g.shape_of(x)
    sq = g.one("MUL", [x, x], shape, fused_activation_function=NONE)
    m = mean(g, sq, [len(shape) - 1], keep=True)
    eps = g.one("ADD", [m, g.const(np.float32(1e-3))], g.shape_of(m), fused_activation_function=NONE)
    r = g.one("RSQRT", [eps], g.shape_of(m))
    y = g.one("MUL", [x, r], shape, fused_activation_function=NONE)
    g.one("MUL", [y, g.uniform((shape[-1],), 0.5, 1.5)], shape, fused_activation_function=NONE)
    return True


def pooled_shortcut(g):
    """MediaPipe's block shortcut: MAX_POOL stride 2 -> PAD channels -> ADD to a stride-2 conv."""
    x = g.pick(lambda s: _rank4(s) and min(s[1:3]) >= 2)
    if x is None:
        return False
    n, h, w, c = g.shape_of(x)
    wider = c + int(g.rng.integers(1, 9))
    pooled = g.one("MAX_POOL_2D", [x], (n, -(-h // 2), -(-w // 2), c), padding=SAME, stride_w=2, stride_h=2,
                   filter_width=2, filter_height=2, fused_activation_function=NONE)
    padded = pad(g, pooled, [[0, 0], [0, 0], [0, 0], [0, wider - c]])
    y = conv2d(g, x, wider, g.choice((1, 3)), 2, SAME, act=NONE)
    if not y:
        return True
    g.one("ADD", [y, padded] if g.chance(0.5) else [padded, y], g.shape_of(y),
          fused_activation_function=g.activation(0.5))
    return True


def add_into_mean(g):
    """An ADD of two runtime tensors that only a MEAN reads (fuse_add_into_reduce)."""
    x = g.pick(_rank4)
    if x is None:
        return False
    same = [t for t in g.values if t != x and g.shape_of(t) == g.shape_of(x)]
    y = g.choice(same) if same else unary(g, x)
    s = g.one("ADD", [x, y], g.shape_of(x), fused_activation_function=NONE)
    mean(g, s, [1, 2] if g.chance(0.7) else None)
    return True


# Ops of the GPU kernels beyond the rewrite rules' patterns: math, logical, space / batch layout,
# windows run backwards, a recurrent layer.
ROUNDING_OPS = ("CEIL", "FLOOR", "ROUND", "SIGN")  # step functions: judged as STEP_OPS says


def _positive(g, x):
    """x mapped into (0, inf), where LOG, SQRT and a fractional POW are defined: EXP, LOGISTIC
    or |x| plus a margin (|x| alone only for SQRT, defined at 0)."""
    how = g.choice(("exp", "logistic", "abs"), (2, 1, 3))
    if how != "abs":
        return unary(g, x, how.upper())
    y = unary(g, x, "ABS")
    margin = g.choice((0.05, 0.25, 1.0))
    return g.one("ADD", [y, g.const(np.float32(margin))], g.shape_of(y), fused_activation_function=NONE)


def math_unary(g):
    """SQUARE, SIN, COS, RELU_0_TO_1, RELU_N1_TO_1, LOG and SQRT (of positive values), and the
    step functions CEIL, FLOOR, ROUND, SIGN, sometimes of x scaled by a power of 2 (more steps)."""
    x = g.pick()
    if x is None:
        return False
    op = g.choice(("SQUARE", "SIN", "COS", "RELU_0_TO_1", "RELU_N1_TO_1", "LOG", "SQRT") + ROUNDING_OPS,
                  (2, 1, 1, 1, 1, 2, 2, 1, 1, 1, 1))
    if op == "LOG":
        x = _positive(g, x)
    elif op == "SQRT":
        x = unary(g, x, "ABS") if g.chance(0.3) else _positive(g, x)
    elif op in ("SIN", "COS") or (op in ROUNDING_OPS and g.chance(0.5)):
        x = g.one("MUL", [x, g.const(np.float32(g.choice((2.0, 4.0))))], g.shape_of(x), fused_activation_function=NONE)
    return g.one(op, [x], g.shape_of(x))


def power(g):
    """POW of a positive base (any exponent), or of any base to an integer constant exponent
    (C's powf: defined for a negative base); the exponent a constant (scalar or per channel) or
    a runtime tensor within [-1.5, 1.5] (1.5 TANH)."""
    x = g.pick()
    if x is None:
        return False
    shape = g.shape_of(x)
    integer = g.chance(0.3)
    base = x if integer else _positive(g, x)
    if integer:
        exponent = g.const(np.float32(g.choice((2.0, 3.0, -1.0, 0.0)))) if g.chance(0.7) else \
            g.const(g.rng.integers(-1, 4, (shape[-1],)).astype(np.float32))
        if g.spec.tensors[exponent].data.min() < 0:  # 1 / x: away from 0
            base = g.one("ADD", [unary(g, x, "ABS"), g.const(np.float32(0.25))], shape, fused_activation_function=NONE)
    elif g.chance(0.6):
        exponent = g.const(np.float32(g.choice((0.5, 1.5, -0.5, 2.0, 2.5)))) if g.chance(0.6) else \
            g.uniform((shape[-1],), -1.5, 1.5)
    else:
        y = g.pick(lambda s: _broadcasts_onto(s, shape))
        exponent = g.one("MUL", [unary(g, y, "TANH"), g.const(np.float32(1.5))], g.shape_of(y),
                         fused_activation_function=NONE)
    return g.one("POW", [base, exponent], shape)


def add_n(g):
    """ADD_N of 2-4 tensors of one shape (a tensor more than once, a constant among them)."""
    x = g.pick()
    if x is None:
        return False
    shape = g.shape_of(x)
    parts = [g.choice(g.alike(x)) for _ in range(int(g.rng.integers(1, 4)))]
    if g.chance(0.2):
        parts.append(g.uniform(shape, -1, 1))
    return g.one("ADD_N", [x] + parts, shape)


def depth_space(g):
    """DEPTH_TO_SPACE or SPACE_TO_DEPTH, block 2 or 3, of a tensor made to fit where it does not:
    a 1x1 CONV_2D to a multiple of block^2 channels, a PAD to multiples of block in height and width."""
    x = g.pick(_rank4)
    if x is None:
        return False
    k = g.choice((2, 3), (3, 1))
    n, h, w, c = g.shape_of(x)
    if g.chance(0.5):
        if c % (k * k):
            x = conv2d(g, x, k * k * g.choice((1, 2, 3)), 1, 1, SAME)
            if not x:
                return False
        n, h, w, c = g.shape_of(x)
        out = (n, h * k, w * k, c // (k * k))
        return g.fits(out) and g.one("DEPTH_TO_SPACE", [x], out, block_size=k)
    if h % k or w % k:
        x = pad(g, x, [[0, 0], [0, -h % k], [0, -w % k], [0, 0]])
        if not x:
            return False
        n, h, w, c = g.shape_of(x)
    return g.one("SPACE_TO_DEPTH", [x], (n, h // k, w // k, c * k * k), block_size=k)


def space_batch(g):
    """SPACE_TO_BATCH_ND (block per spatial dim, paddings making them multiples of it), then
    often a window op on the batches (how converters write a dilated convolution), then
    BATCH_TO_SPACE_ND back, its crops the paddings or none."""
    x = g.pick(lambda s: len(s) in (3, 4))
    if x is None:
        return False
    shape = g.shape_of(x)
    spatial = len(shape) - 2
    block = [g.choice((1, 2, 3), (1, 3, 1)) for _ in range(spatial)]
    paddings = []
    for d, b in zip(shape[1:1 + spatial], block):
        before = int(g.rng.integers(0, b)) if g.chance(0.4) else 0
        paddings.append([before, -(d + before) % b + (b if g.chance(0.2) else 0)])
    padded = [d + a + e for d, (a, e) in zip(shape[1:1 + spatial], paddings)]
    out = (shape[0] * int(np.prod(block)),) + tuple(p // b for p, b in zip(padded, block)) + tuple(shape[1 + spatial:])
    if not g.fits(out):
        return False
    y = g.one("SPACE_TO_BATCH_ND", [x, g.ints(block), g.ints(paddings)], out)
    if spatial == 2 and g.chance(0.5):
        y = depthwise(g, y, kernel=3, stride=1, padding=VALID if min(out[1:3]) >= 3 else SAME, multiplier=1) or y
    elif g.chance(0.4):
        y = unary(g, y)
    if g.chance(0.8):
        ys = g.shape_of(y)
        crops = paddings if ys[1:1 + spatial] == out[1:1 + spatial] and g.chance(0.7) else [[0, 0]] * spatial
        back = (ys[0] // int(np.prod(block)),) + tuple(d * b - a - e for d, b, (a, e) in
                                                       zip(ys[1:1 + spatial], block, crops)) + tuple(ys[1 + spatial:])
        g.one("BATCH_TO_SPACE_ND", [y, g.ints(block), g.ints(crops)], back)
    return True


def mirror_pad(g):
    """MIRROR_PAD, REFLECT (pads <= dim - 1) or SYMMETRIC (pads <= dim)."""
    x = g.pick()
    if x is None:
        return False
    shape = g.shape_of(x)
    symmetric = g.chance(0.5)
    paddings = [[int(g.rng.integers(0, min(2, d - 1 + symmetric) + 1)) if g.chance(0.15 if k == 0 else 0.6) else 0
                 for _ in range(2)] for k, d in enumerate(shape)]
    out = tuple(d + a + b for d, (a, b) in zip(shape, paddings))
    if not g.fits(out):
        return False
    return g.one("MIRROR_PAD", [x, g.ints(paddings)], out, mode=int(symmetric))


def reverse(g):
    """REVERSE_V2 along one axis (negative sometimes)."""
    x = g.pick()
    if x is None:
        return False
    rank = len(g.shape_of(x))
    axis = int(g.rng.integers(rank))
    return g.one("REVERSE_V2", [x, g.ints([axis - rank if g.chance(0.2) else axis])], g.shape_of(x))


def log_softmax(g):
    x = g.pick()
    if x is None:
        return False
    return g.one("LOG_SOFTMAX", [x], g.shape_of(x))


def transpose_conv(g):
    """TRANSPOSE_CONV: weights [O, K, K, I], stride 1 / 2, SAME (output input x stride) or VALID
    ((input - 1) x stride + K), its output_shape a constant, bias mostly, a fused clamp sometimes."""
    x = g.pick(_rank4)
    if x is None:
        return False
    n, h, w, c = g.shape_of(x)
    k, stride, padding = g.choice((1, 2, 3, 4), (1, 3, 3, 1)), g.choice((1, 2), (1, 2)), g.choice((SAME, VALID))
    size = (lambda d: d * stride) if padding == SAME else (lambda d: (d - 1) * stride + k)
    o = g.channels()
    shape = (n, size(h), size(w), o)
    if not g.fits(shape):
        return False
    bias = g.uniform((o,), -0.2, 0.2) if g.chance(0.8) else -1
    return g.one("TRANSPOSE_CONV", [g.ints(shape), g.weights((o, k, k, c), k * k * c // (stride * stride) or 1), x, bias],
                 shape, padding=padding, stride_w=stride, stride_h=stride,
                 fused_activation_function=g.activation(0.25))


def sequence_lstm(g):
    """UNIDIRECTIONAL_SEQUENCE_LSTM as Keras converts it (24 inputs, TANH, the state two
    variable tensors the invokes carry over), batch- or time-major, CIFG and peephole sometimes."""
    x = g.pick(lambda s: len(s) == 3 and s[-1] <= 16)
    if x is None:
        return False
    shape = g.shape_of(x)
    time_major = g.chance(0.3)
    batch, n_input = shape[1] if time_major else shape[0], shape[2]
    n_cell = g.choice((2, 3, 4, 5, 8))
    cifg, peephole = g.chance(0.2), g.chance(0.25)
    gates = ("forget", "cell", "output") if cifg else ("input", "forget", "cell", "output")
    named = {}
    for gate in gates:
        named[f"input_to_{gate}_weights"] = g.weights((n_cell, n_input), n_input)
        named[f"recurrent_to_{gate}_weights"] = g.weights((n_cell, n_cell), n_cell)
        named[f"{gate}_gate_bias"] = g.uniform((n_cell,), *((0.5, 1.5) if gate == "forget" else (-0.5, 0.5)))
        if peephole and gate != "cell":
            named[f"cell_to_{gate}_weights"] = g.uniform((n_cell,), -0.5, 0.5)
    for name, size in (("output_state", n_cell), ("cell_state", n_cell)):
        named[name] = g.spec.add(TensorSpec((batch, size), "variable"))
    inputs = [x] + [named.get(name, -1) for name in LSTM_INPUTS[1:]]
    return g.one("UNIDIRECTIONAL_SEQUENCE_LSTM", inputs, shape[:-1] + (n_cell,), fused_activation_function=4,
                 cell_clip=g.choice((0.0, 10.0, 0.5)), proj_clip=0.0, time_major=time_major,
                 asymmetric_quantize_inputs=False, diagonal_recurrent_tensors=False)


def _compare(g, x):
    """LESS / GREATER of x and a constant or a tensor of x's shape: a bool tensor."""
    same = [t for t in g.values if g.shape_of(t) == g.shape_of(x) and t != x]
    y = g.choice(same) if same and g.chance(0.4) else g.const(np.float32(g.choice((0.0, 0.25, -0.5))))
    inputs = [x, y] if g.chance(0.7) else [y, x]
    return g.typed(g.choice(("LESS", "GREATER")), inputs, [TensorSpec(g.shape_of(x), "value", dtype=np.bool_)])[0]


def logical(g):
    """LOGICAL_AND / LOGICAL_OR of two comparisons, or LOGICAL_NOT of one, read by a SELECT_V2
    of floats or a CAST to float32 (the float pools hold no bool tensor)."""
    x = g.pick()
    if x is None:
        return False
    shape = g.shape_of(x)
    cond = _compare(g, x)
    op = g.choice(("LOGICAL_AND", "LOGICAL_OR", "LOGICAL_NOT"))
    boolean = lambda inputs: g.typed(op, inputs, [TensorSpec(shape, "value", dtype=np.bool_)])[0]
    if op == "LOGICAL_NOT":
        cond = boolean([cond])
    else:
        other = g.pick(lambda s: s == shape)
        cond = boolean([cond, _compare(g, other)] if g.chance(0.5) else [_compare(g, other), cond])
    out = [TensorSpec(shape, "value")]  # float32: node() would type it as its first runtime input, bool
    if g.chance(0.35):
        return g.typed("CAST", [cond], out)[0]
    y = g.pick(lambda s: _broadcasts_onto(s, shape))
    return g.typed("SELECT_V2", [cond, x, y] if g.chance(0.5) else [cond, y, x], out)[0]


BUILDERS = (
    (conv2d, 6), (depthwise, 4), (fully_connected, 4), (binary_const, 5), (binary_runtime, 5), (unary, 5),
    (mean, 2), (softmax, 2), (concatenation, 4), (slice_op, 2), (strided_slice, 2), (split, 2), (reshape, 3),
    (transpose, 2), (pad, 2), (pool, 3), (batch_matmul, 2), (swish, 3), (squeeze_excite, 3), (conv_batch_norm, 2),
    (pad_window, 2), (residual, 2), (mixed_depthwise, 1.5), (split_pointwise, 1.5), (keras_dense, 1.5), (row_op_in_reshapes, 1),
    (attention, 1), (layer_norm, 1), (rms_norm, 1), (pooled_shortcut, 1), (add_into_mean, 1), (reduction, 2),
    (resize, 1.5), (squeeze_or_expand, 1.5), (gather, 1.5), (tile, 1),
    (math_unary, 6), (power, 2), (add_n, 2), (depth_space, 2), (space_batch, 2), (mirror_pad, 1.5), (reverse, 1.5),
    (log_softmax, 1.5), (transpose_conv, 3), (sequence_lstm, 1.5), (logical, 3),
)


def generate(seed, case, min_nodes=3, max_nodes=25, families=tuple(FAMILIES)):
    """The Spec of case `case` of run `seed` (deterministic). The family is drawn from a stream
    of its own, so a float case writes the model it wrote before there were other families."""
    from . import fuzz_graph_families  # it builds on this module's Generator: imported once both exist
    weights = np.array([FAMILIES[f] for f in families], np.float64)
    family = families[int(np.random.default_rng([seed, case, 2]).choice(len(families), p=weights / weights.sum()))]
    generator = Generator if family == "float" else fuzz_graph_families.GENERATORS[family]
    spec = generator(np.random.default_rng([seed, case]), min_nodes, max_nodes).generate()
    spec.family = family
    return spec


# -- running the paths ---------------------------------------------------------------------------
@contextlib.contextmanager
def _quiet():
    """The package's log below ERROR and warnings off while the cases run (each would repeat
    them), as they were after: fuzz() is also called inside other programs (the tests, where a
    level left at ERROR hid a later test's expected warning)."""
    logger = logging.getLogger("gles_delegate")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


@dataclass(frozen=True)
class Resize:
    """A step of case_inputs: resize_tensor_input of every model input (in order) to `shapes`,
    then allocate_tensors."""
    shapes: tuple


class ResizeFailure(RuntimeError):
    """An exception at or after a Resize step, which LiteRT alone ran: a finding however clean
    (the delegate must re-plan, or leave what it cannot run to the CPU)."""


def run_steps(interpreter, steps, after=None):
    """The outputs of every invoke of `steps` (case_inputs: per invoke its inputs, None for a
    reset_all_variables, a Resize), in one flat list, copied as each invoke ends; after(interpreter)
    is called after each invoke. An exception from the first Resize on is a ResizeFailure naming
    the shapes (its cause the exception)."""
    outputs, resized = [], None
    for inputs in steps:
        try:
            if inputs is None:
                interpreter.reset_all_variables()
                continue
            if isinstance(inputs, Resize):
                resized = inputs
                for detail, shape in zip(interpreter.get_input_details(), inputs.shapes):
                    interpreter.resize_tensor_input(detail["index"], shape)
                interpreter.allocate_tensors()
                continue
            common.set_inputs(interpreter, inputs)
            interpreter.invoke()
        except Exception as exc:
            if resized is None:
                raise
            raise ResizeFailure(f"inputs resized to {[list(s) for s in resized.shapes]}: "
                                f"{type(exc).__name__}: {exc}") from exc
        outputs += [np.array(o, copy=True) for o in common.read_outputs(interpreter)]
        if after is not None:
            after(interpreter)
    return outputs


def run_litert(data, steps, resolver=None, after=None):
    """LiteRT alone: (outputs, None), or (None, why it refused the model). after: as run_steps',
    the interpreter then keeping every tensor (experimental_preserve_all_tensors)."""
    module = common.litert()
    kwargs = {"model_content": data}
    if resolver is not None:
        kwargs["experimental_op_resolver_type"] = getattr(module.OpResolverType, resolver)
    if after is not None:
        kwargs["experimental_preserve_all_tensors"] = True
    interpreter, why = common.litert_loaded(**kwargs)
    if interpreter is None:
        return None, why
    try:
        return common.native_call(run_steps, interpreter, steps, after), None
    except RuntimeError as exc:
        return None, f"LiteRT cannot run this model: {exc}"


def litert_default(data, steps, xnnpack=True):
    """LiteRT alone, the reference: its default kernels (XNNPACK, its builtin ones for what that
    leaves), else where XNNPACK fails to prepare a node it took, or without `xnnpack` (a model
    with resource variables: XNNPACK 2.3 crashes the process on READ_VARIABLE -> MUL(x, x) beside
    an ASSIGN_VARIABLE of an input), its builtin kernels. (outputs, None) or (None, why)."""
    outputs, why = run_litert(data, steps) if xnnpack else (None, "XNNPack not used")
    if outputs is None and "XNNPack" in why:
        outputs, why = run_litert(data, steps, "BUILTIN_WITHOUT_DEFAULT_DELEGATES")
    return outputs, why


def litert_builtin(data, steps, after=None):
    """LiteRT's builtin kernels without XNNPACK, the second kernel set: its reference kernels
    (BUILTIN_REF), else where those lack an op (ELU) its optimized ones (BUILTIN_WITHOUT_DEFAULT_DELEGATES:
    a missing op fails the load, before any invoke calls `after`). (outputs, None) or (None, why)."""
    outputs, why = run_litert(data, steps, "BUILTIN_REF", after)
    if outputs is None and "Didn't find op" in why:
        outputs, why = run_litert(data, steps, "BUILTIN_WITHOUT_DEFAULT_DELEGATES", after)
    return outputs, why


def litert_crash(data, steps, xnnpack=True):
    """Why LiteRT's own runs of the model (all three kernel sets) kill the process, or None: they run
    once in a fork() child first, so a crash of LiteRT's skips the case instead of ending the
    run (LiteRT 2.3 aborted on an int8 model of QUANTIZE, CONCATENATION, SOFTMAX and
    FULLY_CONNECTED nodes: --families quant, seed 21 case 429)."""
    if not hasattr(os, "fork"):
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # a multi-threaded parent: the child runs LiteRT only
        pid = os.fork()
    if pid == 0:
        try:
            litert_default(data, steps, xnnpack)
            litert_builtin(data, steps)
            run_litert(data, steps, "BUILTIN_WITHOUT_DEFAULT_DELEGATES")
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return f"LiteRT crashed running the model ({signal.Signals(os.WTERMSIG(status)).name})"
    return None


def case_inputs(spec, seed, case, details):
    """Per step of spec.steps, the inputs of that invoke (None: a reset; a Resize to
    spec.input_shapes of a resize step's sizes): the first invoke's from _input_seed(seed, case)
    (a float model's as tools/common.seeded_inputs draws them), each later one's from a seed of
    its own (other values: a stale result or cache shows), at the shapes of the last resize."""
    shapes = [tuple(int(s) for s in d["shape"]) for d in details]
    out = []
    for k, step in enumerate(spec.steps):
        if isinstance(step, dict):
            shapes = [tuple(s) for s in spec.input_shapes(step)]
            out.append(Resize(tuple(shapes)))
        else:
            out.append(None if step == "reset" else
                       input_values(spec, details, _input_seed(seed, case, *([k] if k else [])), shapes))
    return out


def input_values(spec, details, seed, shapes=None):
    """One seeded array per model input, of its details' shape (or of `shapes`, per input):
    floats (and complex parts) uniform in [-1, 1), booleans 0 / 1, integers over
    their TensorSpec's bounds (else their type's range) with one value in ten an edge: a bound,
    0 or +-1 where those lie within."""
    rng = np.random.default_rng(seed)
    values = []
    shapes = shapes or [d["shape"] for d in details]
    for detail, t, shape in zip(details, spec.inputs, shapes):
        dtype, shape = np.dtype(detail["dtype"]), tuple(int(s) for s in shape)
        if dtype.kind == "f":
            values.append(rng.uniform(-1, 1, shape).astype(dtype))
        elif dtype == np.bool_:
            values.append(rng.integers(0, 2, shape).astype(bool))
        elif dtype.kind == "c":  # a spectrum the minimiser made an input
            values.append((rng.uniform(-1, 1, shape) + 1j * rng.uniform(-1, 1, shape)).astype(dtype))
        else:
            info = np.iinfo(dtype)
            low, high = spec.tensors[t].bounds or (int(info.min), int(info.max))
            value = rng.integers(low, high, shape, dtype=np.int64, endpoint=True)
            edges = [v for v in (low, high, 0, 1, -1) if low <= v <= high]
            value = np.where(rng.random(shape) < 0.1, rng.choice(edges, shape), value)
            values.append(value.astype(dtype))
    return values


def floors(spec, index, interpreter):
    """Per model output, the absolute error no float32 implementation can be held below:
    FLOOR_ULPS float32 ulps (eps x magnitude) of the largest value any float tensor it is computed
    from through float tensors holds (inputs and intermediates, from LiteRT's run that kept
    them). An output that cancels (x - mean(x) over equal values, exactly 0) is rounding noise of
    that magnitude, and another order of the same sums gives other noise. Integer and quantized
    values are exact: an integer output has no floor, and none is taken from them. inf (not
    judged) for an output downstream of a step (near_step): rounding may take it either way."""
    producer = {t: n for n in spec.nodes for t in n.outputs}
    value = lambda u: np.asarray(spec.tensors[u].data if spec.tensors[u].kind == "const" else interpreter.get_tensor(index[u]))
    out = []
    for t in spec.outputs:
        if near_step(spec, producer, value, t):
            out.append(math.inf)
            continue
        out.append(FLOOR_ULPS * float(np.finfo(np.float32).eps) * _largest_upstream(spec, producer, value, [t]))
    return out


def _largest_upstream(spec, producer, value, roots):
    """The largest finite |value| of the runtime float tensors `roots` are computed from through
    float tensors (value(t): its values in LiteRT's run)."""
    seen, stack, largest = set(), list(roots), 0.0
    while stack:
        u = stack.pop()
        if u in seen or u < 0 or spec.tensors[u].kind == "const" or not spec.tensors[u].is_float:
            continue
        seen.add(u)
        try:
            v = np.abs(value(u)).astype(np.float64)
        except (ValueError, RuntimeError):
            v = np.zeros(0)
        v = v[np.isfinite(v)]
        if v.size:
            largest = max(largest, float(v.max()))
        if u in producer:
            stack.extend(producer[u].inputs)
    return largest


def _step_distance(op, xs):
    """Per element, how far a step op's inputs lie from where its output jumps."""
    x = xs[0].astype(np.float64)
    if op in ("FLOOR", "CEIL"):
        return np.abs(x - np.rint(x))
    if op == "ROUND":
        return np.abs(np.abs(x - np.floor(x)) - 0.5)
    if op == "SIGN":
        return np.abs(x)
    return np.abs(x - xs[1].astype(np.float64))  # a comparison


def near_step(spec, producer, value, t):
    """Whether output t is computed (through tensors of any type) from a step (STEP_OPS: CEIL,
    FLOOR, ROUND, SIGN, a comparison of floats) whose input lies, in LiteRT's run, within
    STEP_ULPS float32 ulps of a step, of the largest value upstream of it: another order of the
    same float32 sums may take it to the other side, a jump no tolerance of the output bounds.
    An input exactly on a step counts as near (LiteRT's exact 0 of a cancelling RFFT2D term is
    1e-16 on the GPU: seed 65 case 398, signal family) unless it is computed exactly (_exact:
    the int32 family compares copies of its inputs)."""
    seen, stack = set(), [t]
    while stack:
        u = stack.pop()
        if u in seen or u < 0 or u not in producer:
            continue
        seen.add(u)
        node = producer[u]
        stack.extend(node.inputs)
        if node.op not in STEP_OPS or not all(spec.tensors[i].is_float for i in node.inputs):
            continue
        try:
            d = _step_distance(node.op, [value(i) for i in node.inputs])
        except (ValueError, RuntimeError):
            return True
        window = STEP_ULPS * float(np.finfo(np.float32).eps) * _largest_upstream(spec, producer, value, node.inputs)
        near = d <= window if not all(_exact(spec, producer, i) for i in node.inputs) else (d > 0) & (d <= window)
        if near.any():
            return True
    return False


EXACT_OPS = fuzz_half_bounds.MOVES | set(fuzz_half_bounds.AS_MAXIMUM) | fuzz_half_bounds.EXACT_UNARY | {
    "CAST", "SELECT", "SELECT_V2"}


def _exact(spec, producer, t):
    """Whether tensor t's values are computed without rounding: a model input or constant, or
    the result of ops that move, pick or clamp exact values (EXACT_OPS, MUL by a power of 2)."""
    if t < 0 or t not in producer:
        return True
    node = producer[t]
    if node.op == "MUL" and not node.options.get("fused_activation_function"):
        scale = [spec.tensors[i].data for i in node.inputs if spec.tensors[i].kind == "const"]
        if not scale or not np.all(np.abs(np.frexp(np.asarray(scale[0], np.float64))[0]) == 0.5):
            return False
    elif node.op not in EXACT_OPS:
        return False
    return all(_exact(spec, producer, i) for i in node.inputs)


def with_half_storage(floor, data, steps, precision):
    """floors() (per invoke and output) plus, at a half-storage precision, the most half storage
    may move each output (fuzz_half_bounds: every input, weight and stored result rounded to
    half, propagated through the nodes): a sum that cancels keeps its terms' rounding, which
    can be many times rtol of its result."""
    half = fuzz_half_bounds.output_bounds(data, steps, precision)
    return floor if half is None else [f + h for f, h in zip(floor, half)]


def gpu_options(precision, rewrite_rules=True):
    """The GpuDelegateOptions of paths c and d (tuning on while random_workgroups() runs)."""
    return GpuDelegateOptions(precision=precision, max_delegated_partitions=0, rewrite_rules=rewrite_rules,
                              tune_workgroups=_tuning_at_random)


# -- workgroups a tuner may pick (--workgroups random) --------------------------------------------
# Shapes no candidate list holds: a kernel leaning on a power-of-two workgroup, or on one that
# divides its grid, shows on them.
ODD_WORKGROUPS = ((1, 1, 1), (3, 1, 1), (1, 4, 1), (1, 1, 4), (5, 3, 1), (2, 2, 2), (7, 1, 3))
_tuning_at_random = False  # whether random_workgroups() runs


@contextlib.contextmanager
def random_workgroups(seed):
    """Meanwhile the GPU paths tune their workgroups, and the tuner, instead of timing, picks one
    of each dispatch's candidates at random: the heuristic's, workgroups.CANDIDATES whatever the
    grid, and ODD_WORKGROUPS. A kernel that leaves its workgroup to the compiler must give the
    same outputs on any of them, as on whichever a GPU's timer finds fastest; one that fixes its
    own is not varied (nor is it by a real tuner). The picks are seeded by `seed` and the
    partition's programs, so a case run again (--case, the minimiser) gets the same ones."""
    global _tuning_at_random
    saved = compiler.candidates, workgroup_tuner.WorkgroupTuner.choose
    _tuning_at_random = True

    def candidates(grid, limits):
        shapes = [choose_workgroup(grid, limits), *CANDIDATES, *ODD_WORKGROUPS]
        return list(dict.fromkeys(clamp_workgroup(wg, limits) for wg in shapes))

    def choose(tuner, plan, variants):
        programs = "".join(options[0][1] for options in variants).encode()
        rng = random.Random(seed * 1_000_003 + zlib.crc32(programs))
        return [rng.randrange(len(options)) for options in variants]
    compiler.candidates, workgroup_tuner.WorkgroupTuner.choose = candidates, choose
    try:
        yield
    finally:
        compiler.candidates, workgroup_tuner.WorkgroupTuner.choose = saved
        _tuning_at_random = False


class KernelCompileFailure(RuntimeError):
    """A GPU kernel the delegate built failed to compile: its node ran on the CPU with right
    outputs, a fallback that hides a kernel bug (a POINTWISE_DAG group indexing past its
    registers: seed 33 case 53 at fp16), so the fuzzer reports it."""


def _compile_failures(delegate):
    """KernelCompileFailure for the first node whose GPU kernel failed to compile, or None."""
    failed = [(label, why) for label, why in delegate.summary()["fallbacks"].items() if "failed to compile" in why]
    return KernelCompileFailure(f"{failed[0][0]}: {failed[0][1]}"[:600]) if failed else None


def run_path(path, data, steps, precision="fp32", rewrite_rules=True, coverage=None):
    """The outputs of path b, c, d or e on `steps` (case_inputs; exceptions propagate, and a GPU
    kernel that failed to compile raises KernelCompileFailure). coverage: a dict that receives,
    for path c, the ops on the GPU / CPU and the rewrite rules applied."""
    if path in "be":
        interpreter = Interpreter(model_content=data, cpu_backend="reference" if path == "b" else "auto")
        interpreter.allocate_tensors()
        return run_steps(interpreter, steps)
    with GpuDelegate(gpu_options(precision, rewrite_rules)) as delegate:
        if path == "c":
            interpreter = Interpreter(model_content=data, experimental_delegates=[delegate], cpu_backend="reference")
            interpreter.allocate_tensors()
            outputs = run_steps(interpreter, steps)
            if coverage is not None:
                on_gpu = common.gpu_partition_of(delegate)
                coverage["ops"] = common.op_counts(interpreter._main.graph, on_gpu)
                coverage["cpu_reasons"] = {n.op: common.cpu_reason(n, delegate) for n in interpreter._main.graph.nodes
                                           if id(n) not in on_gpu}
                coverage["rules"] = collections.Counter(r.rule for r in delegate.rewrite_log if r.status == "APPLIED")
            del interpreter
        else:
            interpreter = common.litert().Interpreter(model_content=data, experimental_delegates=[delegate])
            interpreter.allocate_tensors()
            outputs = run_steps(interpreter, steps)
            del interpreter
        failure = _compile_failures(delegate)
        if failure is not None:
            raise failure
        return outputs


def case_bounds(spec, index, data, steps, want, precision):
    """((spread, floor, quantum), None): per invoke and output what judge() takes beside the
    tolerance, from LiteRT's other kernel sets, the floors, half storage and requantization; or
    (None, why) where LiteRT's builtin kernels refuse the model. The optimized builtin kernels
    count in the spread too: LiteRT's three kernel sets disagree among themselves (an int8 MEAN
    over H and W rounds three ways: XNNPACK, BUILTIN_REF, and the optimized kernel the reference
    follows; seed 115 case 3823)."""
    floor = []
    builtin, why = litert_builtin(data, steps, lambda interpreter: floor.extend(floors(spec, index, interpreter)))
    if builtin is None:
        return None, why
    floor = with_half_storage(floor, data, steps, precision)
    optimized, _ = run_litert(data, steps, "BUILTIN_WITHOUT_DEFAULT_DELEGATES")
    quantum = quanta(spec) * (len(want) // max(len(spec.outputs), 1))
    if any(quantum):  # a quantized output (or a DEQUANTIZE's): follow the requantizations before it
        floor = with_requantization(floor, quantum, want, fuzz_quant_bounds.output_steps(data, steps, precision))
    return (spreads(want, builtin, optimized), floor, quantum), None


def spreads(want, *others):
    """Per output, the largest difference between LiteRT's default run `want` and its other
    kernel sets' runs `others` (each None where it did not run; 0 where unknown). Where the
    kernel sets disagree on whether an element is finite (XNNPACK's EXP saturates where the
    builtin one overflows to inf: LOG(EXP(213)) is 88.4 on one and inf on the other, seed 124
    case 158) it is inf: LiteRT does not know that output, so it is not judged. Equal
    infinities, and NaN against NaN, agree."""
    out = [0.0] * len(want)
    for other in others:
        if other is None:
            continue
        for k, (a, b) in enumerate(zip(want, other)):
            if a.shape != b.shape:
                continue
            a, b = (np.atleast_1d(v).astype(np.float64) for v in (a, b))  # a 0-d output too
            d = np.abs(a - b)
            d[(a == b) | (np.isnan(a) & np.isnan(b))] = 0.0
            out[k] = max(out[k], float(np.nan_to_num(d, nan=math.inf, posinf=math.inf).max()) if d.size else 0.0)
    return out


def with_requantization(floor, quantum, want, moved):
    """floor (per invoke and output) widened by what one step of difference per requantization
    may grow to (fuzz_quant_bounds.output_steps, `moved`; None: nothing followed): an int8 /
    uint8 output's floor to that many steps, a DEQUANTIZE's float output's to that bound less
    the step judge() allows it anyway. An output not judged (inf) stays so."""
    if moved is None:
        return floor
    floor = list(floor) if floor else [0.0] * len(want)
    for k, (bound, step) in enumerate(zip(moved, quantum)):
        if not step or floor[k] == math.inf:
            continue
        integer = np.asarray(want[k]).dtype.kind in "iu"
        floor[k] = max(floor[k], bound if integer else bound - QUANTIZED_STEPS * step)
    return floor


def quanta(spec):
    """Per model output, one quantization step in its units where gles-parity allows one
    (QUANTIZED_STEPS): 1 for a quantized integer tensor, its input's scale for a DEQUANTIZE's
    float output; 0 elsewhere (floats to rtol, other integers exactly)."""
    producer = {t: n for n in spec.nodes for t in n.outputs}
    out = []
    for t in spec.outputs:
        node = producer.get(t)
        if spec.tensors[t].quant is not None:
            out.append(1.0)
        elif node is not None and node.op == "DEQUANTIZE" and spec.tensors[node.inputs[0]].quant is not None:
            out.append(float(np.max(spec.tensors[node.inputs[0]].quant[0])))
        else:
            out.append(0.0)
    return out


def judge(got, want, spread, rtol, floor=None, quantum=None, per_invoke=None):
    """The worst problem of one path's outputs against LiteRT's: None, or a dict {kind, output,
    max_abs, max_rel, tolerance, ...}; kind 'shape', 'dtype', 'nan' or 'tolerance'. spread:
    per output, LiteRT's own spread (spreads); floor: per output, floors() (None: none; inf:
    an output half storage does not bound, with_half_storage, is not judged but for its shape);
    quantum: per output, quanta() (None: none); per_invoke: outputs of one invoke, where the list
    holds several invokes' (messages then name the invoke). Integer outputs are held exactly (one
    step where quantized) but for what half storage moves them (floor), complex ones as their
    float pairs."""
    if len(got) != len(want):
        return {"kind": "shape", "output": None, "message": f"{len(got)} outputs, LiteRT has {len(want)}"}
    worst = None
    for k, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g), np.asarray(w)
        name = f"invoke {k // per_invoke} output {k % per_invoke}" if per_invoke else f"output {k}"
        if g.shape != w.shape:
            return {"kind": "shape", "output": k,
                    "message": f"{name}: shape {list(g.shape)}, LiteRT {list(w.shape)}"}
        if g.dtype != w.dtype:
            return {"kind": "dtype", "output": k, "message": f"{name}: dtype {g.dtype}, LiteRT {w.dtype}"}
        if floor and floor[k] == math.inf:  # half storage may make it any value: a value past 65504, 1 / ~0
            continue
        if (~np.isfinite(g) & np.isfinite(w)).any():
            bad = int(np.sum(~np.isfinite(g) & np.isfinite(w)))
            return {"kind": "nan", "output": k, "max_abs": math.inf, "max_rel": math.inf,
                    "message": f"{name}: {bad} non-finite values where LiteRT's are finite"}
        if w.dtype.kind == "c":
            g, w = g.view(g.real.dtype), w.view(w.real.dtype)
        step = quantum[k] if quantum else 0.0
        integer = w.dtype.kind in "iub"
        metrics = compare(g, w, rtol, quantized=integer and step > 0, spread=spread[k] if spread else 0.0)
        # an integer output's floor is its half-storage bound alone (floors() gives integers none): a
        # CAST of a half-rounded float, an ARG_MAX of values within their rounding of each other;
        # a dequantized output: one step, plus its float32 rounding (each side rounds (q - zp) x scale)
        bound = max(metrics["tolerance"], floor[k] if floor else 0.0,
                    0.0 if integer or not step else QUANTIZED_STEPS * step + (floor[k] if floor else 0.0))
        if metrics["max_abs"] > bound and (worst is None or metrics["max_rel"] > worst["max_rel"]):
            worst = {"kind": "tolerance", "output": k, "max_abs": metrics["max_abs"], "max_rel": metrics["max_rel"],
                     "tolerance": bound, "worst_index": metrics["worst_index"],
                     "message": f"{name} {list(w.shape)} {w.dtype}: max |ours - LiteRT| {metrics['max_abs']:.3g} = "
                                f"{metrics['max_rel']:.3g} x max|LiteRT| (bound {bound:.3g})"}
    return worst


def degenerate(outputs):
    """Whether LiteRT's float outputs are not finite or exceed DEGENERATE_MAGNITUDE (integers
    are exact at any size)."""
    return any(w.dtype.kind in "fc" and (not np.all(np.isfinite(w)) or (w.size and np.abs(w).max() >
                                                                         DEGENERATE_MAGNITUDE)) for w in outputs)


@dataclass
class Outcome:
    """One case: status 'compared', 'litert_refused', 'degenerate'; per path its result."""
    status: str
    why: str = ""
    results: dict = field(default_factory=dict)  # path -> 'ok' | 'refused' | finding dict
    coverage: dict = field(default_factory=dict)


def run_case(spec, seed, case, paths, precision="fp32"):
    """Build the model, run LiteRT and every path of `paths` on the case's seeded inputs, judge."""
    data, index = spec.build()
    details = _input_details(data)
    if details is None:
        return Outcome("litert_refused", "LiteRT cannot load the model")
    steps = case_inputs(spec, seed, case, details)
    crash = litert_crash(data, steps, xnnpack=not spec.variables)
    if crash:
        return Outcome("litert_refused", crash)
    want, why = litert_default(data, steps, xnnpack=not spec.variables)
    if want is None:
        return Outcome("litert_refused", why)
    if degenerate(want):
        return Outcome("degenerate", "LiteRT's outputs are not finite or exceed 1e6")
    bounds, why = case_bounds(spec, index, data, steps, want, precision)
    if bounds is None:  # both kernel sets must take it (XNNPACK ignores what the builtin ones refuse)
        return Outcome("litert_refused", f"builtin kernels: {why}")
    spread, floor, quantum = bounds
    outcome = Outcome("compared")
    rtol = TOLERANCES[precision]
    for path in paths:
        if path == "a":
            continue
        try:
            got = run_path(path, data, steps, precision, coverage=outcome.coverage if path == "c" else None)
        except Exception as exc:  # a refusal, or a finding
            if is_refusal(path, exc, data, steps):
                outcome.results[path] = {"kind": "refused", "message": f"{type(exc).__name__}: {exc}"[:300]}
                continue
            outcome.results[path] = {"kind": "exception", "exception": exception_name(exc),
                                     "message": f"{type(exc).__name__}: {exc}"[:300],
                                     "traceback": traceback.format_exc()[-3000:]}
            continue
        problem = judge(got, want, spread, rtol, floor, quantum, len(spec.outputs))
        outcome.results[path] = problem or {"kind": "ok"}
    return outcome


def _input_seed(seed, case, *invoke):
    return int(np.random.default_rng([seed, case, 1, *invoke]).integers(1 << 31))


def _input_details(data):
    interpreter, _ = common.litert_loaded(model_content=data, experimental_op_resolver_type=
                                          common.litert().OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    return None if interpreter is None else interpreter.get_input_details()


def exception_name(exc):
    """The exception's type name; a ResizeFailure's with its cause's: 'ResizeFailure(ModelError)'."""
    if isinstance(exc, ResizeFailure) and exc.__cause__ is not None:
        return f"{type(exc).__name__}({type(exc.__cause__).__name__})"
    return type(exc).__name__


def is_clean(exc):
    """Whether an exception is a clean refusal: a ModelError, or a ValueError / TypeError that a
    raise statement of ours raised (not Python's own, as `a, b = None` raises a TypeError)."""
    if isinstance(exc, ModelError):
        return True
    if not isinstance(exc, CLEAN_ERRORS):
        return False
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and (frames[-1].line or "").lstrip().startswith("raise")


def is_refusal(path, exc, data, steps):
    """Whether path `path`'s exception is a refusal rather than a finding: a clean one (is_clean),
    and on a GPU path (c, d) only where the model does not run without the delegate either (a
    delegate must leave what it cannot run to the CPU, not fail a model the reference runs), on
    path e (LiteRT's kernels in ours) only where the reference refuses it too."""
    if not is_clean(exc):
        return False
    if path == "b":
        return True
    try:
        run_path("b", data, steps)
    except Exception:
        return True
    return False


def is_finding(result):
    return result is not None and result["kind"] not in ("ok", "refused")


# -- minimising and blaming ----------------------------------------------------------------------
def _dead_code_removed(spec):
    spec = copy.deepcopy(spec)
    needed = set(spec.outputs)
    kept = []
    for node in reversed(spec.nodes):
        if not node.outputs or any(t in needed for t in node.outputs):  # no outputs: ASSIGN_VARIABLE's effect
            kept.append(node)
            needed.update(t for t in node.inputs if t >= 0)
    spec.nodes = kept[::-1]
    spec.inputs = [t for t in spec.inputs if t in needed]
    return spec


def _cut(spec, k):
    """Node k removed, its outputs made model inputs (None for a resource handle: no input is one)."""
    if any(spec.tensors[t].type_name for t in spec.nodes[k].outputs):
        return None
    spec = copy.deepcopy(spec)
    node = spec.nodes.pop(k)
    read = {t for n in spec.nodes for t in n.inputs}
    for t in node.outputs:
        if t in read or t in spec.outputs:
            spec.tensors[t].kind = "input"
            spec.inputs.append(t)
    spec.outputs = [t for t in spec.outputs if t not in spec.inputs] or spec.outputs
    return spec


def _bypass(spec, k):
    """Node k removed, its readers reading its first input of the same shape instead (or None)."""
    node = spec.nodes[k]
    if len(node.outputs) != 1:
        return None
    out = node.outputs[0]
    like = spec.tensors[out]
    same = [t for t in node.inputs if t >= 0 and spec.tensors[t].kind != "const" and spec.tensors[t].shape == like.shape
            and np.dtype(spec.tensors[t].dtype) == np.dtype(like.dtype) and spec.tensors[t].type_name == like.type_name]
    if not same:
        return None
    spec = copy.deepcopy(spec)
    spec.nodes.pop(k)
    for n in spec.nodes:
        n.inputs = [same[0] if t == out else t for t in n.inputs]
    spec.outputs = list(dict.fromkeys(same[0] if t == out else t for t in spec.outputs))
    spec.outputs = [t for t in spec.outputs if t not in spec.inputs]
    return spec if spec.outputs else None


def _valid(spec):
    return bool(spec.nodes) and bool(spec.outputs) and not set(spec.outputs) & set(spec.inputs)


def reproduces(spec, seed, case, path, finding, precision="fp32", rewrite_rules=True):
    """Whether `spec` still shows the same kind of finding on `path`."""
    if not _valid(spec):
        return False
    try:
        data, index = spec.build()
    except Exception:
        return False
    details = _input_details(data)
    if details is None:
        return False
    steps = case_inputs(spec, seed, case, details)
    want, _ = litert_default(data, steps, xnnpack=not spec.variables)
    if want is None or degenerate(want):
        return False
    try:
        got = run_path(path, data, steps, precision, rewrite_rules)
    except Exception as exc:
        return (finding["kind"] == "exception" and exception_name(exc) == finding.get("exception")
                and not is_refusal(path, exc, data, steps))
    if finding["kind"] == "exception":
        return False
    bounds, _ = case_bounds(spec, index, data, steps, want, precision)
    if bounds is None:
        return False
    spread, floor, quantum = bounds
    problem = judge(got, want, spread, TOLERANCES[precision], floor, quantum, len(spec.outputs))
    return problem is not None and problem["kind"] == finding["kind"]


def minimize(spec, seed, case, path, finding, precision="fp32", log=None):
    """A smaller Spec that still reproduces the finding (greedy: drop outputs, cut or bypass
    nodes, remove dead code), and the number of runs spent."""
    trials = 0

    def holds(candidate):
        nonlocal trials
        trials += 1
        return reproduces(candidate, seed, case, path, finding, precision)

    best = spec
    candidate = _dead_code_removed(best)
    if len(candidate.nodes) < len(best.nodes) and holds(candidate):
        best = candidate
    changed = True
    while changed and trials < MINIMIZE_TRIALS:
        changed = False
        if len(best.outputs) > 1:
            for t in list(best.outputs):
                candidate = copy.deepcopy(best)
                candidate.outputs = [o for o in best.outputs if o != t]
                candidate = _dead_code_removed(candidate)
                if holds(candidate):
                    best, changed = candidate, True
        for k in reversed(range(len(best.nodes))):
            if trials >= MINIMIZE_TRIALS or k >= len(best.nodes):
                continue
            for edit in (_bypass, _cut):
                candidate = edit(best, k)
                if candidate is None:
                    continue
                candidate = _dead_code_removed(candidate)
                if holds(candidate):
                    best, changed = candidate, True
                    break
    if log:
        log(f"  minimised {len(spec.nodes)} -> {len(best.nodes)} nodes in {trials} runs")
    return best, trials


def blame_rules(spec, seed, case, path, finding, precision="fp32"):
    """For a GPU path: {'rules_off': whether the finding persists with rewrite_rules=False,
    'rules': the rules whose ENABLED switch alone, set False, makes it go}."""
    from gles_delegate.gpu import transforms
    if path not in "cd":
        return {}
    persists = reproduces(spec, seed, case, path, finding, precision, rewrite_rules=False)
    result = {"persists_without_rules": persists, "rules": []}
    if persists:
        return result
    for name, apply in transforms.RULES:
        module = sys.modules[apply.__module__]
        had = "ENABLED" in vars(module)
        saved = getattr(module, "ENABLED", True)
        module.ENABLED = False
        try:
            if not reproduces(spec, seed, case, path, finding, precision):
                result["rules"].append(name)
        finally:
            if had:
                module.ENABLED = saved
            else:
                del module.ENABLED
    return result


def first_bad_node(spec, seed, case, path, precision="fp32"):
    """The first node (in order) of `spec` whose output our `path` (b or c) computes over
    tolerance of LiteRT's builtin (reference) kernels, every tensor kept: '#k OP: ...', or None.
    A hint only: it reads the GPU's intermediates as experimental_preserve_all_tensors captures
    them, which may differ from what the later dispatches read. At a half precision each
    intermediate is also allowed its half-storage bound (fuzz_half_bounds.tensor_bounds), so
    the node named is not merely the first whose result cancels."""
    if path not in "bc":
        return None
    data, index = spec.build()
    steps = case_inputs(spec, seed, case, _input_details(data))
    half = fuzz_half_bounds.tensor_bounds(data, steps, precision) if path == "c" else None
    module = common.litert()
    try:
        for resolver in ("BUILTIN_REF", "BUILTIN_WITHOUT_DEFAULT_DELEGATES"):  # the second where the first lacks an op
            try:
                theirs = common.native_call(lambda: common._allocated(module.Interpreter, {
                    "model_content": data, "experimental_preserve_all_tensors": True,
                    "experimental_op_resolver_type": getattr(module.OpResolverType, resolver)}))
                break
            except RuntimeError:
                if resolver != "BUILTIN_REF":
                    raise
        with GpuDelegate(gpu_options(precision)) as delegate:
            ours = Interpreter(model_content=data, experimental_preserve_all_tensors=True, cpu_backend="reference",
                               experimental_delegates=[delegate] if path == "c" else None)
            ours.allocate_tensors()
            for invoke, inputs in enumerate(steps):  # the first invoke where a node is off
                run_steps(theirs, [inputs])
                run_steps(ours, [inputs])
                if not isinstance(inputs, list):  # a reset or a resize: nothing computed yet
                    continue
                bad = _first_bad_tensor(spec, index, ours, theirs, precision, half[invoke] if half else None)
                if bad is not None:
                    return f"invoke {invoke}: {bad}" if len(steps) > 1 else bad
    except Exception as exc:  # a debugging aid only: say why it could not look
        return f"(could not compare intermediates: {type(exc).__name__}: {exc})"
    return None


def _first_bad_tensor(spec, index, ours, theirs, precision, half=None):
    """'#k OP: ...' of the first node whose output `ours` holds over tolerance of `theirs`, or None.
    half: {model tensor index: its half-storage bound} (fuzz_half_bounds.tensor_bounds), or None."""
    for k, node in enumerate(spec.nodes):
        for t in node.outputs:
            if spec.tensors[t].type_name:  # a resource handle: no value to compare
                continue
            try:
                a, b = ours.get_tensor(index[t]), theirs.get_tensor(index[t])
            except (ValueError, RuntimeError):
                continue
            bound = half.get(index[t], math.nan) if half else math.nan  # NaN: no half bound
            problem = judge([a], [b], [0.0], TOLERANCES[precision], None if math.isnan(bound) else [bound],
                            quantum=[float(spec.tensors[t].quant is not None)])
            if problem is not None:
                return f"#{k} {node.op}: {problem['message'].replace('output 0 ', '')}"
    return None


# -- the run -------------------------------------------------------------------------------------
def fuzz(seed, cases=None, minutes=None, paths=PATHS, min_nodes=3, max_nodes=25, precision="fp32",
         out_dir=None, minimize_findings=True, only_case=None, log=print, families=tuple(FAMILIES), settings=(),
         minimum_limits=False, workgroups="heuristic"):
    """Run the cases; returns the summary dict (what --json writes). `settings`: parsed --set
    values (common.tuning_setting), in force for the whole run (minimising included) and
    restored after it; `minimum_limits`: the GPU paths plan for OpenGL ES 3.1's minimum limits
    (context.ES31_MINIMUM_LIMITS), without its EXT_buffer_storage (I/O by copies), meanwhile;
    `workgroups` 'random': random_workgroups(seed)."""
    with _quiet(), contextlib.ExitStack() as restore:
        for setting in settings:
            restore.callback(common.apply_setting(setting))
        if minimum_limits:
            restore.enter_context(limited_to(ES31_MINIMUM_LIMITS, persistent_mapping=False))
        if workgroups == "random":
            restore.enter_context(random_workgroups(seed))
        options = reproduce_options(precision, families, min_nodes, max_nodes, settings, minimum_limits, workgroups)
        summary = _fuzz(seed, cases, minutes, paths, min_nodes, max_nodes, precision, out_dir, minimize_findings,
                        only_case, log, families, options)
        return {**summary, "settings": [setting[0] for setting in settings], "minimum_limits": minimum_limits,
                "workgroups": workgroups}


def reproduce_options(precision, families, min_nodes, max_nodes, settings, minimum_limits=False,
                      workgroups="heuristic"):
    """The options a finding's `reproduce` line needs besides --seed, --case and --paths: each
    one that changes which model a case is (--families, --min-nodes, --max-nodes) or how it
    runs (--precision, --set, --minimum-limits, --workgroups), where it is not the default."""
    options = [] if precision == "fp32" else [f"--precision {precision}"]
    options += ["--minimum-limits"] if minimum_limits else []
    options += [f"--workgroups {workgroups}"] if workgroups != "heuristic" else []
    if tuple(families) != tuple(FAMILIES):
        options.append(f"--families {','.join(families)}")
    defaults = build_parser().parse_args([])
    options += [f"--{name.replace('_', '-')} {value}" for name, value in
                (("min_nodes", min_nodes), ("max_nodes", max_nodes)) if value != getattr(defaults, name)]
    return options + [f"--set {shlex.quote(setting[0])}" for setting in settings]


def _fuzz(seed, cases, minutes, paths, min_nodes, max_nodes, precision, out_dir, minimize_findings, only_case,
          log, families, options):
    if cases is None and minutes is None and only_case is None:
        cases = 100
    start = time.time()
    deadline = start + minutes * 60 if minutes else None
    counts = collections.Counter()
    per_path = {p: collections.Counter() for p in paths if p != "a"}
    ops_generated, ops_gpu, ops_cpu, rules_applied = (collections.Counter() for _ in range(4))
    cpu_reasons, refusals, findings, compared_by_family = {}, collections.Counter(), [], collections.Counter()
    nodes_total = 0
    case = only_case if only_case is not None else 0
    while True:
        if only_case is not None and case > only_case:
            break
        if only_case is None and ((cases is not None and counts["cases"] >= cases)
                                  or (deadline is not None and time.time() >= deadline)):
            break
        spec = generate(seed, case, min_nodes, max_nodes, families)
        counts["cases"] += 1
        outcome = run_case(spec, seed, case, paths, precision)
        counts[outcome.status] += 1
        if outcome.status == "compared":
            compared_by_family[spec.family] += 1
            nodes_total += len(spec.nodes)
            ops_generated.update(spec.ops())
            for op, (n, gpu, cpu) in outcome.coverage.get("ops", {}).items():
                ops_gpu[op] += gpu
                ops_cpu[op] += cpu
            cpu_reasons.update(outcome.coverage.get("cpu_reasons", {}))
            rules_applied.update(outcome.coverage.get("rules", {}))
        elif outcome.status == "litert_refused":
            refusals[outcome.why[:160]] += 1
        minimized_in_case = {}  # kind -> the entry of path c: path d's finding of that kind is not minimised again
        for path, result in outcome.results.items():
            per_path[path][result["kind"]] += 1
            if result["kind"] == "refused":
                refusals[f"path {path}: {result['message'][:140]}"] += 1
            if is_finding(result):
                same = minimized_in_case.get(result["kind"]) if path == "d" else None
                entry = record_finding(spec, seed, case, path, result, precision, out_dir,
                                       minimize_findings and same is None, log, options)
                if same is not None:
                    entry["same_as"] = same["file"]
                    log(f"  as {same['file']} (path c): not minimised again")
                elif path == "c" and "minimized" in entry:
                    minimized_in_case[result["kind"]] = entry
                findings.append(entry)
        if counts["cases"] % 25 == 0:
            log(f"{counts['cases']} cases, {counts['compared']} compared, {time.time() - start:.0f} s, "
                f"{len(findings)} findings")
        case += 1
    return {
        "seed": seed, "paths": paths, "precision": precision, "rtol": TOLERANCES[precision],
        "seconds": round(time.time() - start, 1), "cases": counts["cases"], "compared": counts["compared"],
        "litert_refused": counts["litert_refused"], "degenerate": counts["degenerate"],
        "nodes_compared": nodes_total, "families": dict(sorted(compared_by_family.items())),
        "results": {p: dict(sorted(c.items())) for p, c in per_path.items()},
        "ops_generated": dict(sorted(ops_generated.items())),
        "ops_on_gpu": dict(sorted(ops_gpu.items())), "ops_on_cpu": dict(sorted(ops_cpu.items())),
        "cpu_reasons": dict(sorted(cpu_reasons.items())),
        "rules_applied": dict(sorted(rules_applied.items())),
        "refusals": dict(refusals.most_common(20)),
        "out": str(out_dir) if out_dir else None, "findings": findings,
    }


def record_finding(spec, seed, case, path, result, precision, out_dir, minimize_findings, log, options=()):
    name = f"{result['kind']}-s{seed}-c{case}-{path}"
    entry = {"seed": seed, "case": case, "family": spec.family, "path": path, "path_name": PATH_NAMES[path], **{
        k: v for k, v in result.items() if k != "traceback"},
        "nodes": len(spec.nodes), "ops": spec.ops(), "file": f"{name}.tflite",
        "reproduce": " ".join(["gles-fuzz-graphs", f"--seed {seed} --case {case} --paths a{path}", *options])}
    log(f"FINDING {name}: {PATH_NAMES[path]}: {result['message']}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.tflite").write_bytes(spec.build()[0])
    if minimize_findings:
        small, trials = minimize(spec, seed, case, path, result, precision, log)
        blame = blame_rules(small, seed, case, path, result, precision)
        entry["minimized"] = {"file": f"{name}-min.tflite", "nodes": len(small.nodes), "ops": small.ops(),
                              "runs": trials, "graph": small.text().splitlines(), **blame,
                              "first_bad_node": first_bad_node(small, seed, case, path, precision)}
        (out / f"{name}-min.tflite").write_bytes(small.build()[0])
        (out / f"{name}-min.txt").write_text(small.text() + "\n")
        log(f"  {len(small.nodes)} nodes: {' '.join(small.ops())}; rules off: "
            f"{'still wrong' if blame.get('persists_without_rules') else 'right'}; rules at fault: "
            f"{', '.join(blame.get('rules', [])) or '-'}; first bad node: {entry['minimized']['first_bad_node']}")
    if "traceback" in result:
        (out / f"{name}.txt").write_text(result["traceback"])
    (out / f"{name}.json").write_text(json.dumps(entry, default=common.json_default) + "\n")
    return entry


def print_summary(s, out=None):
    out = out or sys.stdout
    print(f"{s['cases']} cases in {s['seconds']} s, seed {s['seed']}, precision {s['precision']} (rtol "
          f"{s['rtol']:g}): {s['compared']} compared ({s['nodes_compared']} nodes), {s['litert_refused']} refused by "
          f"LiteRT, {s['degenerate']} degenerate", file=out)
    settings = s.get("settings", []) + ["OpenGL ES 3.1's minimum limits"] * bool(s.get("minimum_limits")) + \
        ["random workgroups"] * (s.get("workgroups") == "random")
    if settings:
        print("settings: " + ", ".join(settings), file=out)
    print("compared by family: " + ", ".join(f"{k} {v}" for k, v in s["families"].items()), file=out)
    for path, counts in s["results"].items():
        print(f"  path {path} ({PATH_NAMES[path]}): " + ", ".join(f"{k} {v}" for k, v in counts.items()), file=out)
    if s["ops_generated"]:
        print("ops (generated / on the GPU in path c / on the CPU): " + ", ".join(
            f"{op} {n}/{s['ops_on_gpu'].get(op, 0)}/{s['ops_on_cpu'].get(op, 0)}"
            for op, n in s["ops_generated"].items()), file=out)
    if s["rules_applied"]:
        print("rewrite rules applied: " + ", ".join(f"{r} {n}" for r, n in s["rules_applied"].items()), file=out)
    if s["refusals"]:
        print("refusals (LiteRT's, and ours of models LiteRT runs): " + "; ".join(
            f"{why} x{n}" for why, n in s["refusals"].items()), file=out)
    print(f"findings: {len(s['findings'])}" + (f" (in {s['out']})" if s["findings"] else ""), file=out)
    for f in s["findings"]:
        line = f"  {f['file']}: {f['path_name']}: {f['message']}"
        if "minimized" in f:
            m = f["minimized"]
            blamed = ", ".join(m.get("rules", [])) or ("none: wrong without rules" if m.get("persists_without_rules")
                                                        else "-")
            line += f"; minimised to {m['nodes']} nodes ({' '.join(m['ops'])}), rules at fault: {blamed}"
        elif "same_as" in f:
            line += f"; as {f['same_as']}"
        print(line, file=out)


# -- command line --------------------------------------------------------------------------------
def path_letters(text):
    """argparse type of --paths: letters of a, b, c, d, e (a, the reference, is always run)."""
    letters = "".join(sorted(set(text.lower())))
    if not letters or set(letters) - set(PATHS):
        raise argparse.ArgumentTypeError(f"expected letters of {PATHS!r}, got {text!r}")
    return "a" + letters.replace("a", "")


def family_names(text):
    """argparse type of --families: names of FAMILIES, comma-separated."""
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    if not names or set(names) - set(FAMILIES):
        raise argparse.ArgumentTypeError(f"expected names of {', '.join(FAMILIES)}, got {text!r}")
    return names


def build_parser():
    parser = common.tool_parser("gles-fuzz-graphs", __doc__)
    parser.add_argument("--cases", type=common.positive_int, default=None,
                        help="number of generated models (default: 100 unless --minutes is given)")
    parser.add_argument("--minutes", type=common.positive_float, default=None, help="stop after this long")
    parser.add_argument("--seed", type=common.non_negative_int, default=0,
                        help="seed of the generator: the same seed writes the same models and inputs (default 0)")
    parser.add_argument("--case", type=common.non_negative_int, default=None,
                        help="run only this case of --seed (what a finding's JSON line says to reproduce it)")
    parser.add_argument("--paths", type=path_letters, default=PATHS,
                        help="which runs to make: a LiteRT (the reference, always run), b our reference kernels, "
                             "c our Interpreter + GpuDelegate, d LiteRT + GpuDelegate (default abcd)")
    parser.add_argument("--min-nodes", type=common.positive_int, default=3, help="fewest nodes per model (default 3)")
    parser.add_argument("--max-nodes", type=common.positive_int, default=25, help="most nodes per model (default 25)")
    parser.add_argument("--precision", choices=("fp32", "fp16", "fp16_fp32acc"), default="fp32",
                        help="GPU precision: fp32 (float storage and math, rtol 1e-4), fp16 (half storage and math, "
                             "rtol 1e-2) or fp16_fp32acc (half storage, float accumulation, rtol 1e-2); default fp32")
    parser.add_argument("--families", type=family_names, default=tuple(FAMILIES),
                        help=f"comma-separated generator families to draw from (default all: {','.join(FAMILIES)})")
    parser.add_argument("--no-minimize", action="store_true", help="write findings as found, without minimising them")
    parser.add_argument("--out", type=common.output_dir, default=None,
                        help="where findings are written (default: a new temporary directory)")
    parser.add_argument("--json", type=common.output_file, help="write the summary as JSON to this file")
    parser.add_argument("--set", action="append", type=common.tuning_setting, default=[], metavar="MODULE.NAME=VALUE",
                        help="run every case with this constant of the package changed (repeatable), to reach "
                             "what the small models would not: gpu.runtime.DIRECT_IO_MAX_BYTES=-1 and "
                             "gpu.io_loads.MIN_IO_BYTES=-1 put every partition's I/O in device memory")
    parser.add_argument("--minimum-limits", action="store_true",
                        help="plan the GPU paths for OpenGL ES 3.1's minimum limits (128 invocations per workgroup, "
                             "16 KiB of shared memory) and without EXT_buffer_storage (I/O by copies), as a small "
                             "board's GPU may be, not this device's")
    parser.add_argument("--workgroups", choices=("heuristic", "random"), default="heuristic",
                        help="random: the GPU paths tune their workgroups and the tuner picks one of each dispatch's "
                             "candidates at random (seeded by --seed and the partition), odd shapes among them; "
                             "default the heuristic's")
    return parser


def main(argv=None):
    return common.run_main(build_parser(), run, argv)


def run(args):
    if common.litert() is None:
        raise common.ToolError(common.LITERT_MISSING)
    if args.min_nodes > args.max_nodes:
        raise argparse.ArgumentTypeError(f"--min-nodes {args.min_nodes} exceeds --max-nodes {args.max_nodes}")
    cases = args.cases if args.cases is not None or args.minutes else 100
    out = args.out or tempfile.mkdtemp(prefix="gles-fuzz-graphs-")
    summary = fuzz(args.seed, cases, args.minutes, args.paths, args.min_nodes, args.max_nodes, args.precision, out,
                   not args.no_minimize, args.case, log=lambda line: print(line, file=sys.stderr, flush=True),
                   families=args.families, settings=args.set, minimum_limits=args.minimum_limits,
                   workgroups=args.workgroups)
    print_summary(summary)
    if args.json:
        common.write_atomic(args.json, json.dumps(summary, indent=1, default=common.json_default))
    return 1 if summary["findings"] else 0


if __name__ == "__main__":
    sys.exit(main())
