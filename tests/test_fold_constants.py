"""fold_constants: constant-only nodes become read-only constants at allocate time."""
import numpy as np
import pytest

from gles_delegate import GpuDelegate, Interpreter, ModelError, ops
from gles_delegate.fold_constants import densify_sparse_reads, fold_constants
from gles_delegate.graph import Graph
from gles_delegate.tflite import ModelBuilder, read_model, write_model
from gles_delegate.tflite.writer import quantize_params
from tests.litert import run_litert
from tests.ops.test_quantize import encode_sparse, random_sparse


def mean_of_constant_scalar():
    """MEAN of a constant scalar (numpy reduces it to a numpy scalar, not an array) feeding an ADD."""
    b = ModelBuilder()
    x = b.input("x", (2,))
    value, axis = b.const("value", np.float32(2.5)), b.const("axis", np.array([0], np.int32))
    mean, out = b.tensor("mean", ()), b.tensor("out", (2,))
    b.op("MEAN", [value, axis], [mean], keep_dims=False)
    b.op("ADD", [x, mean], [out])
    b.output(out)
    return b.build()


def test_a_numpy_scalar_result_folds_into_a_read_only_constant():
    graph = Graph.from_model(read_model(mean_of_constant_scalar()))
    assert [node.op for node in fold_constants(graph)] == ["MEAN"]
    folded = graph.nodes[0].inputs[1].data
    assert isinstance(folded, np.ndarray) and folded.shape == () and folded == np.float32(2.5)
    assert not folded.flags.writeable
    interp = Interpreter(model_content=mean_of_constant_scalar())
    interp.allocate_tensors()
    interp.set_tensor(interp.get_input_details()[0]["index"], np.array([1.0, -1.0], np.float32))
    interp.invoke()
    np.testing.assert_array_equal(interp.get_tensor(interp.get_output_details()[0]["index"]), [3.5, 1.5])


def test_a_result_that_does_not_fit_the_declared_shape_is_a_model_error():
    b = ModelBuilder()
    x = b.const("x", np.arange(6, dtype=np.float32).reshape(2, 3))
    y = b.tensor("y", (4,))
    b.op("RESHAPE", [x], [y], new_shape=[6])
    b.output(y)
    # Said by the fold, or before the kernel runs by RESHAPE's output-shape rule (ops.OUTPUT_SHAPES).
    with pytest.raises(ModelError, match=r"#0 \(RESHAPE\).*output (tensor 1 shape|0 \(tensor 1\) would have shape) "
                                         r"\[6\].*declares \[4\]"):
        Interpreter(model_content=b.build()).allocate_tensors()


def keras_gate_model(batch=1):
    """x [batch, 4, 4, 8] (a dynamic batch, as a Keras 3 model declares it) -> MEAN over H, W ->
    RESHAPE to [batch, 1, 1, 8], the target shape computed as Keras writes it: SHAPE(x) ->
    STRIDED_SLICE (the batch) -> PACK with 1, 1, 8 -> then x * the gate."""
    b = ModelBuilder()
    x = b.input("x", (batch, 4, 4, 8), shape_signature=(-1, 4, 4, 8))
    mean = b.tensor("mean", (batch, 8), shape_signature=(-1, 8))
    b.op("MEAN", [x, b.const("axes", np.array([1, 2], np.int32))], [mean], keep_dims=False)
    shape, size = b.tensor("shape", (4,), np.int32), b.tensor("batch", (), np.int32)
    b.op("SHAPE", [x], [shape], out_type=2)
    one = np.array([1], np.int32)
    b.op("STRIDED_SLICE", [shape, b.const("begin", np.array([0], np.int32)), b.const("end", one),
                           b.const("strides", one)], [size], shrink_axis_mask=1)
    target = b.tensor("target", (4,), np.int32)
    b.op("PACK", [size] + [b.const(f"d{k}", np.array(v, np.int32)) for k, v in enumerate((1, 1, 8))], [target],
         values_count=4, axis=0)
    gate = b.tensor("gate", (batch, 1, 1, 8), shape_signature=(-1, 1, 1, 8))
    b.op("RESHAPE", [mean, target], [gate])
    y = b.tensor("y", (batch, 4, 4, 8), shape_signature=(-1, 4, 4, 8))
    b.op("MUL", [x, gate], [y], fused_activation_function=0)
    b.output(y)
    return b.build()


def expected_gate(x):
    return x * x.mean(axis=(1, 2), keepdims=True)


def test_shape_of_a_fixed_shape_folds_with_what_only_computes_on_it():
    interpreter = Interpreter(model_content=keras_gate_model())
    interpreter.allocate_tensors()
    assert [node.op for node in interpreter._main.graph.nodes] == ["MEAN", "RESHAPE", "MUL"]
    target = {d["name"]: d["index"] for d in interpreter.get_tensor_details()}["target"]
    np.testing.assert_array_equal(interpreter.get_tensor(target), [1, 1, 1, 8])


def test_a_folded_shape_follows_a_resize():
    interpreter = Interpreter(model_content=keras_gate_model())
    interpreter.allocate_tensors()
    interpreter.resize_tensor_input(0, [3, 4, 4, 8])
    interpreter.allocate_tensors()  # plans again from the model: SHAPE folds to [3, 4, 4, 8]
    x = np.random.default_rng(0).uniform(-1, 1, (3, 4, 4, 8)).astype(np.float32)
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    interpreter.invoke()
    out, expected = interpreter.get_tensor(interpreter.get_output_details()[0]["index"]), expected_gate(x)
    # float32 throughout: the mean's summation order differs from numpy's by a few ulps.
    assert np.abs(out - expected).max() <= 16 * np.finfo(np.float32).eps * np.abs(expected).max()


def band_part_model(batch=1):
    """tf.linalg.band_part(x, 1, 0) as TF's converter writes it: SELECT_V2 between x and a
    ZEROS_LIKE of x, by a mask computed from constants; the batch dynamic."""
    b = ModelBuilder()
    x = b.input("x", (batch, 4, 4), shape_signature=(-1, 4, 4))
    zeros = b.tensor("zeros", (batch, 4, 4), shape_signature=(-1, 4, 4))
    b.op("ZEROS_LIKE", [x], [zeros])
    rows, cols = np.indices((4, 4))
    band = b.const("band", (rows - cols >= 0) & (rows - cols <= 1))
    y = b.tensor("y", (batch, 4, 4), shape_signature=(-1, 4, 4))
    b.op("SELECT_V2", [band, x, zeros], [y])
    b.output(y)
    return b.build()


@pytest.mark.parametrize("batch", [1, 3])
def test_zeros_like_of_a_fixed_shape_folds_and_follows_a_resize(batch):
    """Its value is its input's shape's zeros: a constant once the allocation fixes that shape
    (the GPU partition is then the SELECT_V2 alone, where ZEROS_LIKE has no GPU kernel)."""
    interpreter = Interpreter(model_content=band_part_model())
    if batch != 1:
        interpreter.resize_tensor_input(0, [batch, 4, 4])
    interpreter.allocate_tensors()
    assert [node.op for node in interpreter._main.graph.nodes] == ["SELECT_V2"]
    x = np.random.default_rng(batch).uniform(-1, 1, (batch, 4, 4)).astype(np.float32)
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    interpreter.invoke()
    np.testing.assert_array_equal(interpreter.get_tensor(interpreter.get_output_details()[0]["index"]),
                                  np.tril(np.triu(x, -1)))


def test_zeros_like_as_a_graph_output_stays_a_node():
    b = ModelBuilder()
    x = b.input("x", (2, 3))
    zeros = b.tensor("zeros", (2, 3))
    b.op("ZEROS_LIKE", [x], [zeros])
    b.output(zeros)
    interpreter = Interpreter(model_content=b.build())
    interpreter.allocate_tensors()
    assert [node.op for node in interpreter._main.graph.nodes] == ["ZEROS_LIKE"]


# -- sparse weights read directly (densify_sparse_reads) ----------------------------------------
SPARSE_FC_CASES = {  # weights dtype, formats, block_map, block_sizes
    "float_1x4_blocks": (np.float32, ("DENSE", "SPARSE_CSR", "DENSE"), (1,), (4,)),
    "float_random": (np.float32, ("DENSE", "SPARSE_CSR"), (), ()),
    "int8_1x16_blocks": (np.int8, ("DENSE", "SPARSE_CSR", "DENSE"), (1,), (16,)),
}


def sparse_fc_model(case, rng):
    """(model, input, dense weights, bias) of a FULLY_CONNECTED reading sparse weights itself
    (no DENSIFY node), as TFLite's sparse FC kernels take them."""
    dtype, formats, block_map, block_sizes = SPARSE_FC_CASES[case]
    weights = random_sparse(rng, (8, 32), dtype, block_map=block_map, block_sizes=block_sizes)
    weights = weights.astype(np.float32) / 50 if dtype == np.float32 else weights
    values, sparsity = encode_sparse(weights, tuple(range(2 + len(block_map))), formats, block_map, block_sizes)
    quantized = dtype == np.int8
    q = (lambda scale, zero: quantize_params(scale, zero)) if quantized else (lambda scale, zero: None)
    bias = (rng.standard_normal(8) * 100).astype(np.int32) if quantized else rng.standard_normal(8).astype(np.float32)
    b = ModelBuilder()
    x = b.input("x", (2, 32), dtype, quantization=q(0.05, 3))
    w = b.tensor("w", (8, 32), dtype, data=values, sparsity=sparsity, quantization=q(0.02, 0))
    out = b.tensor("out", (2, 8), dtype, quantization=q(0.1, -2))
    b.op("FULLY_CONNECTED", [x, w, b.const("bias", bias, quantization=q(0.001, 0))], [out],
         fused_activation_function=0)
    b.output(out)
    x_value = rng.integers(-128, 128, (2, 32)).astype(np.int8) if quantized else \
        rng.standard_normal((2, 32)).astype(np.float32)
    return b.build(), x_value, weights, bias


@pytest.mark.parametrize("gpu", [False, True], ids=["cpu", "gpu"])
@pytest.mark.parametrize("case", SPARSE_FC_CASES)
def test_sparse_weights_read_by_a_fully_connected_are_densified(case, gpu):
    """Each sparse tensor an op reads directly gets a DENSIFY, which folds: the reference (and
    the GPU) then run the dense op. LiteRT's builtin sparse kernels agree: the same integers in
    int8, within float32 rounding of the sums in float (LiteRT's default resolver, XNNPACK,
    returned NaN and 1e28 on the float cases)."""
    model, x, weights, bias = sparse_fc_model(case, np.random.default_rng(len(case)))
    delegates = [GpuDelegate(precision="fp32")] if gpu else []
    interpreter = Interpreter(model_content=model, experimental_delegates=delegates)
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    interpreter.invoke()
    ours = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
    if gpu:
        assert delegates[0].summary()["gpu_nodes"] == 1
        delegates[0].close()
    (theirs,) = run_litert(model, [x], resolver="builtin")
    if x.dtype == np.int8:
        assert np.abs(ours.astype(np.int32) - theirs).max() <= (1 if gpu else 0)  # the GPU's float view: a step
        return
    magnitude = np.abs(x).astype(np.float64) @ np.abs(weights).T + np.abs(bias)
    bound = 32 * np.finfo(np.float32).eps * magnitude
    assert np.all(np.abs(ours - theirs) <= bound)
    assert np.all(np.abs(ours - (x.astype(np.float64) @ weights.T + bias)) <= bound)


def test_one_densify_per_sparse_tensor_and_none_before_a_densify():
    model, _, _, _ = sparse_fc_model("float_random", np.random.default_rng(1))
    graph = Graph.from_model(read_model(model))
    sparse = graph.nodes[0].inputs[1]
    added = densify_sparse_reads(graph)
    assert [n.op for n in graph.nodes] == ["DENSIFY", "FULLY_CONNECTED"] and added == graph.nodes[:1]
    assert graph.nodes[0].inputs == [sparse] and graph.nodes[1].inputs[1] is graph.nodes[0].outputs[0]
    assert densify_sparse_reads(graph) == []  # the DENSIFY itself reads the sparse tensor
    assert [n.op for n in fold_constants(graph)] == ["DENSIFY"]
    np.testing.assert_array_equal(np.asarray(graph.nodes[0].inputs[1].data), ops.run_node(added[0], [sparse.data])[0])


def test_malformed_sparse_weights_read_directly_are_a_model_error_naming_the_tensor():
    """The DENSIFY takes the reader's operator index: the error names it and the tensor."""
    model, _, _, _ = sparse_fc_model("float_random", np.random.default_rng(2))
    edited = read_model(model)
    edited.subgraphs[0].tensors[1].sparsity.dim_metadata[1].array_indices = None
    with pytest.raises(ModelError, match=r"#0 \(DENSIFY\).*tensor 1: SPARSE_CSR level 1 lacks array_segments"):
        Interpreter(model_content=write_model(edited)).allocate_tensors()
