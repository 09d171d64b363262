"""The index view (gpu/index_view.py): int64 tensors that hold int32 values (int32_values.py:
ARG_MAX's indices and what moves them) run on the GPU as int32, and their readers with them
(GATHER, ONE_HOT, CAST, EQUAL), against the reference in every precision ('auto' too): indices
past a half's 2^11 integers exact, widened into int64 outputs; a partition that reads them from
another one narrows them on upload; an int64 node that may leave int32 (ADD) stays on the CPU."""
import numpy as np
import pytest

from gles_delegate.tflite import ModelBuilder
from tests.gpu.gpulib import PRECISIONS, run_gpu
from tests.oplib import run_ours

ALL_PRECISIONS = PRECISIONS + ("auto",)
ARG_INT64 = 4  # ArgMaxOptions.output_type: TensorType INT64
HALF_STEP = 2.0 ** -11  # a half's relative rounding: float outputs of indices past 2^11


def argmax(b, x, shape):
    best = b.tensor("best", shape[:-1], np.int64)
    b.op("ARG_MAX", [x, b.const("axis", np.array([-1], np.int32))], [best], output_type=ARG_INT64)
    return best


def readers_model(shape):
    """x -> ARG_MAX (int64) -> GATHER of a float table and of an int64 table (values up to
    2^31 - 1), ONE_HOT, CAST to float32 and int32, RESHAPE (an int64 output) -> EQUAL to an int64
    constant, and an int64 ADD of the reshaped indices (it may leave int32: the CPU's)."""
    b, depth = ModelBuilder(), shape[-1]
    x = b.input("x", shape)
    best, rows = argmax(b, x, shape), shape[:-1]
    flat = (int(np.prod(rows)),)
    table = b.const("table", np.arange(depth * 3, dtype=np.float32).reshape(depth, 3) - 7.5)
    wide = b.const("wide", (2 ** 31 - 1 - np.arange(depth) * 65537).astype(np.int64))
    outs = {"rows": b.tensor("rows", rows + (3,)), "wide_rows": b.tensor("wide_rows", rows, np.int64),
            "one_hot": b.tensor("one_hot", shape), "as_float": b.tensor("as_float", rows),
            "as_int32": b.tensor("as_int32", rows, np.int32), "flat": b.tensor("flat", flat, np.int64),
            "is_2049": b.tensor("is_2049", flat, np.bool_), "twice": b.tensor("twice", flat, np.int64)}
    b.op("GATHER", [table, best], [outs["rows"]], axis=0)
    b.op("GATHER", [wide, best], [outs["wide_rows"]], axis=0)
    b.op("ONE_HOT", [best, b.const("depth", np.array(depth, np.int32)), b.const("on", np.float32(1.0)),
                     b.const("off", np.float32(0.0))], [outs["one_hot"]], axis=-1)
    b.op("CAST", [best], [outs["as_float"]])
    b.op("CAST", [best], [outs["as_int32"]])
    b.op("RESHAPE", [best, b.const("flat_shape", np.array(flat, np.int32))], [outs["flat"]])
    b.op("EQUAL", [outs["flat"], b.const("c2049", np.array([2049], np.int64))], [outs["is_2049"]])
    b.op("ADD", [outs["flat"], outs["flat"]], [outs["twice"]], fused_activation_function=0)
    for t in outs.values():
        b.output(t)
    return b.build()


def peaked(shape, seed):
    """Normal values, the maxima of the first rows placed past 2^11 along the last axis (odd
    ones, which a half cannot hold)."""
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    for row, place in enumerate((shape[-1] - 1, 2049, 2051)):
        x.reshape(-1, shape[-1])[row, place] = 9.0
    return x


def check_outputs(gpu, reference, precision, float_outputs):
    """Every output of the reference's dtype; integer and bool ones exact, the float ones
    (k in float_outputs: an index as a float) within one half rounding in the half precisions."""
    for k, (got, want) in enumerate(zip(gpu, reference)):
        assert got.dtype == want.dtype, (k, got.dtype, want.dtype)
        if k in float_outputs and precision != "fp32":
            np.testing.assert_allclose(got, want, rtol=HALF_STEP, atol=0)
        else:
            assert np.array_equal(got, want), (k, got, want)


@pytest.mark.parametrize("precision", ALL_PRECISIONS)
def test_readers_of_argmax_indices_run_on_the_gpu(precision):
    shape = (2, 3, 4100)
    model, x = readers_model(shape), peaked(shape, 1)
    reference = run_ours(model, [x])
    gpu, summary = run_gpu(model, [x], precision, max_delegated_partitions=0)
    assert summary["gpu_nodes"] == 8 and summary["cpu_nodes"] == 1, summary  # all but the ADD
    check_outputs(gpu, reference, precision, float_outputs={0, 3})
    assert reference[5].max() > 2 ** 11 and reference[1].max() > 2 ** 30  # the cases half storage would round


def across_partitions_model(shape):
    """x -> ARG_MAX (int64) -> ADD 2^40 (int64: the CPU's) and CAST to float32 -> MUL 2 after
    it: the CAST's partition reads the indices as an input."""
    b = ModelBuilder()
    x = b.input("x", shape)
    best = argmax(b, x, shape)
    shifted, as_float, y = (b.tensor("shifted", shape[:-1], np.int64), b.tensor("as_float", shape[:-1]),
                            b.tensor("y", shape[:-1]))
    b.op("ADD", [best, b.const("far", np.array([2 ** 40], np.int64))], [shifted], fused_activation_function=0)
    b.op("CAST", [best], [as_float])
    b.op("MUL", [as_float, b.const("two", np.float32([2.0]))], [y], fused_activation_function=0)
    for t in (best, shifted, y):
        b.output(t)
    return b.build()


@pytest.mark.parametrize("precision", ALL_PRECISIONS)
def test_indices_cross_from_one_partition_to_the_next(precision):
    """The first partition's int64 output is widened for the CPU's ADD and narrowed again into
    the second partition (the upload of an int64 input, gpu/kernels/base.io_values)."""
    shape = (2, 3, 3000)
    model, x = across_partitions_model(shape), peaked(shape, 12)
    reference = run_ours(model, [x])
    gpu, summary = run_gpu(model, [x], precision, max_delegated_partitions=0)
    assert (summary["gpu_nodes"], summary["cpu_nodes"], summary["partitions"]) == (3, 1, 2), summary
    check_outputs(gpu, reference, precision, float_outputs={2})
    assert reference[1].min() >= 2 ** 40  # the CPU's sum past int32, from the widened indices
