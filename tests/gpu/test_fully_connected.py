"""FULLY_CONNECTED on the GPU against the numpy reference: split K, every way input rows map onto
PHWC4 (a row per pixel, slice-aligned rows across pixels, gathered values), keep_num_dims,
optional bias, activation and precision; and which nodes it refuses."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gles_delegate.gpu import kernels
from gles_delegate.gpu.kernels import conv, fully_connected
from tests.gpu.gpulib import MOST_BLOCKING, NO_BLOCKING, PRECISIONS, check_gpu, dispatches
from tests.oplib import In, single_op_node

CASES = [  # input shape, K, units, keep_num_dims, bias
    ((1, 1152), 1152, 63, False, True),     # a landmark head: K split over a workgroup
    ((3, 1280), 1280, 21, False, False),    # several rows, no bias
    ((6,), 6, 5, False, True),              # rank 1
    ((4, 10), 10, 1, False, True),          # one unit
    ((2, 3, 5, 8), 8, 7, True, True),       # keep_num_dims, rows are pixels
    ((2, 3, 6), 6, 4, True, True),          # keep_num_dims, rank 3
    ((2, 3, 5, 8), 120, 7, False, True),    # flattened over H, W, C: slice-aligned rows
    ((1, 8, 8, 16), 1024, 5, False, True),
    ((1, 4, 4, 6), 96, 9, False, True),     # flattened, C % 4 != 0: gathered values
    ((2, 6), 3, 5, False, True),            # rows shorter than the input's last dimension
    ((1, 2, 2, 12), 6, 3, False, True),     # rows of 6 inside pixels of 12
]


def fc_inputs(rng, shape, depth, units, bias=True):
    x = rng.standard_normal(shape).astype(np.float32)
    w = (rng.standard_normal((units, depth)) / np.sqrt(depth)).astype(np.float32)
    b = rng.standard_normal(units).astype(np.float32)
    return [In(x), In(w, const=True)] + ([In(b, const=True)] if bias else [])


def fc_options(keep_num_dims=False, activation=0):
    return dict(keep_num_dims=keep_num_dims, fused_activation_function=activation, weights_format=0)


@pytest.mark.parametrize("min_invocations", [NO_BLOCKING, MOST_BLOCKING])
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("case", CASES)
def test_fully_connected(case, precision, min_invocations, monkeypatch):
    """NO_BLOCKING: the most lanes per output (small grids); MOST_BLOCKING: one lane per output."""
    monkeypatch.setattr(conv, "MIN_INVOCATIONS", min_invocations)
    shape, depth, units, keep, bias = case
    rng = np.random.default_rng(CASES.index(case))
    check_gpu("FULLY_CONNECTED", fc_inputs(rng, shape, depth, units, bias),
              fc_options(keep, CASES.index(case) % 4), precision)


@settings(max_examples=12, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=4), st.integers(1, 40), st.booleans(),
       st.sampled_from(PRECISIONS), st.integers(0, 2 ** 31))
def test_fully_connected_random(shape, units, keep, precision, seed):
    rng = np.random.default_rng(seed)
    depth = shape[-1] if keep else int(np.prod(shape[rng.integers(0, len(shape)):]))
    check_gpu("FULLY_CONNECTED", fc_inputs(rng, shape, depth, units), fc_options(keep, seed % 4), precision)


def test_variant_choice():
    def defines(shape, depth, units):
        return dispatches("FULLY_CONNECTED", fc_inputs(np.random.default_rng(0), shape, depth, units),
                          fc_options())[0].defines
    assert defines((1, 1280), 1280, 1001) == {"K_SPLIT": 16, "FLATTEN": 0, "ACTIVATION": 0, "CLAMP_FINITE": 1,
                                              "EP_COUNT": 0}
    assert defines((1, 4, 4, 8), 128, 10)["FLATTEN"] == 1
    assert defines((1, 4, 4, 6), 96, 10)["FLATTEN"] == 2
    assert defines((1, 8), 8, 3)["K_SPLIT"] == 1  # too few chunks to split


def test_rejects_runtime_weights():
    inputs = fc_inputs(np.random.default_rng(0), (2, 8), 8, 3)
    inputs[1].const = False
    assert "weights" in kernels.unsupported_reason(single_op_node("FULLY_CONNECTED", inputs, fc_options()))
