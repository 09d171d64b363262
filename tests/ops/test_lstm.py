"""UNIDIRECTIONAL_SEQUENCE_LSTM and LSTM (full and basic kernels) against LiteRT.

The models mirror what TFLite's converter emits for a Keras LSTM (checked by converting one with
TensorFlow 2.21: UNIDIRECTIONAL_SEQUENCE_LSTM with 24 inputs, the four input and recurrent
weights split per gate, no peephole / projection / layer norm, output_state and cell_state as
variable tensors without data, TANH, cell_clip 10, proj_clip 0, time_major false) and then turn
every optional feature on. Each model is invoked twice, so the second invoke starts from the
state the first left, then once more after reset_all_variables().
"""
from dataclasses import dataclass

import numpy as np
import pytest

from gles_delegate import Interpreter, ops
from gles_delegate.errors import ModelError
from gles_delegate.ops.common import ACT_NONE, ACT_RELU, ACT_RELU6, ACT_RELU_N1_TO_1, ACT_TANH
from gles_delegate.ops.lstm import GATES, INPUT_NAMES
from gles_delegate.tflite import ModelBuilder, read_model, write_model
from gles_delegate.tflite.writer import quantize_params
from tests.litert import RESOLVERS, LiteRTInterpreter
from tests.oplib import assert_close, first_node, reason_of


@dataclass
class LstmSpec:
    """Sizes and features of one full-layout LSTM node."""
    n_time: int = 3
    n_batch: int = 2
    n_input: int = 3
    n_cell: int = 4
    n_projection: int = 3
    cifg: bool = False
    peephole: bool = False
    projection: bool = False
    projection_bias: bool = False
    layer_norm: bool = False
    diagonal: bool = False
    activation: int = ACT_TANH
    cell_clip: float = 0.0
    proj_clip: float = 0.0
    time_major: bool = False
    n_inputs: int = 24

    @property
    def n_output(self):
        return self.n_projection if self.projection else self.n_cell

    def weight_shapes(self):
        """{input name: shape} of the constant inputs this spec gives (the rest are omitted)."""
        gates = GATES[1:] if self.cifg else GATES
        c, o = self.n_cell, self.n_output
        shapes = {}
        for gate in gates:
            shapes[f"input_to_{gate}_weights"] = (c, self.n_input)
            shapes[f"recurrent_to_{gate}_weights"] = (c,) if self.diagonal else (c, o)
            shapes[f"{gate}_gate_bias"] = (c,)
            if self.layer_norm:
                shapes[f"{gate}_layer_norm_coefficients"] = (c,)
        if self.peephole:
            shapes.update({f"cell_to_{g}_weights": (c,) for g in ("input", "forget", "output") if g in gates})
        if self.projection:
            shapes["projection_weights"] = (o, c)
        if self.projection_bias:
            shapes["projection_bias"] = (o,)
        return shapes

    def input_shape(self, op):
        if op == "LSTM":
            return (self.n_batch, self.n_input)
        return (self.n_time, self.n_batch, self.n_input) if self.time_major else \
            (self.n_batch, self.n_time, self.n_input)

    def output_shape(self, op):
        return self.input_shape(op)[:-1] + (self.n_output,)

    def options(self, op):
        options = dict(fused_activation_function=self.activation, cell_clip=self.cell_clip, proj_clip=self.proj_clip)
        if op == "UNIDIRECTIONAL_SEQUENCE_LSTM":
            options.update(time_major=self.time_major, diagonal_recurrent_tensors=self.diagonal)
        return options


def full_lstm_model(op, spec, rng, state_variable=True):
    """A one-op model of `op` with random weights; returns (model bytes, state tensor indices)."""
    b = ModelBuilder()
    shapes = spec.weight_shapes()
    state_shapes = {"output_state": (spec.n_batch, spec.n_output), "cell_state": (spec.n_batch, spec.n_cell)}
    indices = [b.input("input", spec.input_shape(op))]
    for name in INPUT_NAMES[1:spec.n_inputs]:
        if name in state_shapes:
            shape = state_shapes[name]
            # A variable tensor without data is how the converter emits LSTM state.
            indices.append(b.tensor(name, shape, is_variable=True) if state_variable else b.input(name, shape))
        elif name in shapes:
            # Layer-norm coefficients near 1 and biases of either sign keep the gates unsaturated.
            center = 1.0 if name.endswith("coefficients") else 0.0
            indices.append(b.const(name, (center + rng.uniform(-0.8, 0.8, shapes[name])).astype(np.float32)))
        else:
            indices.append(-1)
    out = b.tensor("output", spec.output_shape(op))
    b.op(op, indices, [out], **spec.options(op))
    b.output(out)
    return b.build(), [indices[INPUT_NAMES.index("output_state")], indices[INPUT_NAMES.index("cell_state")]]


def run_twice_and_reset(interp, feeds, watched):
    """Invoke once per feed (the state carries over), then reset_all_variables() and invoke the
    first feed again; returns every output and watched tensor after each invoke."""
    def invoke(feed):
        for detail, value in zip(interp.get_input_details(), feed):
            interp.set_tensor(detail["index"], value)
        interp.invoke()
        return [interp.get_tensor(d["index"]) for d in interp.get_output_details()] + \
            [interp.get_tensor(i) for i in watched]

    interp.allocate_tensors()
    results = [result for feed in feeds for result in invoke(feed)]
    interp.reset_all_variables()
    return results + invoke(feeds[0])


def compare_with_litert(model, feeds, watched, what):
    """Every output and `watched` (state) tensor after each invoke of run_twice_and_reset, ours
    against LiteRT's; the op's output-shape rule must give the shapes LiteRT computes."""
    ours = run_twice_and_reset(Interpreter(model_content=model, cpu_backend="fallback"), feeds, watched)
    theirs = run_twice_and_reset(LiteRTInterpreter(model_content=model,
                                                   experimental_op_resolver_type=RESOLVERS["builtin"]),
                                 feeds, watched)
    for k, (a, b) in enumerate(zip(ours, theirs)):
        assert_close(a, b, what=f"{what}, result {k}")
    node = first_node(model)
    rule = ops.output_shapes(node, [None if t is None else t.shape for t in node.inputs])
    assert rule == [r.shape for r in theirs[:len(node.outputs)]], what
    return ours


FEATURES = {
    "keras": dict(cell_clip=10.0),
    "peephole": dict(peephole=True),
    "cifg": dict(cifg=True),
    "cifg_peephole": dict(cifg=True, peephole=True),
    "projection": dict(projection=True),
    "projection_bias_clip": dict(projection=True, projection_bias=True, proj_clip=0.3),
    "layer_norm": dict(layer_norm=True),
    "layer_norm_cifg_peephole": dict(layer_norm=True, cifg=True, peephole=True),
    "cell_clip": dict(cell_clip=0.3),
    "relu": dict(activation=ACT_RELU),
    "relu6": dict(activation=ACT_RELU6),
    "relu_n1_to_1": dict(activation=ACT_RELU_N1_TO_1),
    "everything": dict(peephole=True, projection=True, projection_bias=True, layer_norm=True, cell_clip=0.5,
                       proj_clip=0.4),
    "layout_20_inputs": dict(n_inputs=20, peephole=True, projection=True),
}


def random_spec(seed, **features):
    rng = np.random.default_rng(seed)
    # Layer norm over two cells maps (a, b) to +-(a - b) / sqrt((a - b)^2 + 4e-8): when a ~ b it
    # amplifies float32 rounding a thousandfold, a conditioning issue no implementation escapes.
    # Four or more cells make such near-ties vanishingly rare.
    min_cells = 4 if features.get("layer_norm") else 1
    sizes = dict(n_time=int(rng.integers(1, 6)), n_batch=int(rng.integers(1, 4)), n_input=int(rng.integers(1, 7)),
                 n_cell=int(rng.integers(min_cells, 7)), n_projection=int(rng.integers(1, 6)))
    return LstmSpec(**sizes, **features), rng


@pytest.mark.parametrize("time_major", [False, True])
@pytest.mark.parametrize("name", FEATURES)
@pytest.mark.parametrize("seed", range(2))
def test_unidirectional_sequence_lstm_matches_litert(name, time_major, seed):
    spec, rng = random_spec(seed, time_major=time_major, **FEATURES[name])
    model, states = full_lstm_model("UNIDIRECTIONAL_SEQUENCE_LSTM", spec, rng)
    feeds = [[rng.uniform(-1, 1, spec.input_shape("UNIDIRECTIONAL_SEQUENCE_LSTM")).astype(np.float32)]
             for _ in range(2)]
    compare_with_litert(model, feeds, states, f"{name} {spec}")


@pytest.mark.parametrize("seed", range(3))
def test_diagonal_recurrent_weights_match_litert(seed):
    spec, rng = random_spec(seed, diagonal=True, time_major=bool(seed % 2), peephole=seed == 2)
    model, states = full_lstm_model("UNIDIRECTIONAL_SEQUENCE_LSTM", spec, rng)
    feeds = [[rng.uniform(-1, 1, spec.input_shape("UNIDIRECTIONAL_SEQUENCE_LSTM")).astype(np.float32)]
             for _ in range(2)]
    compare_with_litert(model, feeds, states, f"diagonal {spec}")


@pytest.mark.parametrize("name", FEATURES)
@pytest.mark.parametrize("seed", range(2))
def test_lstm_full_kernel_matches_litert(name, seed):
    spec, rng = random_spec(seed, **FEATURES[name])
    model, states = full_lstm_model("LSTM", spec, rng)
    feeds = [[rng.uniform(-1, 1, spec.input_shape("LSTM")).astype(np.float32)] for _ in range(2)]
    compare_with_litert(model, feeds, states, f"{name} {spec}")


def test_state_carries_over_and_resets():
    """The second invoke differs from the first (state carried over), and a reset restores the
    first result: guards against a kernel that ignores or never writes the state."""
    spec, rng = random_spec(5, cell_clip=10.0)
    model, states = full_lstm_model("UNIDIRECTIONAL_SEQUENCE_LSTM", spec, rng)
    feed = [rng.uniform(-1, 1, spec.input_shape("UNIDIRECTIONAL_SEQUENCE_LSTM")).astype(np.float32)]
    first, h1, c1, second, h2, c2, after_reset, h3, c3 = compare_with_litert(model, [feed, feed], states, "carry")
    assert np.abs(first - second).max() > 1e-3
    np.testing.assert_array_equal(first, after_reset)
    np.testing.assert_array_equal(h1, h3)
    # Batch-major output: the output state is the last time step's output.
    np.testing.assert_array_equal(h2, second[:, -1])


def test_sequence_length_resize_matches_litert():
    spec, rng = random_spec(7, peephole=True)
    model, states = full_lstm_model("UNIDIRECTIONAL_SEQUENCE_LSTM", spec, rng)
    longer = (spec.n_batch, spec.n_time + 3, spec.n_input)
    x = rng.uniform(-1, 1, longer).astype(np.float32)
    results = []
    for interp in (Interpreter(model_content=model, cpu_backend="fallback"),
                   LiteRTInterpreter(model_content=model, experimental_op_resolver_type=RESOLVERS["builtin"])):
        interp.resize_tensor_input(interp.get_input_details()[0]["index"], longer)
        interp.allocate_tensors()
        interp.set_tensor(interp.get_input_details()[0]["index"], x)
        interp.invoke()
        results.append(interp.get_tensor(interp.get_output_details()[0]["index"]))
    assert_close(*results, what="resized sequence")


def test_batch_resize_is_a_model_error():
    """The state tensors fix the batch; a different batch must fail cleanly, naming the node."""
    spec, rng = random_spec(0)
    model, _ = full_lstm_model("UNIDIRECTIONAL_SEQUENCE_LSTM", spec, rng)
    interp = Interpreter(model_content=model)
    interp.resize_tensor_input(0, (spec.n_batch + 1, spec.n_time, spec.n_input))
    with pytest.raises(ModelError, match=r"#0 \(UNIDIRECTIONAL_SEQUENCE_LSTM\).*output_state"):
        interp.allocate_tensors()


# -- basic kernel -------------------------------------------------------------------------
def basic_lstm_model(n_batch, n_input, depth, rng):
    b = ModelBuilder()
    x = b.input("input", (n_batch, n_input))
    prev_activation = b.tensor("prev_activation", (n_batch, depth), is_variable=True)
    weights = b.const("weights", rng.uniform(-1, 1, (4 * depth, n_input + depth)).astype(np.float32))
    bias = b.const("bias", rng.uniform(-1, 1, (4 * depth,)).astype(np.float32))
    prev_state = b.tensor("prev_state", (n_batch, depth), is_variable=True)
    outputs = [b.tensor(name, shape) for name, shape in
               (("activation", (n_batch, depth)), ("state", (n_batch, depth)),
                ("concat", (n_batch, n_input + depth)), ("pre_activations", (n_batch, 4 * depth)))]
    b.op("LSTM", [x, prev_activation, weights, bias, prev_state], outputs, kernel_type=1,
         fused_activation_function=ACT_TANH, version=2)
    for index in outputs:
        b.output(index)
    return b.build(), [prev_activation, prev_state]


@pytest.mark.parametrize("seed", range(4))
def test_lstm_basic_kernel_matches_litert(seed):
    rng = np.random.default_rng(seed)
    n_batch, n_input, depth = (int(v) for v in rng.integers(1, 6, 3))
    model, states = basic_lstm_model(n_batch, n_input, depth, rng)
    feeds = [[rng.uniform(-1, 1, (n_batch, n_input)).astype(np.float32)] for _ in range(2)]
    compare_with_litert(model, feeds, states, f"basic {n_batch}x{n_input}->{depth}")


# -- rejection ----------------------------------------------------------------------------
def edited_lstm(op, spec, edit):
    """A full-layout model whose operator inputs / options `edit(model_def)` changes."""
    model, _ = full_lstm_model(op, spec, np.random.default_rng(0))
    model_def = read_model(model)
    edit(model_def)
    return write_model(model_def)


def drop_input(name):
    def edit(model_def):
        op = model_def.subgraphs[0].operators[0]
        inputs = list(op.inputs)
        inputs[INPUT_NAMES.index(name)] = -1
        op.inputs = tuple(inputs)
    return edit


def set_option(**options):
    def edit(model_def):
        model_def.subgraphs[0].operators[0].options.update(options)
    return edit


@pytest.mark.parametrize("op, spec, edit, expected", [
    ("UNIDIRECTIONAL_SEQUENCE_LSTM", LstmSpec(), drop_input("recurrent_to_input_weights"), "CIFG"),
    ("UNIDIRECTIONAL_SEQUENCE_LSTM", LstmSpec(), drop_input("input_to_forget_weights"), "required inputs"),
    ("UNIDIRECTIONAL_SEQUENCE_LSTM", LstmSpec(peephole=True), drop_input("cell_to_output_weights"), "peephole"),
    ("UNIDIRECTIONAL_SEQUENCE_LSTM", LstmSpec(layer_norm=True), drop_input("cell_layer_norm_coefficients"),
     "layer-norm"),
    ("UNIDIRECTIONAL_SEQUENCE_LSTM", LstmSpec(projection=True, projection_bias=True),
     drop_input("projection_weights"), "projection_bias"),
    ("UNIDIRECTIONAL_SEQUENCE_LSTM", LstmSpec(), set_option(fused_activation_function=ACT_NONE),
     "fused activation"),
    ("UNIDIRECTIONAL_SEQUENCE_LSTM", LstmSpec(projection=True), set_option(diagonal_recurrent_tensors=True),
     "diagonal"),
    ("UNIDIRECTIONAL_SEQUENCE_LSTM", LstmSpec(), set_option(time_major=True), "has shape"),
    ("LSTM", LstmSpec(), set_option(kernel_type=2), "kernel_type"),
])
def test_unsupported_nodes_are_rejected(op, spec, edit, expected):
    reason = reason_of(edited_lstm(op, spec, edit))
    assert reason is not None and expected in reason, reason


def test_state_must_be_a_variable_tensor():
    model, _ = full_lstm_model("UNIDIRECTIONAL_SEQUENCE_LSTM", LstmSpec(), np.random.default_rng(0),
                               state_variable=False)
    assert "variable tensor" in reason_of(model)
    with pytest.raises(ModelError, match=r"#0 \(UNIDIRECTIONAL_SEQUENCE_LSTM\).*variable"):
        Interpreter(model_content=model).allocate_tensors()


def test_lstm_rejects_a_sequence_input():
    def make_lstm(model_def):
        op = model_def.subgraphs[0].operators[0]
        op.op, op.options = "LSTM", {"fused_activation_function": ACT_TANH}
    assert "rank 2" in reason_of(edited_lstm("UNIDIRECTIONAL_SEQUENCE_LSTM", LstmSpec(), make_lstm))


def test_quantized_weights_are_rejected():
    def quantize_forget_weights(model_def):
        subgraph = model_def.subgraphs[0]
        tensor = subgraph.tensors[subgraph.operators[0].inputs[INPUT_NAMES.index("input_to_forget_weights")]]
        tensor.type_name = "INT8"
        tensor.quantization = quantize_params(0.01, 0)
        model_def.buffers[tensor.buffer] = np.zeros(int(np.prod(tensor.shape)), np.uint8)
    assert "float32" in reason_of(edited_lstm("UNIDIRECTIONAL_SEQUENCE_LSTM", LstmSpec(), quantize_forget_weights))


def basic_lstm_with_plain_state(state):
    """A basic-kernel LSTM (input 1x2, depth 3) whose prev_activation and prev_state are not
    variable tensors: state "const" makes them zero constants, "input" model inputs."""
    rng = np.random.default_rng(0)
    b = ModelBuilder()
    x = b.input("input", (1, 2))
    if state == "const":
        prev = [b.const(name, np.zeros((1, 3), np.float32)) for name in ("prev_activation", "prev_state")]
    else:
        prev = [b.input(name, (1, 3)) for name in ("prev_activation", "prev_state")]
    weights = b.const("weights", rng.uniform(-1, 1, (12, 5)).astype(np.float32))
    bias = b.const("bias", np.zeros(12, np.float32))
    outputs = [b.tensor(f"o{k}", s) for k, s in enumerate([(1, 3), (1, 3), (1, 5), (1, 12)])]
    b.op("LSTM", [x, prev[0], weights, bias, prev[1]], outputs, kernel_type=1)
    for index in outputs:
        b.output(index)
    return b.build()


def test_basic_kernel_rejects_constant_state():
    assert "constant" in reason_of(basic_lstm_with_plain_state("const"))
