"""Resize reference kernels (ops/resize.py) against LiteRT's builtin kernels."""
import numpy as np
import pytest

from gles_delegate.ops import resize as resize_ops
from tests.oplib import In, assert_kernel_error, assert_rejected, check_nodes_on_real_models, check_op

# align_corners / half_pixel_centers combinations; TFLite's bilinear refuses both at once.
FLAGS = [(False, False), (True, False), (False, True)]
QUANT = {np.dtype(np.uint8): (0.05, 128), np.dtype(np.int8): (0.05, -5)}


def image(rng, shape, dtype):
    """Random pixels: floats in [-3, 3), integers from their minimum up to at most 1000."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return rng.uniform(-3, 3, shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, min(info.max, 1000) + 1, shape).astype(dtype)


def check_resize(op, x, out_hw, align_corners, half_pixel, version=1):
    quant = QUANT.get(x.dtype)
    inputs = [In(x, quant=quant), In(np.array(out_hw, np.int32), const=True)]
    # 8-bit outputs may differ by one step where float rounding lands on a half.
    return check_op(op, inputs, {"align_corners": align_corners, "half_pixel_centers": half_pixel},
                    version=version, output_dtypes=[x.dtype], output_quant=[quant],
                    quantum=1 if quant else None)


def random_sizes(rng, count):
    """(input shape, output size) pairs: up- and downsampling, 1-pixel edges, odd ratios."""
    for _ in range(count):
        in_hw = rng.integers(1, 9, 2)
        out_hw = rng.integers(1, 17, 2)
        yield (int(rng.integers(1, 3)), *map(int, in_hw), int(rng.integers(1, 4))), [int(v) for v in out_hw]


@pytest.mark.parametrize("align_corners,half_pixel", FLAGS)
@pytest.mark.parametrize("dtype", [np.float32, np.uint8, np.int8])
def test_resize_bilinear(dtype, align_corners, half_pixel):
    rng = np.random.default_rng(1)
    for shape, out_hw in random_sizes(rng, 8):
        check_resize("RESIZE_BILINEAR", image(rng, shape, dtype), out_hw, align_corners, half_pixel,
                     version=3 if half_pixel else 1)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_resize_bilinear_8bit_is_exact(dtype):
    # Both 8-bit paths (uint8: float weights, +0.5 and truncation; int8: 10-bit fixed point)
    # are LiteRT's own arithmetic, so require equality, not check_resize's one-step tolerance.
    rng = np.random.default_rng(2)
    for (align_corners, half_pixel), (shape, out_hw) in zip(FLAGS * 4, random_sizes(rng, 12)):
        x = image(rng, shape, dtype)
        ours, theirs = check_resize("RESIZE_BILINEAR", x, out_hw, align_corners, half_pixel, version=3)
        assert np.array_equal(ours[0], theirs[0])


@pytest.mark.parametrize("align_corners,half_pixel", FLAGS + [(True, True)])
@pytest.mark.parametrize("dtype", [np.float32, np.uint8, np.int8, np.int16, np.int32])
def test_resize_nearest_neighbor(dtype, align_corners, half_pixel):
    rng = np.random.default_rng(3)
    for shape, out_hw in random_sizes(rng, 8):
        ours, theirs = check_resize("RESIZE_NEAREST_NEIGHBOR", image(rng, shape, dtype), out_hw,
                                    align_corners, half_pixel, version=3)
        assert np.array_equal(ours[0], theirs[0])  # a copy of input pixels: exact


@pytest.mark.parametrize("dtype", [np.float32, np.uint8, np.int8])
def test_resize_nearest_neighbor_large_outputs(dtype):
    # Past 256 output pixels LiteRT's 8-bit kernel (16.16 fixed point) and its float kernel
    # pick different source pixels; ours must follow each.
    x = np.arange(2 * 3, dtype=dtype).reshape(1, 2, 3, 1)
    ours, theirs = check_resize("RESIZE_NEAREST_NEIGHBOR", x, [376, 301], False, False)
    assert np.array_equal(ours[0], theirs[0])


def test_resize_bilinear_matches_known_values():
    # TFLite's resize_bilinear_test.cc: int8 2x2 -> 4x6, align_corners and half_pixel off.
    x = np.array([127, -128, 64, 0], np.int8).reshape(1, 2, 2, 1)
    ours, _ = check_resize("RESIZE_BILINEAR", x, [4, 6], False, False)
    assert ours[0].reshape(4, 6).tolist() == [[127, 42, -43, -128, -128, -128], [96, 42, -11, -64, -64, -64],
                                              [64, 43, 21, 0, 0, 0], [64, 43, 21, 0, 0, 0]]


@pytest.mark.parametrize("op", ["RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR"])
def test_resize_rejects_bad_sizes(op):
    for x, size in [(np.zeros((1, 2, 2, 1), np.float32), [0, 3]), (np.zeros((2, 2, 1), np.float32), [3, 3]),
                    (np.zeros((1, 2, 2, 1), np.float32), [3, 3, 3])]:
        assert_kernel_error(op, [In(x), In(np.array(size, np.int32), const=True)], match="positive sizes")


def test_resize_support_refusals():
    x = np.zeros((1, 2, 2, 1), np.float32)
    cases = [("RESIZE_BILINEAR", x, {"align_corners": True, "half_pixel_centers": True}, np.int32,
              "requires align_corners"),
             ("RESIZE_BILINEAR", x.astype(np.int32), {}, np.int32, "not float32"),
             ("RESIZE_NEAREST_NEIGHBOR", x, {}, np.int64, "size must be an int32")]
    for op, value, options, size_dtype, match in cases:
        assert_rejected(op, [In(value), In(np.array([4, 4], size_dtype), const=True)], options, match,
                        outputs=[((1, 4, 4, 1), value.dtype, None)])


def test_resize_nodes_of_real_models(mediapipe_models):
    assert check_nodes_on_real_models(mediapipe_models, resize_ops.KERNELS) > 0
