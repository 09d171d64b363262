"""RNN, UNIDIRECTIONAL_SEQUENCE_RNN and BIDIRECTIONAL_SEQUENCE_RNN against LiteRT, on one-op
models with every fused activation, both layouts, merge_outputs and the aux input in both of its
roles. Each model is invoked twice (the hidden state carries over), then once more after
reset_all_variables()."""
from dataclasses import dataclass

import numpy as np
import pytest

from gles_delegate import Interpreter
from gles_delegate.errors import ModelError
from gles_delegate.ops.common import ACT_NONE, ACT_RELU, ACT_RELU6, ACT_RELU_N1_TO_1, ACT_SIGN_BIT, ACT_TANH
from gles_delegate.ops.rnn import BIDIRECTIONAL_INPUTS
from gles_delegate.tflite import ModelBuilder, read_model, write_model
from tests.oplib import edit_operator, reason_of, with_int8_weights
from tests.ops.test_lstm import compare_with_litert

ACTIVATIONS = [ACT_NONE, ACT_RELU, ACT_RELU_N1_TO_1, ACT_RELU6, ACT_TANH, ACT_SIGN_BIT]
CROSS_LINKS, BACKWARD_INPUT = "cross_links", "backward_input"  # the aux input's two roles


@dataclass
class RnnSpec:
    """Sizes and options of one RNN node (bw_units: the backward cell's units)."""
    n_time: int = 3
    n_batch: int = 2
    n_input: int = 3
    units: int = 4
    bw_units: int = 4
    n_aux: int = 3
    time_major: bool = False
    activation: int = ACT_TANH

    def input_shape(self, op, features=None):
        features = self.n_input if features is None else features
        if op == "RNN":
            return (self.n_batch, features)
        return (self.n_time, self.n_batch, features) if self.time_major else (self.n_batch, self.n_time, features)


def random_spec(seed, **options):
    rng = np.random.default_rng(seed)
    sizes = dict(n_time=int(rng.integers(1, 6)), n_batch=int(rng.integers(1, 4)), n_input=int(rng.integers(1, 6)),
                 units=int(rng.integers(1, 6)), bw_units=int(rng.integers(1, 6)), n_aux=int(rng.integers(1, 6)))
    return RnnSpec(**{**sizes, **options}), rng


def add_cell(b, prefix, spec, units, rng, state_variable=True):
    """A cell's weights, recurrent weights, bias and hidden state; returns their indices. The
    recurrent weights are scaled down so that a long RELU sequence stays bounded."""
    def const(name, shape, scale=0.8):
        return b.const(prefix + name, rng.uniform(-scale, scale, shape).astype(np.float32))
    hidden_shape = (spec.n_batch, units)
    hidden = b.tensor(prefix + "hidden_state", hidden_shape, is_variable=True) if state_variable else \
        b.input(prefix + "hidden_state", hidden_shape)
    return [const("weights", (units, spec.n_input)), const("recurrent_weights", (units, units), 0.8 / np.sqrt(units)),
            const("bias", (units,)), hidden]


def rnn_model(op, spec, rng, state_variable=True):
    """A one-op RNN or UNIDIRECTIONAL_SEQUENCE_RNN model; returns (model bytes, [hidden state index])."""
    b = ModelBuilder()
    indices = [b.input("input", spec.input_shape(op))] + add_cell(b, "", spec, spec.units, rng, state_variable)
    out = b.tensor("output", spec.input_shape(op, spec.units))
    options = dict(fused_activation_function=spec.activation)
    if op == "UNIDIRECTIONAL_SEQUENCE_RNN":
        options["time_major"] = spec.time_major
    b.op(op, indices, [out], **options)
    b.output(out)
    return b.build(), [indices[4]]


def bidirectional_rnn_model(spec, rng, merge=False, aux=None, state_variable=True):
    """A one-op BIDIRECTIONAL_SEQUENCE_RNN model; returns (model bytes, the hidden state indices)."""
    b = ModelBuilder()
    indices = [b.input("input", spec.input_shape("")), *add_cell(b, "fw_", spec, spec.units, rng, state_variable),
               *add_cell(b, "bw_", spec, spec.bw_units, rng, state_variable)]
    aux_features = spec.n_aux if aux == CROSS_LINKS else spec.n_input
    indices.append(b.input("aux_input", spec.input_shape("", aux_features)) if aux else -1)
    for prefix, units in (("fw_", spec.units), ("bw_", spec.bw_units)):
        indices.append(b.const(prefix + "aux_weights", rng.uniform(-0.8, 0.8, (units, spec.n_aux)).astype(np.float32))
                       if aux == CROSS_LINKS else -1)
    if merge:
        outputs = [b.tensor("output", spec.input_shape("", spec.units + spec.bw_units))]
    else:
        outputs = [b.tensor("fw_output", spec.input_shape("", spec.units)),
                   b.tensor("bw_output", spec.input_shape("", spec.bw_units))]
    b.op("BIDIRECTIONAL_SEQUENCE_RNN", indices, outputs, fused_activation_function=spec.activation,
         time_major=spec.time_major, merge_outputs=merge)
    for index in outputs:
        b.output(index)
    return b.build(), [indices[4], indices[8]]


def feeds(shapes, rng):
    """Two feeds of uniform(-1, 1) values for inputs of these shapes."""
    return [[rng.uniform(-1, 1, shape).astype(np.float32) for shape in shapes] for _ in range(2)]


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_rnn_matches_litert(activation):
    spec, rng = random_spec(activation, activation=activation)
    model, states = rnn_model("RNN", spec, rng)
    compare_with_litert(model, feeds([spec.input_shape("RNN")], rng), states, f"RNN {spec}")


@pytest.mark.parametrize("time_major", [False, True])
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_unidirectional_sequence_rnn_matches_litert(activation, time_major):
    spec, rng = random_spec(10 + activation, activation=activation, time_major=time_major)
    model, states = rnn_model("UNIDIRECTIONAL_SEQUENCE_RNN", spec, rng)
    compare_with_litert(model, feeds([spec.input_shape("")], rng), states, f"sequence {spec}")


@pytest.mark.parametrize("merge", [False, True])
@pytest.mark.parametrize("time_major", [False, True])
@pytest.mark.parametrize("activation", [ACT_NONE, ACT_RELU, ACT_TANH])
def test_bidirectional_sequence_rnn_matches_litert(activation, time_major, merge):
    spec, rng = random_spec(20 + activation + 2 * time_major + merge, activation=activation, time_major=time_major)
    model, states = bidirectional_rnn_model(spec, rng, merge)
    compare_with_litert(model, feeds([spec.input_shape("")], rng), states, f"bidirectional merge={merge} {spec}")


@pytest.mark.parametrize("merge", [False, True])
@pytest.mark.parametrize("time_major", [False, True])
@pytest.mark.parametrize("aux", [CROSS_LINKS, BACKWARD_INPUT])
def test_bidirectional_aux_input_matches_litert(aux, time_major, merge):
    spec, rng = random_spec(30 + 2 * time_major + merge, time_major=time_major)
    if time_major:
        spec.n_aux = spec.n_input  # TFLite's time-major kernel reads the aux input with the input's strides
    model, states = bidirectional_rnn_model(spec, rng, merge, aux)
    aux_features = spec.n_aux if aux == CROSS_LINKS else spec.n_input
    compare_with_litert(model, feeds([spec.input_shape(""), spec.input_shape("", aux_features)], rng), states,
                        f"aux {aux} merge={merge} {spec}")


def test_state_carries_over():
    spec, rng = random_spec(40, n_batch=2, n_time=3)
    model, states = rnn_model("UNIDIRECTIONAL_SEQUENCE_RNN", spec, rng)
    feed = feeds([spec.input_shape("")], rng)[0]
    first, h1, second, h2, after_reset, _ = compare_with_litert(model, [feed, feed], states, "carry")
    assert np.abs(first - second).max() > 1e-3
    np.testing.assert_array_equal(first, after_reset)
    np.testing.assert_array_equal(h2, second[:, -1])


# -- rejection ----------------------------------------------------------------------------
edited = edit_operator


def drop(*names):
    def edit(inputs, options):
        for name in names:
            inputs[BIDIRECTIONAL_INPUTS.index(name)] = -1
    return edit


def options(**values):
    return lambda inputs, options: options.update(values)


def sequence(**kwargs):
    return rnn_model("UNIDIRECTIONAL_SEQUENCE_RNN", RnnSpec(), np.random.default_rng(0), **kwargs)[0]


def bidirectional(time_major=False, n_aux=3, **kwargs):
    spec = RnnSpec(time_major=time_major, n_aux=n_aux)
    return bidirectional_rnn_model(spec, np.random.default_rng(0), **kwargs)[0]


@pytest.mark.parametrize("model, edit, expected", [
    (sequence(), lambda inputs, options: inputs.pop(), "takes 5 inputs"),
    (sequence(), lambda inputs, options: inputs.__setitem__(3, -1), "required inputs are omitted: bias"),
    (sequence(), options(time_major=True), "hidden_state has shape"),
    (sequence(state_variable=False), options(), "hidden_state (tensor 1) must be a variable tensor"),
    (bidirectional(aux=CROSS_LINKS), drop("bw_aux_weights"), "both be given"),
    (bidirectional(aux=CROSS_LINKS), drop("aux_input"), "without aux_input"),
    (bidirectional(time_major=True, n_aux=2, aux=CROSS_LINKS), options(), "time-major kernel needs"),
    (bidirectional(time_major=True, aux=BACKWARD_INPUT), lambda inputs, options: inputs.__setitem__(9, 1),
     "aux_input has shape"),
    (bidirectional(), options(merge_outputs=True), "takes 1 output"),
    (bidirectional(), drop("bw_bias"), "backward cell: required inputs are omitted: bias"),
    (bidirectional(state_variable=False), options(), "fw_hidden_state"),
])
def test_unsupported_nodes_are_rejected(model, edit, expected):
    reason = reason_of(edited(model, edit))
    assert reason is not None and expected in reason, reason


def test_rnn_rejects_a_sequence_input():
    model_def = read_model(sequence())
    op = model_def.subgraphs[0].operators[0]
    op.op = "RNN"
    op.options.pop("time_major")
    assert "rank 2" in reason_of(write_model(model_def))


@pytest.mark.parametrize("op", ["RNN", "UNIDIRECTIONAL_SEQUENCE_RNN"])
def test_hybrid_weights_are_rejected(op):
    """Int8 weights (TFLite's hybrid kernel) are refused, naming the node."""
    model = with_int8_weights(rnn_model(op, RnnSpec(), np.random.default_rng(0))[0], [1, 2])
    assert "float32" in reason_of(model)
    with pytest.raises(ModelError, match=rf"#0 \({op}\).*float32"):
        Interpreter(model_content=model).allocate_tensors()


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_special_values_match_litert(activation):
    """NaN, +-inf, -0 and huge inputs through every activation: the RELU family takes NaN to its
    lower bound (TFLite's ApplyActivationToVector), and the state carries what it computed."""
    spec, rng = random_spec(50, activation=activation, n_time=4, n_batch=3)
    model, states = rnn_model("UNIDIRECTIONAL_SEQUENCE_RNN", spec, rng)
    x = rng.uniform(-1, 1, spec.input_shape("")).astype(np.float32)
    x[0, 1, 0], x[1, 0, 0], x[1, 2, 0], x[2, 1, 0], x[2, 3, 0] = np.nan, np.inf, -np.inf, -0.0, 3e38
    compare_with_litert(model, [[x], [x]], states, f"special values {spec}")
