"""The comparison the op tests rest on: tests/oplib.assert_close."""
import numpy as np
import pytest

from tests.oplib import assert_close
from tests.tolerance import F32_ULPS

FLT_MAX = np.finfo(np.float32).max


def f32(*values):
    return np.array(values, np.float32)


def test_matching_non_finite_values_pass_and_the_rest_keeps_its_tolerance():
    assert_close(f32(np.inf, -np.inf, np.nan, 1.0), f32(np.inf, -np.inf, np.nan, 1.0 + 2 ** -20))
    with pytest.raises(AssertionError, match="max abs error"):
        assert_close(f32(np.inf, 1.0), f32(np.inf, 1.1))


@pytest.mark.parametrize("ours,theirs", [
    (f32(np.inf, 1.0), f32(FLT_MAX, 1.0)),     # LiteRT clamps inf, we did not
    (f32(-np.inf, 1.0), f32(np.inf, 1.0)),     # wrong sign
    (f32(np.nan, 1.0), f32(np.inf, 1.0)),
    (f32(1.0, 1.0), f32(np.nan, 1.0)),
])
def test_non_finite_values_must_match_exactly(ours, theirs):
    with pytest.raises(AssertionError, match="differ"):
        assert_close(ours, theirs)


def test_flt_max_does_not_widen_the_tolerance():
    """max|theirs| is taken over the other values: FLT_MAX would excuse any error."""
    with pytest.raises(AssertionError, match="max abs error"):
        assert_close(f32(FLT_MAX, 2.0), f32(FLT_MAX, 1.0))


def test_the_default_bound_is_ulps_of_the_largest_magnitude():
    """F32_ULPS float32 steps at max|theirs| pass, one more fails, at any magnitude."""
    for scale in (1e-30, 1.0, 3e4, 1e30):
        step = float(np.spacing(np.float32(scale)))
        theirs = f32(scale, 0.0)
        assert_close(f32(scale, F32_ULPS * step), theirs)
        with pytest.raises(AssertionError, match="max abs error"):
            assert_close(f32(scale, (F32_ULPS + 1) * step), theirs)


def test_a_per_element_bound_is_checked_per_element():
    assert_close(f32(1.5, 10.0), f32(1.0, 10.0), bound=f32(0.5, 0.0))
    with pytest.raises(AssertionError, match=r"at 10\.5 vs 10"):
        assert_close(f32(1.0, 10.5), f32(1.0, 10.0), bound=f32(1.0, 0.25))
