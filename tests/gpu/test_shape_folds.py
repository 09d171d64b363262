"""fold_shapes and placeholder shapes on the GPU: a dynamic-batch Keras model's SHAPE ->
STRIDED_SLICE -> PACK chain folds at allocate, so the RESHAPE it feeds runs on the GPU and the
partition stays whole; tensors declared with placeholder shapes are planned at their real ones."""
import numpy as np
import pytest

from tests.gpu.gpulib import PRECISIONS, run_gpu
from tests.test_fold_constants import expected_gate, keras_gate_model
from tests.test_placeholder_shapes import dilated_model, expected_dense, keras_dense_model


@pytest.mark.parametrize("precision", PRECISIONS)
def test_a_keras_gate_runs_whole_on_the_gpu(precision):
    x = np.random.default_rng(1).uniform(-1, 1, (1, 4, 4, 8)).astype(np.float32)
    (out,), summary = run_gpu(keras_gate_model(), [x], precision)
    assert summary["cpu_nodes"] == 0 and summary["partitions"] == 1 and summary["gpu_nodes"] == 3
    # x * mean(x): a half rounds x, the mean and the product (relative 2^-11 each); in float32,
    # the mean's summation order differs from numpy's by a few ulps.
    scale = np.abs(expected_gate(x)).max()
    tolerance = 16 * np.finfo(np.float32).eps if precision == "fp32" else 4 * 2.0 ** -11
    assert np.abs(out - expected_gate(x)).max() <= tolerance * scale


@pytest.mark.parametrize("precision", PRECISIONS)
def test_a_keras_dense_on_a_rank_3_input_runs_whole_on_the_gpu(precision):
    """The RESHAPE declared [1, 1] gets its real shape at allocate, so the FULLY_CONNECTED after
    it sizes its dispatch by [tokens, features]."""
    model, weights = keras_dense_model(tokens=6, features=8, units=5)
    x = np.random.default_rng(2).uniform(-1, 1, (1, 6, 8)).astype(np.float32)
    (out,), summary = run_gpu(model, [x], precision)
    assert summary["cpu_nodes"] == 0 and summary["partitions"] == 1
    # Eight products summed: in half storage x, the weights and the output round (2^-11 each),
    # relative to the sum of |products|, at most 8x the output's magnitude here (|x|, |w| <= 1).
    expected = expected_dense(x, weights)
    bound = np.abs(x) @ np.abs(weights).T
    tolerance = 8 * np.finfo(np.float32).eps if precision == "fp32" else 4 * 2.0 ** -11
    assert np.all(np.abs(out - expected) <= tolerance * bound.max())


@pytest.mark.parametrize("precision", PRECISIONS)
def test_a_space_to_batch_declared_at_batch_1_runs_at_its_real_batch_on_the_gpu(precision):
    model, scale = dilated_model(length=16, channels=4, scale=(0.5, -2.0, 4.0, 1.0))
    x = np.random.default_rng(4).uniform(-1, 1, (1, 16, 4)).astype(np.float32)
    (out,), summary = run_gpu(model, [x], precision)
    assert summary["cpu_nodes"] == 0 and summary["partitions"] == 1
    # Products by powers of two: exact in float32; in half storage x rounds once (2^-11).
    tolerance = 0 if precision == "fp32" else 2.0 ** -11
    assert np.all(np.abs(out - x * scale) <= tolerance * np.abs(x * scale))
