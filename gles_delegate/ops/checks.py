"""What the reference kernels' SUPPORT checks share: errors that name the node, arity, index
inputs, quantization parameters, window options and fused activations.

A check returns None when the node is fine, else a string saying why not (see ops/__init__.py).
"""
import contextlib
import math
import threading

import numpy as np

from ..errors import ModelError
from .common import (PADDING_SAME, PADDING_VALID, activation_range, dilations_of, fused_activation,
                     spatial_geometry, strides_of)

INDEX_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))
# A window (kernel extent with dilation) may exceed its input, as TFLite allows with SAME
# padding, but by no more than this: past it the padded input a kernel builds is mostly padding.
MAX_WINDOW_OVERHANG = 64
_inference = threading.local()


def node_error(node, message):
    """A ModelError that names the operator (`#<index> (<OP>)`)."""
    return ModelError(f"operator {node.label}: {message}")


def normalized_axis(node, axis, rank, what="axis"):
    """A possibly negative axis as an index in [0, rank); a ModelError naming the node if it is
    out of range."""
    axis = int(axis)
    if not -rank <= axis < rank:
        raise node_error(node, f"{what} {axis} is out of range for rank {rank}")
    return axis % rank


# -- arity and types ----------------------------------------------------------------------
def arity_reason(node, n_inputs, n_outputs=1, optional=()):
    """Why the node's input/output counts or tensors do not fit, or None. `n_inputs` is an int or
    a tuple of accepted counts, `n_outputs` an int or None (any count); every input but those in
    `optional` must be present, and every tensor of a type numpy can hold."""
    accepted = n_inputs if isinstance(n_inputs, tuple) else (n_inputs,)
    if len(node.inputs) not in accepted:
        return Malformed(f"takes {' or '.join(map(str, accepted))} inputs, got {len(node.inputs)}")
    if n_outputs is not None and len(node.outputs) != n_outputs:
        return Malformed(f"takes {n_outputs} outputs, got {len(node.outputs)}")
    omitted = next((k for k, t in enumerate(node.inputs) if t is None and k not in optional), None)
    if omitted is not None or None in node.outputs:
        where = f"input {omitted}" if omitted is not None else f"output {node.outputs.index(None)}"
        return Malformed(f"has a missing tensor: {where} is omitted, which {node.op} requires")
    required = [t for k, t in enumerate(node.inputs) if k not in optional] + list(node.outputs)
    unheld = next((t for t in required if t.dtype is None), None)
    if unheld is not None:
        return f"tensor {unheld.index} is of type {unheld.type_name or 'unknown'}, which numpy cannot hold"
    return None


def with_arity(required, optional, check):
    """A SUPPORT function: `required` inputs (none omitted), up to `optional` more (each of which
    may be omitted) and one output, as arity_reason checks them; then `check(node)`."""
    counts = tuple(range(required, required + optional + 1))
    optional_indices = tuple(range(required, required + optional))

    def support(node):
        return arity_reason(node, counts, 1, optional_indices) or check(node)
    return support


def float32_reason(node):
    """Why a float32-only kernel cannot take the node's tensors, or None (omitted inputs pass)."""
    for tensor in [*node.inputs, *node.outputs]:
        if tensor is not None and tensor.dtype != np.float32:
            return Unimplemented(f"only float32 is supported, tensor {tensor.index} ({tensor.name!r}) is "
                                 f"{tensor.dtype}")
    return None


class Unimplemented(str):
    """A reason the reference refuses a node for: a variant it has no kernel for, which TFLite
    may well define: a type combination (int16 activations, a hybrid TRANSPOSE_CONV or
    BATCH_MATMUL, a CAST or QUANTIZE between types it lacks) or a feature of a well-formed node
    (broadcasting past rank 4, per-channel quantization of an op it runs per tensor). Under
    cpu_backend 'auto' or 'fallback' such a node runs on LiteRT's kernels
    (cpu_litert.CpuBackend.on_litert), whose Prepare checks the types and options of what it
    runs. Any other reason (a shape, a count, an option out of range) stays a ModelError there:
    it may mean a malformed node, which LiteRT's kernels are not guaranteed to survive."""


class Malformed(str):
    """A reason the reference refuses a node for that makes it no well-formed TFLite node: an
    input or output count its op does not take, an input it requires omitted (-1), malformed
    sparsity parameters. Every cpu_backend refuses such a node with a ModelError at
    allocate_tensors, 'litert' included (cpu_litert.CpuBackend.check): LiteRT's kernels index
    their inputs without checking them, and such nodes crashed its process (gles-fuzz: SIGSEGV,
    std::bad_alloc)."""


def dtype_reason(node, tensor, dtypes, what):
    """Why `tensor` (the op's `what`) has a dtype outside `dtypes` (Unimplemented), or None."""
    if tensor.dtype not in dtypes:
        return Unimplemented(f"{node.op} {what} {tensor.dtype} is not supported (supported: "
                             f"{sorted(d.name for d in dtypes)})")
    return None


def index_input_reason(node, k, what, int32_only=False):
    """Why input k (an index/shape tensor) is unusable, or None. `int32_only` for the inputs
    TFLite reads as int32 whatever their type (an int64 vector would be misread)."""
    tensor = node.inputs[k] if k < len(node.inputs) else None
    accepted = INDEX_DTYPES[:1] if int32_only else INDEX_DTYPES
    if tensor is None or tensor.dtype not in accepted:
        return f"{what} must be an {' or '.join(map(str, accepted))} tensor"
    return None


def index_values(node, values, what, count=None):
    """A shape-defining or index input as a flat int64 array, checked to be int32 or int64 and to
    hold `count` values (any count when None); a ModelError naming the node otherwise."""
    values = np.asarray(values)
    if values.dtype not in INDEX_DTYPES:
        raise node_error(node, f"{what} must be int32 or int64, got {values.dtype}")
    flat = values.reshape(-1).astype(np.int64)
    if count is not None and flat.size != count:
        raise node_error(node, f"{what} holds {flat.size} values, expected {count}")
    return flat


def quantization_reason(node, tensors, per_channel=False):
    """None when every tensor has quantization parameters with positive scales (a single scale
    unless `per_channel`), else why not."""
    for t in tensors:
        q = t.quantization
        if q is None:
            return f"{node.op} on {t.dtype} needs quantization parameters on tensor {t.index}"
        if q.scales.size != 1 and not per_channel:
            return Unimplemented(f"{node.op} supports only per-tensor quantization (tensor {t.index} is per-channel)")
        if not np.all(q.scales > 0):
            return f"{node.op}: tensor {t.index} has a non-positive scale"
    return None


# -- windows and fused activations --------------------------------------------------------
def check_window_options(node, with_dilation):
    """Why a windowed op's padding / strides / dilations / fused activation are unsupported, or None."""
    if node.options.get("padding") not in (PADDING_SAME, PADDING_VALID):
        return f"padding {node.options.get('padding')} is not SAME or VALID"
    if min(strides_of(node)) < 1:
        return f"strides {list(strides_of(node))} must be >= 1"
    if with_dilation and min(dilations_of(node)) < 1:
        return f"dilations {list(dilations_of(node))} must be >= 1"
    return check_activation(node)


def check_activation(node):
    """Why a node's fused activation is unsupported, or None. TFLite's convolution and pooling
    kernels only clamp: they silently ignore a fused TANH or SIGN_BIT (where TFLite's GPU delegate
    applies it), so we refuse those rather than pick one of the two answers."""
    if activation_range(fused_activation(node)) is None:
        return f"fused activation {fused_activation(node)} is not a clamp (NONE, RELU, RELU_N1_TO_1, RELU6)"
    return None


def check_output_size(node, in_hw, kernel_hw, strides, dilations):
    """Why a windowed op would have an empty output (a kernel larger than a VALID input) or a
    window so much larger than its input (2 x input + MAX_WINDOW_OVERHANG) that the padded input
    would be mostly padding (a hostile dilation or filter size), or None."""
    for size, k, d in zip(in_hw, kernel_hw, dilations):
        extent = (k - 1) * d + 1
        if extent > 2 * size + MAX_WINDOW_OVERHANG:
            return (f"window extent {extent} (kernel {k}, dilation {d}) is far larger than the input "
                    f"extent {size}")
    oh, ow, _, _ = spatial_geometry(in_hw, kernel_hw, strides, dilations, node.options["padding"])
    return None if min(oh, ow) >= 1 else f"output size {oh}x{ow}: the window does not fit the input"


# -- output shapes --------------------------------------------------------------------------
@contextlib.contextmanager
def inferring_shapes(growth):
    """Within this block the model's declared shapes are being recomputed (after a resize), so
    check_output_elements cannot compare against them: it caps every output at `growth` times
    the elements the model declares for it (plus 1 Mi elements) instead."""
    previous = getattr(_inference, "growth", None)
    _inference.growth = growth
    try:
        yield
    finally:
        _inference.growth = previous


def check_output_elements(node, shapes, input_elements=0, dynamic=False):
    """Before a kernel allocates its outputs: a ModelError naming the node when an output of
    `shapes` (what the kernel is about to compute) holds more elements than the model declares
    for it, so that a hostile size, padding, multiple or stride fails here instead of allocating
    gigabytes. (A different shape with as many elements is the caller's to report.) An output
    declared as a scalar is taken as not declared (writers use [] for "unknown"): it may hold up
    to 16 x `input_elements` (the node's inputs together) + 16 Mi elements; so may every output
    when `dynamic` (dynamic tensors, whose shapes the invoke decides)."""
    growth = getattr(_inference, "growth", None)
    for k, (tensor, shape) in enumerate(zip(node.outputs, shapes)):
        if tensor is None or shape is None:
            continue
        computed = math.prod(map(int, shape))
        declared = tensor.size
        if growth is None and (dynamic or len(tensor.shape) == 0):
            if computed > 16 * input_elements + (1 << 24):
                raise node_error(node, f"output {k} (tensor {tensor.index}, declared without a shape) would "
                                       f"have shape {list(shape)}, far larger than the node's inputs")
        elif growth is None and computed > declared:
            raise node_error(node, f"output {k} (tensor {tensor.index}) would have shape {list(shape)}, the "
                                   f"model declares {list(tensor.shape)}")
        elif growth is not None and computed > declared * growth + 16 * input_elements + (1 << 20):
            raise node_error(node, f"output {k} (tensor {tensor.index}) would have shape {list(shape)}: far "
                                   f"larger than the model declares ({list(tensor.shape)}) for the resized inputs")


def shapes_of(items):
    """The shapes of tensors or arrays, None for an omitted input."""
    return [None if item is None else item.shape for item in items]


def raise_problem(node, problem):
    """A ModelError naming the node when `problem` (a reason string) is not None: kernels that
    re-check the arrays they get (a resize reruns them before SUPPORT sees the shapes)."""
    if problem is not None:
        raise node_error(node, problem)
