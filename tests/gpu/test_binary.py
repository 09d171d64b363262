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
@given(st.lists(st.integers(1, 9), min_size=1, max_size=4), st.integers(0, 2 ** 31), st.booleans(),
       st.booleans())
def test_add_random_broadcast(shape, seed, swap, same_rank):
    """Same-rank runtime operands broadcast any dimension of size 1; a lower-rank operand is
    a constant (packed in the broadcast layout)."""
    rng = np.random.default_rng(seed)
    other = [d if rng.random() < 0.5 else 1 for d in shape]
    if not same_rank:
        other = other[rng.integers(0, len(shape)):] or [1]
    inputs = [In(rng.standard_normal(shape).astype(np.float32)),
              In(rng.standard_normal(other).astype(np.float32), const=not same_rank)]
    check_gpu("ADD", inputs[::-1] if swap else inputs, {"fused_activation_function": 0})


def test_layout_changing_broadcast_runs_on_the_cpu():
    """[2, 5] + [1, 2, 5]: the runtime [2, 5] is stored as 2x1x1x5 but broadcasts as 1x1x2x5,
    so the GPU declines the node and the CPU computes it."""
    rng = np.random.default_rng(1)
    inputs = [In(rng.standard_normal((1, 2, 5)).astype(np.float32)), In(rng.standard_normal((2, 5)).astype(np.float32))]
    reference, gpu = check_gpu("ADD", inputs, {"fused_activation_function": 0}, gpu_nodes=0)
    assert np.allclose(gpu[0], inputs[0].value + inputs[1].value)
