"""GPU broadcasting binary ops against the numpy reference, in every precision."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gles_delegate.gpu import kernels
from tests.gpu.gpulib import PRECISIONS, check_gpu
from tests.litert import LiteRTInterpreter
from tests.oplib import In, node_with_output, single_op_model

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


NAN, INF = np.float32(np.nan), np.float32(np.inf)
# (base, exponent, C's powf): negative bases to even, odd and negative integer powers; to a
# non-integer power (NaN); zeros (0^0 = 1, 0^-y = +inf, -0 to an odd power keeps its sign);
# NaN (x^0 = 1, 1^y = 1); infinities.
POW_CASES = [(-2, 2, 4), (-2, 3, -8), (-1.5, 2, 2.25), (-1.5, -1, -1 / 1.5), (-3, 1, -3), (-0.5, -2, 4),
             (-8, 2, 64), (-2, -3, -0.125), (-2, 0.5, NAN), (-1.5, -0.25, NAN), (0, 0, 1), (0, -1, INF),
             (0, -2, INF), (0, -0.5, INF), (0, 2, 0), (0, 0.5, 0), (-0.0, -1, -INF), (-0.0, 3, -0.0), (-0.0, 0, 1),
             (NAN, 0, 1), (1, NAN, 1), (NAN, 1, NAN), (-1, NAN, NAN), (2, 3, 8), (2.5, 1.5, 2.5 ** 1.5),
             (-1, INF, 1), (-2, INF, INF), (-0.5, INF, 0), (2, -INF, 0), (-INF, 3, -INF), (-INF, -3, -0.0),
             (-INF, 0.5, INF), (INF, -1, 0), (-1, 7, -1), (-1, 8, 1)]


@pytest.mark.parametrize("precision", PRECISIONS)
def test_pow_runtime_exponent(precision):
    """TFLite's POW is C's powf: GLSL's pow is undefined for a negative base and for 0 to a power
    <= 0 (llvmpipe gave NaN for (-2)^3 and 0 for 0^0); the reference is checked too."""
    base, exponent, expected = (np.array(column, np.float32).reshape(1, -1) for column in zip(*POW_CASES))
    reference, _ = check_gpu("POW", [In(base), In(exponent)], {}, precision)
    np.testing.assert_allclose(reference[0], expected, rtol=1e-6)
    signed = ~np.isnan(expected)
    np.testing.assert_array_equal(np.signbit(reference[0])[signed], np.signbit(expected)[signed])


# (y, x) where C's atan2f has its own answer: signed zeros (+-0 or +-pi), a zero x (+-pi / 2),
# infinities (+-pi / 4, +-3 pi / 4, +-0, +-pi), NaN.
ATAN2_SPECIALS = [(0.0, 1.0), (-0.0, 1.0), (0.0, -1.0), (-0.0, -1.0), (0.0, 0.0), (-0.0, 0.0), (0.0, -0.0),
                  (-0.0, -0.0), (2.0, 0.0), (-2.0, -0.0), (INF, INF), (INF, -INF), (-INF, INF), (-INF, -INF),
                  (3.0, INF), (-3.0, INF), (3.0, -INF), (-3.0, -INF), (INF, 2.0), (-INF, -2.0), (NAN, 1.0),
                  (1.0, NAN)]


@pytest.mark.parametrize("precision", PRECISIONS)
def test_atan2_in_every_quadrant_and_at_c_s_special_values(precision):
    """TFLite's ATAN2 is C's atan2f of two tensors of one shape: values of every quadrant and
    magnitude, then the special values (GLSL's atan(y, x) is undefined at 0, 0), their signs too."""
    rng = np.random.default_rng(4)
    y, x = (rng.standard_normal((2, 5, 7)) * 10.0 ** rng.integers(-3, 4, (2, 5, 7)) for _ in range(2))
    check_gpu("ATAN2", [In(y.astype(np.float32)), In(x.astype(np.float32))], {}, precision)
    y, x = (np.array(column, np.float32).reshape(1, -1) for column in zip(*ATAN2_SPECIALS))
    reference, gpu = check_gpu("ATAN2", [In(y), In(x)], {}, precision)
    np.testing.assert_allclose(reference[0], np.arctan2(y, x), rtol=1e-6)
    signed = ~np.isnan(reference[0])
    np.testing.assert_array_equal(np.signbit(gpu[0])[signed], np.signbit(reference[0])[signed])


def test_atan2_of_two_shapes_stays_off_the_gpu():
    """TFLite's ATAN2 takes operands of one shape (no broadcast): the reference's refusal is the
    kernel's."""
    node = node_with_output("ATAN2", [In(np.ones((2, 3), np.float32)), In(np.ones((3,), np.float32))], (2, 3))
    assert "shapes" in kernels.unsupported_reason(node)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("exponent", [3.0, 2.0, -1.0, -2.0, 0.0, 0.5, 1.0])
def test_pow_constant_exponent(exponent, precision):
    """tf.pow(x, c): a constant scalar exponent (the kernel's scalar operand) on negative, zero
    and NaN bases, as either operand. (No infinite base: there the reference, numpy's sqrt for a
    scalar 0.5, gives NaN for -inf, and LiteRT's FLT_MAX for inf^2 and inf^3; C's powf, which the
    GPU computes, and LiteRT's POW of two runtime tensors give +inf.)"""
    x = np.array([-2, -1.5, -0.5, -0.0, 0, 0.5, 3, NAN, -1, 1, -3], np.float32).reshape(1, 11)
    c = In(np.array(exponent, np.float32), const=True)
    check_gpu("POW", [In(x), c], {}, precision)
    check_gpu("POW", [c, In(x)], {}, precision)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("count, constant", [(2, ()), (3, (1,)), (9, (0, 4))])
def test_add_n(precision, count, constant):
    """ADD_N of 2 to ADD_N_MAX_INPUTS inputs (some constant) in one dispatch."""
    rng = np.random.default_rng(count)
    inputs = [In(rng.standard_normal((1, 5, 6, 7)).astype(np.float32), const=k in constant) for k in range(count)]
    check_gpu("ADD_N", inputs, {}, precision)


def test_add_n_clamps_each_sum_as_litert():
    """LiteRT's AddN clamps after every addition: FLT_MAX + FLT_MAX - FLT_MAX is FLT_MAX - FLT_MAX
    = 0, not inf - FLT_MAX = inf; inf + -inf is NaN; a NaN stays NaN; a first input of inf
    becomes FLT_MAX once added to."""
    big = np.finfo(np.float32).max
    first = np.array([big, big, INF, NAN, 1, -big], np.float32).reshape(1, 6)
    second = np.array([big, 1, -INF, 1, NAN, -big], np.float32).reshape(1, 6)
    third = np.array([-big, 0, 0, 0, 1, big], np.float32).reshape(1, 6)
    inputs = [In(first), In(second), In(third)]
    reference, _ = check_gpu("ADD_N", inputs, {})
    np.testing.assert_array_equal(reference[0], np.array([[0, big, NAN, NAN, NAN, 0]], np.float32))
    litert = LiteRTInterpreter(model_content=single_op_model("ADD_N", inputs, {}))
    litert.allocate_tensors()
    for detail, value in zip(litert.get_input_details(), (first, second, third)):
        litert.set_tensor(detail["index"], value)
    litert.invoke()
    np.testing.assert_array_equal(litert.get_tensor(litert.get_output_details()[0]["index"]), reference[0])


def test_add_n_of_more_inputs_than_the_kernel_adds_stays_on_the_cpu():
    from gles_delegate.gpu.kernels.binary import ADD_N_MAX_INPUTS
    rng = np.random.default_rng(0)
    inputs = [In(rng.standard_normal((2, 3)).astype(np.float32)) for _ in range(ADD_N_MAX_INPUTS + 1)]
    check_gpu("ADD_N", inputs, {}, gpu_nodes=0)
