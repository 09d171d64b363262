"""int32 tensors on the GPU (gpu/kernels/base.py: held as their bits): the integer kernel
(gpu/kernels/integer.py: arithmetic, comparisons, ABS, NEG, SUM, REDUCE_PROD / MAX / MIN) and the layout ops moving int32
values, against the reference in every precision, over the whole int32 range (values whose bits
are float specials included). Outputs must match exactly; overflow wraps as on the CPU."""
import numpy as np
import pytest

from gles_delegate import GpuDelegate, Interpreter, ModelError
from gles_delegate.tflite import ModelBuilder
from tests.gpu.gpulib import PRECISIONS, check_gpu, run_gpu
from tests.gpu.test_float_view import INT_SPECIALS, check_exact
from tests.oplib import In, run_ours

ARITHMETIC = ["ADD", "SUB", "MUL", "MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE"]
DIVISIONS = ["DIV", "FLOOR_DIV", "FLOOR_MOD"]
COMPARISONS = ["GREATER", "GREATER_EQUAL", "LESS", "LESS_EQUAL", "EQUAL", "NOT_EQUAL"]
# (a shape, b shape, b constant): same shapes, broadcasts of a row, a scalar, both sides.
SHAPES = [((1, 4, 5, 6), (1, 4, 5, 6), False), ((2, 3, 7), (7,), True), ((3, 6), (1,), True),
          ((2, 1, 5), (2, 3, 1), False)]


def full_range(rng, shape):
    """int32 values over the whole range, with INT_SPECIALS in the first elements."""
    values = rng.integers(-2 ** 31, 2 ** 31, shape, dtype=np.int64).astype(np.int32)
    flat = values.reshape(-1)
    flat[:min(flat.size, INT_SPECIALS.size)] = INT_SPECIALS[:flat.size]
    return values


def small_ints(rng, shape, low=-9, high=10):
    return rng.integers(low, high, shape).astype(np.int32)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("op", ARITHMETIC + COMPARISONS)
def test_binary_ops_over_the_whole_range(op, precision):
    """Wrapping sums and products, exact comparisons; small values too (ties, equal operands)."""
    rng = np.random.default_rng(sum(map(ord, op)))
    out_dtype = np.bool_ if op in COMPARISONS else np.int32
    for a_shape, b_shape, b_const in SHAPES:
        for values in (full_range, small_ints):
            check_exact(op, [In(values(rng, a_shape)), In(values(rng, b_shape), const=b_const)],
                        precision=precision, out_dtype=out_dtype)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("op", DIVISIONS)
def test_divisions_round_as_tflite(op, precision):
    """C++'s truncating DIV, FLOOR_DIV and FLOOR_MOD of every sign combination, large values, and
    divisors of INT32_MIN (whose magnitude no int32 holds: they divided by 1, gles-fuzz-graphs
    --families int32 seed 21 case 331)."""
    rng = np.random.default_rng(len(op))
    low = -2 ** 31
    signs = (np.int32([7, -7, 7, -7, 6, -6, 0, 2 ** 31 - 1, -2 ** 31 + 1, low, 2 ** 31 - 1, low + 1, 5, 0, low]),
             np.int32([2, 2, -2, -2, 3, -3, 5, -7, 9, low, low, low, low, low, 3]))
    large = rng.integers(-2 ** 31 + 1, 2 ** 31, 40, dtype=np.int64).astype(np.int32)
    divisors = np.concatenate([small_ints(rng, (20,), 1, 50), -small_ints(rng, (20,), 1, 2 ** 20)])
    a, b = np.concatenate([signs[0], large]), np.concatenate([signs[1], divisors])
    check_exact(op, [In(a), In(b)], precision=precision, out_dtype=np.int32)
    check_exact(op, [In(a[:49].reshape(7, 7)), In(np.int32([3, -4, 5, 1, -1, 2 ** 30, -9]), const=True)],
                precision=precision, out_dtype=np.int32)


@pytest.mark.parametrize("op", DIVISIONS)
def test_a_zero_divisor_fails_the_invoke(op):
    """TFLite fails the invoke; the GPU flags a status word: the reference's ModelError naming the
    node, and a good invoke after it runs. A zero in a padded channel (3 channels) is no error."""
    a = np.int32([[5, -6, 7], [8, 9, -10]])
    model = ModelBuilder()
    x, y = model.input("a", a.shape, np.int32), model.input("b", a.shape, np.int32)
    out = model.tensor("out", a.shape, np.int32)
    model.op(op, [x, y], [out])
    model.output(out)
    with GpuDelegate() as delegate:
        interp = Interpreter(model_content=model.build(), experimental_delegates=[delegate])
        interp.allocate_tensors()
        assert delegate.summary()["gpu_nodes"] == 1
        a_index, b_index = (d["index"] for d in interp.get_input_details())
        interp.set_tensor(a_index, a)
        interp.set_tensor(b_index, np.int32([[1, 2, 3], [4, 0, 6]]))
        with pytest.raises(ModelError, match=rf"#0 \({op}\): .*division by zero"):
            interp.invoke()
        interp.set_tensor(b_index, np.int32([[1, 2, 3], [4, 5, 6]]))
        interp.invoke()
        reference = run_ours(model.build(), [a, np.int32([[1, 2, 3], [4, 5, 6]])])[0]
        assert np.array_equal(interp.get_tensor(interp.get_output_details()[0]["index"]), reference)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("op", ["ABS", "NEG"])
def test_unary_ops(op, precision):
    """|INT_MIN| and -INT_MIN wrap to INT_MIN, as LiteRT's kernels give them."""
    check_exact(op, [In(full_range(np.random.default_rng(1), (3, 5, 7)))], precision=precision, out_dtype=np.int32)


@pytest.mark.parametrize("activation", [1, 2, 3])
def test_fused_activation_clamps_to_integer_bounds(activation):
    rng = np.random.default_rng(activation)
    check_exact("ADD", [In(small_ints(rng, (4, 9))), In(small_ints(rng, (9,)), const=True)],
                {"fused_activation_function": activation}, out_dtype=np.int32)


# -- moves of int32 values ---------------------------------------------------------------------
MOVES = [
    ("RESHAPE", lambda x: [In(np.array([6, 7], np.int32), const=True)], {}),
    ("TRANSPOSE", lambda x: [In(np.array([0, 2, 1], np.int32), const=True)], {}),
    ("SLICE", lambda x: [In(np.array([0, 1, 2], np.int32), const=True), In(np.array([2, 2, 5], np.int32), const=True)],
     {}),
    ("STRIDED_SLICE", lambda x: [In(np.array([0, 0, 1], np.int32), const=True), In(np.array([2, 3, 7], np.int32),
                                 const=True), In(np.array([1, 2, 2], np.int32), const=True)], {}),
    ("PAD", lambda x: [In(np.array([[0, 0], [1, 0], [2, 3]], np.int32), const=True)], {}),
    ("TILE", lambda x: [In(np.array([1, 2, 1], np.int32), const=True)], {}),
    ("GATHER", lambda x: [In(np.array([2, 0, 1], np.int32), const=True)], {"axis": 1}),
    ("BROADCAST_TO", lambda x: [In(np.array([2, 2, 3, 7], np.int32), const=True)], {}),
    ("PACK", lambda x: [In(x[::-1].copy(), const=True)], {"axis": 2, "values_count": 2}),
]


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("op,extra,options", MOVES, ids=[m[0] for m in MOVES])
def test_layout_ops_move_int32_bits(op, extra, options, precision):
    x = full_range(np.random.default_rng(2), (2, 3, 7))
    check_exact(op, [In(x)] + extra(x), options, precision=precision, out_dtype=np.int32)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_unpack_moves_int32_bits(precision):
    """Each output of an UNPACK of int32 values over the whole range is its slice, bit for bit."""
    x = full_range(np.random.default_rng(4), (2, 3, 7))
    reference, gpu = check_gpu("UNPACK", [In(x)], {"num": 3, "axis": 1}, precision, n_outputs=3,
                               output_dtypes=[np.int32] * 3)
    for want, got in zip(reference, gpu):
        assert got.dtype == np.int32 and np.array_equal(got, want)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_concatenation_and_select_of_int32(precision):
    """A runtime and a constant int32 operand concatenated along the channels (4 + 3: an
    unaligned join), and SELECT_V2 of int32 values by a runtime mask."""
    rng = np.random.default_rng(3)
    a, b = full_range(rng, (2, 5, 4)), full_range(rng, (2, 5, 3))
    check_exact("CONCATENATION", [In(a), In(b, const=True)], {"axis": -1}, precision=precision, out_dtype=np.int32)
    mask = rng.random((2, 5, 4)) < 0.5
    check_exact("SELECT_V2", [In(mask), In(a), In(full_range(rng, (4,)), const=True)], precision=precision,
                out_dtype=np.int32)


# -- a model of int32 index arithmetic -----------------------------------------------------------
def relative_buckets_model(length, buckets=8, max_distance=32):
    """T5's relative position buckets as a transformer converted from PyTorch computes them from
    runtime positions: SUB, ABS, LESS, a log-spaced CAST -> LOG -> MUL -> CAST, MINIMUM, ADD,
    SELECT_V2, then an EMBEDDING_LOOKUP of per-bucket biases by the bucket ids. Inputs: query
    and key positions (int32 [length]); outputs: the ids (int32) and the biases (float32)."""
    exact = buckets // 2
    scale = (buckets - exact) / np.log(max_distance / exact)
    b = ModelBuilder()
    q, k = b.input("q", (length, 1), np.int32), b.input("k", (1, length), np.int32)
    pair = (length, length)
    rel, dist, small, dist_f, logs, scaled, large_i, large, capped, ids = (
        b.tensor(n, pair, d) for n, d in [("rel", np.int32), ("dist", np.int32), ("small", np.bool_),
                                          ("dist_f", np.float32), ("log", np.float32), ("scaled", np.float32),
                                          ("large_i", np.int32), ("large", np.int32), ("capped", np.int32),
                                          ("ids", np.int32)])
    flat, bias = b.tensor("flat", (length * length,), np.int32), b.tensor("bias", (length * length, 2))
    b.op("SUB", [k, q], [rel], fused_activation_function=0)
    b.op("ABS", [rel], [dist])
    b.op("LESS", [dist, b.const("exact", np.int32([exact]))], [small])
    b.op("CAST", [dist], [dist_f])
    b.op("LOG", [dist_f], [logs])
    b.op("MUL", [logs, b.const("scale", np.float32([scale]))], [scaled], fused_activation_function=0)
    b.op("CAST", [scaled], [large_i])
    b.op("ADD", [large_i, b.const("offset", np.int32([exact - int(np.floor(np.log(exact) * scale))]))], [large],
         fused_activation_function=0)
    b.op("MINIMUM", [large, b.const("top", np.int32([buckets - 1]))], [capped])
    b.op("SELECT_V2", [small, dist, capped], [ids])
    b.op("RESHAPE", [ids, b.const("shape", np.int32([length * length]))], [flat])
    table = np.random.default_rng(4).standard_normal((buckets, 2)).astype(np.float32)
    b.op("EMBEDDING_LOOKUP", [flat, b.const("table", table)], [bias])
    b.output(ids)
    b.output(bias)
    return b.build(), table


@pytest.mark.parametrize("precision", PRECISIONS)
def test_relative_position_buckets_run_in_one_partition(precision):
    """Every node on the GPU in one partition; the integer path exact in every precision (the
    log-spaced ids of far positions are float math: in half storage one may land one bucket
    off), and the biases exactly the table's rows of the GPU's own ids (as stored)."""
    length = 12
    model, table = relative_buckets_model(length)
    positions = np.arange(length, dtype=np.int32) * 3 - 5
    inputs = [positions.reshape(length, 1), positions.reshape(1, length)]
    reference = run_ours(model, inputs)
    gpu, summary = run_gpu(model, inputs, precision)
    assert summary["cpu_nodes"] == 0 and summary["partitions"] == 1, summary
    ids = gpu[0]
    near = np.abs(inputs[1] - inputs[0]) < 4
    assert ids.dtype == np.int32 and np.array_equal(ids[near], reference[0][near])
    assert np.abs(ids - reference[0]).max() <= (0 if precision == "fp32" else 1)
    rows = table if precision == "fp32" else table.astype(np.float16).astype(np.float32)
    assert np.array_equal(gpu[1], rows[ids.reshape(-1)])


REDUCTIONS = ["SUM", "REDUCE_PROD", "REDUCE_MAX", "REDUCE_MIN"]


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("op", REDUCTIONS)
def test_int32_reductions_over_the_whole_range(op, precision):
    """Any axes (negative ones too), keep_dims both ways, ranks 1-4, values over the whole range
    (sums and products wrap as TFLite's do) and small ones (a count of a mask)."""
    rng = np.random.default_rng(len(op))
    for shape, axes, keep in [((7,), [0], False), ((3, 5), [1], True), ((2, 3, 4), [0, 2], False),
                              ((2, 3, 4, 5), [-1, 1], True), ((2, 3, 4, 5), [0, 1, 2, 3], False), ((4, 6), [0], False)]:
        for values in (full_range(rng, shape), small_ints(rng, shape, 0, 2)):
            check_exact(op, [In(values), In(np.array(axes, np.int32), const=True)], {"keep_dims": keep}, precision,
                        out_dtype=np.int32)


def test_an_int32_reduction_runs_with_its_neighbours():
    """torch's (x > 0).sum(-1) / tf.reduce_sum(tf.cast(mask, tf.int32)): GREATER, CAST, SUM, CAST
    back, one GPU partition."""
    b = ModelBuilder()
    x = b.input("x", (3, 10))
    mask, ints, total, out = (b.tensor(n, s, d) for n, s, d in (("mask", (3, 10), np.bool_), ("ints", (3, 10), np.int32),
                                                                ("total", (3,), np.int32), ("out", (3,), np.float32)))
    b.op("GREATER", [x, b.const("zero", np.float32([0.0]))], [mask])
    b.op("CAST", [mask], [ints])
    b.op("SUM", [ints, b.const("axis", np.array([-1], np.int32))], [total], keep_dims=False)
    b.op("CAST", [total], [out])
    b.output(out)
    values = np.random.default_rng(2).standard_normal((3, 10)).astype(np.float32)
    (gpu,), summary = run_gpu(b.build(), [values])
    assert (summary["gpu_nodes"], summary["cpu_nodes"], summary["partitions"]) == (4, 0, 1), summary
    np.testing.assert_array_equal(gpu, (values > 0).sum(-1))
