"""CONV_3D (ops/conv3d.py) against LiteRT's builtin kernel: SAME / VALID padding per spatial dim
(odd totals put the extra element after), strides and dilations of each dim, with and without a
bias, every clamp activation, batches; and what it refuses."""
import numpy as np
import pytest

from tests.oplib import SAME, VALID, In, assert_kernel_error, assert_rejected, check_op

ACTIVATIONS = {"NONE": 0, "RELU": 1, "RELU_N1_TO_1": 2, "RELU6": 3}


def conv3d_options(padding=SAME, strides=(1, 1, 1), dilations=(1, 1, 1), activation=0):
    (sd, sh, sw), (dd, dh, dw) = strides, dilations
    return dict(padding=padding, stride_d=sd, stride_h=sh, stride_w=sw, dilation_d_factor=dd,
                dilation_h_factor=dh, dilation_w_factor=dw, fused_activation_function=activation)


def conv3d_inputs(rng, x_shape, kernel, out_channels, bias=True):
    """x [N, D, H, W, C], filter [KD, KH, KW, C, O] (constant), bias [O] (constant, or omitted)."""
    x = rng.normal(0, 1, x_shape).astype(np.float32)
    w = rng.normal(0, 0.5, (*kernel, x_shape[-1], out_channels)).astype(np.float32)
    inputs = [In(x), In(w, const=True)]
    return inputs + ([In(rng.normal(0, 1, out_channels).astype(np.float32), const=True)] if bias else [])


CASES = [  # (x shape, kernel, out channels, strides, dilations)
    ((1, 4, 6, 6, 3), (3, 3, 3), 4, (1, 1, 1), (1, 1, 1)),   # C3D / R3D's 3x3x3 block
    ((2, 5, 7, 6, 2), (2, 3, 1), 5, (2, 1, 2), (1, 1, 1)),   # odd extents, batch 2, strides per dim
    ((1, 6, 5, 5, 4), (3, 2, 2), 3, (1, 2, 1), (2, 1, 2)),   # dilations per dim
    ((1, 8, 4, 4, 8), (3, 1, 1), 6, (1, 1, 1), (1, 1, 1)),   # a (2+1)D net's temporal conv
    ((1, 2, 3, 3, 5), (4, 4, 4), 2, (1, 1, 1), (1, 1, 1)),   # windows larger than a SAME input
]


def fits(case):
    """Whether a VALID window of the case fits its input."""
    x_shape, kernel, _, _, dilations = case
    return all((k - 1) * d + 1 <= s for k, d, s in zip(kernel, dilations, x_shape[1:4]))


@pytest.mark.parametrize("x_shape, kernel, out_channels, strides, dilations, padding",
                         [(*case, SAME) for case in CASES] + [(*case, VALID) for case in CASES if fits(case)])
def test_conv3d_matches_litert(x_shape, kernel, out_channels, strides, dilations, padding):
    rng = np.random.default_rng(sum(x_shape) + padding)
    check_op("CONV_3D", conv3d_inputs(rng, x_shape, kernel, out_channels), conv3d_options(padding, strides, dilations))


@pytest.mark.parametrize("activation", list(ACTIVATIONS.values()))
@pytest.mark.parametrize("bias", [True, False])
def test_conv3d_bias_and_activations(bias, activation):
    rng = np.random.default_rng(activation + 10 * bias)
    inputs = conv3d_inputs(rng, (1, 3, 5, 5, 3), (2, 3, 3), 4, bias=bias)
    check_op("CONV_3D", inputs, conv3d_options(activation=activation))


def test_conv3d_refusals():
    rng = np.random.default_rng(0)
    inputs = conv3d_inputs(rng, (1, 3, 4, 4, 3), (2, 2, 2), 4)
    out = [((1, 3, 4, 4, 4), np.float32, None)]
    assert_rejected("CONV_3D", inputs, conv3d_options(strides=(0, 1, 1)), match=r"strides \[0, 1, 1\]", outputs=out)
    assert_rejected("CONV_3D", inputs, conv3d_options(activation=4), match="not a clamp", outputs=out)
    wrong = [inputs[0], In(np.ones((2, 2, 2, 2, 4), np.float32), const=True), inputs[2]]
    assert_rejected("CONV_3D", wrong, conv3d_options(), match="filter input channels 2", outputs=out)
    flat = [In(np.ones((1, 4, 4, 3), np.float32)), inputs[1], inputs[2]]
    assert_rejected("CONV_3D", flat, conv3d_options(), match="rank 4 and filter rank 5 must be 5",
                    outputs=[((1, 4, 4, 4), np.float32, None)])


def transpose_inputs(rng, x_shape, kernel, out_shape, bias=True, const_shape=True):
    """output_shape (int32), filter [KD, KH, KW, O, C], x [N, D, H, W, C], bias [O] (or omitted)."""
    x = rng.normal(0, 1, x_shape).astype(np.float32)
    w = rng.normal(0, 0.5, (*kernel, out_shape[4], x_shape[4])).astype(np.float32)
    inputs = [In(np.array(out_shape, np.int32), const=const_shape), In(w, const=True), In(x)]
    return inputs + ([In(rng.normal(0, 1, out_shape[4]).astype(np.float32), const=True)] if bias else [])


TRANSPOSE_CASES = [  # (x shape, kernel, output shape, strides, dilations, padding)
    ((1, 2, 4, 4, 3), (2, 2, 2), (1, 4, 8, 8, 5), (2, 2, 2), (1, 1, 1), SAME),   # a 3D U-Net's upsampling
    ((1, 2, 4, 4, 3), (3, 3, 3), (1, 4, 8, 8, 4), (2, 2, 2), (1, 1, 1), SAME),   # odd kernel: padding split
    ((2, 3, 3, 2, 4), (2, 3, 2), (2, 4, 7, 5, 3), (1, 2, 2), (1, 1, 1), VALID),  # per-dim strides, batch 2
    ((1, 3, 2, 3, 2), (2, 2, 3), (1, 6, 5, 8, 2), (2, 2, 2), (1, 2, 1), VALID),  # dilation, extra output rows
    ((1, 4, 3, 3, 6), (3, 1, 1), (1, 4, 3, 3, 7), (1, 1, 1), (1, 1, 1), SAME),   # temporal, stride 1
]


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("x_shape, kernel, out_shape, strides, dilations, padding", TRANSPOSE_CASES)
def test_conv3d_transpose_matches_litert(x_shape, kernel, out_shape, strides, dilations, padding, bias):
    rng = np.random.default_rng(sum(out_shape) + bias)
    check_op("CONV_3D_TRANSPOSE", transpose_inputs(rng, x_shape, kernel, out_shape, bias),
             conv3d_options(padding, strides, dilations, activation=ACTIVATIONS["RELU6"] if bias else 0),
             output_dtypes=[np.float32])


def test_conv3d_transpose_with_a_runtime_output_shape():
    """output_shape computed at run time (a dynamic output): its values checked at invoke."""
    rng = np.random.default_rng(7)
    inputs = transpose_inputs(rng, (1, 2, 4, 4, 3), (2, 2, 2), (1, 4, 8, 8, 5), const_shape=False)
    check_op("CONV_3D_TRANSPOSE", inputs, conv3d_options(strides=(2, 2, 2)), output_dtypes=[np.float32])
    inputs[0] = In(np.array([1, 4, 8, 9, 5], np.int32))
    assert_kernel_error("CONV_3D_TRANSPOSE", inputs, conv3d_options(strides=(2, 2, 2)), output_dtypes=[np.float32],
                        match=r"output_shape \[1, 4, 8, 9, 5\]: its convolution would give extents \[2, 4, 5\]")


def test_conv3d_transpose_refusals():
    rng = np.random.default_rng(8)
    out = [((1, 4, 8, 8, 5), np.float32, None)]
    wrong = transpose_inputs(rng, (1, 2, 4, 4, 3), (2, 2, 2), (1, 4, 8, 8, 5))
    wrong[0] = In(np.array([1, 5, 8, 8, 5], np.int32), const=True)
    assert_rejected("CONV_3D_TRANSPOSE", wrong, conv3d_options(strides=(2, 2, 2)), outputs=out,
                    match=r"its convolution would give extents \[3, 4, 4\], not the input's \[2, 4, 4\]")
    wide = transpose_inputs(rng, (1, 2, 4, 4, 3), (2, 2, 2), (1, 4, 8, 8, 5))
    wide[0] = In(np.array([1, 4, 8, 8, 10], np.int32), const=True)
    assert_rejected("CONV_3D_TRANSPOSE", wide, conv3d_options(strides=(2, 2, 2)), outputs=out,
                    match="has 10 channels, the filter 5")
