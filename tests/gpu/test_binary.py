"""GPU broadcasting binary ops against the numpy reference, in every precision."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.gpu.gpulib import PRECISIONS, check_gpu
from tests.oplib import In

SHAPES = [  # (a, b, b constant)
    ((1, 5, 6, 7), (1, 5, 6, 7), False),
    ((1, 5, 6, 7), (7,), True),
    ((2, 1, 5), (1, 3, 1), False),
    ((1, 4, 4, 3), (1,), True),
    ((3, 9), (1, 9), False),
    ((1, 8, 8, 16), (1, 1, 1, 16), True),
]


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("activation", [0, 1, 2, 3])
@pytest.mark.parametrize("a_shape,b_shape,b_const", SHAPES)
def test_add(precision, activation, a_shape, b_shape, b_const):
    rng = np.random.default_rng(len(a_shape) * 10 + activation)
    inputs = [In(rng.standard_normal(a_shape).astype(np.float32)),
              In(rng.standard_normal(b_shape).astype(np.float32), const=b_const)]
    check_gpu("ADD", inputs, {"fused_activation_function": activation}, precision)


@settings(max_examples=15, deadline=None)
@given(st.lists(st.integers(1, 9), min_size=1, max_size=4), st.integers(0, 2 ** 31), st.booleans())
def test_add_random_broadcast(shape, seed, swap):
    rng = np.random.default_rng(seed)
    other = [d if rng.random() < 0.5 else 1 for d in shape][rng.integers(0, len(shape)):]
    a, b = rng.standard_normal(shape).astype(np.float32), rng.standard_normal(other or [1]).astype(np.float32)
    if swap:
        a, b = b, a
    check_gpu("ADD", [In(a), In(b)], {"fused_activation_function": 0})
