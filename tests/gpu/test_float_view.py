"""The float and int views (gpu/kernels/base.py): bool tensors as 0.0 / 1.0 and int32 tensors as
their bits on the GPU, and the kernels that take them (comparisons, LOGICAL_*, CAST, SELECT /
SELECT_V2, ARG_MAX / ARG_MIN, GATHER with runtime indices, layout ops on masks), against the
reference in every precision. Bool and int32 outputs must match exactly (integer arithmetic:
tests/gpu/test_integer.py)."""
import numpy as np
import pytest

from gles_delegate import GpuDelegate, Interpreter, ModelError
from gles_delegate.tflite import ModelBuilder
from tests.gpu.gpulib import fails_then_runs, PRECISIONS, check_gpu, run_gpu
from tests.gpu.test_io_paths import IO_PATHS, check_io_path, use_io_path
from tests.oplib import In, run_ours, single_op_model

COMPARISONS = ["GREATER", "GREATER_EQUAL", "LESS", "LESS_EQUAL", "EQUAL", "NOT_EQUAL"]
SPECIALS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 2.5, -7.0, 1e-30], np.float32)
# int32 values whose bits are float specials: a denormal (1), NaNs (INT_MAX, -1), inf, -0 (INT_MIN),
# and values past 2^24 (a float would round them): stored as bits, each must come back exact.
INT_SPECIALS = np.array([0, 1, -1, 7, 2 ** 23 - 1, 2 ** 24 + 1, -(2 ** 24) - 3, 0x7f800000, 0x7fc00001,
                         2 ** 31 - 1, -2 ** 31, -2 ** 31 + 1], np.int32)
INT32 = 2  # ArgMaxOptions.output_type


def check_exact(op, inputs, options=None, precision="fp32", out_dtype=np.bool_, gpu_nodes=1):
    """check_gpu, and the output equal to the reference's exactly (NaN where it has NaN): these
    ops compare, select or convert values the storage holds exactly (the reference runs on the
    inputs as stored)."""
    reference, gpu = check_gpu(op, inputs, options, precision, gpu_nodes=gpu_nodes, output_dtypes=[out_dtype])
    assert gpu[0].dtype == reference[0].dtype, (op, gpu[0].dtype)
    assert np.array_equal(gpu[0], reference[0], equal_nan=gpu[0].dtype.kind == "f"), (op, reference, gpu)
    return reference, gpu


def small(rng, shape):
    """Values from a small range (many ties), with halves."""
    return (rng.integers(-3, 4, shape) + rng.choice([0.0, 0.5], shape)).astype(np.float32)


# -- comparisons and logical ops ----------------------------------------------------------------
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("op", COMPARISONS)
def test_comparisons(op, precision):
    rng = np.random.default_rng(len(op))
    for a_shape, b_shape, b_const in [((1, 4, 5, 6), (1, 4, 5, 6), False), ((2, 3, 7), (7,), True),
                                      ((3, 6), (1,), True), ((2, 1, 5), (2, 3, 1), False)]:
        check_exact(op, [In(small(rng, a_shape)), In(small(rng, b_shape), const=b_const)], precision=precision)
    # NaN against everything: false, NOT_EQUAL true; infinities and -0 as IEEE numbers.
    a, b = np.repeat(SPECIALS, SPECIALS.size), np.tile(SPECIALS, SPECIALS.size)
    check_exact(op, [In(a), In(b)], precision=precision)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("op", ["LOGICAL_AND", "LOGICAL_OR", "EQUAL", "NOT_EQUAL"])
def test_bool_binary_ops(op, precision):
    rng = np.random.default_rng(3)
    for a_shape, b_shape, b_const in [((2, 3, 4, 5), (2, 3, 4, 5), False), ((3, 9), (9,), True),
                                      ((2, 1, 6), (2, 4, 1), False)]:
        a, b = rng.random(a_shape) < 0.5, rng.random(b_shape) < 0.5
        check_exact(op, [In(a), In(b, const=b_const)], precision=precision)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_logical_not(precision):
    check_exact("LOGICAL_NOT", [In(np.random.default_rng(4).random((2, 5, 6)) < 0.5)], precision=precision)


# -- CAST ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("precision", PRECISIONS)
def test_cast_from_float(precision):
    """float32 -> int32 truncates toward zero and saturates (NaN: INT_MAX); -> bool is nonzero
    (NaN: true)."""
    x = np.concatenate([SPECIALS, np.float32([7.9, -7.9, 1000.5, -2047.5, 0.4, -0.4, 6e4, -6e4])])
    if precision == "fp32":  # past half's range (there: overflow to inf, which saturates too)
        x = np.concatenate([x, np.float32([3e9, -3e9, 2.5e9, 2147483520.0])])
    for out_dtype in (np.int32, np.bool_):
        check_exact("CAST", [In(x)], precision=precision, out_dtype=out_dtype)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_cast_from_bool_and_int32(precision):
    """int32 inputs over the whole range in every precision (their bits: CAST int32 -> float32
    rounds past 2^24 as the CPU does; -> float32 in half precisions is a float output, rounded
    to half there, so only fp32 compares it exactly)."""
    rng = np.random.default_rng(5)
    mask = rng.random((2, 3, 5)) < 0.5
    for out_dtype in (np.float32, np.int32):
        check_exact("CAST", [In(mask)], precision=precision, out_dtype=out_dtype)
    ints = rng.integers(-2 ** 31, 2 ** 31, (3, 7), dtype=np.int64).astype(np.int32)
    ints[0, :INT_SPECIALS.size // 2] = INT_SPECIALS[:INT_SPECIALS.size // 2]
    ints[1, :INT_SPECIALS.size - INT_SPECIALS.size // 2] = INT_SPECIALS[INT_SPECIALS.size // 2:]
    for out_dtype in (np.bool_, np.int32) + ((np.float32,) if precision == "fp32" else ()):
        check_exact("CAST", [In(ints)], precision=precision, out_dtype=out_dtype)


# -- SELECT / SELECT_V2 -------------------------------------------------------------------------
@pytest.mark.parametrize("precision", PRECISIONS)
def test_select_v2_broadcasts(precision):
    rng = np.random.default_rng(6)
    cases = [((1, 4, 5, 6), (1, 4, 5, 6), (1, 4, 5, 6), ()), ((2, 1, 7), (3, 7), (7,), (1, 2)),
             ((6,), (2, 3, 6), (1,), (0, 2)), ((4, 1), (4, 5), (4, 5), (1, 2))]
    for c_shape, x_shape, y_shape, consts in cases:
        values = [rng.random(c_shape) < 0.5, rng.standard_normal(x_shape).astype(np.float32),
                  rng.standard_normal(y_shape).astype(np.float32)]
        check_exact("SELECT_V2", [In(v, const=k in consts) for k, v in enumerate(values)], precision=precision,
                    out_dtype=np.float32)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_select_takes_bool_values_and_never_leaks_the_other_side(precision):
    """NaN and inf on the side not chosen stay out; SELECT (v1) with a full or scalar condition."""
    rng = np.random.default_rng(7)
    condition = np.arange(SPECIALS.size) % 2 == 0
    check_exact("SELECT_V2", [In(condition), In(SPECIALS), In(SPECIALS[::-1].copy())], precision=precision,
                out_dtype=np.float32)
    a, b = rng.random((3, 4)) < 0.5, rng.random((3, 4)) < 0.5
    check_exact("SELECT", [In(rng.random((3, 4)) < 0.5), In(a), In(b)], precision=precision)
    check_exact("SELECT", [In(np.array(True)), In(a), In(b)], precision=precision)


# -- ARG_MAX / ARG_MIN --------------------------------------------------------------------------
OUTPUT_TYPES = {INT32: np.int32, 4: np.int64}  # TensorType -> ARG_MAX's output dtype

@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("op", ["ARG_MAX", "ARG_MIN"])
def test_arg_extreme_over_the_last_axis(op, precision):
    """Ranks 1-4, ties (the first index), NaN first (it stays) and later (it never wins); bool
    and int32 inputs; int32 and int64 indices (tf.argmax's default: held as int32 on the GPU,
    gpu/index_view.py)."""
    rng = np.random.default_rng(8)
    for shape in [(9,), (5, 6), (2, 3, 13), (2, 3, 4, 5), (1, 2, 2, 64)]:
        x = small(rng, shape)
        x.reshape(-1, shape[-1])[0, 0] = np.nan
        x.reshape(-1, shape[-1])[-1, shape[-1] // 2] = np.nan
        for output_type, out_dtype in OUTPUT_TYPES.items():
            check_exact(op, [In(x), In(np.array([-1], np.int32), const=True)], {"output_type": output_type},
                        precision, out_dtype=out_dtype)
    mask = rng.random((3, 7)) < 0.3
    check_exact(op, [In(mask), In(np.array([1], np.int64), const=True)], {"output_type": INT32}, precision,
                out_dtype=np.int32)
    # int32 over the whole range (values whose bits are float NaN or inf compare as integers), ties
    ints = np.resize(INT_SPECIALS, (4, 9)).astype(np.int32)
    ints[3] = [5, -2, 5, 7, -9, 7, 0, 7, 5]
    check_exact(op, [In(ints), In(np.array([-1], np.int32), const=True)], {"output_type": INT32}, precision,
                out_dtype=np.int32)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("op", ["ARG_MAX", "ARG_MIN"])
def test_arg_extreme_over_every_other_axis(op, precision):
    """Every axis but the last, ranks 2-6 (litert-torch's NCHW argmax over the channels, axis 1):
    ties, a NaN first and later, where elements follow the axis (a number then replaces a NaN
    extreme, as TFLite's kernel does) and where only size-1 axes do (it does not); int32 and bool
    inputs; int32 and int64 indices."""
    rng = np.random.default_rng(13)
    for shape in [(5, 6), (2, 7, 3), (1, 5, 4, 6), (2, 3, 1, 1), (2, 3, 2, 2, 3), (1, 2, 3, 2, 2, 3)]:
        for axis in range(len(shape) - 1):
            x = small(rng, shape)
            lines = np.moveaxis(x, axis, -1).reshape(-1, shape[axis])  # a copy: NaN placed by line
            lines[0, 0], lines[-1, shape[axis] // 2] = np.nan, np.nan
            x = np.moveaxis(lines.reshape(np.moveaxis(x, axis, -1).shape), -1, axis).copy()
            for output_type, out_dtype in OUTPUT_TYPES.items():
                check_exact(op, [In(x), In(np.array([axis - len(shape)], np.int32), const=True)],
                            {"output_type": output_type}, precision, out_dtype=out_dtype)
    ints = rng.integers(-2**31, 2**31, (3, 9, 4), dtype=np.int64).astype(np.int32)
    ints[:, 2] = ints[:, 5]  # ties
    mask = rng.random((4, 3, 5)) < 0.3
    for values in (ints, mask):
        check_exact(op, [In(values), In(np.array([1], np.int32), const=True)], {"output_type": INT32}, precision,
                    out_dtype=np.int32)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_arg_extreme_indices_past_what_a_half_holds(precision):
    """4099 channels: indices past 2^11 (the last integer a half holds exactly), stored as their
    bits, are exact in half precisions too: the node runs on the GPU."""
    x = np.random.default_rng(9).standard_normal((2, 4099)).astype(np.float32)
    x[0, 4097], x[1, 2049] = 10.0, 10.0
    check_exact("ARG_MAX", [In(x), In(np.array([-1], np.int32), const=True)], {"output_type": INT32}, precision,
                out_dtype=np.int32)


# -- GATHER with runtime indices ----------------------------------------------------------------
@pytest.mark.parametrize("precision", PRECISIONS)
def test_gather_with_runtime_indices(precision):
    """An embedding lookup (constant table), runtime params along every axis, index tensors of
    rank 0-2, bool params."""
    rng = np.random.default_rng(10)
    table = rng.standard_normal((11, 6)).astype(np.float32)
    check_exact("GATHER", [In(table, const=True), In(rng.integers(0, 11, (2, 3)).astype(np.int32))], {"axis": 0},
                precision, out_dtype=np.float32)
    x = rng.standard_normal((2, 5, 7)).astype(np.float32)
    for axis, indices in [(0, np.int32(1)), (1, rng.integers(0, 5, (4,))), (-1, rng.integers(0, 7, (3, 1)))]:
        check_exact("GATHER", [In(x), In(np.asarray(indices, np.int32))], {"axis": axis}, precision,
                    out_dtype=np.float32)
    mask = rng.random((6, 3)) < 0.5
    check_exact("GATHER", [In(mask), In(np.array([5, 0, 0, 2], np.int32))], {"axis": 0}, precision)
    # int32 values, runtime and constant, over the whole range; an axis past 2^11 (half's exact range).
    ints = np.resize(INT_SPECIALS, (6, 4))
    for const in (False, True):
        check_exact("GATHER", [In(ints, const=const), In(np.array([5, 0, 3, 2], np.int32))], {"axis": 0},
                    precision, out_dtype=np.int32)
    long = rng.standard_normal((3, 5000)).astype(np.float32)
    check_exact("GATHER", [In(long), In(np.array([4999, 2049, 0], np.int32))], {"axis": 1}, precision,
                out_dtype=np.float32)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_gather_with_batch_dims(precision):
    """tf.gather(..., batch_dims=b): batch item k of params gathered by batch item k of the
    indices, the axis right after the batch dims or further in, batch_dims negative too (counted
    from the indices' rank); runtime and constant params."""
    rng = np.random.default_rng(14)
    x = rng.standard_normal((2, 3, 5, 4)).astype(np.float32)
    for axis, batch_dims, shape, high, const in [(1, 1, (2, 4), 3, False), (2, 1, (2, 2, 3), 5, False),
                                                 (2, 2, (2, 3, 2), 5, True), (3, -1, (2, 3, 5, 2), 4, False)]:
        indices = rng.integers(0, high, shape).astype(np.int32)
        check_exact("GATHER", [In(x, const=const), In(indices)], {"axis": axis, "batch_dims": batch_dims}, precision,
                    out_dtype=np.float32)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_embedding_lookup(precision):
    """EMBEDDING_LOOKUP: rows of a constant or runtime table (float32, int32) by runtime ids."""
    rng = np.random.default_rng(12)
    table = rng.standard_normal((50, 3, 6)).astype(np.float32)
    ids = np.array([49, 0, 7, 7, 12], np.int32)
    for const in (True, False):
        check_exact("EMBEDDING_LOOKUP", [In(ids), In(table, const=const)], precision=precision,
                    out_dtype=np.float32)
    check_exact("EMBEDDING_LOOKUP", [In(ids[:3] % 6), In(np.resize(INT_SPECIALS, (6, 5)), const=True)],
                precision=precision, out_dtype=np.int32)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_gather_nd(precision):
    """GATHER_ND by runtime and constant index rows of every depth: whole slices (depth 1, 2),
    single elements (depth = rank), repeated rows, index tensors of rank 1-3; bool and int32
    params over the whole range; a runtime and a constant params tensor."""
    rng = np.random.default_rng(13)
    x = rng.standard_normal((4, 5, 6)).astype(np.float32)
    for depth, rows in [(1, (3,)), (2, (2, 3)), (3, (7,)), (2, (1, 2, 2))]:
        indices = np.stack([rng.integers(0, d, rows) for d in x.shape[:depth]], axis=-1).astype(np.int32)
        indices.reshape(-1, depth)[-1] = indices.reshape(-1, depth)[0]  # a row twice
        for const_indices in (False, True):
            params = In(x, const=depth == 2 and not const_indices)  # not both: the node would fold
            check_exact("GATHER_ND", [params, In(indices, const=const_indices)], precision=precision,
                        out_dtype=np.float32)
    mask = rng.random((3, 4)) < 0.5
    check_exact("GATHER_ND", [In(mask), In(np.array([[2], [0]], np.int32))], precision=precision)
    ints = np.resize(INT_SPECIALS, (5, 3))
    check_exact("GATHER_ND", [In(ints), In(np.array([[4, 2], [0, 1], [3, 0]], np.int32))], precision=precision,
                out_dtype=np.int32)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_gathers_of_rank_5_and_6(precision):
    """litert-torch's grid_sample and unfold gather from rank-5 params into rank-6 outputs:
    GATHER_ND, GATHER and EMBEDDING_LOOKUP read and write by row-major index, which the BHWC
    view of merged leading dims keeps."""
    rng = np.random.default_rng(17)
    x = rng.standard_normal((2, 3, 2, 4, 5)).astype(np.float32)
    for depth, rows in [(2, (2, 3, 2)), (4, (3, 2)), (1, (2, 2))]:  # outputs of rank 6, 3 and 6
        indices = np.stack([rng.integers(0, d, rows) for d in x.shape[:depth]], axis=-1).astype(np.int32)
        check_exact("GATHER_ND", [In(x), In(indices)], precision=precision, out_dtype=np.float32)
    positions = rng.integers(0, 4, (2, 3)).astype(np.int32)
    check_exact("GATHER", [In(x), In(positions)], {"axis": 3}, precision=precision, out_dtype=np.float32)
    table = rng.standard_normal((6, 2, 3, 2, 2)).astype(np.float32)
    check_exact("EMBEDDING_LOOKUP", [In(rng.integers(0, 6, (4,)).astype(np.int32)), In(table, const=True)],
                precision=precision, out_dtype=np.float32)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_scatter_nd(precision):
    """SCATTER_ND of index rows of depth 1 to the output's rank, runtime and constant, with
    duplicates (added in index order: the reference's sum, to rounding), into outputs of ranks 1
    to 5; runtime and constant updates."""
    rng = np.random.default_rng(19)
    for shape, depth, rows, const_indices in [((6,), 1, (4,), False), ((3, 4, 5), 2, (7,), True),
                                              ((2, 3, 4, 5), 1, (2, 2), False), ((4, 3), 2, (12,), False),
                                              ((2, 2, 3, 2, 4), 3, (3,), True)]:
        indices = np.stack([rng.integers(0, d, rows) for d in shape[:depth]], axis=-1).astype(np.int32)
        indices.reshape(-1, depth)[-1] = indices.reshape(-1, depth)[0]  # a row twice: its updates add
        updates = rng.standard_normal(rows + shape[depth:]).astype(np.float32)
        const_updates = depth == 2 and not const_indices  # not both: the node would fold
        check_gpu("SCATTER_ND", [In(indices, const=const_indices), In(updates, const=const_updates),
                                 In(np.array(shape, np.int32), const=True)], None, precision,
                  output_dtypes=[np.float32])


def test_scatter_nd_out_of_range_index_fails_the_invoke():
    """An index row outside the output fails the invoke, naming the node; in range it runs."""
    model = single_op_model("SCATTER_ND", [In(np.array([[1, 2]], np.int32)), In(np.ones((1, 4), np.float32)),
                                           In(np.array([2, 3, 4], np.int32), const=True)], output_dtypes=[np.float32])
    updates = np.arange(4, dtype=np.float32).reshape(1, 4)
    bad = [[np.array(rows, np.int32), updates] for rows in ([[1, 3]], [[-1, 0]], [[2, 0]])]
    out = fails_then_runs(model, bad, [np.array([[1, 2]], np.int32), updates],
                          r"#0 \(SCATTER_ND\): a scatter_nd index is out of range")
    assert np.array_equal(out[1, 2], np.arange(4)) and out.sum() == 6


def test_gather_nd_out_of_range_index_fails_the_invoke():
    """A row of GATHER_ND's indices outside params' dims fails the invoke, naming the node, as
    TFLite fails it; the next invoke in range runs."""
    params = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    model = single_op_model("GATHER_ND", [In(params, const=True), In(np.array([[1, 2]], np.int32))])
    bad = [[np.array(rows, np.int32)] for rows in ([[1, 3]], [[-1, 0]], [[2, 0]])]
    out = fails_then_runs(model, bad, [np.array([[1, 2]], np.int32)],
                          r"#0 \(GATHER_ND\): a gather_nd index is out of range for shape \[2, 3\]")
    assert np.array_equal(out, params[1, 2][None])


def computed_indices_model(table, count):
    """GATHER(table, CAST(x)) of a float32 input `x` of `count`: the indices computed inside
    the partition (a CAST to int32 on the GPU) rather than taken from outside it."""
    b = ModelBuilder()
    x = b.input("x", (count,), np.float32)
    indices, out = b.tensor("indices", (count,), np.int32), b.tensor("out", (count, table.shape[1]))
    b.op("CAST", [x], [indices])
    b.op("GATHER", [b.const("table", table), indices], [out], axis=0)
    b.output(out)
    return b.build()


@pytest.mark.parametrize("path", IO_PATHS)
@pytest.mark.parametrize("computed", [False, True], ids=["input_indices", "computed_indices"])
def test_gather_out_of_range_indices_fail_the_invoke(monkeypatch, computed, path):
    """TFLite fails the invoke, naming the node; the shader reads 0 and sets a status word the
    runtime reads with the outputs: the reference's ModelError on every such invoke, whether the
    indices enter the partition or are computed in it, over every I/O path; an in-range invoke
    after it runs on the GPU."""
    table = np.arange(1, 13, dtype=np.float32).reshape(4, 3)
    model = computed_indices_model(table, 2) if computed else \
        single_op_model("GATHER", [In(table, const=True), In(np.array([1, 3], np.int32))], {"axis": 0})
    label = r"#1 \(GATHER\)" if computed else r"#0 \(GATHER\)"
    with GpuDelegate() as delegate:
        use_io_path(monkeypatch, delegate, path)
        interp = Interpreter(model_content=model, experimental_delegates=[delegate])
        interp.allocate_tensors()
        assert delegate.summary()["gpu_nodes"] == 1 + computed
        check_io_path(delegate.partitions[0], path)
        index = interp.get_input_details()[0]["index"]
        for indices in ([3, 4], [-1, 0], [3, 4]):  # as floats, CAST truncates them to the same
            interp.set_tensor(index, np.array(indices, np.float32 if computed else np.int32))
            with pytest.raises(ModelError, match=label + r": gather index out of range \[0, 4\)"):
                interp.invoke()
            interp.set_tensor(index, np.array([3, 0], np.float32 if computed else np.int32))
            interp.invoke()
            assert np.array_equal(interp.get_tensor(interp.get_output_details()[0]["index"]), table[[3, 0]])


# -- what stays on the CPU ----------------------------------------------------------------------
@pytest.mark.parametrize("op,inputs,options,out_dtype", [
    ("CAST", [In(np.arange(4, dtype=np.float32))], {}, np.int64),
    ("CAST", [In(np.array([0, 3, 2**40], np.int64))], {}, np.float32),
    ("GATHER", [In(np.ones((3, 4), np.float32)), In(np.array([0, 2], np.int64))], {"axis": 0}, np.float32),
])
def test_unsupported_variants_run_on_the_cpu(op, inputs, options, out_dtype):
    """int64 tensors that may hold values past int32 (a CAST of floats, an input's) stay on the
    CPU, and still compute the reference's result (those that cannot: tests/gpu/test_index_view.py)."""
    check_exact(op, inputs, options, out_dtype=out_dtype, gpu_nodes=0)


# -- a mask inside a float model ----------------------------------------------------------------
def masked_model(shape, index_dtype=np.int32):
    """x -> MUL -> (LESS 0.5, AND with GREATER_EQUAL -1) -> SELECT_V2(mask, MUL, -1e9) ->
    SOFTMAX, plus the mask itself (bool) and the ARG_MAX of the result (index_dtype: int32 or
    int64) as outputs."""
    b = ModelBuilder()
    x = b.input("x", shape)
    scale = b.const("scale", np.float32([1.5]))
    half, low = b.const("half", np.float32(0.5)), b.const("low", np.float32([-1.0]))
    floor = b.const("floor", np.float32([-1e9]))
    axis = b.const("axis", np.array([-1], np.int32))
    scaled, less, greater, mask = (b.tensor(n, shape, d) for n, d in
                                   [("scaled", np.float32), ("less", np.bool_), ("ge", np.bool_), ("mask", np.bool_)])
    selected, probs = b.tensor("selected", shape), b.tensor("probs", shape)
    best = b.tensor("best", shape[:-1], index_dtype)
    b.op("MUL", [x, scale], [scaled], fused_activation_function=0)
    b.op("LESS", [scaled, half], [less])
    b.op("GREATER_EQUAL", [x, low], [greater])
    b.op("LOGICAL_AND", [less, greater], [mask])
    b.op("SELECT_V2", [mask, scaled, floor], [selected])
    b.op("SOFTMAX", [selected], [probs], beta=1.0)
    b.op("ARG_MAX", [probs, axis], [best], output_type={np.int32: INT32, np.int64: 4}[index_dtype])
    for t in (probs, mask, best):
        b.output(t)
    return b.build()


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("precision", PRECISIONS)
def test_a_mask_between_float_ops_keeps_one_gpu_partition(precision, index_dtype):
    shape = (1, 3, 4, 10)
    model = masked_model(shape, index_dtype)
    x = np.random.default_rng(11).uniform(-2, 2, shape).astype(np.float32)
    if precision != "fp32":
        x = x.astype(np.float16).astype(np.float32)
    reference = run_ours(model, [x])
    gpu, summary = run_gpu(model, [x], precision)
    assert summary["gpu_nodes"] == 7 and summary["cpu_nodes"] == 0 and summary["partitions"] == 1, summary
    tolerance = 1e-5 if precision == "fp32" else 1e-2
    np.testing.assert_allclose(gpu[0], reference[0], atol=tolerance)
    assert gpu[1].dtype == np.bool_ and np.array_equal(gpu[1], reference[1])
    assert gpu[2].dtype == index_dtype and np.array_equal(gpu[2], reference[2])
