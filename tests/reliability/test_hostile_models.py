"""One test per hostile input the fuzzer (tools/fuzz_models.py) found: each now gives a
ModelError that says what and where, fast and without allocating what the file asks for. These
are the package's own guarantees: its CPU nodes on the reference (cpu_backend='reference', what
docs/usage.md advises for models you do not trust)."""
import struct
import time
import tracemalloc

import numpy as np
import pytest

from gles_delegate import GpuDelegate, Interpreter, ModelError
from gles_delegate.cpu_litert import WholeModelStep
from gles_delegate.graph import Graph
from gles_delegate.shape_propagation import declared_shape_errors
from gles_delegate.tflite import ModelBuilder, read_model, write_model
from gles_delegate.tflite.model import DimensionMetadata, Quantization, Sparsity
from gles_delegate.tflite.writer import quantize_params
from gles_delegate.tools.fuzz_models import shared_table_model, shared_vector_model, small_models


def interpreter(model, gpu=False, cpu_backend="reference"):
    return Interpreter(model_content=model, experimental_delegates=[GpuDelegate()] if gpu else None,
                       cpu_backend=cpu_backend)


def test_shared_offsets_cannot_amplify_reading():
    """20,000 subgraph offsets to one subgraph of 20,000 offsets to one tensor: 160 kB that a
    naive reader turns into 400 million tensors."""
    data = shared_table_model(20000, 20000)
    start = time.perf_counter()
    with pytest.raises(ModelError, match="refers to its tables and vectors more often"):
        read_model(data)
    assert time.perf_counter() - start < 30
    read_model(shared_table_model(50, 3))  # a little sharing is still a valid file


def test_a_shared_operator_vector_cannot_amplify_reading():
    """2,000 operator offsets to one ADD whose inputs vector holds 25,000 indices: 108 kB that
    gathered per operator are 50 million indices (the batched table read once gathered them
    before charging the reading budget: 1.6 GB at its peak)."""
    data = shared_vector_model(2000, 25000)
    tracemalloc.start()
    start = time.perf_counter()
    try:
        with pytest.raises(ModelError, match="refers to its tables and vectors more often"):
            read_model(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - start < 10
    assert peak < 16 * len(data) + (8 << 20)
    assert len(read_model(shared_vector_model(200, 3)).subgraphs[0].operators) == 200  # a little sharing is valid


def test_shape_longer_than_the_rank_limit_is_refused_before_conversion():
    b = ModelBuilder()
    x = b.input("x", (1,) * 17)
    b.output(x)
    with pytest.raises(ModelError, match=r"tensor 0: Shape has 17 entries, at most 16"):
        read_model(b.build())


def sparse_model(edit):
    model = read_model(small_models()["sparse"])
    edit(model.subgraphs[0].tensors[1], model)
    return write_model(model)


def test_sparse_buffer_of_partial_values():
    def shorten(tensor, model):
        model.buffers[tensor.buffer] = np.asarray(model.buffers[tensor.buffer])[:5]
    with pytest.raises(ModelError, match=r"tensor 1 \('sparse_w'\): buffer 1 holds 5 bytes, not a whole number"):
        read_model(sparse_model(shorten))


def test_csr_level_without_indices_keeps_the_details_readable():
    def drop_indices(tensor, model):
        tensor.sparsity.dim_metadata[1].array_indices = None
    it = interpreter(sparse_model(drop_indices))
    details = it.get_tensor_details()[1]["sparsity_parameters"]
    assert details["dim_metadata"][1]["array_indices"].size == 0
    with pytest.raises(ModelError, match="SPARSE_CSR level 1 lacks array_segments or array_indices"):
        it.allocate_tensors()


def test_infinite_quantization_scale():
    model = read_model(small_models()["quantized"])
    model.subgraphs[0].tensors[0].quantization = Quantization(np.array([np.inf], np.float32), np.zeros(1, np.int64))
    with pytest.raises(ModelError, match=r"tensor 0: quantization scale inf is not finite"):
        read_model(write_model(model))


def one_op(op, inputs, output_shape, custom_options=None, **options):
    """One op on float inputs: each input is (shape, constant array or None, dtype)."""
    b = ModelBuilder()
    indices = []
    for k, (shape, data, dtype) in enumerate(inputs):
        if data is not None:
            indices.append(b.const(f"c{k}", np.asarray(data, dtype)))
        else:
            indices.append(b.input(f"in{k}", shape, dtype))
    y = b.tensor("y", output_shape)
    b.op(op, indices, [y], custom_options=custom_options, **options)
    b.output(y)
    return b.build()


HUGE = [
    ("PAD", [((1, 4, 4, 1), None, np.float32), (None, [[0, 0], [0, 0], [1 << 30, 0], [0, 0]], np.int32)],
     (1, 4, 4, 1), {}, r"operator #0 \(PAD\): output 0 \(tensor 2, 'y'\) is declared \[1, 4, 4, 1\], its inputs "
                       r"give \[1, 4, 1073741828, 1\]"),
    ("RESIZE_BILINEAR", [((1, 4, 4, 1), None, np.float32), (None, [2143289344, 14], np.int32)], (1, 8, 8, 1),
     {"align_corners": False, "half_pixel_centers": False}, r"RESIZE_BILINEAR.*is declared \[1, 8, 8, 1\]"),
    ("TILE", [((1, 4), None, np.float32), (None, [1 << 20, 1 << 10], np.int32)], (1, 4), {},
     r"TILE.*its inputs give \[1048576, 4096\]"),
    ("ADD", [((4096, 1), None, np.float32), ((1, 4096), None, np.float32)], (4096, 1),
     {"fused_activation_function": 0}, r"ADD.*its inputs give \[4096, 4096\]"),
]


@pytest.mark.parametrize("op, inputs, output_shape, options, match", HUGE, ids=[h[0] for h in HUGE])
def test_outputs_far_larger_than_declared_fail_at_allocate(op, inputs, output_shape, options, match):
    it = interpreter(one_op(op, inputs, output_shape, **options))
    start = time.perf_counter()
    with pytest.raises(ModelError, match=match):
        it.allocate_tensors()
    assert time.perf_counter() - start < 5


def test_transpose_conv_bias_with_a_huge_custom_stride():
    weights = np.ones((3, 2, 2, 2), np.float32)
    options = struct.pack("<iiii", 1, 1 << 28, 2, 0)  # SAME, stride_w 2^28, stride_h 2
    model = one_op("Convolution2DTransposeBias", [((1, 4, 4, 2), None, np.float32), (None, weights, np.float32),
                                                  (None, np.zeros(3), np.float32)], (1, 8, 8, 3),
                   custom_options=options)
    with pytest.raises(ModelError, match=r"Convolution2DTransposeBias.*its inputs give \[1, 8, 805306370, 3\]"):
        interpreter(model).allocate_tensors()


@pytest.mark.parametrize("cpu_backend, match", [
    ("reference", r"operator #0 \(PAD\): output 0 \(tensor 2\) would have shape \[1, 1073741828, 4, 1\], the "
                  r"model declares \[1, 6, 6, 1\]"),
    ("auto", r"operator #0 \(PAD\) failed in LiteRT: .*Pad output size overflowed"),
])
def test_runtime_paddings_too_large_fail_at_invoke(cpu_backend, match):
    """PAD whose paddings are a runtime input: checked against the declared output when set
    (on LiteRT, by its kernel)."""
    it = interpreter(one_op("PAD", [((1, 4, 4, 1), None, np.float32), ((4, 2), None, np.int32)], (1, 6, 6, 1)),
                     cpu_backend=cpu_backend)
    it.allocate_tensors()
    it.set_tensor(1, np.array([[0, 0], [1 << 30, 0], [0, 0], [0, 0]], np.int32))
    with pytest.raises(ModelError, match=match):
        it.invoke()


def test_pool_window_far_larger_than_its_input():
    model = one_op("MAX_POOL_2D", [((1, 4, 4, 1), None, np.float32)], (1, 4, 4, 1), padding=0, stride_w=1,
                   stride_h=1, filter_width=65535, filter_height=65535, fused_activation_function=0)
    with pytest.raises(ModelError, match=r"MAX_POOL_2D.*window extent 65535"):
        interpreter(model).allocate_tensors()


def test_pool_window_larger_than_its_input_reads_only_what_overlaps():
    """SAME pooling with a window of twice the input: valid, and every output is the max of
    the whole input (the padding taps are skipped, not computed)."""
    x = np.arange(16, dtype=np.float32).reshape(1, 4, 4, 1)
    model = one_op("MAX_POOL_2D", [((1, 4, 4, 1), None, np.float32)], (1, 4, 4, 1), padding=0, stride_w=1,
                   stride_h=1, filter_width=8, filter_height=8, fused_activation_function=0)
    it = interpreter(model)
    it.allocate_tensors()
    it.set_tensor(0, x)
    it.invoke()
    assert (it.get_tensor(1) == 15).all()


def test_conv_with_a_huge_dilation():
    model = one_op("CONV_2D", [((1, 4, 4, 1), None, np.float32), (None, np.ones((1, 3, 3, 1)), np.float32)],
                   (1, 4, 4, 1), padding=0, stride_w=1, stride_h=1, dilation_w_factor=1 << 30,
                   dilation_h_factor=1, fused_activation_function=0)
    with pytest.raises(ModelError, match=r"CONV_2D.*window extent 2147483649"):
        interpreter(model).allocate_tensors()


@pytest.mark.usefixtures("gpu_available")
def test_malformed_nodes_are_model_errors_with_the_gpu_delegate():
    """A RESHAPE with no inputs and a CONCATENATION with an omitted input: the CPU refuses them,
    and the GPU kernels' checks (which assume a well-formed node) must not crash on them."""
    model = read_model(small_models()["convnet"])
    model.subgraphs[0].operators[3].inputs = ()
    with pytest.raises(ModelError, match=r"operator #3 \(RESHAPE\)"):
        interpreter(write_model(model), gpu=True).allocate_tensors()
    model = read_model(small_models()["shapes"])
    model.subgraphs[0].operators[4].inputs = (8, -1)
    with pytest.raises(ModelError, match=r"operator #4 \(CONCATENATION\)"):
        interpreter(write_model(model), gpu=True).allocate_tensors()


def test_declared_shapes_far_from_the_sparsity_metadata():
    """DENSIFY with a dense_size that does not match the shape is refused before it allocates."""
    def grow(tensor, model):
        tensor.sparsity = Sparsity(tensor.sparsity.traversal_order, (),
                                   [DimensionMetadata("DENSE", 1 << 30)] + tensor.sparsity.dim_metadata[1:])
    with pytest.raises(ModelError, match=r"DENSE level 0 has dense_size 1073741824"):
        interpreter(sparse_model(grow)).allocate_tensors()


def test_huge_declared_input_before_a_small_declared_conv_output():
    """Two flipped bytes made the conv net's input [1, 16711688, 8, 3]: the CONV_2D output is
    still declared [1, 8, 8, 4], which allocate_tensors() reports before allocating 1.6 GB."""
    model = read_model(small_models()["convnet"])
    model.subgraphs[0].tensors[0].shape = (1, 16711688, 8, 3)
    start = time.perf_counter()
    with pytest.raises(ModelError, match=r"operator #0 \(CONV_2D\): output 0 \(tensor 3, 'conv'\) is declared "
                                         r"\[1, 8, 8, 4\], its inputs give \[1, 16711688, 8, 4\]"):
        interpreter(write_model(model)).allocate_tensors()
    assert time.perf_counter() - start < 5


# -- what gles-fuzz found crashing LiteRT's kernels under cpu_backend 'auto' ----------------------
@pytest.mark.parametrize("dtype, scale, zero_point, why", [
    (np.int8, 0.1, 128, "not safe with: zero points outside int8"),
    (np.uint8, 0.1, -3, "not safe with: zero points outside uint8"),
    (np.uint8, 1e-45, 128, "not safe with: a scale that is not a positive normal float"),
])
def test_quantization_litert_crashes_on_stays_on_the_reference(dtype, scale, zero_point, why):
    """A QUANTIZE whose output has a zero point outside its type (a retyped tensor, an overlong
    zero-point vector) or a denormal scale crashed LiteRT 2.3 (SIGSEGV) once 'auto' handed it
    every CPU node; the reference runs it."""
    b = ModelBuilder()
    x = b.input("x", (1, 4))
    y = b.tensor("y", (1, 4), dtype, quantization=quantize_params(scale, zero_point))
    b.op("QUANTIZE", [x], [y])
    b.output(y)
    values = [np.float32([[-1, 0, 0.5, 2]])]
    ours = interpreter(b.build(), cpu_backend="auto")
    ours.allocate_tensors()
    summary = ours.cpu_summary()
    assert summary["reference_nodes"] == ["#0 (QUANTIZE)"] and why in summary["reference_reasons"]["#0 (QUANTIZE)"]
    ours.set_tensor(0, values[0])
    ours.invoke()
    reference = interpreter(b.build())
    reference.allocate_tensors()
    reference.set_tensor(0, values[0])
    reference.invoke()
    np.testing.assert_array_equal(ours.get_tensor(1), reference.get_tensor(1))


def depthwise_without_bias():
    """x [1, 6, 6, 4] -> DEPTHWISE_CONV_2D of 2 inputs (no bias slot, which TFLite's Prepare
    takes) -> TANH."""
    b = ModelBuilder()
    x = b.input("x", (1, 6, 6, 4))
    y, z = b.tensor("y", (1, 4, 4, 4)), b.tensor("z", (1, 4, 4, 4))
    weights = np.random.default_rng(0).standard_normal((1, 3, 3, 4)).astype(np.float32)
    b.op("DEPTHWISE_CONV_2D", [x, b.const("w", weights)], [y], padding=1, stride_w=1, stride_h=1,
         depth_multiplier=1, fused_activation_function=0, dilation_w_factor=1, dilation_h_factor=1)
    b.op("TANH", [y], [z])
    b.output(z)
    return b.build()


@pytest.mark.parametrize("placement", ["cpu", "fastest"])
def test_a_depthwise_conv_without_bias_stays_off_litert(placement):
    """A DEPTHWISE_CONV_2D of 2 inputs crashes LiteRT 2.3 at invoke (SIGSEGV, gles-fuzz seed 77:
    LiteRT alone too): neither a sub-model of it nor the model file whole goes to LiteRT; the
    reference runs the convolution (bias zero), LiteRT the TANH after it."""
    x = np.random.default_rng(1).standard_normal((1, 6, 6, 4)).astype(np.float32)
    delegates = [GpuDelegate(placement="fastest")] if placement == "fastest" else None
    ours = Interpreter(model_content=depthwise_without_bias(), cpu_backend="auto", experimental_delegates=delegates)
    ours.allocate_tensors()
    assert not any(isinstance(step, WholeModelStep) for step in ours._main.steps)
    if placement == "cpu":
        summary = ours.cpu_summary()
        assert summary["reference_nodes"] == ["#0 (DEPTHWISE_CONV_2D)"] and summary["litert_nodes"] == ["#1 (TANH)"]
        assert "crashes LiteRT" in summary["reference_reasons"]["#0 (DEPTHWISE_CONV_2D)"]
    ours.set_tensor(0, x)
    ours.invoke()
    reference = interpreter(depthwise_without_bias(), cpu_backend="reference")
    reference.allocate_tensors()
    reference.set_tensor(0, x)
    reference.invoke()
    got, expected = ours.get_tensor(ours.get_output_details()[0]["index"]), reference.get_tensor(2)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5 * max(np.abs(expected).max(), 1))


def test_reshape_with_an_omitted_shape_runs_on_litert():
    """RESHAPE [x, -1] (its shape input omitted) crashed LiteRT 2.3 (SIGSEGV: its kernel reads
    the -1); the sub-model writes it in the 1-input form, which LiteRT defines."""
    b = ModelBuilder()
    x = b.input("x", (2, 3))
    y = b.tensor("y", (3, 2))
    b.op("RESHAPE", [x, -1], [y], new_shape=[3, 2])
    b.output(y)
    ours = interpreter(b.build(), cpu_backend="auto")
    ours.allocate_tensors()
    assert ours.cpu_summary()["litert_nodes"] == ["#0 (RESHAPE)"]
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    ours.set_tensor(0, x)
    ours.invoke()
    np.testing.assert_array_equal(ours.get_tensor(1), x.reshape(3, 2))



@pytest.mark.parametrize("op", ["SOFTMAX", "DEQUANTIZE"])
def test_an_omitted_input_whose_shape_rule_passes_none_has_no_declared_shape_error(op):
    """SOFTMAX / DEQUANTIZE with their one input omitted (gles-fuzz --seed 4103 --cpu-backend
    litert): the shape rule gave [None], whose conversion was a TypeError out of allocate
    (check_declared_shapes) and out of the LiteRT path's plan; now no shape is known, and the
    node's kernel says what is wrong ('auto': the reference's ModelError)."""
    b = ModelBuilder()
    x = b.input("x", (2, 3))
    y, z = b.tensor("y", (2, 3)), b.tensor("z", (2, 3))
    b.op("TANH", [x], [y])
    b.op(op, [-1], [z], **({"beta": 1.0} if op == "SOFTMAX" else {}))
    b.output(y)
    b.output(z)
    graph = Graph.from_model(read_model(b.build()))
    assert list(declared_shape_errors(graph)) == []
    with pytest.raises(ModelError, match="missing tensor"):
        interpreter(b.build(), cpu_backend="auto").allocate_tensors()


def rewritten_tensor(quantize):
    """x int8 -> DEQUANTIZE -> a; MUL(a, a) -> m; then QUANTIZE (or NEG) of m written into a
    again; the graph's output q, which nothing writes. gles-fuzz seed 4711 (QUANTIZE's output
    mutated onto the DEQUANTIZE's): LiteRT 2.3 alone corrupts its heap on it (an abort at exit)."""
    b = ModelBuilder()
    x = b.input("x", (1, 4, 4, 3), np.int8, quantization=quantize_params(0.05, -3))
    a, m = b.tensor("a", (1, 4, 4, 3)), b.tensor("m", (1, 4, 4, 3))
    q = b.tensor("q", (1, 4, 4, 3), np.uint8, quantization=quantize_params(0.1, 128))
    b.op("DEQUANTIZE", [x], [a])
    b.op("MUL", [a, a], [m], fused_activation_function=0)
    b.op("QUANTIZE" if quantize else "NEG", [m], [a])
    b.output(q)
    return b.build()


@pytest.mark.parametrize("quantize", [True, False])
@pytest.mark.parametrize("cpu_backend", ["reference", "auto"])
def test_a_tensor_written_twice_is_refused(quantize, cpu_backend):
    """Each tensor has one producer: a second one is a ModelError naming both, before any
    kernel (LiteRT's among them) runs."""
    with pytest.raises(ModelError, match=r"tensor 1 \('a'\) is the output of operator #0 \(DEQUANTIZE\) and of "
                                         r"operator #2 \((QUANTIZE|NEG)\)"):
        interpreter(rewritten_tensor(quantize), cpu_backend=cpu_backend).allocate_tensors()
