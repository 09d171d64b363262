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


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 9), min_size=1, max_size=4), st.integers(0, 2 ** 31), st.booleans(),
       st.booleans(), st.booleans())
def test_add_random_broadcast(shape, seed, swap, same_rank, other_const):
    """Operands broadcast any dimension of size 1; a lower-rank one, constant or computed at run
    time, is right-aligned (a runtime one read where it is stored: epilogue.Source.plane)."""
    rng = np.random.default_rng(seed)
    other = [d if rng.random() < 0.5 else 1 for d in shape]
    if not same_rank:
        other = other[rng.integers(0, len(shape)):] or [1]
    inputs = [In(rng.standard_normal(shape).astype(np.float32)),
              In(rng.standard_normal(other).astype(np.float32), const=other_const)]
    check_gpu("ADD", inputs[::-1] if swap else inputs, {"fused_activation_function": 0})


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("shapes", [((1, 37, 12), (37, 12)), ((2, 7, 6), (7, 6)), ((3, 5, 2, 9), (5, 2, 9)),
                                    ((3, 5, 2, 9), (5, 1, 9)), ((4, 6, 10), (6, 1))])
def test_a_runtime_operand_stored_in_another_layout(shapes, precision):
    """[37, 12] + [1, 37, 12] (a ViT's position embedding, computed at run time): the runtime
    [37, 12] is stored as 37x1x1x12 but broadcasts as 1x1x37x12; the kernel finds each pixel by
    its row-major index, in either operand order, and the node runs on the GPU."""
    rng = np.random.default_rng(len(shapes[1]))
    big, small = (In(rng.standard_normal(s).astype(np.float32)) for s in shapes)
    check_gpu("ADD", [big, small], {"fused_activation_function": 0}, precision)
    check_gpu("MUL", [small, big], {"fused_activation_function": 0}, precision)
