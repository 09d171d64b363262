"""STABLEHLO_REDUCE_WINDOW and REDUCE_WINDOW reference kernels (ops/reduce_window.py) against
LiteRT's builtin kernels: every body op LiteRT recognises, float and integer types, padding
(asymmetric, and negative: cropping), base and window dilations, strides, windows along any
dimension, ranks 1-6, an init value that is not the op's identity, NaN where a max meets it in
window order; float sums within tolerance.sum_bound, everything else exactly. Then what the
reference refuses: a body of two ops, a type mismatch, bad attributes."""
import numpy as np
import pytest

from gles_delegate import Interpreter, ModelError
from gles_delegate.tools import common
from tests.litert import run_litert
from tests.oplib import assert_close, first_node, reason_of, run_ours
from tests.reduce_window_models import Window, deprecated_window_model, window_model
from tests.tolerance import sum_bound

# (input shape, window, body op, init): float32
FLOAT_CASES = [
    ((1, 6, 7, 5), Window((1, 3, 3, 1), (1, 2, 2, 1), padding=(0, 0, 1, 2, 1, 2, 0, 0)), "ADD", 0.0),  # avg_pool2d(ceil)
    ((1, 6, 7, 5), Window((1, 3, 3, 1), (1, 2, 2, 1), padding=(0, 0, 1, 1, 1, 1, 0, 0)), "MAXIMUM", -np.inf),
    ((2, 5, 5, 3), Window((1, 2, 2, 1)), "STABLEHLO_MAXIMUM", 0.0),  # init above some windows' max
    ((1, 4, 5, 6), Window((1, 1, 1, 3), padding=(0, 0, 0, 0, 0, 0, 1, 1)), "STABLEHLO_ADD", 0.0),  # channels (LRN)
    ((1, 5, 6, 2), Window((1, 2, 3, 1), base_dilations=(1, 2, 2, 1), window_dilations=(1, 2, 1, 1)), "ADD", 0.5),
    ((1, 7, 8, 2), Window((1, 2, 2, 1), (1, 1, 2, 1), padding=(0, 0, -1, 0, 0, -2, 0, 0)), "MINIMUM", np.inf),
    ((3, 4, 5), Window((1, 3, 2), (1, 1, 2), padding=(0, 0, 2, 0, 1, 1)), "STABLEHLO_MINIMUM", 1e30),
    ((9,), Window((4,), (3,), padding=(2, 3)), "ADD", 0.0),
    ((4, 6), Window((2, 3), (2, 1)), "MUL", 1.0),
    ((2, 3, 4, 5, 2), Window((1, 2, 2, 2, 1), (1, 1, 2, 1, 1), padding=(0, 0, 1, 0, 0, 1, 1, 1, 0, 0)), "ADD", 0.0),
    ((1, 2, 3, 2, 3, 2), Window((2, 1, 2, 2, 2, 1)), "STABLEHLO_MULTIPLY", 1.0),
    ((1, 3, 3, 2), Window((1, 3, 3, 1), padding=(0, 0, 2, 2, 2, 2, 0, 0)), "ADD", 0.25),  # windows all padding
]


def case_id(case):
    shape, window, op, _ = case
    return f"{'x'.join(map(str, shape))}-{op}-w{'.'.join(map(str, window.window))}"


def compare(model, values):
    ours = run_ours(model, values, cpu_backend="reference")
    theirs = run_litert(model, values, resolver="builtin")
    node = first_node(model)
    fed = iter(values)
    bounds = sum_bound(node, [np.asarray(t.data) if t.is_const else next(fed) for t in node.inputs])
    for k, (a, b) in enumerate(zip(ours, theirs)):
        if bounds is None:
            np.testing.assert_array_equal(a, b, err_msg=f"output {k}")
        else:
            assert_close(a, b, bounds[k], what=f"output {k}")
    return ours[0], theirs[0]


@pytest.mark.parametrize("case", FLOAT_CASES, ids=case_id)
def test_float_windows(case):
    shape, window, op, init = case
    x = np.random.default_rng(len(shape)).normal(0, 2, shape).astype(np.float32)
    ours, _ = compare(window_model(shape, window, op, init), [x])
    assert ours.shape == window.out_shape(shape)


def test_max_takes_nan_only_where_it_comes_last():
    """LiteRT's max is acc >= x ? acc : x: a NaN tap wins, and a later number replaces it; of
    two equal values (0.0 and -0.0) the earlier stays."""
    x = np.arange(12, dtype=np.float32).reshape(1, 12)
    x[0, 2], x[0, 7] = np.nan, np.nan
    x[0, 9:] = [0.0, -0.0, 0.0]
    for op, init in (("MAXIMUM", -np.inf), ("MINIMUM", np.inf), ("MAXIMUM", -0.0), ("MINIMUM", 0.0)):
        ours, theirs = compare(window_model((1, 12), Window((1, 3)), op, init), [x])
        assert np.isnan(ours).any() and not np.isnan(ours).all()
        np.testing.assert_array_equal(np.signbit(ours), np.signbit(theirs))


@pytest.mark.parametrize("dtype,op,init", [(np.int32, "ADD", 7), (np.int32, "MAXIMUM", -(2 ** 31)),
                                           (np.int8, "ADD", 0), (np.int8, "MINIMUM", 127), (np.int64, "MUL", 1),
                                           (np.uint8, "STABLEHLO_MAXIMUM", 0), (np.int16, "ADD", -3)])
def test_integer_windows_wrap_as_litert(dtype, op, init):
    info = np.iinfo(dtype)
    x = np.random.default_rng(3).integers(info.min, info.max, (2, 6, 5, 3), endpoint=True).astype(dtype)
    window = Window((1, 3, 2, 1), (1, 2, 1, 1), padding=(0, 0, 1, 1, 0, 1, 0, 0))
    compare(window_model(x.shape, window, op, init, dtype), [x])


@pytest.mark.parametrize("op,init", [("LOGICAL_OR", False), ("STABLEHLO_AND", True), ("MAXIMUM", False)])
def test_bool_windows(op, init):
    x = np.random.default_rng(4).random((1, 5, 6, 2)) < 0.3
    compare(window_model(x.shape, Window((1, 2, 3, 1), padding=(0, 0, 1, 0, 1, 1, 0, 0)), op, init, np.bool_), [x])


@pytest.mark.parametrize("function,init", [("add", 0.0), ("max", -np.inf), ("min", 3.0), ("mul", 1.0)])
def test_deprecated_reduce_window(function, init):
    x = np.random.default_rng(5).normal(0, 1, (1, 6, 5, 3)).astype(np.float32)
    model = deprecated_window_model(x.shape, Window((1, 2, 3, 1), (1, 2, 1, 1), window_dilations=(1, 1, 2, 1)),
                                    function, init)
    if common.litert() is None:
        pytest.skip("LiteRT is the oracle here")
    compare(model, [x])


def test_a_constant_input_folds_at_load():
    """litert-torch's count of an average pool's taps: a window sum of a constant, folded (no node)."""
    ones = np.ones((1, 6, 7, 1), np.float32)
    window = Window((1, 3, 3, 1), (1, 2, 2, 1), padding=(0, 0, 1, 2, 1, 2, 0, 0))
    interpreter = Interpreter(model_content=window_model(ones.shape, window, const_input=ones),
                              cpu_backend="reference")
    interpreter.allocate_tensors()
    interpreter.invoke()
    counts = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
    assert counts[0, 0, 0, 0] == 4 and counts[0, 1, 1, 0] == 9 and counts.max() == 9


@pytest.mark.parametrize("model,match", [
    (window_model((1, 4, 4, 2), Window((1, 2, 2, 1)), None), "anything but one binary op"),
    (window_model((1, 4, 4, 2), Window((1, 2, 2, 1)), "SUB"), "a body subgraph of SUB"),
    (window_model((1, 4, 4, 2), Window((1, 2, 2, 1)), "ADD", 0, np.bool_), "bool window reduced by ADD"),
    (window_model((1, 4, 4, 2), Window((1, 2, 2)), "ADD", out_shape=(1, 3, 3, 2)), "window_dimensions holds 3 values"),
    (window_model((1, 4, 4, 2), Window((1, 0, 2, 1)), "ADD", out_shape=(1, 3, 3, 2)), "must all be positive"),
    (window_model((1, 4, 4, 2), Window((1, 2, 2, 1), padding=(0, 0, -4, 0, 0, 0, 0, 0)), "ADD"),
     "leaves an empty tensor"),
])
def test_refusals_name_the_node(model, match):
    assert match in reason_of(model)
    with pytest.raises(ModelError, match=r"STABLEHLO_REDUCE_WINDOW"):
        Interpreter(model_content=model, cpu_backend="reference").allocate_tensors()
