"""AVERAGE_POOL_2D and MAX_POOL_2D: the numpy reference against LiteRT, on random single-op
models and on every pooling node of the MediaPipe models."""
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gles_delegate import Interpreter, ModelError, ops
from tests.litert import RESOLVERS, LiteRTInterpreter
from tests.oplib import (BUILTIN_ONLY_MODELS, CLAMPS, SAME, VALID, In, build_model, check_model_nodes, check_op,
                         reason_of, window_out_size)

POOLS = ["AVERAGE_POOL_2D", "MAX_POOL_2D"]
FLOAT_POOLS = POOLS + ["L2_POOL_2D"]  # L2_POOL_2D is float32 only in TFLite


def _options(filter_hw, strides, padding, activation):
    return dict(padding=padding, filter_height=filter_hw[0], filter_width=filter_hw[1], stride_h=strides[0],
                stride_w=strides[1], fused_activation_function=activation)


CASES = [  # (x shape, filter, strides)
    ((1, 1, 1, 3), (3, 3), (1, 1)),    # 1x1 input: SAME windows hold one element
    ((2, 7, 9, 3), (2, 3), (2, 2)),    # odd sizes, batch 2
    ((1, 8, 8, 2), (2, 2), (3, 3)),    # stride > filter
    ((1, 5, 6, 4), (5, 6), (1, 1)),    # filter as large as the input
    ((1, 9, 9, 1), (3, 3), (1, 2)),    # unequal strides
    ((1, 6, 6, 5), (1, 1), (1, 1)),    # identity window
]


@pytest.mark.parametrize("padding", [SAME, VALID])
@pytest.mark.parametrize("x_shape,filter_hw,strides", CASES)
@pytest.mark.parametrize("op", FLOAT_POOLS)
def test_pool_float_cases(op, x_shape, filter_hw, strides, padding):
    rng = np.random.default_rng(sum(x_shape) + padding)
    if min(window_out_size(s, k, st_, padding) for s, k, st_ in zip(x_shape[1:3], filter_hw, strides)) < 1:
        pytest.skip("the VALID window does not fit")
    x = rng.uniform(-2, 2, x_shape).astype(np.float32)
    for activation in CLAMPS:
        check_op(op, [In(x)], _options(filter_hw, strides, padding, activation))


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(FLOAT_POOLS), st.integers(1, 2), st.integers(1, 11), st.integers(1, 11), st.integers(1, 5),
       st.integers(1, 5), st.integers(1, 5), st.integers(1, 4), st.integers(1, 4),
       st.sampled_from([SAME, VALID]), st.sampled_from(CLAMPS), st.integers(0, 2 ** 31))
def test_pool_float_random(op, n, h, w, c, fh, fw, sh, sw, padding, activation, seed):
    assume(min(window_out_size(h, fh, sh, padding), window_out_size(w, fw, sw, padding)) >= 1)
    x = np.random.default_rng(seed).uniform(-2, 2, (n, h, w, c)).astype(np.float32)
    check_op(op, [In(x)], _options((fh, fw), (sh, sw), padding, activation))


@pytest.mark.parametrize("activation", CLAMPS)
@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("op", POOLS)
def test_pool_quantized(op, dtype, activation):
    """Exact: TFLite pools the raw integers, rounding averages half away from zero."""
    rng = np.random.default_rng(activation)
    info = np.iinfo(dtype)
    # The output shares the input's quantization, as TFLite requires; a zero point inside the
    # range and a small scale make every activation clamp bite.
    quant = (0.02, int(rng.integers(info.min + 40, info.max - 40)))
    for x_shape, filter_hw, strides in CASES:
        x = rng.integers(info.min, info.max + 1, x_shape).astype(dtype)
        for padding in (SAME, VALID):
            if min(window_out_size(s, k, st_, padding) for s, k, st_ in zip(x_shape[1:3], filter_hw, strides)) < 1:
                continue
            check_op(op, [In(x, quant=quant)], _options(filter_hw, strides, padding, activation), output_quant=[quant])


@pytest.mark.parametrize("activation", CLAMPS)
@pytest.mark.parametrize("op", FLOAT_POOLS)
def test_infinities_clamp_to_flt_max(op, activation):
    """TFLite clamps a pool's output to the activation's range within +-FLT_MAX: an infinite max
    or average becomes +-FLT_MAX, with or without activation (an L2 pool's square overflows from
    2e19 on, and a NaN stays NaN)."""
    x = np.random.default_rng(1).uniform(-2, 2, (1, 6, 6, 2)).astype(np.float32)
    x[0, 1, 1, 0], x[0, 4, 3, 1], x[0, 0, 4, 1] = np.inf, -np.inf, 3e19
    if op == "L2_POOL_2D":
        x[0, 5, 0, 0] = np.nan
    check_op(op, [In(x)], _options((2, 2), (1, 1), SAME, activation))


def test_average_pool_rounds_half_away_from_zero():
    """Sums of +-1 over windows of 2 land on exact halves; TFLite rounds them away from zero."""
    x = np.array([1, 0, -1, 0, 1, 2, -1, -2], np.int8).reshape(1, 1, 8, 1)
    quant = (0.5, 0)
    ours, _ = check_op("AVERAGE_POOL_2D", [In(x, quant=quant)], _options((1, 2), (1, 2), VALID, 0),
                       output_quant=[quant])
    assert ours[0].ravel().tolist() == [1, -1, 2, -2]


def _resized_output(interpreter, x):
    """The output of a one-input model after resizing its input to x's shape."""
    interpreter.resize_tensor_input(0, x.shape)
    interpreter.allocate_tensors()
    interpreter.set_tensor(0, x)
    interpreter.invoke()
    return interpreter.get_tensor(interpreter.get_output_details()[0]["index"])


def _resizable_pool(op, padding):
    """An 8x8 window (stride 8) over an 8x8 input: one window, whichever the padding."""
    return build_model(op, [In(np.zeros((1, 8, 8, 3), np.float32))], [((1, 1, 1, 3), np.float32, None)],
                       _options((8, 8), (8, 8), padding, 0))


@pytest.mark.parametrize("op", FLOAT_POOLS)
def test_input_resized_below_a_valid_window(op):
    """No VALID window fits a 4x4 input: TFLite's pool outputs an empty tensor (which any next
    node refuses); ours refuses the node at allocate_tensors, as it does a model that declares it."""
    x = np.ones((1, 4, 4, 3), np.float32)
    litert = LiteRTInterpreter(model_content=_resizable_pool(op, VALID),
                               experimental_op_resolver_type=RESOLVERS["builtin"])
    assert _resized_output(litert, x).size == 0
    ours = Interpreter(model_content=_resizable_pool(op, VALID))
    ours.resize_tensor_input(0, x.shape)
    with pytest.raises(ModelError, match=rf"#0 \({op}\).*8x8 window over a 4x4 input.*does not fit"):
        ours.allocate_tensors()


@pytest.mark.parametrize("op", FLOAT_POOLS)
def test_input_resized_below_a_same_window(op):
    """A SAME window larger than the resized input still pools its in-bounds elements, as in LiteRT."""
    x = np.random.default_rng(4).uniform(-2, 2, (1, 4, 4, 3)).astype(np.float32)
    litert = LiteRTInterpreter(model_content=_resizable_pool(op, SAME),
                               experimental_op_resolver_type=RESOLVERS["builtin"])
    expected = _resized_output(litert, x)
    ours = Interpreter(model_content=_resizable_pool(op, SAME), cpu_backend="fallback")
    np.testing.assert_allclose(_resized_output(ours, x), expected, rtol=1e-6)


def test_selfie_segmentation_resized_below_its_global_pools(mediapipe_models):
    """At 128x128 the 64x64 VALID pool #12 reads a 32x32 input (LiteRT fails at the CONV_2D after it)."""
    interpreter = Interpreter(model_path=str(mediapipe_models["selfie_segmentation"]))
    interpreter.resize_tensor_input(0, [1, 128, 128, 3])
    with pytest.raises(ModelError, match=r"#12 \(AVERAGE_POOL_2D\).*64x64 window over a 32x32 input"):
        interpreter.allocate_tensors()


@pytest.mark.parametrize("name", BUILTIN_ONLY_MODELS)
def test_mediapipe_model_pools(mediapipe_models, name):
    check_model_nodes(str(mediapipe_models[name]), set(ops.pool.KERNELS))


X = In(np.zeros((1, 5, 5, 3), np.float32))
OUT = [((1, 5, 5, 3), np.float32, None)]
REJECTED = [  # (what, model, words the reason must contain)
    ("padding", build_model("MAX_POOL_2D", [X], OUT, _options((2, 2), (1, 1), 2, 0)), "padding 2"),
    ("stride 0", build_model("MAX_POOL_2D", [X], OUT, _options((2, 2), (0, 1), SAME, 0)), "strides"),
    ("filter 0", build_model("AVERAGE_POOL_2D", [X], OUT, _options((0, 2), (1, 1), SAME, 0)), "filter"),
    ("tanh", build_model("AVERAGE_POOL_2D", [X], OUT, _options((2, 2), (1, 1), SAME, 4)), "activation 4"),
    ("no window", build_model("MAX_POOL_2D", [X], [((1, 1, 1, 3), np.float32, None)],
                              _options((6, 2), (1, 1), VALID, 0)), "does not fit"),
    ("rank", build_model("MAX_POOL_2D", [In(np.zeros((5, 5, 3), np.float32))], [((5, 5, 3), np.float32, None)],
                         _options((2, 2), (1, 1), SAME, 0)), "rank 3"),
    ("int16", build_model("MAX_POOL_2D", [In(np.zeros((1, 5, 5, 3), np.int16), quant=(0.1, 0))],
                          [((1, 5, 5, 3), np.int16, (0.1, 0))], _options((2, 2), (1, 1), SAME, 0)), "int16"),
    ("l2 int8", build_model("L2_POOL_2D", [In(np.zeros((1, 5, 5, 3), np.int8), quant=(0.1, 0))],
                            [((1, 5, 5, 3), np.int8, (0.1, 0))], _options((2, 2), (1, 1), SAME, 0)),
     "float32, unchanged"),
    ("unquantized", build_model("MAX_POOL_2D", [In(np.zeros((1, 5, 5, 3), np.int8))], [((1, 5, 5, 3), np.int8, None)],
                                _options((2, 2), (1, 1), SAME, 0)), "quantized per tensor"),
]


@pytest.mark.parametrize("what,model,words", REJECTED, ids=[r[0] for r in REJECTED])
def test_unsupported_pools_give_a_reason(what, model, words):
    reason = reason_of(model)
    assert reason is not None and words in reason, f"{what}: {reason!r}"
