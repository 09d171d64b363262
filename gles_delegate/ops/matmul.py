"""BATCH_MATMUL: lhs [..., M, K] x rhs [..., K, N] -> [..., M, N] over broadcast batch dimensions
(ranks 2 to 5, TFLite's limit), either operand transposed first (adj_x / adj_y), both operands
at run time or either one constant.

Types as LiteRT's builtin kernel runs them (tensorflow/lite/kernels/batch_matmul.cc, whose every
path is reference_ops::BatchMatMul):
  float32 x float32 -> float32: float32 sums;
  int8 x int8 -> int8 and int16 x int16 -> int16: per-tensor quantized (int16 with zero points 0),
    exact integer sums of the centred operands, then MultiplyByQuantizedMultiplier by
    lhs_scale * rhs_scale / output_scale (int8: the int32 form, int16: the int64 form) plus the
    output's zero point, saturated (the op has no fused activation).
  int8 x int8 -> int32: the raw integer products summed, zero points and scales ignored
    (EvalInt8Int32).
The hybrid form (float32 lhs, int8 rhs: the lhs quantized per row at run time, also with
asymmetric_quantize_inputs) is refused.
"""
import numpy as np

from .checks import Unimplemented, quantization_reason, with_arity
from .common import (is_quantized, multiply_by_quantized_multiplier, multiply_by_quantized_multiplier_64,
                     quant_params, quantized_multiplier, zero_point_of)

MIN_RANK, MAX_RANK = 2, 5
_FLOAT = np.dtype(np.float32)
_QUANTIZED = (np.dtype(np.int8), np.dtype(np.int16))


def adjoints(node):
    """(adj_x, adj_y) of a BATCH_MATMUL node: whether lhs / rhs are transposed before the product."""
    return bool(node.options.get("adj_x", False)), bool(node.options.get("adj_y", False))


def _centred(tensor, values):
    """Float values unchanged; quantized integers minus their zero point, as exact float64 (a sum
    of fewer than 2^22 int16 x int16 products stays an exact float64 integer)."""
    if not is_quantized(tensor):
        return values
    return values.astype(np.float64) - quant_params(tensor, values.ndim)[1]


def _matrices(node, lhs, rhs):
    """The operands as [..., M, K] and [..., K, N], transposed as adj_x / adj_y say."""
    adj_x, adj_y = adjoints(node)
    return (np.swapaxes(lhs, -1, -2) if adj_x else lhs), (np.swapaxes(rhs, -1, -2) if adj_y else rhs)


def batch_matmul(node, inputs):
    """BATCH_MATMUL: lhs [..., M, K] (adj_x: [..., K, M]), rhs [..., K, N] (adj_y: [..., N, K])
    -> [broadcast batch dims..., M, N]."""
    lhs_t, rhs_t = node.inputs
    output_t = node.outputs[0]
    if output_t.dtype == np.int32:
        # Raw products in TFLite's int32 accumulator: int64 sums cast to int32 wrap as it does.
        return [np.matmul(*_matrices(node, inputs[0].astype(np.int64), inputs[1].astype(np.int64))).astype(np.int32)]
    lhs, rhs = _matrices(node, _centred(lhs_t, inputs[0]), _centred(rhs_t, inputs[1]))
    with np.errstate(all="ignore"):  # inf * 0, inf - inf, overflow: IEEE results, as in C++
        acc = np.matmul(lhs, rhs)
    if not is_quantized(output_t):
        return [acc.astype(np.float32, copy=False)]
    # GetQuantizedConvolutionMultipler: the scales' product in float32, the division in double.
    product = np.float64(np.float32(lhs_t.quantization.scales[0]) * np.float32(rhs_t.quantization.scales[0]))
    multiplier, shift = quantized_multiplier(product / np.float64(np.float32(output_t.quantization.scales[0])))
    rescale = multiply_by_quantized_multiplier if output_t.dtype == np.int8 else multiply_by_quantized_multiplier_64
    out = rescale(acc.astype(np.int64), multiplier, shift) + zero_point_of(output_t)
    info = np.iinfo(output_t.dtype)
    return [np.clip(out, info.min, info.max).astype(output_t.dtype)]


KERNELS = {"BATCH_MATMUL": batch_matmul}


# -- support ------------------------------------------------------------------------------
def _check_types(node):
    lhs_t, rhs_t = node.inputs
    out_t = node.outputs[0]
    dtypes = (lhs_t.dtype, rhs_t.dtype, out_t.dtype)
    if lhs_t.dtype == _FLOAT and rhs_t.dtype == np.int8:
        return Unimplemented("hybrid BATCH_MATMUL (float32 lhs, int8 rhs) is not supported")
    if dtypes == (_FLOAT,) * 3 or dtypes == (np.dtype(np.int8),) * 2 + (np.dtype(np.int32),):
        return None
    if lhs_t.dtype not in _QUANTIZED or dtypes != (lhs_t.dtype,) * 3:
        return Unimplemented(f"lhs {lhs_t.dtype}, rhs {rhs_t.dtype}, output {out_t.dtype} (supported: all "
                             "float32, all int8, all int16, int8 x int8 -> int32)")
    reason = quantization_reason(node, (lhs_t, rhs_t, out_t))
    if reason is None and lhs_t.dtype == np.int16 and any(zero_point_of(t) != 0 for t in (lhs_t, rhs_t, out_t)):
        reason = "int16 BATCH_MATMUL needs zero points of 0 (as TFLite)"
    return reason


def _check_shapes(node):
    lhs_t, rhs_t = node.inputs
    for role, tensor in (("lhs", lhs_t), ("rhs", rhs_t)):
        if not MIN_RANK <= len(tensor.shape) <= MAX_RANK:
            return f"{role} has rank {len(tensor.shape)}, BATCH_MATMUL takes ranks {MIN_RANK} to {MAX_RANK}"
    try:
        _output_shape(node, [tuple(lhs_t.shape), tuple(rhs_t.shape)], None)
    except ValueError as exc:
        return str(exc)
    return None


def support_batch_matmul(node):
    """Why the reference cannot run this BATCH_MATMUL node, or None."""
    if node.options.get("asymmetric_quantize_inputs", False) and node.inputs[0].dtype == _FLOAT:
        return Unimplemented("asymmetric_quantize_inputs (hybrid BATCH_MATMUL) is not supported")
    return _check_types(node) or _check_shapes(node)


SUPPORT = {"BATCH_MATMUL": with_arity(2, 0, support_batch_matmul)}


# -- output shape -------------------------------------------------------------------------
def _output_shape(node, shapes, values):
    """[broadcast batch dims..., M, N]; ValueError when the batch dimensions do not broadcast
    or the contracted dimensions differ."""
    adj_x, adj_y = adjoints(node)
    lhs, rhs = shapes
    (m, k_lhs), (k_rhs, n) = (lhs[-1:-3:-1] if adj_x else lhs[-2:]), (rhs[-1:-3:-1] if adj_y else rhs[-2:])
    if k_lhs != k_rhs:
        raise ValueError(f"lhs {list(lhs)} (adj_x={adj_x}) and rhs {list(rhs)} (adj_y={adj_y}) contract "
                         f"{k_lhs} with {k_rhs} values")
    rank = max(len(lhs), len(rhs))
    batch_lhs, batch_rhs = (1,) * (rank - len(lhs)) + lhs[:-2], (1,) * (rank - len(rhs)) + rhs[:-2]
    if any(a != b and 1 not in (a, b) for a, b in zip(batch_lhs, batch_rhs)):
        raise ValueError(f"batch dimensions {list(lhs[:-2])} and {list(rhs[:-2])} do not broadcast")
    return [tuple(b if a == 1 else a for a, b in zip(batch_lhs, batch_rhs)) + (m, n)]


OUTPUT_SHAPES = {"BATCH_MATMUL": _output_shape}
