"""QUANTIZE, DEQUANTIZE and DENSIFY reference kernels against LiteRT's builtin kernels, on
random tensors, per-channel parameters, hand-built sparse tensors (encoded by an independent
recursive encoder, block sparsity included) and the DENSIFY nodes of the MediaPipe models."""
from pathlib import Path

import numpy as np
import pytest

from gles_delegate import Interpreter, ModelError, ops
from gles_delegate.graph import Graph
from gles_delegate.tflite import ModelBuilder, read_model
from gles_delegate.tflite.model import DimensionMetadata, Sparsity
from gles_delegate.tools.common import seeded_inputs
from tests.litert import run_litert
from tests.oplib import In, assert_rejected, check_op, first_node, run_ours, single_op_model

QUANTIZED_DTYPES = [np.int8, np.uint8, np.int16]


def random_quant(rng, dtype, low=0.001, high=0.1):
    info = np.iinfo(dtype)
    zero_point = 0 if dtype == np.int16 else int(rng.integers(info.min, info.max + 1))
    return float(rng.uniform(low, high)), zero_point


# -- QUANTIZE ---------------------------------------------------------------------------------
# LiteRT's x86 QUANTIZE rounds half to even in its vectorized body and half away from zero in
# the scalar tail (TfLiteRound), so exact .5 steps may differ by one: hence quantum=1.
@pytest.mark.parametrize("dtype", QUANTIZED_DTYPES)
def test_quantize_float_per_tensor(dtype):
    rng = np.random.default_rng(np.dtype(dtype).itemsize)
    for rank in range(0, 6):
        shape = tuple(int(d) for d in rng.integers(1, 6, rank))
        scale, zero_point = random_quant(rng, dtype)
        x = rng.normal(0, 200 * scale, shape).astype(np.float32)  # saturates at both ends too
        check_op("QUANTIZE", [In(x)], output_dtypes=[dtype], output_quant=[(scale, zero_point)], quantum=1)


def test_quantize_exact_half_steps():
    """Values exactly halfway between two quantized levels."""
    x = (np.arange(-40, 40, dtype=np.float32) + np.float32(0.5)) * np.float32(0.25)
    for dtype in (np.int8, np.uint8):
        check_op("QUANTIZE", [In(x)], output_dtypes=[dtype], output_quant=[(0.25, 3)], quantum=1)


@pytest.mark.parametrize("axis", [0, 1, 3])
def test_quantize_float_per_channel(axis):
    rng = np.random.default_rng(axis)
    shape = (3, 4, 2, 5)
    scales = rng.uniform(0.01, 0.1, shape[axis])
    zero_points = rng.integers(-20, 20, shape[axis])
    x = rng.normal(0, 3, shape).astype(np.float32)
    check_op("QUANTIZE", [In(x)], output_dtypes=[np.int8], output_quant=[(scales, zero_points, axis)], quantum=1)


def test_quantize_non_finite_values_saturate():
    """Not comparable with LiteRT (undefined behaviour in its C++; x86 gives the minimum for all
    of them): +inf -> max, -inf -> min, NaN -> the zero point, huge values saturate."""
    x = np.array([np.inf, -np.inf, np.nan, 1e30, -1e30, 3e9], np.float32)
    for dtype in QUANTIZED_DTYPES:
        info, zero_point = np.iinfo(dtype), 3 if dtype != np.int16 else 0
        model = single_op_model("QUANTIZE", [In(x)], output_dtypes=[dtype], output_quant=[(0.5, zero_point)])
        expected = [info.max, info.min, zero_point, info.max, info.min, info.max]
        np.testing.assert_array_equal(run_ours(model, [x])[0], np.array(expected, dtype))


REQUANTIZE_PAIRS = [(np.int8, np.int8), (np.int8, np.uint8), (np.uint8, np.int8), (np.uint8, np.uint8),
                    (np.int8, np.int16), (np.uint8, np.int16), (np.int16, np.int8)]


@pytest.mark.parametrize("source,target", REQUANTIZE_PAIRS, ids=lambda d: np.dtype(d).name)
def test_requantize_every_input_value(source, target):
    """Integer -> integer QUANTIZE is reference_ops::Requantize (MultiplyByQuantizedMultiplier,
    which rounds twice): bit-exact against LiteRT's reference kernels. LiteRT's optimized 8-bit ->
    8-bit Requantize rounds once, so near-halves differ by one step: quantum=1 there."""
    rng = np.random.default_rng(np.dtype(source).itemsize * 10 + np.dtype(target).itemsize)
    info = np.iinfo(source)
    x = np.arange(max(info.min, -3000), min(info.max, 3000) + 1).astype(source)
    for _ in range(6):
        inputs, quant = [In(x, quant=random_quant(rng, source))], [random_quant(rng, target)]
        check_op("QUANTIZE", inputs, output_dtypes=[target], output_quant=quant, resolver="reference")
        check_op("QUANTIZE", inputs, output_dtypes=[target], output_quant=quant, quantum=1)
    if {np.dtype(source), np.dtype(target)} == {np.dtype(np.int8), np.dtype(np.uint8)}:
        # The common zero-point shift by 128 at one scale (LiteRT has a fast path for it).
        shift = 128 if source == np.int8 else -128
        check_op("QUANTIZE", [In(x, quant=(0.02, -5))], output_dtypes=[target], output_quant=[(0.02, -5 + shift)])


# -- DEQUANTIZE -----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", QUANTIZED_DTYPES)
def test_dequantize_per_tensor(dtype):
    rng = np.random.default_rng(1)
    info = np.iinfo(dtype)
    for rank in range(0, 6):
        shape = tuple(int(d) for d in rng.integers(1, 6, rank))
        x = rng.integers(info.min, info.max + 1, shape).astype(dtype)
        for const in (False, True):
            check_op("DEQUANTIZE", [In(x, const=const, quant=random_quant(rng, dtype))], output_dtypes=[np.float32])


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_dequantize_per_channel(dtype, axis):
    rng = np.random.default_rng(axis)
    info = np.iinfo(dtype)
    shape = (4, 3, 5)
    x = rng.integers(info.min, info.max + 1, shape).astype(dtype)
    scales = rng.uniform(0.001, 0.5, shape[axis])
    zero_points = rng.integers(info.min, info.max + 1, shape[axis])
    for const in (False, True):
        check_op("DEQUANTIZE", [In(x, const=const, quant=(scales, zero_points, axis))], output_dtypes=[np.float32])


def test_dequantize_float16_is_exact():
    """Every finite float16 bit pattern plus inf / NaN / subnormals: float32 holds them exactly."""
    x = np.arange(0, 1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    model = single_op_model("DEQUANTIZE", [In(x)], output_dtypes=[np.float32])
    ours, theirs = run_ours(model, [x])[0], run_litert(model, [x], resolver="builtin")[0]
    np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(ours, x.astype(np.float32))


# -- DENSIFY --------------------------------------------------------------------------------
def encode_sparse(dense, traversal_order, formats, block_map=(), block_sizes=()):
    """Our own dense -> TFLite sparse encoder, a recursive walk independent of the kernel's
    vectorized decoder. Each blocked dim d splits into (d / b, b), the block axes go last, the
    levels follow traversal_order; a SPARSE_CSR level keeps the indices whose sub-tensor holds a
    nonzero. Returns (flat values, Sparsity)."""
    outer, inner, split_shape = [], [], []
    for d, size in enumerate(dense.shape):
        outer.append(len(split_shape))
        if d in block_map:
            block = block_sizes[list(block_map).index(d)]
            split_shape += [size // block, block]
            inner.append(len(split_shape) - 1)
        else:
            split_shape.append(size)
    ordered = dense.reshape(split_shape).transpose(outer + inner).transpose(traversal_order)
    segments, indices, values = [[0] for _ in formats], [[] for _ in formats], []

    def walk(level, sub):
        if level == len(formats):
            values.append(sub)
            return
        for i in range(sub.shape[0]):
            if formats[level] == "DENSE":
                walk(level + 1, sub[i])
            elif np.any(sub[i] != 0):
                indices[level].append(i)
                walk(level + 1, sub[i])
        segments[level].append(len(indices[level]))
    walk(0, ordered)
    dims = [DimensionMetadata("DENSE", dense_size=ordered.shape[level]) if f == "DENSE" else
            DimensionMetadata("SPARSE_CSR", array_segments=np.array(segments[level], np.int64),
                              array_indices=np.array(indices[level], np.int64))
            for level, f in enumerate(formats)]
    return np.array(values, dense.dtype), Sparsity(tuple(traversal_order), tuple(block_map), dims)


def densify_model(dense_shape, dtype, values, sparsity):
    b = ModelBuilder()
    sparse = b.tensor("sparse", dense_shape, dtype, data=values, sparsity=sparsity)
    out = b.tensor("dense", dense_shape, dtype)
    b.op("DENSIFY", [sparse], [out])
    b.output(out)
    return b.build()


def random_sparse(rng, shape, dtype, density=0.3, block_map=(), block_sizes=()):
    """A random dense tensor whose zeros come in whole blocks (so block sparsity pays off)."""
    coarse = list(shape)
    for d, b in zip(block_map, block_sizes):
        coarse[d] //= b
    keep = rng.random(coarse) < density
    keep.flat[0] = True  # an empty values buffer would make the tensor non-constant
    for d, b in zip(block_map, block_sizes):
        keep = np.repeat(keep, b, axis=d)
    values = rng.integers(1, 100, shape) * np.where(rng.random(shape) < 0.8, 1, -1)
    return (values * keep).astype(dtype)


DENSIFY_CASES = [
    # (dense shape, traversal order, formats, block_map, block_sizes)
    ((8, 1, 1, 32), (0, 1, 2, 3), ("DENSE", "DENSE", "DENSE", "SPARSE_CSR"), (), ()),  # MediaPipe's layout
    ((6, 10), (0, 1), ("DENSE", "SPARSE_CSR"), (), ()),
    ((6, 10), (1, 0), ("DENSE", "SPARSE_CSR"), (), ()),
    ((6, 10), (0, 1), ("SPARSE_CSR", "SPARSE_CSR"), (), ()),
    ((6, 10), (0, 1), ("SPARSE_CSR", "DENSE"), (), ()),
    ((3, 4, 5), (2, 0, 1), ("DENSE", "SPARSE_CSR", "SPARSE_CSR"), (), ()),
    ((4, 8), (0, 1, 2), ("DENSE", "SPARSE_CSR", "DENSE"), (1,), (4,)),  # 1x4 blocks (TFLite's usual)
    ((8, 6), (0, 1, 2, 3), ("DENSE", "SPARSE_CSR", "DENSE", "DENSE"), (0, 1), (2, 3)),
    ((8, 6), (1, 0, 2, 3), ("DENSE", "SPARSE_CSR", "DENSE", "DENSE"), (0, 1), (4, 2)),
    ((8, 6), (0, 1, 3, 2), ("SPARSE_CSR", "SPARSE_CSR", "DENSE", "DENSE"), (0, 1), (2, 2)),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8])
@pytest.mark.parametrize("shape,order,formats,block_map,block_sizes", DENSIFY_CASES)
def test_densify_hand_built(dtype, shape, order, formats, block_map, block_sizes):
    rng = np.random.default_rng(len(shape) + len(order))
    for density in (0.0, 0.3, 1.0):  # 0.0: a single nonzero block
        dense = random_sparse(rng, shape, dtype, density, block_map, block_sizes)
        values, sparsity = encode_sparse(dense, order, formats, block_map, block_sizes)
        model = densify_model(shape, dtype, values, sparsity)
        ours = run_ours(model, [])[0]
        np.testing.assert_array_equal(ours, dense)
        np.testing.assert_array_equal(ours, run_litert(model, [], resolver="builtin")[0])


def test_densify_then_dequantize_folds_into_the_graph():
    """The MediaPipe pattern end to end: sparse fp16 weights -> DENSIFY -> DEQUANTIZE -> ADD."""
    rng = np.random.default_rng(0)
    dense = random_sparse(rng, (4, 16), np.float16)
    values, sparsity = encode_sparse(dense, (0, 1), ("DENSE", "SPARSE_CSR"))
    b = ModelBuilder()
    x = b.input("x", (4, 16))
    sparse = b.tensor("w16", (4, 16), np.float16, data=values, sparsity=sparsity)
    w16, w32, y = b.tensor("dense16", (4, 16), np.float16), b.tensor("w32", (4, 16)), b.tensor("y", (4, 16))
    b.op("DENSIFY", [sparse], [w16])
    b.op("DEQUANTIZE", [w16], [w32], version=3)
    b.op("ADD", [x, w32], [y])
    b.output(y)
    model = b.build()
    feed = [rng.normal(size=(4, 16)).astype(np.float32)]
    np.testing.assert_array_equal(run_ours(model, feed)[0], run_litert(model, feed, resolver="builtin")[0])


@pytest.mark.parametrize("name", ["face_detection_full_range_sparse", "pose_detection"])
def test_densify_matches_litert_on_mediapipe_models(mediapipe_models, name):
    """Every DENSIFY output of the real models, bit for bit against LiteRT's intermediate tensor."""
    data = Path(mediapipe_models[name]).read_bytes()
    graph = Graph.from_model(read_model(data))
    densify_nodes = [node for node in graph.nodes if node.op == "DENSIFY"]
    assert densify_nodes
    probe = Interpreter(model_content=data)
    _, litert = run_litert(data, seeded_inputs(probe.get_input_details()), resolver="builtin",
                           preserve_all_tensors=True)
    for node in densify_nodes:
        assert ops.unsupported_reason(node) is None
        ours = ops.run_node(node, [node.inputs[0].data])[0]
        theirs = litert.get_tensor(node.outputs[0].index)
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape, node.label
        np.testing.assert_array_equal(ours, theirs, err_msg=node.label)


def _densify_node(shape, sparsity, values, dtype=np.float32):
    model = densify_model(shape, dtype, np.asarray(values, dtype), sparsity)
    return first_node(model), model


def _csr(segments, indices):
    return DimensionMetadata("SPARSE_CSR", array_segments=np.array(segments), array_indices=np.array(indices))


@pytest.mark.parametrize("sparsity,expected", [
    (Sparsity((0,), (), [DimensionMetadata("DENSE", 4)]), "2 entries"),
    (Sparsity((1, 1), (), [DimensionMetadata("DENSE", 2), _csr([0, 1, 2], [0, 1])]), "traversal_order"),
    (Sparsity((0, 1, 2), (2,), [DimensionMetadata("DENSE", 2), _csr([0, 1, 2], [0, 1]),
                                DimensionMetadata("DENSE", 1)]), "block_map"),
    (Sparsity((0, 1, 2), (1,), [DimensionMetadata("DENSE", 2), _csr([0, 1, 2], [0, 1]),
                                DimensionMetadata("DENSE", 3)]), "does not divide"),
    (Sparsity((0, 1), (), [DimensionMetadata("DENSE", 2), DimensionMetadata("SPARSE_CSR")]), "lacks array_segments"),
    (Sparsity((0, 1), (), [DimensionMetadata("DENSE", 2_000_000_000), _csr([0, 1, 2], [0, 1])]), "dense_size"),
])
def test_densify_rejects_malformed_sparsity(sparsity, expected):
    node, model = _densify_node((2, 4), sparsity, [1.0, 2.0])
    reason = ops.unsupported_reason(node)
    assert reason is not None and expected in reason
    with pytest.raises(ModelError, match="DENSIFY"):
        Interpreter(model_content=model).allocate_tensors()


@pytest.mark.parametrize("last_level,n_values,expected", [
    (_csr([0, 1], [0]), 2, "too few"),                 # one segment pair for two rows
    (_csr([0, 2, 1], [0, 1]), 2, "non-decreasing"),
    (_csr([0, 1, 3], [0, 1]), 2, "non-decreasing"),     # segments run past the indices
    (_csr([0, 1, 2], [0, 9]), 2, "outside"),
    (_csr([0, 1, 2], [0, -1]), 2, "outside"),
    (_csr([-1, 1, 2], [0, 1]), 2, "non-decreasing"),
    (_csr([0, 1, 2], [0, 1]), 3, "addresses 2 values"),
])
def test_densify_bad_index_arrays_fail_at_allocate(last_level, n_values, expected):
    """Contents of the index arrays are checked by the walk itself: a clean ModelError when the
    node is folded at allocate time, never an IndexError or a silent wrong tensor."""
    sparsity = Sparsity((0, 1), (), [DimensionMetadata("DENSE", 2), last_level])
    _, model = _densify_node((2, 4), sparsity, np.arange(1, n_values + 1))
    with pytest.raises(ModelError, match=expected):
        Interpreter(model_content=model).allocate_tensors()



@pytest.mark.parametrize("on_gpu", [False, True])
def test_densify_of_weights_fails_at_allocate_whoever_reads_them(on_gpu):
    """DENSIFY folds lazily (fold_constants.deferrable): weights an ADD reads are still checked
    at allocate_tensors, by the CPU step's forced read or by the GPU compile's."""
    from gles_delegate import GpuDelegate
    sparsity = Sparsity((0, 1), (), [DimensionMetadata("DENSE", 2), _csr([0, 1, 2], [0, 9])])
    b = ModelBuilder()
    x = b.input("x", (2, 4))
    stored = b.tensor("sparse", (2, 4), np.float32, data=np.array([1.0, 2.0], np.float32), sparsity=sparsity)
    dense, y = b.tensor("dense", (2, 4)), b.tensor("y", (2, 4))
    b.op("DENSIFY", [stored], [dense])
    b.op("ADD", [x, dense], [y])
    b.output(y)
    delegates = [GpuDelegate()] if on_gpu else []
    with pytest.raises(ModelError, match="outside"):
        Interpreter(model_content=b.build(), experimental_delegates=delegates).allocate_tensors()

# -- support ----------------------------------------------------------------------------------
@pytest.mark.parametrize("op,in_dtype,out_dtype,in_quant,out_quant,expected", [
    ("QUANTIZE", np.float32, np.int32, None, (0.1, 0), "QUANTIZE to"),
    ("QUANTIZE", np.float64, np.int8, None, (0.1, 0), "QUANTIZE from"),
    ("QUANTIZE", np.float32, np.int8, None, None, "needs quantization parameters"),
    ("QUANTIZE", np.float32, np.int8, None, (0.0, 0), "non-positive"),
    ("QUANTIZE", np.float32, np.int8, None, ((0.1, 0.2), 0, 1), "2 scales along dimension 1"),
    ("QUANTIZE", np.int8, np.uint8, ((0.1, 0.2, 0.3), 0, 1), (0.1, 0), "per-tensor"),
    ("DEQUANTIZE", np.int8, np.float16, (0.1, 0), None, "DEQUANTIZE to"),
    ("DEQUANTIZE", np.int32, np.float32, (0.1, 0), None, "DEQUANTIZE from"),
    ("DEQUANTIZE", np.uint8, np.float32, ((0.1, 0.2), (0, 0), 5), None, "dimension 5"),
])
def test_unsupported_nodes_are_rejected(op, in_dtype, out_dtype, in_quant, out_quant, expected):
    assert_rejected(op, [In(np.zeros((2, 3), in_dtype), quant=in_quant)], match=expected,
                    outputs=[((2, 3), out_dtype, out_quant)])
