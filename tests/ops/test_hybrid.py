"""Hybrid (dynamic-range) CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED (ops/hybrid.py): float
input, int8 constant weights per tensor or per channel, against LiteRT's builtin kernels on random
one-op models; the on-the-fly input quantization on rows LiteRT quantizes at exact halves; what
SUPPORT refuses; and that the GPU kernels keep refusing hybrid nodes."""
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gles_delegate import ops
from gles_delegate.gpu import kernels as gpu_kernels
from gles_delegate.ops import hybrid
from tests.litert import run_litert
from tests.oplib import (CLAMPS, SAME, VALID, In, assert_close, build_model, check_op, conv_options, reason_of,
                         run_ours, single_op_model, single_op_node, window_out_size)

FEW = settings(max_examples=25, deadline=None)
F32 = np.float32
# Filter scales: one per tensor, one per channel, or one per channel all equal (TFLite then takes
# its per-tensor, symmetric path).
SCALE_KINDS = ["tensor", "channel", "equal"]


def _filter(rng, shape, axis, kind):
    """An int8 constant filter In spec with symmetric scales of `kind` along `axis`."""
    w = rng.integers(-127, 128, shape).astype(np.int8)
    channels = shape[axis]
    if kind == "tensor":
        quant = (float(rng.uniform(0.002, 0.02)), 0)
    else:
        scales = rng.uniform(0.002, 0.02, channels) if kind == "channel" else np.full(channels, 0.007)
        quant = (scales.astype(F32), 0, axis)
    return In(w, const=True, quant=quant)


def _inputs(rng, shape, spread):
    """Float inputs, mostly negative-and-positive, at times all of one sign (ReLU outputs)."""
    x = rng.normal(0, spread, shape).astype(F32)
    return np.abs(x) if rng.random() < 0.3 else x


# -- CONV_2D ------------------------------------------------------------------------------
@FEW
@given(st.integers(1, 3), st.integers(1, 9), st.integers(1, 9), st.integers(1, 9), st.integers(1, 7),
       st.integers(1, 3), st.integers(1, 3), st.integers(1, 2), st.integers(1, 2), st.integers(1, 2),
       st.sampled_from([SAME, VALID]), st.sampled_from(CLAMPS), st.sampled_from(SCALE_KINDS), st.integers(0, 2 ** 31))
def test_conv_2d_hybrid_random(n, h, w, c, o, kh, kw, stride, dh, dw, padding, activation, kind, seed):
    assume(min(window_out_size(h, kh, stride, padding, dh), window_out_size(w, kw, stride, padding, dw)) >= 1)
    rng = np.random.default_rng(seed)
    inputs = [In(_inputs(rng, (n, h, w, c), 2.0)), _filter(rng, (o, kh, kw, c), 0, kind),
              In(rng.normal(0, 1, o).astype(F32), const=True)]
    check_op("CONV_2D", inputs, conv_options((stride, stride), (dh, dw), padding, activation))


@pytest.mark.parametrize("kind", SCALE_KINDS)
def test_conv_2d_hybrid_mobilenet_layers(kind):
    """1x1 and 3x3 layers of MobileNet's sizes, on ReLU6 outputs (all positive)."""
    rng = np.random.default_rng(SCALE_KINDS.index(kind))
    for x_shape, w_shape, stride in [((1, 14, 14, 64), (96, 1, 1, 64), 1), ((2, 9, 9, 16), (24, 3, 3, 16), 2)]:
        x = np.clip(rng.normal(1, 2, x_shape), 0, 6).astype(F32)
        inputs = [In(x), _filter(rng, w_shape, 0, kind), In(rng.normal(0, 1, w_shape[0]).astype(F32), const=True)]
        check_op("CONV_2D", inputs, conv_options((stride, stride), (1, 1), SAME, 3))


# -- DEPTHWISE_CONV_2D --------------------------------------------------------------------
@FEW
@given(st.integers(1, 3), st.integers(1, 9), st.integers(1, 9), st.integers(1, 6), st.integers(1, 3),
       st.integers(1, 3), st.integers(1, 3), st.integers(1, 2), st.integers(1, 2), st.sampled_from([SAME, VALID]),
       st.sampled_from(CLAMPS), st.booleans(), st.integers(0, 2 ** 31))
def test_depthwise_hybrid_random(n, h, w, c, m, kh, kw, stride, dilation, padding, activation, equal, seed):
    assume(min(window_out_size(h, kh, stride, padding, dilation),
               window_out_size(w, kw, stride, padding, dilation)) >= 1)
    rng = np.random.default_rng(seed)
    inputs = [In(_inputs(rng, (n, h, w, c), 2.0)), _filter(rng, (1, kh, kw, c * m), 3, "equal" if equal else "channel"),
              In(rng.normal(0, 1, c * m).astype(F32), const=True)]
    options = dict(conv_options((stride, stride), (dilation, dilation), padding, activation), depth_multiplier=m)
    check_op("DEPTHWISE_CONV_2D", inputs, options)


# -- FULLY_CONNECTED ----------------------------------------------------------------------
@FEW
@given(st.lists(st.integers(1, 4), min_size=0, max_size=2), st.integers(1, 40), st.integers(1, 12),
       st.sampled_from(["tensor", "channel"]), st.booleans(), st.booleans(), st.booleans(), st.sampled_from(CLAMPS),
       st.integers(0, 2 ** 31))
def test_fully_connected_hybrid_random(lead, k, units, kind, asymmetric, keep_num_dims, with_bias, activation, seed):
    rng = np.random.default_rng(seed)
    inputs = [In(_inputs(rng, tuple(lead) + (k,), 3.0)), _filter(rng, (units, k), 0, kind),
              In(rng.normal(0, 1, units).astype(F32), const=True) if with_bias else None]
    options = dict(asymmetric_quantize_inputs=asymmetric, keep_num_dims=keep_num_dims and len(lead) > 0,
                   fused_activation_function=activation)
    check_op("FULLY_CONNECTED", inputs, options)


# -- the on-the-fly input quantization ----------------------------------------------------
def _quantized_by_litert(row, asymmetric):
    """LiteRT's quantized values (q - offset) of one float row, read through a hybrid
    FULLY_CONNECTED with identity weights of scale 1: output j = (q_j - offset) * factor."""
    k = row.size
    inputs = [In(row[None]), In(np.eye(k, dtype=np.int8), const=True, quant=(1.0, 0)), None]
    model = single_op_model("FULLY_CONNECTED", inputs, dict(asymmetric_quantize_inputs=asymmetric))
    return run_litert(model, [row[None]], resolver="builtin")[0][0]


ROWS = {  # rows whose scaled values x / factor land on exact halves: where rounding rules differ
    "symmetric halves": np.array([-0.0625, -0.1875, 0.0625, 0.1875, -2.3125, 2.3125, -15.875, 15.875] * 3, F32),
    "asymmetric halves": np.array([-0.0625, -0.1875, 0.0625, 0.1875, -2.3125, 2.3125, -16.0, 15.875] * 3, F32),
    "all negative": -np.linspace(0.1, 3.0, 19).astype(F32),
    "all positive": np.linspace(0.0, 5.0, 21).astype(F32),
    "zeros": np.zeros(9, F32),
    "random": np.random.default_rng(3).normal(0, 2, 37).astype(F32),
}


@pytest.mark.parametrize("asymmetric", [False, True])
@pytest.mark.parametrize("name", sorted(ROWS))
def test_input_quantization_matches_litert(name, asymmetric):
    row = ROWS[name]
    q, factors, _ = (hybrid.asymmetric_quantize if asymmetric else hybrid.symmetric_quantize)(row[None])
    np.testing.assert_array_equal((q[0] * factors[0]).astype(F32), _quantized_by_litert(row, asymmetric))


def test_asymmetric_offset_and_range():
    """An all-positive row maps 0 to -128; a symmetric spread puts the offset near 0."""
    q, factors, offsets = hybrid.asymmetric_quantize(np.array([[0.0, 1.0, 2.55], [-1.0, 0.0, 1.0]], F32))
    assert offsets[0] == -128 and factors[0] == np.float32(np.float32(2.55) / np.float32(255))
    assert abs(offsets[1]) <= 1
    assert np.all(q + offsets[:, None] >= -128) and np.all(q + offsets[:, None] <= 127)


def test_non_finite_inputs_do_not_crash():
    """Undefined in TFLite: NaN counts as 0 and +-inf as +-FLT_MAX; no exception, no warning (not
    even with numpy errors raised)."""
    x = np.array([[[[np.nan, 1.0], [np.inf, -2.0]], [[-np.inf, 0.5], [3.0, 4.0]]]], F32)
    inputs = [In(x), In(np.ones((2, 1, 1, 2), np.int8), const=True, quant=([0.1, 0.2], 0, 0)),
              In(np.zeros(2, F32), const=True)]
    with np.errstate(all="raise"):
        for op, w in (("CONV_2D", inputs[1]), ("DEPTHWISE_CONV_2D", In(np.ones((1, 1, 1, 2), np.int8), const=True,
                                                                          quant=([0.1, 0.2], 0, 3)))):
            out = run_ours(single_op_model(op, [inputs[0], w, inputs[2]], conv_options((1, 1), (1, 1), SAME, 0)),
                           [x])[0]
            assert out.shape == (1, 2, 2, 2)


def test_omitted_bias_is_zero_bias():
    rng = np.random.default_rng(5)
    x = _inputs(rng, (1, 5, 6, 3), 1.0)
    w = _filter(rng, (4, 3, 3, 3), 0, "channel")
    options = conv_options((1, 1), (1, 1), SAME, 0)
    _, theirs = check_op("CONV_2D", [In(x), w, In(np.zeros(4, F32), const=True)], options)
    assert_close(run_ours(single_op_model("CONV_2D", [In(x), w], options), [x])[0], theirs[0])


# -- refusals -----------------------------------------------------------------------------
X = In(np.zeros((1, 5, 5, 3), F32))
W8 = In(np.zeros((4, 3, 3, 3), np.int8), const=True, quant=(0.1, 0))
B = In(np.zeros(4, F32), const=True)
OUT = [((1, 5, 5, 4), F32, None)]
CONV = conv_options((1, 1), (1, 1), SAME, 0)
DW = dict(CONV, depth_multiplier=2)
REJECTED = [  # (what, model, words the reason must contain)
    ("uint8 weights", build_model("CONV_2D", [X, In(np.zeros((4, 3, 3, 3), np.uint8), const=True, quant=(0.1, 128)), B],
                                  OUT, CONV), "uint8 weights"),
    ("int16 weights", build_model("CONV_2D", [X, In(np.zeros((4, 3, 3, 3), np.int16), const=True, quant=(0.1, 0)), B],
                                  OUT, CONV), "int16 weights"),
    ("int8 output", build_model("CONV_2D", [X, W8, B], [((1, 5, 5, 4), np.int8, (0.1, 0))], CONV), "must be float32"),
    ("int32 bias", build_model("CONV_2D", [X, W8, In(np.zeros(4, np.int32), const=True)], OUT, CONV), "bias"),
    ("no quantization", build_model("CONV_2D", [X, In(np.zeros((4, 3, 3, 3), np.int8), const=True), B], OUT, CONV),
     "no quantization"),
    ("filter zero point", build_model("CONV_2D", [X, In(np.zeros((4, 3, 3, 3), np.int8), const=True, quant=(0.1, 2)),
                                                  B], OUT, CONV), "zero point"),
    ("channel axis", build_model("CONV_2D", [X, In(np.zeros((4, 3, 3, 3), np.int8), const=True,
                                                   quant=([0.1] * 3, 0, 3)), B], OUT, CONV), "dimension 3"),
    ("depthwise per tensor", build_model("DEPTHWISE_CONV_2D", [X, In(np.zeros((1, 3, 3, 6), np.int8), const=True,
                                                                     quant=(0.1, 0)), In(np.zeros(6, F32), const=True)],
                                         [((1, 5, 5, 6), F32, None)], DW), "one filter scale per output channel"),
    ("fc weights", build_model("FULLY_CONNECTED", [In(np.zeros((2, 3), F32)),
                                                   In(np.zeros((4, 3), np.int8), const=True, quant=([0.1] * 3, 0, 1))],
                               [((2, 4), F32, None)]), "dimension 1"),
    ("grouped", build_model("CONV_2D", [X, In(np.zeros((3, 3, 3, 1), np.int8), const=True, quant=(0.1, 0)),
                                        In(np.zeros(3, F32), const=True)], [((1, 5, 5, 3), F32, None)], CONV),
     "grouped hybrid"),
]


@pytest.mark.parametrize("what,model,words", REJECTED, ids=[r[0] for r in REJECTED])
def test_unsupported_hybrid_nodes_give_a_reason(what, model, words):
    reason = reason_of(model)
    assert reason is not None and words in reason, f"{what}: {reason}"


@pytest.mark.parametrize("op,w_shape,axis", [("CONV_2D", (4, 3, 3, 3), 0), ("DEPTHWISE_CONV_2D", (1, 3, 3, 6), 3),
                                             ("FULLY_CONNECTED", (4, 3), 0)])
def test_gpu_kernels_refuse_hybrid_nodes(op, w_shape, axis):
    """The GPU convolution kernels run float32 weights: a hybrid node reaches them only through
    quant.float_view, which dequantizes its weights first. Refused as it is, whatever the
    reference says."""
    x_shape = (2, 3) if op == "FULLY_CONNECTED" else (1, 5, 5, 3)
    channels = w_shape[axis]
    inputs = [In(np.zeros(x_shape, F32)), In(np.ones(w_shape, np.int8), const=True, quant=([0.1] * channels, 0, axis)),
              In(np.zeros(channels, F32), const=True)]
    options = {} if op == "FULLY_CONNECTED" else dict(CONV, depth_multiplier=2) if op == "DEPTHWISE_CONV_2D" else CONV
    node = single_op_node(op, inputs, options)
    assert hybrid.is_hybrid(node) and ops.unsupported_reason(node) is None
    assert gpu_kernels.unsupported_reason(node) is not None
