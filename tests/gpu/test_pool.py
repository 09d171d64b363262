"""GPU pooling (kernels_glsl/pool.glsl, and reduce.glsl for global pools) against the numpy
reference, in every precision: SAME / VALID windows clipped at the borders, strides above and below
the filter, every clamp activation, padded channels, batches, and global pools as large as
MediaPipe's (a 128 x 128 window)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.gpu.gpulib import PRECISIONS, check_gpu
from tests.oplib import SAME, VALID, In

POOLS = ["AVERAGE_POOL_2D", "MAX_POOL_2D"]


def options(filter_hw, strides, padding, activation=0):
    return dict(padding=padding, filter_height=filter_hw[0], filter_width=filter_hw[1], stride_h=strides[0],
                stride_w=strides[1], fused_activation_function=activation)


CASES = [  # (x shape, filter, strides, paddings)
    ((1, 16, 16, 8), (2, 2), (2, 2), (SAME, VALID)),  # MediaPipe's max pools
    ((2, 7, 9, 3), (3, 2), (2, 1), (SAME, VALID)),    # odd sizes, batch 2, padded channels
    ((1, 8, 8, 5), (2, 2), (3, 3), (SAME, VALID)),    # stride > filter
    ((1, 6, 6, 1), (1, 1), (1, 1), (SAME, VALID)),    # identity window, one channel
    ((1, 5, 5, 4), (7, 7), (1, 1), (SAME,)),          # windows larger than the input, clipped on every side
    ((1, 1, 1, 6), (3, 3), (1, 1), (SAME,)),          # 1x1 input
]


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("x_shape,filter_hw,strides,padding",
                         [(x, f, s, p) for x, f, s, paddings in CASES for p in paddings])
@pytest.mark.parametrize("op", POOLS)
def test_pool(op, x_shape, filter_hw, strides, padding, precision):
    x = np.random.default_rng(sum(x_shape) + padding).normal(0, 3, x_shape).astype(np.float32)
    check_gpu(op, [In(x)], options(filter_hw, strides, padding), precision)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("activation", [1, 2, 3])
@pytest.mark.parametrize("op", POOLS)
def test_pool_fused_activation(op, activation, precision):
    x = np.random.default_rng(activation).normal(0, 4, (1, 9, 9, 6)).astype(np.float32)
    check_gpu(op, [In(x)], options((3, 3), (2, 2), SAME, activation), precision)


GLOBAL_CASES = [  # (x shape, padding): one window covering the whole input
    ((1, 17, 17, 13), VALID),   # DeepLab's image pooling, channels not a multiple of 4
    ((1, 128, 128, 16), VALID),  # selfie segmentation
    ((2, 16, 16, 6), SAME),
    ((1, 4, 4, 1), VALID),
]


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("x_shape,padding", GLOBAL_CASES)
@pytest.mark.parametrize("op", POOLS)
def test_global_pool(op, x_shape, padding, precision):
    x = np.random.default_rng(x_shape[1]).normal(0, 3, x_shape).astype(np.float32)
    check_gpu(op, [In(x)], options(x_shape[1:3], x_shape[1:3], padding, activation=3), precision)


@pytest.mark.parametrize("precision", ["fp16", "fp16_fp32acc"])
def test_global_average_near_half_limit(precision):
    """64 x 64 values near 60000: a half-float sum would overflow after two of them."""
    x = np.random.default_rng(0).uniform(50000, 60000, (1, 64, 64, 3)).astype(np.float32)
    check_gpu("AVERAGE_POOL_2D", [In(x)], options((64, 64), (64, 64), VALID), precision)
    check_gpu("AVERAGE_POOL_2D", [In(x)], options((8, 8), (8, 8), VALID), precision)


@settings(max_examples=15, deadline=None)
@given(st.sampled_from(POOLS), st.integers(1, 3), st.integers(1, 12), st.integers(1, 12), st.integers(1, 9),
       st.integers(1, 4), st.integers(1, 4), st.integers(1, 3), st.integers(1, 3), st.sampled_from([SAME, VALID]),
       st.integers(0, 3), st.sampled_from(PRECISIONS))
def test_pool_random(op, b, h, w, c, fh, fw, sh, sw, padding, activation, precision):
    if padding == VALID:
        fh, fw = min(fh, h), min(fw, w)
    x = np.random.default_rng(h * w * c).normal(0, 3, (b, h, w, c)).astype(np.float32)
    check_gpu(op, [In(x)], options((fh, fw), (sh, sw), padding, activation), precision)
