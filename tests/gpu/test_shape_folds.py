"""fold_shapes on the GPU: a dynamic-batch Keras model's SHAPE -> STRIDED_SLICE -> PACK chain
folds at allocate, so the RESHAPE it feeds runs on the GPU and the partition stays whole."""
import numpy as np
import pytest

from tests.gpu.gpulib import PRECISIONS, run_gpu
from tests.test_fold_constants import expected_gate, keras_gate_model


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
