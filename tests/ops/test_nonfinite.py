"""The reference against LiteRT's builtin kernels on NaN, +-inf and +-FLT_MAX (issue 17, item 5):
NaN, +-inf and +-FLT_MAX exactly where LiteRT has them (tests/nonfinite_cases.py says what
LiteRT does per op)."""
import warnings

import numpy as np
import pytest

from tests.litert import run_litert
from tests.nonfinite_cases import cases
from tests.oplib import assert_close, feeds, run_ours, single_op_model

CASES = cases()


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_nonfinite_matches_litert(case):
    name, op, inputs, options = case
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        model = single_op_model(op, inputs, options)
        ours = run_ours(model, feeds(inputs))[0]
    theirs = run_litert(model, feeds(inputs), resolver="builtin")[0]
    assert np.array_equal(np.isnan(ours), np.isnan(theirs)), f"{name}: NaN at {np.isnan(ours).ravel()} vs " \
                                                              f"LiteRT's {np.isnan(theirs).ravel()}"
    assert_close(ours, theirs, what=name)


def test_cases_hold_nan_in_and_out():
    """Every case feeds a NaN; the RELU family passes it through (the GPU once clamped it away)."""
    for name, op, inputs, options in CASES:
        assert any(np.isnan(s.value).any() for s in inputs if s.value.dtype == np.float32), name
