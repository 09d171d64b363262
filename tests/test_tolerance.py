"""The bounds of tests/tolerance.py: wide enough for any order of a float sum, narrow enough to
catch a wrong term."""
import numpy as np
import pytest

from tests.oplib import SAME, In, assert_close, conv_options, first_node, single_op_model
from tests.tolerance import F32_U, gamma, sum_bound, ulp_bound


def _cancelling_conv():
    """A 3x3 conv over 32 channels whose 288 products of +-512 cancel to small outputs: the
    accumulator passes 1024 where one float32 step is 1.2e-4, the output stays near 0."""
    rng = np.random.default_rng(0)
    x = rng.uniform(500, 512, (1, 4, 4, 32)).astype(np.float32)
    w = np.where(rng.random((2, 3, 3, 32)) < 0.5, -1.0, 1.0).astype(np.float32)
    inputs = [In(x), In(w, const=True), In(np.zeros(2, np.float32), const=True)]
    model = single_op_model("CONV_2D", inputs, conv_options((1, 1), (1, 1), SAME))
    return first_node(model), [s.value for s in inputs]


def _sum_in_order(terms):
    """A float32 sum left to right: one order an implementation may take."""
    total = np.float32(0)
    for term in terms:
        total = np.float32(total + term)
    return total


def test_sum_bound_covers_a_reordered_sum_and_not_a_wrong_tap():
    node, (x, w, b) = _cancelling_conv()
    bound = sum_bound(node, [x, w, b])[0][0, 1, 1, 0]
    terms = (x[0, :3, :3] * w[0]).ravel()  # output pixel (1, 1), channel 0: products in float32
    # sum|terms| is 288 products of ~506: the bound is 2 gamma(289) of it.
    assert np.isclose(bound, 2 * gamma(289, F32_U) * np.sum(np.abs(terms), dtype=np.float64), rtol=1e-6)
    exact = float(np.sum(terms.astype(np.float64)))
    forward, backward = float(_sum_in_order(terms)), float(_sum_in_order(terms[::-1]))
    assert forward != backward, "the two orders should round differently here"
    assert abs(forward - backward) <= bound and abs(forward - exact) <= bound / 2
    with pytest.raises(AssertionError, match="max abs error"):  # one tap dropped
        assert_close(np.float32([_sum_in_order(terms[1:])]), np.float32([forward]), bound=np.float32([bound]))


def test_sum_bound_skips_ops_that_do_not_sum():
    x = In(np.ones((1, 2, 2, 1), np.float32))
    assert sum_bound(first_node(single_op_model("TANH", [x])), [x.value]) is None


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_ulp_bound_at_the_largest_finite_value_is_finite(dtype):
    """np.spacing of a dtype's max is inf (the next value up): a bound built on it would pass any
    answer. The bound there is the spacing of the top binade, as just below it."""
    info = np.finfo(dtype)
    below = dtype(float(info.max) * 0.75)
    at_max = ulp_bound(np.array([info.max], dtype), ulps=2, dtype=dtype)
    assert np.isfinite(at_max)
    assert at_max == ulp_bound(np.array([below], dtype), ulps=2, dtype=dtype)
