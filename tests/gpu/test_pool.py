"""GPU pooling (kernels_glsl/pool.glsl, and reduce.glsl for global pools) against the numpy
reference, in every precision: SAME / VALID windows clipped at the borders, strides above and below
the filter, every clamp activation, padded channels, batches, and global pools as large as
MediaPipe's (a 128 x 128 window)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gles_delegate import GpuDelegate, Interpreter, ModelError
from tests.gpu.gpulib import PRECISIONS, assert_gpu_matches, check_gpu
from tests.oplib import SAME, VALID, In, build_model

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


def _resized(op, padding, delegate):
    """An 8x8 window (stride 8) over an 8x8 input, the input resized to 4x4 (not allocated)."""
    model = build_model(op, [In(np.zeros((1, 8, 8, 3), np.float32))], [((1, 1, 1, 3), np.float32, None)],
                        options((8, 8), (8, 8), padding))
    interpreter = Interpreter(model_content=model, experimental_delegates=[delegate] if delegate else None)
    interpreter.resize_tensor_input(0, [1, 4, 4, 3])
    return interpreter


@pytest.mark.parametrize("op", POOLS)
def test_input_resized_below_the_window(op):
    """VALID: no window fits, a ModelError naming the node (tests/ops/test_pool.py says why);
    SAME: the GPU pools the in-bounds elements as the reference does."""
    x = np.random.default_rng(5).normal(0, 3, (1, 4, 4, 3)).astype(np.float32)
    with GpuDelegate() as delegate:
        with pytest.raises(ModelError, match=rf"#0 \({op}\).*does not fit"):
            _resized(op, VALID, delegate).allocate_tensors()
        results = []
        for interpreter in (_resized(op, SAME, delegate), _resized(op, SAME, None)):
            interpreter.allocate_tensors()
            interpreter.set_tensor(0, x)
            interpreter.invoke()
            results.append(interpreter.get_tensor(interpreter.get_output_details()[0]["index"]))
        assert delegate.summary()["gpu_nodes"] == 1
    assert_gpu_matches(results[1], results[0], "fp32", op)


def test_selfie_segmentation_resized_below_its_global_pools(mediapipe_models):
    with GpuDelegate() as delegate:
        interpreter = Interpreter(model_path=str(mediapipe_models["selfie_segmentation"]),
                                  experimental_delegates=[delegate])
        interpreter.resize_tensor_input(0, [1, 128, 128, 3])
        with pytest.raises(ModelError, match=r"#12 \(AVERAGE_POOL_2D\).*64x64 window over a 32x32 input"):
            interpreter.allocate_tensors()
