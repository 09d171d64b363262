"""The shared semantics of ops/common.py, one test per rule (the op tests check them against
LiteRT through the kernels that use them)."""
import warnings

import numpy as np
import pytest

from gles_delegate.graph import Tensor
from gles_delegate.ops.common import (ACT_NONE, ACT_RELU, ACT_RELU6, ACT_RELU_N1_TO_1, ACT_SIGN_BIT, ACT_TANH,
                                      apply_activation, clamp_to_activation, dequantize, quant_params, quantize,
                                      quantized_activation_range)
from gles_delegate.tflite.writer import quantize_params

FLT_MAX = np.finfo(np.float32).max


def quantized_tensor(shape, scale, zero_point, dim=0, dtype=np.int8):
    return Tensor(index=0, name="q", shape=tuple(shape), dtype=np.dtype(dtype),
                  quantization=quantize_params(scale, zero_point, dim))


# -- quantize / dequantize / quant_params -------------------------------------------------
def test_scalars_stay_scalars():
    tensor = quantized_tensor((), 0.5, 3)
    scales, zero_points = quant_params(tensor)
    assert scales.shape == zero_points.shape == ()
    assert quantize(tensor, np.float32(1.5)).shape == ()
    assert dequantize(tensor, np.int8(7)).shape == ()
    assert dequantize(tensor, np.int8(7)) == np.float32(2.0)


def test_per_channel_parameters_follow_the_array_not_the_declared_shape():
    """Before shape propagation the declared shape may be stale (here: a scalar); the values'
    own rank decides how the per-channel parameters broadcast."""
    tensor = quantized_tensor((), [0.5, 0.25, 1.0], [0, 1, -1], dim=1)
    real = np.array([[1.0, 1.0, 1.0], [-2.0, 0.5, 3.0]], np.float32)
    q = quantize(tensor, real)
    np.testing.assert_array_equal(q, [[2, 5, 0], [-4, 3, 2]])
    np.testing.assert_array_equal(dequantize(tensor, q), real)
    assert quant_params(tensor, ndim=3)[0].shape == (1, 3, 1)


def test_nan_quantizes_to_the_zero_point_and_infinities_saturate():
    tensor = quantized_tensor((4,), 0.1, -5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "invalid value encountered in cast"
        q = quantize(tensor, np.array([np.nan, np.inf, -np.inf, 1e30], np.float32))
    np.testing.assert_array_equal(q, np.array([-5, 127, -128, 127], np.int8))


# -- fused activations --------------------------------------------------------------------
@pytest.mark.parametrize("activation", [ACT_TANH, ACT_SIGN_BIT])
def test_quantized_activation_range_ignores_tanh_and_sign_bit(activation):
    """TFLite's CalculateActivationRangeQuantized clamps only for the RELU family."""
    assert quantized_activation_range(activation, quantized_tensor((1,), 0.1, 0)) == (-128, 127)


def test_quantized_activation_range_rounds_in_float32():
    """6 / 0.8 is 7.4999999 in float64 but 7.5 in float32, as TFLite divides: RELU6 tops at zp + 8."""
    tensor = quantized_tensor((1,), 0.8, -128)
    assert quantized_activation_range(ACT_RELU6, tensor) == (-128, -120)
    assert quantized_activation_range(ACT_RELU_N1_TO_1, tensor) == (-128, -127)


def test_clamp_to_activation_is_tflites_output_stage():
    """Infinities become +-FLT_MAX even with no activation, TANH / SIGN_BIT clamp like NONE, NaN
    stays NaN."""
    x = np.array([np.inf, -np.inf, np.nan, 0.5, -7.0], np.float32)
    for activation in (ACT_NONE, ACT_TANH, ACT_SIGN_BIT):
        np.testing.assert_array_equal(clamp_to_activation(x, activation), [FLT_MAX, -FLT_MAX, np.nan, 0.5, -7.0])
    np.testing.assert_array_equal(clamp_to_activation(x, ACT_RELU), [FLT_MAX, 0.0, np.nan, 0.5, 0.0])
    np.testing.assert_array_equal(clamp_to_activation(x, ACT_RELU6), [6.0, 0.0, np.nan, 0.5, 0.0])
    ints = np.array([-9, 3, 9], np.int32)
    np.testing.assert_array_equal(clamp_to_activation(ints, ACT_RELU_N1_TO_1), [-1, 1, 1])


def test_apply_activation_is_the_function_lstm_applies():
    """LSTM's ApplyActivationToVector: TANH is tanh, RELU leaves +inf."""
    x = np.array([np.inf, -1.0, 0.5], np.float32)
    np.testing.assert_array_equal(apply_activation(x, ACT_TANH), np.tanh(x))
    np.testing.assert_array_equal(apply_activation(x, ACT_RELU), [np.inf, 0.0, 0.5])
