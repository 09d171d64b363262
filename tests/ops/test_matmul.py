"""BATCH_MATMUL: the numpy reference against LiteRT over ranks 2 to 5, broadcast batch dimensions,
every adj_x / adj_y combination, runtime and constant operands, special values, the int8 / int16
quantized forms and int8 -> int32; and the variants it refuses."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.oplib import In, assert_rejected, check_op

ADJOINTS = [(False, False), (False, True), (True, False), (True, True)]
CASES = [  # lhs batch dims, rhs batch dims, M, K, N
    ((), (), 3, 5, 4),                 # plain matrices
    ((2,), (2,), 1, 7, 1),             # one row, one column
    ((2, 3), (2, 3), 4, 6, 5),         # attention-shaped: [batch, heads, ...]
    ((2, 1), (1, 3), 3, 4, 2),         # both sides broadcast
    ((3,), (), 5, 8, 6),               # rhs shared by every batch (rank 3 x rank 2)
    ((), (2, 2), 2, 3, 9),             # lhs shared (rank 2 x rank 4)
    ((2, 1, 3), (2, 1), 2, 5, 3),      # rank 5 x rank 4
    ((1, 2, 3), (2, 1, 3), 3, 2, 2),   # rank 5 x rank 5, broadcast both ways
]


def _stored(rng, batch, rows, cols, adjoint, scale=1.0):
    """A [batch..., rows, cols] operand, stored transposed ([..., cols, rows]) when `adjoint`."""
    shape = tuple(batch) + ((cols, rows) if adjoint else (rows, cols))
    return rng.uniform(-scale, scale, shape).astype(np.float32)


def _operands(rng, case, adj_x, adj_y):
    lhs_batch, rhs_batch, m, k, n = case
    return _stored(rng, lhs_batch, m, k, adj_x, 2.0), _stored(rng, rhs_batch, k, n, adj_y)


@pytest.mark.parametrize("adj_x,adj_y", ADJOINTS)
@pytest.mark.parametrize("case", CASES)
def test_float_cases(case, adj_x, adj_y):
    rng = np.random.default_rng(CASES.index(case))
    lhs, rhs = _operands(rng, case, adj_x, adj_y)
    options = dict(adj_x=adj_x, adj_y=adj_y)
    check_op("BATCH_MATMUL", [In(lhs), In(rhs)], options)
    check_op("BATCH_MATMUL", [In(lhs), In(rhs, const=True)], options)
    check_op("BATCH_MATMUL", [In(lhs, const=True), In(rhs)], options)


@settings(max_examples=20, deadline=None)
@given(st.lists(st.integers(1, 3), max_size=3), st.lists(st.integers(1, 3), max_size=3), st.integers(1, 9),
       st.integers(1, 9), st.integers(1, 9), st.booleans(), st.booleans(), st.integers(0, 2 ** 31))
def test_float_random(lhs_batch, rhs_batch, m, k, n, adj_x, adj_y, seed):
    """Random batch dimensions made to broadcast: where both sides have a dimension and they
    differ, the rhs's becomes 1."""
    common = min(len(lhs_batch), len(rhs_batch))
    for i in range(1, common + 1):
        if lhs_batch[-i] != rhs_batch[-i]:
            rhs_batch[-i] = 1
    rng = np.random.default_rng(seed)
    lhs, rhs = _operands(rng, (lhs_batch, rhs_batch, m, k, n), adj_x, adj_y)
    check_op("BATCH_MATMUL", [In(lhs), In(rhs)], dict(adj_x=adj_x, adj_y=adj_y))


@pytest.mark.parametrize("adj_x,adj_y", ADJOINTS)
def test_special_values(adj_x, adj_y):
    """NaN, +-inf, -0 and huge values propagate as LiteRT's float sums do (inf * 0 is NaN, +inf
    and -inf in one sum NaN). The huge value's products stay finite: whether a product that
    overflows becomes inf before it is added depends on FMA, which neither side promises."""
    rng = np.random.default_rng(5)
    lhs, rhs = _operands(rng, ((2,), (2,), 4, 6, 5), adj_x, adj_y)
    lhs.reshape(-1)[[0, 7, 13]] = [np.nan, np.inf, -np.inf]
    rhs.reshape(-1)[[3, 11, 20]] = [0.0, -0.0, 1e37]
    check_op("BATCH_MATMUL", [In(lhs), In(rhs)], dict(adj_x=adj_x, adj_y=adj_y))


# -- quantized ----------------------------------------------------------------------------
def _quantized(rng, dtype, case, adj_x, adj_y):
    """int8 (asymmetric) or int16 (zero points 0) operands and an output scale that spreads the
    sums over about +-60 output steps (int8) / +-8000 (int16)."""
    lhs_batch, rhs_batch, m, k, n = case
    info = np.iinfo(dtype)
    lhs = _stored(rng, lhs_batch, m, k, adj_x, info.max).round().astype(dtype)
    rhs = _stored(rng, rhs_batch, k, n, adj_y, info.max).round().astype(dtype)
    lhs_q = (float(rng.uniform(0.01, 0.05)), int(rng.integers(-20, 21)) if dtype == np.int8 else 0)
    rhs_q = (float(rng.uniform(0.002, 0.02)), int(rng.integers(-20, 21)) if dtype == np.int8 else 0)
    spread = info.max * info.max / 3 * np.sqrt(k)
    steps = 60 if dtype == np.int8 else 8000
    out_q = (lhs_q[0] * rhs_q[0] * spread / steps, int(rng.integers(-10, 11)) if dtype == np.int8 else 0)
    return lhs, rhs, lhs_q, rhs_q, out_q


@pytest.mark.parametrize("dtype", [np.int8, np.int16])
@pytest.mark.parametrize("adj_x,adj_y", ADJOINTS)
def test_quantized(dtype, adj_x, adj_y):
    rng = np.random.default_rng(int(adj_x) * 2 + int(adj_y))
    for case in CASES[:7]:
        lhs, rhs, lhs_q, rhs_q, out_q = _quantized(rng, dtype, case, adj_x, adj_y)
        for rhs_const in (False, True):
            check_op("BATCH_MATMUL", [In(lhs, quant=lhs_q), In(rhs, const=rhs_const, quant=rhs_q)],
                     dict(adj_x=adj_x, adj_y=adj_y), output_quant=[out_q])


@pytest.mark.parametrize("adj_x,adj_y", ADJOINTS)
def test_int8_to_int32(adj_x, adj_y):
    """int8 x int8 -> int32: the raw products (LiteRT ignores the zero points)."""
    rng = np.random.default_rng(9)
    for case in CASES[2:5]:
        lhs, rhs, lhs_q, rhs_q, _ = _quantized(rng, np.int8, case, adj_x, adj_y)
        check_op("BATCH_MATMUL", [In(lhs, quant=lhs_q), In(rhs, quant=rhs_q)], dict(adj_x=adj_x, adj_y=adj_y),
                 output_dtypes=[np.dtype(np.int32)])


# -- refusals -----------------------------------------------------------------------------
def _f32(*shape):
    return np.zeros(shape, np.float32)


@pytest.mark.parametrize("inputs,output,options,match", [
    ([In(_f32(2, 3)), In(np.zeros((3, 4), np.int8), const=True, quant=(0.1, 0))], ((2, 4), np.float32, None), {},
     "hybrid"),
    ([In(_f32(2, 3)), In(np.zeros((3, 4), np.int8), const=True, quant=(0.1, 0))], ((2, 4), np.float32, None),
     dict(asymmetric_quantize_inputs=True), "asymmetric_quantize_inputs"),
    ([In(_f32(3)), In(_f32(3, 4))], ((4,), np.float32, None), {}, "rank 1"),
    ([In(_f32(1, 1, 1, 1, 2, 3)), In(_f32(3, 4))], ((1, 1, 1, 1, 2, 4), np.float32, None), {}, "rank 6"),
    ([In(_f32(2, 3)), In(_f32(4, 5))], ((2, 5), np.float32, None), {}, "contract 3 with 4"),
    ([In(_f32(2, 2, 3)), In(_f32(3, 3, 4))], ((2, 2, 4), np.float32, None), {}, "do not broadcast"),
    ([In(_f32(2, 3)), In(_f32(3, 4))], ((2, 4), np.int32, None), {}, "output int32"),
    ([In(np.zeros((2, 3), np.int16), quant=(0.1, 2)), In(np.zeros((3, 4), np.int16), quant=(0.1, 0))],
     ((2, 4), np.int16, (0.1, 0)), {}, "zero points of 0"),
    ([In(np.zeros((2, 3), np.int8), quant=(0.1, 2)), In(np.zeros((3, 4), np.int8))],
     ((2, 4), np.int8, (0.1, 0)), {}, "needs quantization"),
    ([In(np.zeros((2, 3), np.uint8), quant=(0.1, 2)), In(np.zeros((3, 4), np.uint8), quant=(0.1, 2))],
     ((2, 4), np.uint8, (0.1, 0)), {}, "lhs uint8"),
])
def test_refused(inputs, output, options, match):
    assert_rejected("BATCH_MATMUL", inputs, options, match=match, outputs=[output])
