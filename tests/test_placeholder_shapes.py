"""Shapes a converter declares as placeholders (a -1 in the shape_signature, 1 in the shape):
the interpreter gives such a tensor the shape its node computes at every allocate, as TFLite's
Prepare does, not only after a resize. Keras 3's Dense on a rank-3 input flattens it with
RESHAPE(x, [prod(shape[:2]), features]) declared [1, 1]; a dilated Conv1D's SPACE_TO_BATCH_ND
of a dynamic batch is declared [1, ...] and makes a batch of 2."""
import numpy as np

from gles_delegate import Interpreter
from gles_delegate.tflite import ModelBuilder
from tests.litert import run_litert

EPS32 = np.finfo(np.float32).eps


def keras_dense_model(tokens=5, features=4, units=3, batch=1):
    """x [batch, tokens, features] (dynamic batch) -> Dense(units) as Keras 3 writes it for the
    TFLite converter: SHAPE(x) -> GATHER [0, 1] -> REDUCE_PROD (rows), PACK(rows, features) ->
    RESHAPE to [rows, features], declared [1, 1] -> FULLY_CONNECTED (no bias), declared
    [1, units] -> RESHAPE to CONCATENATION(GATHER [0, 1], [units]) -> y [batch, tokens, units]."""
    b = ModelBuilder()
    x = b.input("x", (batch, tokens, features), shape_signature=(-1, tokens, features))
    shape, lead, rows = b.tensor("shape", (3,), np.int32), b.tensor("lead", (2,), np.int32), b.tensor("rows", (), np.int32)
    b.op("SHAPE", [x], [shape], out_type=2)
    b.op("GATHER", [shape, b.const("lead_axes", np.array([0, 1], np.int32))], [lead], axis=0, batch_dims=0)
    b.op("REDUCE_PROD", [lead, b.const("axis0", np.array([0], np.int32))], [rows], keep_dims=False)
    flat_shape = b.tensor("flat_shape", (2,), np.int32)
    b.op("PACK", [rows, b.const("features", np.array(features, np.int32))], [flat_shape], values_count=2, axis=0)
    flat = b.tensor("flat", (1, 1), shape_signature=(-1, -1))
    b.op("RESHAPE", [x, flat_shape], [flat])
    weights = np.random.default_rng(7).uniform(-1, 1, (units, features)).astype(np.float32)
    dense = b.tensor("dense", (1, units), shape_signature=(-1, units))
    b.op("FULLY_CONNECTED", [flat, b.const("weights", weights), -1], [dense], fused_activation_function=0,
         keep_num_dims=False)
    out_shape = b.tensor("out_shape", (3,), np.int32)
    b.op("CONCATENATION", [lead, b.const("units", np.array([units], np.int32))], [out_shape], axis=0,
         fused_activation_function=0)
    y = b.tensor("y", (batch, tokens, units), shape_signature=(-1, tokens, units))
    b.op("RESHAPE", [dense, out_shape], [y])
    b.output(y)
    return b.build(), weights


def dilated_model(length=8, channels=2, scale=(0.5, -2.0)):
    """x [1, length, channels] (dynamic batch) -> SPACE_TO_BATCH_ND (block 2), declared
    [1, length / 2, channels] as the TF converter writes it (really [2, ...]) -> MUL by a
    per-channel constant -> BATCH_TO_SPACE_ND (block 2) -> y [1, length, channels] = x * scale."""
    b = ModelBuilder()
    x = b.input("x", (1, length, channels), shape_signature=(-1, length, channels))
    block, pads = b.const("block", np.array([2], np.int32)), b.const("pads", np.zeros((1, 2), np.int32))
    spread = b.tensor("spread", (1, length // 2, channels), shape_signature=(-1, length // 2, channels))
    b.op("SPACE_TO_BATCH_ND", [x, block, pads], [spread])
    scaled = b.tensor("scaled", (1, length // 2, channels), shape_signature=(-1, length // 2, channels))
    b.op("MUL", [spread, b.const("scale", np.array(scale, np.float32))], [scaled], fused_activation_function=0)
    y = b.tensor("y", (1, length, channels), shape_signature=(-1, length, channels))
    b.op("BATCH_TO_SPACE_ND", [scaled, block, pads], [y])
    b.output(y)
    return b.build(), np.array(scale, np.float32)


def expected_dense(x, weights):
    return x @ weights.T


def run(interp, x):
    interp.set_tensor(interp.get_input_details()[0]["index"], x)
    interp.invoke()
    return interp.get_tensor(interp.get_output_details()[0]["index"])


def test_a_placeholder_reshape_gets_its_real_shape_at_allocate():
    model, weights = keras_dense_model()
    interp = Interpreter(model_content=model)
    interp.allocate_tensors()
    shapes = {d["name"]: list(d["shape"]) for d in interp.get_tensor_details()}
    assert shapes["flat"] == [5, 4] and shapes["dense"] == [5, 3]
    x = np.random.default_rng(0).uniform(-1, 1, (1, 5, 4)).astype(np.float32)
    # Four products summed in float32: within a few ulps of the output's magnitude.
    expected = expected_dense(x, weights)
    assert np.abs(run(interp, x) - expected).max() <= 8 * EPS32 * np.abs(expected).max()


def test_the_placeholder_follows_a_resize():
    model, weights = keras_dense_model()
    interp = Interpreter(model_content=model)
    interp.allocate_tensors()
    interp.resize_tensor_input(0, [3, 5, 4])
    interp.allocate_tensors()
    assert {d["name"]: list(d["shape"]) for d in interp.get_tensor_details()}["flat"] == [15, 4]
    x = np.random.default_rng(1).uniform(-1, 1, (3, 5, 4)).astype(np.float32)
    expected = expected_dense(x, weights)
    assert np.abs(run(interp, x) - expected).max() <= 8 * EPS32 * np.abs(expected).max()


def test_the_reference_matches_litert_at_the_declared_shapes():
    model, _ = keras_dense_model(tokens=7, features=6, units=5)
    x = np.random.default_rng(2).uniform(-1, 1, (1, 7, 6)).astype(np.float32)
    interp = Interpreter(model_content=model)
    interp.allocate_tensors()
    (want,) = run_litert(model, [x], resolver="builtin")
    assert np.abs(run(interp, x) - want).max() <= 8 * EPS32 * np.abs(want).max()


def test_a_space_to_batch_declared_at_batch_1_gets_its_real_batch():
    model, scale = dilated_model()
    interp = Interpreter(model_content=model)
    interp.allocate_tensors()
    assert {d["name"]: list(d["shape"]) for d in interp.get_tensor_details()}["spread"] == [2, 4, 2]
    x = np.random.default_rng(3).uniform(-1, 1, (1, 8, 2)).astype(np.float32)
    np.testing.assert_array_equal(run(interp, x), x * scale)  # one product each: exact
    (want,) = run_litert(model, [x], resolver="builtin")
    np.testing.assert_array_equal(run(interp, x), want)
