"""GPU RESIZE_BILINEAR and RESIZE_NEAREST_NEIGHBOR against the numpy reference, in every
precision: every align_corners / half_pixel_centers combination TFLite accepts, up and down
sampling by integer and fractional ratios, 1x1 inputs and outputs, odd channel counts, batches."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gles_delegate.gpu import kernels
from gles_delegate.tflite import ModelBuilder
from tests.gpu.gpulib import PRECISIONS, check_gpu
from tests.oplib import In, first_node

FLAGS = {  # (align_corners, half_pixel_centers) per op
    "RESIZE_BILINEAR": [(False, False), (True, False), (False, True)],
    "RESIZE_NEAREST_NEIGHBOR": [(False, False), (True, False), (False, True), (True, True)],
}
SHAPES = [  # (input shape, output size)
    ((1, 5, 7, 3), (9, 4)),
    ((2, 4, 4, 8), (8, 8)),
    ((1, 1, 1, 5), (3, 2)),
    ((1, 6, 3, 1), (2, 5)),
    ((1, 4, 6, 4), (4, 6)),
    ((1, 3, 4, 6), (1, 1)),
]


def resize_inputs(shape, size, seed=0):
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return [In(x), In(np.array(size, np.int32), const=True)]


def options(flags):
    return {"align_corners": flags[0], "half_pixel_centers": flags[1]}


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("shape,size", SHAPES)
@pytest.mark.parametrize("op,flags", [(op, f) for op, fs in FLAGS.items() for f in fs])
def test_resize(op, flags, shape, size, precision):
    check_gpu(op, resize_inputs(shape, size), options(flags), precision, version=3)


@pytest.mark.parametrize("op", FLAGS)
def test_resize_large_output(op):
    """A deeplab-like 17x17 -> 257x257 upsampling in FP16 mode (positions stay highp)."""
    check_gpu(op, resize_inputs((1, 17, 17, 21), (257, 257)), options((False, True)), "fp16", version=3)


@settings(max_examples=10, deadline=None)
@given(st.sampled_from([(op, f) for op, fs in FLAGS.items() for f in fs]),
       st.lists(st.integers(1, 9), min_size=6, max_size=6), st.integers(1, 2), st.sampled_from(PRECISIONS))
def test_random_resize(op_flags, dims, batch, precision):
    (op, flags), (h, w, c, out_h, out_w, seed) = op_flags, dims
    check_gpu(op, resize_inputs((batch, h, w, c), (out_h, out_w), seed), options(flags), precision, version=3)


def node_of(op, size_const, flags, out_shape=(1, 6, 6, 2)):
    """The node of a one-op resize model whose size input is constant or fed at run time."""
    b = ModelBuilder()
    x = b.input("x", (1, 3, 3, 2), np.float32)
    size = b.const("size", np.array([6, 6], np.int32)) if size_const else b.input("size", (2,), np.float32)
    out = b.tensor("out", out_shape, np.float32)
    b.op(op, [x, size], [out], version=3, **options(flags))
    b.output(out)
    return first_node(b.build())


@pytest.mark.parametrize("op,size_const,flags,out_shape,reason", [
    ("RESIZE_BILINEAR", False, (False, False), (1, 6, 6, 2), "constant"),
    ("RESIZE_NEAREST_NEIGHBOR", False, (False, True), (1, 6, 6, 2), "constant"),
    ("RESIZE_BILINEAR", True, (True, True), (1, 6, 6, 2), "align_corners"),
    ("RESIZE_NEAREST_NEIGHBOR", True, (False, False), (1, 5, 6, 2), "declared"),
])
def test_rejects(op, size_const, flags, out_shape, reason):
    assert reason in kernels.SUPPORT[op](node_of(op, size_const, flags, out_shape))
