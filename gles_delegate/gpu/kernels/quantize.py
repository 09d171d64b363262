"""QUANTIZE, DEQUANTIZE and QUANTIZE_AND_DEQUANTIZE of the float view of quantized models (quant.py).

All three run kernels_glsl/quantize.glsl, one template specialized by an op code and by
per-tensor or per-channel parameters.

On the GPU every tensor is float32. gles_delegate/quant.py builds the float view of a quantized
partition: int8 / uint8 tensors become float32 tensors that keep their `.quantization`, inside
the partition they hold real values, and the partition's quantized inputs and outputs hold their
integer values as floats. SUPPORT is the entry point for that view only: it takes

  QUANTIZE                 float32 real x -> float32 output holding clamp(round(x / s) + zp,
                           qmin, qmax); the output carries the quantization, the node options
                           {"qmin": int, "qmax": int} the integer range (-128 / 127 for int8);
  DEQUANTIZE               float32 input holding integers (it carries the quantization) ->
                           float32 (q - zp) * s;
  QUANTIZE_AND_DEQUANTIZE  float32 x -> float32 x snapped to the output's grid (ops/quantize.py
                           has its reference; options as for QUANTIZE); with
                           options[REQUANTIZE_FROM] (a model's integer -> integer QUANTIZE) x's
                           integer on its source grid looked up in TFLite's Requantize table.

A model's own QUANTIZE / DEQUANTIZE node never reaches these checks: its int8 / uint8 tensors
are refused first by the registry (gpu/kernels/__init__.py), which runs float32 tensors only.

Parameters: per tensor, or per channel along the last axis (the PHWC4 channels), packed as
constant rows (see the template). Integer values must lie in [-2048, 2048]: half storage holds
integers exactly up to 2048 (8-bit types fit; int16 does not, so it is refused). With half
storage a real value is rounded to half before it is quantized, so a value within 2^-11 of a
rounding boundary can land one step off; the arithmetic itself is highp in every mode.
"""
import numpy as np

from ...ops.checks import arity_reason
from ...ops.quantize import REQUANTIZE_FROM
from ...registry import UNARY, OpFacts
from ..phwc4 import bhwc
from .base import Dispatch

OP_CODES = {"QUANTIZE": 0, "DEQUANTIZE": 1, "QUANTIZE_AND_DEQUANTIZE": 2}
REQUANTIZE = 3  # a QUANTIZE_AND_DEQUANTIZE with options[REQUANTIZE_FROM]: TFLite's Requantize, looked up
HALF_EXACT = 2048  # the largest integer range half floats hold exactly


def quantized_tensor(node):
    """The tensor whose quantization the node applies: DEQUANTIZE's input, else the output."""
    return node.inputs[0] if node.op == "DEQUANTIZE" else node.outputs[0]


def integer_range(node):
    """(qmin, qmax) of a QUANTIZE / QUANTIZE_AND_DEQUANTIZE node (its options)."""
    return node.options.get("qmin"), node.options.get("qmax")


def _quantization_reason(tensor):
    q = tensor.quantization
    if q is None or q.scales.size == 0:
        return f"tensor {tensor.index} has no quantization (the float view keeps it on quantized tensors)"
    scales = np.asarray(q.scales, np.float32)
    if not np.all(np.isfinite(scales)) or not np.all(scales > 0):
        return f"tensor {tensor.index} has a non-positive or non-finite scale"
    if np.any(np.abs(q.zero_points) > HALF_EXACT):
        return f"tensor {tensor.index} has a zero point beyond +-{HALF_EXACT}"
    if scales.size > 1:
        rank = len(tensor.shape)
        if rank == 0 or q.quantized_dimension != rank - 1 or scales.size != tensor.shape[-1]:
            return (f"tensor {tensor.index} is quantized along dimension {q.quantized_dimension} with "
                    f"{scales.size} scales; the GPU takes per-channel parameters along the last axis only")
    return None


def supports(node):
    """Why the GPU cannot run this float-view node, or None (see the module docstring)."""
    reason = arity_reason(node, 1)
    if reason:
        return reason
    x, out = node.inputs[0], node.outputs[0]
    if x.dtype != np.float32 or out.dtype != np.float32:
        return f"{node.op} on the GPU runs the float view (float32 tensors), got {x.dtype} -> {out.dtype}"
    if tuple(x.shape) != tuple(out.shape):
        return f"output shape {list(out.shape)} differs from input {list(x.shape)}"
    reason = _quantization_reason(quantized_tensor(node))
    if reason or node.op == "DEQUANTIZE":
        return reason
    qmin, qmax = integer_range(node)
    if not (isinstance(qmin, (int, np.integer)) and isinstance(qmax, (int, np.integer)) and qmin <= qmax):
        return (f"{node.op} needs integer options qmin <= qmax (gles_delegate/quant.py sets them), "
                f"got {qmin!r}, {qmax!r}")
    if max(abs(int(qmin)), abs(int(qmax))) > HALF_EXACT:
        return f"integer range [{qmin}, {qmax}] is beyond +-{HALF_EXACT} (not exact in half storage)"
    return None


def pack_channel_params(scales, zero_points, channels):
    """Per-channel scales and zero points -> vec4 rows [slices][4][4]: for each slice of 4
    channels, the scales' float32 bits 0-10, 11-21 and 22-31 as integers (each below 2048, so
    exact in half storage), then the zero points. Padded channels get scale 1, zero point 0."""
    slices = -(-channels // 4)
    scale = np.ones(slices * 4, np.float32)
    scale[:channels] = np.asarray(scales, np.float32)
    zero_point = np.zeros(slices * 4, np.float32)
    zero_point[:channels] = np.asarray(zero_points, np.float32)
    bits = scale.view(np.uint32)
    pieces = [(bits >> shift) & mask for shift, mask in ((0, 0x7FF), (11, 0x7FF), (22, 0x3FF))]
    rows = np.stack([p.astype(np.float32) for p in pieces] + [zero_point]).reshape(4, slices, 4)
    return rows.transpose(1, 0, 2).reshape(-1, 4)


def build(node, env):
    """One quantize.glsl Dispatch over the output, one vec4 per invocation (see the module docstring)."""
    x, out = node.inputs[0], node.outputs[0]
    s4 = bhwc(out.shape)
    q = quantized_tensor(node).quantization
    per_channel = q.scales.size > 1
    params = {"size": s4.as_ivec4(), "channels": s4.c, "in_offset": env.arena(x), "out_offset": env.arena(out)}
    if node.op != "DEQUANTIZE":
        qmin, qmax = integer_range(node)
        params.update(qmin=float(qmin), qmax=float(qmax))
    if per_channel:
        params["quant_offset"] = env.constant(pack_channel_params(q.scales, q.zero_points, s4.c))
    else:
        params.update(q_scale=float(np.float32(q.scales[0])), q_zero_point=float(q.zero_points[0]))
    code = OP_CODES[node.op]
    if REQUANTIZE_FROM in node.options:
        code = REQUANTIZE
        params.update(_table_params(node.options[REQUANTIZE_FROM], env))
    defines = {"OP": code, "PER_CHANNEL": int(per_channel)}
    # Elementwise at the very index it writes: the output may take the input's storage.
    return [Dispatch("quantize", (s4.w, s4.h, s4.slices * s4.b), defines, params, reads=(x,), writes=(out,),
                     inplace=(x,))]


def _table_params(source, env):
    """Params of a requantize: the source grid and its table (ops/quantize.py REQUANTIZE_FROM) as
    constant rows of four integers (exact in half storage: an 8-bit type's)."""
    scale, zero_point, qmin, table = source
    rows = np.zeros(-(-len(table) // 4) * 4, np.float32)
    rows[:len(table)] = table
    return {"source_scale": float(scale), "source_zero_point": float(zero_point), "source_qmin": float(qmin),
            "table_last": len(table) - 1, "table_offset": env.constant(rows.reshape(-1, 4))}


SUPPORT = {op: supports for op in OP_CODES}
BUILD = {op: build for op in OP_CODES}
FACTS = {op: OpFacts(arity=UNARY) for op in OP_CODES}
HIGH_RANK = {op: None for op in OP_CODES}  # elementwise; per-channel parameters run along the channels
