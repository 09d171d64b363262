"""UNIDIRECTIONAL_SEQUENCE_LSTM and LSTM (full and basic kernels) on the GPU against the numpy
reference, in every precision. Each model is invoked twice (the second invoke starts from the
state the first left in the variable tensors), then once more after reset_all_variables(); the
outputs and the state tensors are compared after every invoke. The models are the ones
tests/ops/test_lstm.py checks the reference against LiteRT with."""
import numpy as np
import pytest

from gles_delegate import GpuDelegate, Interpreter
from gles_delegate.gpu import kernels
from gles_delegate.gpu.kernels import lstm
from gles_delegate.ops.common import ACT_RELU, ACT_RELU6, ACT_RELU_N1_TO_1
from gles_delegate.tflite import ModelBuilder
from tests.gpu.gpulib import PRECISIONS, assert_gpu_matches
from tests.oplib import first_node
from tests.ops.test_lstm import (LstmSpec, basic_lstm_model, basic_lstm_with_plain_state, full_lstm_model, random_spec,
                                 run_twice_and_reset)

SEQUENCE = "UNIDIRECTIONAL_SEQUENCE_LSTM"
# What the GPU kernel implements (projection and layer norm it refuses; see test_refusals).
FEATURES = {
    "keras": dict(cell_clip=10.0),  # what the converter emits
    "peephole": dict(peephole=True),
    "cifg": dict(cifg=True),
    "cifg_peephole": dict(cifg=True, peephole=True, cell_clip=0.4),
    "cell_clip": dict(cell_clip=0.3),
    "relu": dict(activation=ACT_RELU),
    "relu6": dict(activation=ACT_RELU6),
    "relu_n1_to_1": dict(activation=ACT_RELU_N1_TO_1),
    "diagonal": dict(diagonal=True, peephole=True),
    "layout_20_inputs": dict(n_inputs=20, peephole=True),
}


def compare(model, feeds, watched, precision, what, gpu_nodes=1, cpu_nodes=0):
    """Reference and GPU runs of run_twice_and_reset, compared result by result (outputs and the
    watched state tensors after each invoke); returns the GPU's results."""
    ours = run_twice_and_reset(Interpreter(model_content=model, cpu_backend="fallback"), feeds, watched)
    with GpuDelegate(precision=precision) as delegate:
        gpu = run_twice_and_reset(Interpreter(model_content=model, experimental_delegates=[delegate]), feeds, watched)
        summary = delegate.summary()
    assert summary["gpu_nodes"] == gpu_nodes and summary["cpu_nodes"] == cpu_nodes, f"{what}: {summary}"
    for k, (r, g) in enumerate(zip(ours, gpu)):
        assert_gpu_matches(r, g, precision, what=f"{what}, result {k}")
    return gpu


def sequence_feeds(spec, rng, op=SEQUENCE, count=2):
    return [[rng.uniform(-1, 1, spec.input_shape(op)).astype(np.float32)] for _ in range(count)]


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("time_major", [False, True])
@pytest.mark.parametrize("name", FEATURES)
def test_sequence_lstm(name, time_major, precision):
    spec, rng = random_spec(list(FEATURES).index(name) + 10 * time_major, time_major=time_major, **FEATURES[name])
    model, states = full_lstm_model(SEQUENCE, spec, rng)
    compare(model, sequence_feeds(spec, rng), states, precision, f"{name} {spec}")


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("split", [1, 4])
@pytest.mark.parametrize("sizes", [
    dict(n_time=6, n_batch=3, n_input=33, n_cell=67),    # cells and inputs off slice boundaries
    dict(n_time=1, n_batch=1, n_input=5, n_cell=64),     # one step (streaming), whole slices
    dict(n_time=9, n_batch=2, n_input=1, n_cell=17),
])
def test_larger_sequence_lstm(sizes, split, precision, monkeypatch):
    """Recurrent matmuls over several state chunks, summed by one lane (split 1) or by 4 lanes of
    a workgroup (split 4, with lanes that have no chunk when the state has fewer than 4)."""
    monkeypatch.setattr(lstm, "recurrent_split", lambda chunks: split)
    rng = np.random.default_rng(sizes["n_cell"])
    for time_major in (False, True):
        spec = LstmSpec(**sizes, cell_clip=10.0, peephole=sizes["n_time"] > 5, time_major=time_major)
        model, states = full_lstm_model(SEQUENCE, spec, rng)
        compare(model, sequence_feeds(spec, rng), states, precision, f"{spec}")


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("name", ["keras", "peephole", "cifg_peephole", "relu6", "layout_20_inputs"])
def test_lstm_full_kernel(name, precision):
    spec, rng = random_spec(list(FEATURES).index(name) + 50, **FEATURES[name])
    model, states = full_lstm_model("LSTM", spec, rng)
    compare(model, sequence_feeds(spec, rng, op="LSTM"), states, precision, f"LSTM {name} {spec}")


def test_state_carries_over_and_resets():
    """The second invoke (same feed) differs from the first, reset_all_variables() brings the
    first back, and output_state is the last step's output: guards against a GPU kernel that
    ignores the state, never writes it back, or keeps it on the GPU past a reset."""
    spec, rng = LstmSpec(n_time=4, cell_clip=10.0), np.random.default_rng(5)
    model, states = full_lstm_model(SEQUENCE, spec, rng)
    feed = sequence_feeds(spec, rng, count=1)[0]
    first, h1, c1, second, h2, c2, after_reset, h3, c3 = compare(model, [feed, feed], states, "fp32", "carry")
    assert np.abs(first - second).max() > 1e-3
    np.testing.assert_array_equal(first, after_reset)
    np.testing.assert_array_equal(h1, h3)
    np.testing.assert_array_equal(c1, c3)
    np.testing.assert_array_equal(h2, second[:, -1])


def test_two_lstm_layers_in_one_partition():
    """A stacked LSTM: the second layer reads the first one's output sequence on the GPU; four
    state tensors carry over."""
    rng = np.random.default_rng(8)
    spec1 = LstmSpec(n_time=4, n_batch=2, n_input=3, n_cell=6, cell_clip=10.0)
    spec2 = LstmSpec(n_time=4, n_batch=2, n_input=6, n_cell=5, cell_clip=10.0, peephole=True)
    b = ModelBuilder()
    x = b.input("input", spec1.input_shape(SEQUENCE))
    states, layer_input = [], x
    for k, spec in enumerate((spec1, spec2)):
        model1, _ = full_lstm_model(SEQUENCE, spec, rng)
        source = first_node(model1)
        indices = [layer_input]
        for tensor in source.inputs[1:]:
            if tensor is None:
                indices.append(-1)
            elif tensor.is_variable:
                indices.append(b.tensor(f"{tensor.name}{k}", tensor.shape, is_variable=True))
                states.append(indices[-1])
            else:
                indices.append(b.const(f"{tensor.name}{k}", tensor.data))
        out = b.tensor(f"output{k}", spec.output_shape(SEQUENCE))
        b.op(SEQUENCE, indices, [out], **spec.options(SEQUENCE))
        layer_input = out
    b.output(layer_input)
    compare(b.build(), sequence_feeds(spec1, rng), states, "fp32", "stacked", gpu_nodes=2)


# -- basic kernel -------------------------------------------------------------------------
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("sizes", [(1, 1, 1), (2, 3, 5), (3, 7, 4), (2, 9, 13)])
def test_lstm_basic_kernel(sizes, precision):
    n_batch, n_input, depth = sizes
    rng = np.random.default_rng(sum(sizes))
    model, states = basic_lstm_model(n_batch, n_input, depth, rng)
    feeds = [[rng.uniform(-1, 1, (n_batch, n_input)).astype(np.float32)] for _ in range(2)]
    compare(model, feeds, states, precision, f"basic {sizes}")


# -- refusals -----------------------------------------------------------------------------
@pytest.mark.parametrize("make, expected", [
    (lambda: full_lstm_model(SEQUENCE, LstmSpec(projection=True), np.random.default_rng(0))[0], "projection"),
    (lambda: full_lstm_model(SEQUENCE, LstmSpec(layer_norm=True), np.random.default_rng(0))[0], "layer normalization"),
    (lambda: full_lstm_model("LSTM", LstmSpec(projection=True, projection_bias=True), np.random.default_rng(0))[0],
     "projection"),
    (lambda: full_lstm_model(SEQUENCE, LstmSpec(), np.random.default_rng(0), state_variable=False)[0], "variable"),
    # State fed as ordinary inputs: TFLite writes the new state into them, which a GPU partition
    # would not download.
    (lambda: basic_lstm_with_plain_state("input"), "not a variable tensor"),
])
def test_refusals(make, expected):
    reason = kernels.unsupported_reason(first_node(make()))
    assert reason is not None and expected in reason, reason


def test_refused_projection_runs_on_the_cpu():
    spec = LstmSpec(projection=True, peephole=True)
    model, states = full_lstm_model(SEQUENCE, spec, np.random.default_rng(1))
    compare(model, sequence_feeds(spec, np.random.default_rng(2)), states, "fp32", "projection", gpu_nodes=0,
            cpu_nodes=1)
