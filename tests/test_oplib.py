"""The comparison the op tests rest on: tests/oplib.assert_close."""
import numpy as np
import pytest

from tests.oplib import assert_close

FLT_MAX = np.finfo(np.float32).max


def f32(*values):
    return np.array(values, np.float32)


def test_matching_non_finite_values_pass_and_the_rest_keeps_its_tolerance():
    assert_close(f32(np.inf, -np.inf, np.nan, 1.0), f32(np.inf, -np.inf, np.nan, 1.0 + 1e-6))
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
