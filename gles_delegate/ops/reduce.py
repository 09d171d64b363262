"""Reductions over the axes in a constant (or run-time) int32 input: MEAN, SUM, REDUCE_MAX,
REDUCE_MIN, REDUCE_PROD, and over bool: REDUCE_ANY, REDUCE_ALL, with keep_dims.

Floats accumulate in float32 as TFLite does (numpy's pairwise sum stays closer to the exact value
than TFLite's running sum, so the two agree within the parity tolerance). An int32 / int64 MEAN
truncates toward zero, as C++'s integer division. Quantized MEAN
reproduces TFLite's integer requantization, including the different formula LiteRT's optimized
kernel uses for the common 4-D mean over height and width.
"""
import numpy as np

from .checks import Unimplemented, arity_reason, index_input_reason, normalized_axis
from .common import (multiply_by_quantized_multiplier, quantized_multiplier, round_half_away, same_quantization,
                     saturate, scale_of, zero_point_of)

_FLOAT = np.dtype(np.float32)
_BOOL = np.dtype(np.bool_)
_QUANTIZED = (np.dtype(np.int8), np.dtype(np.uint8))
_INTEGERS = (np.dtype(np.int32), np.dtype(np.int64))


def _axes(node, x, axis_values):
    """Unique axes in [0, rank) from the axis input (negative values count from the end)."""
    axes = [normalized_axis(node, axis, x.ndim) for axis in np.asarray(axis_values).reshape(-1).tolist()]
    return list(dict.fromkeys(axes))


def _reduction(node, inputs):
    """(x, axes, keep_dims) of a reduction node."""
    x = inputs[0]
    return x, (_axes(node, x, inputs[1]) if x.ndim else []), bool(node.options.get("keep_dims", False))


def _reducer(reduce, initial=None):
    """A kernel applying numpy's `reduce` over the node's axes; `initial(dtype)` is the value
    TFLite's kernel leaves in outputs that reduce over nothing (an empty input)."""
    def kernel(node, inputs):
        x, axes, keep_dims = _reduction(node, inputs)
        extra = {} if initial is None else {"initial": initial(x.dtype)}
        return [np.asarray(reduce(x, axis=tuple(axes), keepdims=keep_dims, **extra)).astype(x.dtype)]
    return kernel


def _scanned_extreme(reduce, start):
    """REDUCE_MAX (reduce np.max, start _lowest) or REDUCE_MIN as LiteRT's builtin kernel runs
    them: acc = start, then acc = x unless x < acc (x > acc for MIN) for every element in
    row-major order. A comparison with NaN is false, so a NaN becomes acc and the next element
    replaces it: with NaN in a run, the result is the extreme of the elements after its last
    NaN, NaN when a NaN comes last (LiteRT's reference kernel, which skips NaN, differs).
    Without NaN it is numpy's reduce with `initial`."""
    plain = _reducer(reduce, start)

    def kernel(node, inputs):
        x, axes, keep_dims = _reduction(node, inputs)
        if x.dtype.kind != "f" or not axes or x.size == 0 or not np.isnan(x).any():
            return plain(node, inputs)
        kept = [d for a, d in enumerate(x.shape) if a not in axes]
        runs = np.moveaxis(x, sorted(axes), range(-len(axes), 0)).reshape(kept + [-1])
        nan = np.isnan(runs)
        length = runs.shape[-1]
        last_nan = np.where(nan.any(-1), length - 1 - np.argmax(nan[..., ::-1], axis=-1), -1)
        after = np.arange(length) > last_nan[..., None]
        beyond = np.float32(-np.inf if reduce is np.max else np.inf)  # no element after: NaN below
        result = reduce(np.where(after, runs, beyond), axis=-1)
        result = np.where(last_nan < 0, reduce(np.stack([result, np.full_like(result, start(x.dtype))]), axis=0),
                          result)
        result = np.where(last_nan == length - 1, np.float32(np.nan), result).astype(x.dtype)
        shape = [1 if a in axes else d for a, d in enumerate(x.shape)] if keep_dims else kept
        return [result.reshape(shape)]
    return kernel


def _lowest(dtype):
    """numeric_limits<T>::lowest(): REDUCE_MAX's start value."""
    return np.finfo(dtype).min if dtype.kind == "f" else np.iinfo(dtype).min


def _highest(dtype):
    return np.finfo(dtype).max if dtype.kind == "f" else np.iinfo(dtype).max


# -- MEAN -------------------------------------------------------------------------------------
def mean(node, inputs):
    """MEAN: float32 sum / count (NaN over an empty input), an int32 / int64 one (_integer_mean),
    or TFLite's quantized mean."""
    x, axes, keep_dims = _reduction(node, inputs)
    if x.dtype in _INTEGERS:
        return [_integer_mean(x, axes, keep_dims)]
    if x.dtype != _FLOAT:
        return [_quantized_mean(node, x, axes, keep_dims)]
    count = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    total = np.sum(x, axis=tuple(axes), keepdims=keep_dims, dtype=np.float32)
    if x.size == 0:
        return [np.full(total.shape, np.nan, np.float32)]
    return [(total / np.float32(count)).astype(np.float32)]


def _integer_mean(x, axes, keep_dims):
    """reference_ops::Mean of int32 / int64: the sum in int64 (wrapping, as C++'s), divided by the
    count truncating toward zero (C++'s integer division); 0 over an empty input."""
    total = np.sum(x, axis=tuple(axes), keepdims=keep_dims, dtype=np.int64)
    count = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    if count == 0:
        return np.zeros(total.shape, x.dtype)
    quotient = np.where(total < 0, -(-total // count), total // count)
    return quotient.astype(x.dtype)


def _quantized_mean(node, x, axes, keep_dims):
    """Sum of the raw integers, then requantized to the output's scale and zero point."""
    out = node.outputs[0]
    in_scale, in_zero = scale_of(node.inputs[0]), zero_point_of(node.inputs[0])
    out_scale, out_zero = scale_of(out), zero_point_of(out)
    total = np.sum(x, axis=tuple(axes), keepdims=keep_dims, dtype=np.int64)
    if x.size == 0:
        return np.zeros(total.shape, x.dtype)
    count = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    if keep_dims and x.ndim == 4 and sorted(axes) == [1, 2]:
        result = _mean_hw(total, count, in_scale, in_zero, out_scale, out_zero)
    else:
        result = _mean_general(total, count, in_scale, in_zero, out_scale, out_zero)
    return saturate(result, x.dtype)


def _mean_general(total, count, in_scale, in_zero, out_scale, out_zero):
    """reference_ops::QuantizedMeanOrSum: the in/out scale multiplier absorbs 1/count as a
    shift of up to floor(log2(count)) bits and an integer division."""
    multiplier, shift = quantized_multiplier(np.float64(in_scale) / np.float64(out_scale))
    count_shift = min(count.bit_length() - 1, 32, 31 + shift)
    multiplier = (multiplier << count_shift) // count
    return multiply_by_quantized_multiplier(total - in_zero * count, multiplier, shift - count_shift) + out_zero


def _mean_hw(total, count, in_scale, in_zero, out_scale, out_zero):
    """LiteRT's optimized 4-D mean over H and W: the raw sum times in/(count * out) in float32,
    plus a bias for the zero points rounded on its own (so it may differ from the general path)."""
    zero_term = np.float32(in_zero) * np.float32(in_scale) / np.float32(out_scale)
    bias = out_zero - int(round_half_away(zero_term))
    multiplier, shift = quantized_multiplier(
        float(np.float32(in_scale) / (np.float32(count) * np.float32(out_scale))))
    return multiply_by_quantized_multiplier(total, multiplier, shift) + bias


# -- SUPPORT ----------------------------------------------------------------------------------
def _support(dtypes, requantizes=False):
    """A SUPPORT check: two inputs (data, int32 axes), one output of the data's dtype, which is
    in `dtypes`. 8-bit tensors need per-tensor quantization, and unless the op `requantizes`
    (MEAN), the same scale and zero point on input and output, as TFLite requires."""
    def check(node):
        reason = arity_reason(node, 2) or index_input_reason(node, 1, "axis", int32_only=True)
        if reason:
            return reason
        x, out = node.inputs[0], node.outputs[0]
        if x.dtype not in dtypes or out.dtype != x.dtype:
            return Unimplemented(f"input {x.dtype} / output {out.dtype} are not one of "
                                 f"{', '.join(map(str, dtypes))}")
        if x.dtype not in _QUANTIZED:
            return None
        if any(t.quantization is None or t.quantization.scales.size != 1 for t in (x, out)):
            return "8-bit reductions need per-tensor quantization on input and output"
        if not requantizes and not same_quantization(x, out):
            return "8-bit input and output must share scale and zero point"
        return None
    return check


_MINMAX_DTYPES = (_FLOAT, np.dtype(np.int32)) + _QUANTIZED
# reduce.cc's EvalGeneric over int32 / int64 accumulates in the type itself (wrapping on overflow):
# numpy's wider accumulator cast back (astype) wraps the same way, modulo 2^32 or 2^64.
# (Keras 3's attention computes a product of shape dimensions in int32.)
_SUM_PROD_DTYPES = (_FLOAT, np.dtype(np.int32), np.dtype(np.int64))

KERNELS = {
    "MEAN": mean,
    "SUM": _reducer(np.sum),
    "REDUCE_PROD": _reducer(np.prod),
    "REDUCE_MAX": _scanned_extreme(np.max, _lowest),
    "REDUCE_MIN": _scanned_extreme(np.min, _highest),
    # reduce.cc's EvalLogic: over nothing (an empty input) ANY is false and ALL true, as in numpy.
    "REDUCE_ANY": _reducer(np.any),
    "REDUCE_ALL": _reducer(np.all),
}
SUPPORT = {
    "MEAN": _support((_FLOAT,) + _INTEGERS + _QUANTIZED, requantizes=True),
    "SUM": _support(_SUM_PROD_DTYPES),
    "REDUCE_PROD": _support(_SUM_PROD_DTYPES),
    "REDUCE_MAX": _support(_MINMAX_DTYPES),
    "REDUCE_MIN": _support(_MINMAX_DTYPES),
    "REDUCE_ANY": _support((_BOOL,)),
    "REDUCE_ALL": _support((_BOOL,)),
}


def _reduced_shape(node, shapes, values):
    """A reduction's output shape (the kernel's _reduction), from the axis input's values."""
    shape = shapes[0]
    if values[1] is None:
        return None
    axes = [normalized_axis(node, a, len(shape)) for a in np.asarray(values[1]).reshape(-1).tolist()] if shape else []
    if node.options.get("keep_dims", False):
        return [tuple(1 if k in axes else d for k, d in enumerate(shape))]
    return [tuple(d for k, d in enumerate(shape) if k not in axes)]


OUTPUT_SHAPES = {op: _reduced_shape for op in KERNELS}
