"""CUMSUM and TOPK_V2 reference kernels (ops/scan.py) against LiteRT's builtin kernels: every
axis (negative ones included), exclusive and reverse, every dtype, ties, special values."""
import numpy as np
import pytest

from tests.oplib import In, assert_kernel_error, assert_rejected, check_op

TOPK_DTYPES = [np.float32, np.int32, np.int64, np.int8, np.uint8, np.int16]


# -- CUMSUM -----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
def test_cumsum_every_axis_and_option(dtype):
    """Float sums within tolerance.sum_bound (the order of a running sum is TFLite's too)."""
    rng = np.random.default_rng(np.dtype(dtype).num)
    for rank in range(1, 5):
        shape = tuple(int(d) for d in rng.integers(1, 6, rank))
        x = rng.normal(0, 10, shape).astype(dtype)
        for axis in range(-rank, rank):
            for exclusive in (False, True):
                for reverse in (False, True):
                    check_op("CUMSUM", [In(x), In(np.array(axis, np.int32), const=axis % 2 == 0)],
                             {"exclusive": exclusive, "reverse": reverse})


def test_cumsum_special_values_and_wrapping():
    """inf - inf along the axis gives NaN from there on; int32 sums wrap as in C++."""
    x = np.array([[1.0, np.inf, 2.0, -np.inf, 3.0], [np.nan, 1.0, 2.0, 3.0, 4.0], [3e38, 3e38, -3e38, 1.0, 0.0]],
                 np.float32)
    big = np.full((2, 4), 2 ** 30, np.int32)
    for exclusive in (False, True):
        for reverse in (False, True):
            options = {"exclusive": exclusive, "reverse": reverse}
            check_op("CUMSUM", [In(x), In(np.array(1, np.int32), const=True)], options)
            check_op("CUMSUM", [In(big), In(np.array(-1, np.int32), const=True)], options)


def test_cumsum_refusals():
    x = In(np.ones((2, 3), np.float32))
    assert_kernel_error("CUMSUM", [x, In(np.array(2, np.int32), const=True)], match="axis 2 is out of range")
    assert_rejected("CUMSUM", [x, In(np.array(0, np.int64))], match="axis must be an int32")
    assert_rejected("CUMSUM", [In(np.ones(3, np.int8)), In(np.array(0, np.int32))], match="int8 is not supported")
    assert_rejected("CUMSUM", [In(np.array(1.0, np.float32)), In(np.array(0, np.int32))],
                    match="at least one dimension")


# -- TOPK_V2 ----------------------------------------------------------------------------------
def topk(x, k, k_dtype=np.int32, index_dtype=np.int32, const_k=True):
    return check_op("TOPK_V2", [In(x), In(np.array(k, k_dtype), const=const_k)],
                    output_dtypes=[x.dtype, index_dtype], n_outputs=2)


@pytest.mark.parametrize("dtype", TOPK_DTYPES, ids=lambda d: np.dtype(d).name)
def test_topk_with_many_ties(dtype):
    """Values from a small range, so most of them tie: TFLite lists ties by the lower index."""
    rng = np.random.default_rng(np.dtype(dtype).num)
    for shape in [(7,), (3, 10), (2, 3, 16), (1, 300)]:
        x = rng.integers(0, 5, shape).astype(dtype)
        for k in sorted({0, 1, 2, shape[-1] // 2, shape[-1]} - {0}):
            topk(x, k, const_k=k % 2 == 0)


def test_topk_float_values_and_specials():
    rng = np.random.default_rng(3)
    x = rng.normal(0, 1, (4, 50)).astype(np.float32)
    for k in (1, 5, 50):
        topk(x, k)
    # -0.0 ties with 0.0; infinities order as values.
    specials = np.array([0.0, -0.0, np.inf, 1.0, -np.inf, -0.0, np.inf, 0.0], np.float32)
    for k in range(1, specials.size + 1):
        topk(specials, k)


def test_topk_puts_nan_last():
    rng = np.random.default_rng(5)
    for n in (2, 9, 40):
        x = rng.normal(0, 1, (3, n)).astype(np.float32)
        x[rng.random(x.shape) < 0.3] = np.nan
        for k in sorted({1, n // 2, n - 1, n} - {0}):
            topk(x, k)


@pytest.mark.parametrize("k_dtype,index_dtype", [(np.int16, np.int32), (np.int32, np.int16)])
def test_topk_int16_k_and_indices(k_dtype, index_dtype):
    x = np.random.default_rng(4).normal(0, 1, (3, 20)).astype(np.float32)
    topk(x, 7, k_dtype=k_dtype, index_dtype=index_dtype, const_k=False)


def test_topk_refusals():
    x = np.ones((2, 4), np.float32)
    with pytest.raises(Exception, match=r"#0 \(TOPK_V2\).*k 5 is outside"):
        topk(x, 5)
    outputs = [((2, 2), np.float32, None), ((2, 2), np.int64, None)]
    assert_rejected("TOPK_V2", [In(x), In(np.array(2, np.int32))], match="indices output int64", outputs=outputs)
    outputs = [((2, 2), np.bool_, None), ((2, 2), np.int32, None)]
    assert_rejected("TOPK_V2", [In(x.astype(bool)), In(np.array(2, np.int32))], match="bool is not supported",
                    outputs=outputs)
    assert_rejected("TOPK_V2", [In(x), In(np.array(2, np.int32))], match="takes 2 outputs",
                    outputs=[((2, 2), np.float32, None)])
