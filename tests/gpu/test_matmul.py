"""BATCH_MATMUL on the GPU against the numpy reference: every adj_x / adj_y combination, ranks
2 to 5 with broadcast batch dimensions (rank 5: two outer ones merged in the view), runtime and constant operands, sizes off multiples of 4,
special values, in every precision; and which nodes it refuses."""
import numpy as np
import pytest

from gles_delegate.gpu import kernels
from tests.gpu.gpulib import PRECISIONS, check_gpu, run_gpu
from tests.oplib import In, run_ours, single_op_model, single_op_node

ADJOINTS = [(False, False), (False, True), (True, False), (True, True)]
CASES = [  # lhs batch dims, rhs batch dims, M, K, N
    ((), (), 5, 7, 6),               # rank 2 x rank 2: rows on the B axis
    ((1, 2), (1, 2), 6, 8, 6),       # attention-shaped Q.K^T / .V
    ((3,), (3,), 1, 13, 9),          # rank 3, one row
    ((2, 3), (3,), 4, 5, 3),         # rank 4 x rank 3: rhs shared over the outer batch
    ((2, 1), (1, 3), 3, 4, 2),       # both sides broadcast
    ((), (2, 2), 2, 3, 5),           # rank 2 x rank 4
    ((4,), (), 9, 16, 1),            # one column
    ((2, 3, 2), (1, 1, 2), 5, 6, 7),  # rank 5: rhs broadcast over both merged outer dims
    ((2, 3, 1), (4,), 3, 5, 4),      # rank 5 x rank 3: lhs broadcast over the inner batch
]


def operands(rng, case, adj_x, adj_y):
    lhs_batch, rhs_batch, m, k, n = case
    lhs = rng.standard_normal(tuple(lhs_batch) + ((k, m) if adj_x else (m, k))).astype(np.float32)
    rhs = rng.standard_normal(tuple(rhs_batch) + ((n, k) if adj_y else (k, n))).astype(np.float32)
    return lhs, rhs


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("adj_x,adj_y", ADJOINTS)
@pytest.mark.parametrize("case", CASES)
def test_batch_matmul(case, adj_x, adj_y, precision):
    rng = np.random.default_rng(CASES.index(case))
    lhs, rhs = operands(rng, case, adj_x, adj_y)
    check_gpu("BATCH_MATMUL", [In(lhs), In(rhs)], dict(adj_x=adj_x, adj_y=adj_y), precision)


@pytest.mark.parametrize("adj_x,adj_y", ADJOINTS)
@pytest.mark.parametrize("const", [0, 1])
def test_constant_operand(const, adj_x, adj_y):
    rng = np.random.default_rng(const)
    inputs = [In(x) for x in operands(rng, CASES[3], adj_x, adj_y)]
    inputs[const].const = True
    check_gpu("BATCH_MATMUL", inputs, dict(adj_x=adj_x, adj_y=adj_y))


@pytest.mark.parametrize("adj_x,adj_y", ADJOINTS)
def test_special_values(adj_x, adj_y):
    """NaN and +-inf in the operands (and zeros next to them) land where the reference has them;
    nothing of the padding past K or N turns a finite output into NaN."""
    rng = np.random.default_rng(3)
    lhs, rhs = operands(rng, ((2,), (2,), 5, 6, 7), adj_x, adj_y)
    lhs.reshape(-1)[[0, 9, 23]] = [np.nan, np.inf, -np.inf]
    rhs.reshape(-1)[[4, 30]] = [0.0, -0.0]
    with np.errstate(invalid="ignore"):  # inf - inf where both have inf: compared below instead
        (reference,), (gpu,) = check_gpu("BATCH_MATMUL", [In(lhs), In(rhs)], dict(adj_x=adj_x, adj_y=adj_y))
    infinite = np.isinf(reference)
    assert infinite.any() and np.array_equal(np.isinf(gpu), infinite)
    assert np.array_equal(gpu[infinite], reference[infinite])


@pytest.mark.parametrize("adj_x,adj_y", ADJOINTS)
def test_int8_through_the_float_view(adj_x, adj_y):
    """int8 x int8 -> int8 runs as the float product snapped to the output's grid (quant.py), as
    TFLite's GPU delegate runs it: within one step of the integer reference."""
    rng = np.random.default_rng(4)
    lhs, rhs = (np.clip(np.round(x * 40), -128, 127).astype(np.int8) for x in operands(rng, CASES[1], adj_x, adj_y))
    inputs = [In(lhs, quant=(0.05, 3)), In(rhs, quant=(0.02, -2))]
    model = single_op_model("BATCH_MATMUL", inputs, dict(adj_x=adj_x, adj_y=adj_y), output_quant=[(0.15, -4)])
    (gpu,), summary = run_gpu(model, [lhs, rhs])
    (reference,) = run_ours(model, [lhs, rhs])
    assert summary["gpu_nodes"] == 1
    assert np.abs(gpu.astype(np.int64) - reference).max() <= 1


def test_refuses():
    rng = np.random.default_rng(0)
    lhs, rhs = operands(rng, CASES[0], False, False)
    both_const = single_op_node("BATCH_MATMUL", [In(lhs, const=True), In(rhs, const=True)])
    assert "fold" in kernels.unsupported_reason(both_const)
    partial = single_op_node("BATCH_MATMUL", [In(np.zeros((2, 1, 3, 5, 7), np.float32)),
                                              In(np.zeros((2, 4, 3, 7, 6), np.float32))])
    assert "some but not all of the batch dimensions [2, 4]" in kernels.unsupported_reason(partial)
    int32_out = single_op_node("BATCH_MATMUL", [In(lhs.astype(np.int8), quant=(0.1, 0)),
                                                In(rhs.astype(np.int8), quant=(0.1, 0))],
                               output_dtypes=[np.dtype(np.int32)])
    assert "int32" in kernels.unsupported_reason(int32_out)
