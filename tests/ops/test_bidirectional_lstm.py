"""BIDIRECTIONAL_SEQUENCE_LSTM against LiteRT: both cells with every optional feature the op
takes (CIFG, peepholes, projection with bias, clips, activations), merge_outputs, time_major,
and the aux input in both of its roles. Each model is invoked twice (the state carries over),
then once more after reset_all_variables()."""
from dataclasses import replace

import numpy as np
import pytest

from gles_delegate import Interpreter
from gles_delegate.errors import ModelError
from gles_delegate.ops.common import ACT_NONE, ACT_RELU, ACT_RELU6, ACT_RELU_N1_TO_1
from gles_delegate.ops.lstm import BIDIRECTIONAL_INPUTS, GATES
from gles_delegate.tflite import ModelBuilder, read_model, write_model
from tests.litert import RESOLVERS, LiteRTInterpreter
from tests.oplib import assert_close, edit_operator, reason_of, with_int8_weights
from tests.ops.test_lstm import LstmSpec, compare_with_litert, random_spec, run_twice_and_reset

OP = "BIDIRECTIONAL_SEQUENCE_LSTM"
CROSS_LINKS, BACKWARD_INPUT = "cross_links", "backward_input"  # the aux input's two roles


def bidirectional_lstm_model(spec, rng, merge=False, aux=None, state_variable=True):
    """A one-op model with random weights for both cells (`spec` sizes and features; the backward
    cell gets its own values); returns (model bytes, the four state tensor indices)."""
    b = ModelBuilder()
    shapes = spec.weight_shapes()
    for gate in GATES[1:] if spec.cifg else GATES:
        shapes[f"aux_input_to_{gate}_weights"] = (spec.n_cell, spec.n_input)
    state_shapes = {"output_state": (spec.n_batch, spec.n_output), "cell_state": (spec.n_batch, spec.n_cell)}
    indices = []
    for name in BIDIRECTIONAL_INPUTS:
        plain = name[3:]  # without fw_ / bw_
        if name == "input" or (name == "aux_input" and aux is not None):
            indices.append(b.input(name, spec.input_shape(OP)))
        elif plain in state_shapes:
            indices.append(b.tensor(name, state_shapes[plain], is_variable=True) if state_variable
                           else b.input(name, state_shapes[plain]))
        elif plain in shapes and (aux == CROSS_LINKS or not plain.startswith("aux")):
            indices.append(b.const(name, rng.uniform(-0.8, 0.8, shapes[plain]).astype(np.float32)))
        else:
            indices.append(-1)
    n_out = spec.n_output
    out_shape = spec.output_shape(OP)[:-1]
    outputs = [b.tensor("output", out_shape + (2 * n_out,))] if merge else \
        [b.tensor("fw_output", out_shape + (n_out,)), b.tensor("bw_output", out_shape + (n_out,))]
    b.op(OP, indices, outputs, fused_activation_function=spec.activation, cell_clip=spec.cell_clip,
         proj_clip=spec.proj_clip, merge_outputs=merge, time_major=spec.time_major)
    for index in outputs:
        b.output(index)
    return b.build(), [indices[BIDIRECTIONAL_INPUTS.index(name)] for name in BIDIRECTIONAL_INPUTS[35:39]]


FEATURES = {
    "plain": dict(),
    "cifg_peephole": dict(cifg=True, peephole=True),
    "peephole_clips": dict(peephole=True, cell_clip=0.3),
    "projection_bias_clip": dict(projection=True, projection_bias=True, proj_clip=0.3),
    "relu": dict(activation=ACT_RELU),
    "relu6_cifg": dict(activation=ACT_RELU6, cifg=True),
    "relu_n1_to_1": dict(activation=ACT_RELU_N1_TO_1),
}


def feeds(spec, rng, aux):
    shape = spec.input_shape(OP)
    return [[rng.uniform(-1, 1, shape).astype(np.float32) for _ in range(2 if aux else 1)] for _ in range(2)]


@pytest.mark.parametrize("merge", [False, True])
@pytest.mark.parametrize("time_major", [False, True])
@pytest.mark.parametrize("name", FEATURES)
def test_bidirectional_sequence_lstm_matches_litert(name, time_major, merge):
    spec, rng = random_spec(len(name) + 2 * time_major + merge, time_major=time_major, **FEATURES[name])
    if merge and not time_major:
        spec.n_batch = 1  # TFLite's kernel is undefined for more (test_batch_major_merge_is_refused)
    model, states = bidirectional_lstm_model(spec, rng, merge)
    compare_with_litert(model, feeds(spec, rng, None), states, f"{name} merge={merge} {spec}")


@pytest.mark.parametrize("cifg", [False, True])
@pytest.mark.parametrize("time_major", [False, True])
@pytest.mark.parametrize("aux", [CROSS_LINKS, BACKWARD_INPUT])
def test_aux_input_matches_litert(aux, time_major, cifg):
    spec, rng = random_spec(3 + time_major + 2 * cifg, time_major=time_major, cifg=cifg, peephole=True)
    model, states = bidirectional_lstm_model(spec, rng, merge=time_major, aux=aux)
    compare_with_litert(model, feeds(spec, rng, aux), states, f"aux {aux} {spec}")


def test_state_carries_over_backwards():
    """The backward cell ends at the first time step: its output state is the backward output
    there, and a second invoke starts from it."""
    spec, rng = random_spec(11, time_major=True)
    model, states = bidirectional_lstm_model(spec, rng)
    feed = feeds(spec, rng, None)[0]
    first_fw, first_bw, _, _, bw_h, _, second_fw, second_bw, *_ = compare_with_litert(model, [feed, feed], states,
                                                                                      "carry")
    np.testing.assert_array_equal(bw_h, first_bw[0])
    assert np.abs(first_bw - second_bw).max() > 1e-3 and np.abs(first_fw - second_fw).max() > 1e-3


def test_sequence_length_resize_matches_litert():
    spec, rng = random_spec(4, time_major=True, projection=True)
    model, states = bidirectional_lstm_model(spec, rng, merge=True)
    longer = (spec.n_time + 3,) + spec.input_shape(OP)[1:]
    results = []
    for interp in (Interpreter(model_content=model, cpu_backend="fallback"),
                   LiteRTInterpreter(model_content=model, experimental_op_resolver_type=RESOLVERS["builtin"])):
        interp.resize_tensor_input(interp.get_input_details()[0]["index"], longer)
        results.append(run_twice_and_reset(interp, feeds(replace(spec, n_time=longer[0]), np.random.default_rng(0),
                                                         None), states))
    for k, (ours, theirs) in enumerate(zip(*results)):
        assert_close(ours, theirs, what=f"resized, result {k}")


# -- rejection ----------------------------------------------------------------------------
def edited(spec, edit, **model_kwargs):
    """bidirectional_lstm_model(spec) with `edit(operator inputs list, options dict)` applied."""
    return edit_operator(bidirectional_lstm_model(spec, np.random.default_rng(0), **model_kwargs)[0], edit)


def drop(*names):
    def edit(inputs, options):
        for name in names:
            inputs[BIDIRECTIONAL_INPUTS.index(name)] = -1
    return edit


def move(source, target):
    def edit(inputs, options):
        inputs[BIDIRECTIONAL_INPUTS.index(target)] = inputs[BIDIRECTIONAL_INPUTS.index(source)]
    return edit


def options(**values):
    return lambda inputs, options: options.update(values)


@pytest.mark.parametrize("spec, edit, kwargs, expected", [
    (LstmSpec(), drop("fw_aux_input_to_cell_weights"), dict(aux=CROSS_LINKS), "must all be given"),
    (LstmSpec(), drop("fw_aux_input_to_input_weights"), dict(aux=CROSS_LINKS), "forward cell: aux weights are omitted"),
    (LstmSpec(), drop("aux_input"), dict(aux=CROSS_LINKS), "without aux_input"),
    (LstmSpec(n_input=3), move("bw_input_to_forget_weights", "aux_input"), dict(aux=BACKWARD_INPUT), "aux_input has shape"),
    (LstmSpec(), drop("bw_input_to_forget_weights"), {}, "backward cell: required inputs"),
    (LstmSpec(), drop("bw_recurrent_to_input_weights"), {}, "backward cell: recurrent_to_input_weights"),
    (LstmSpec(peephole=True), drop("fw_cell_to_forget_weights"), {}, "forward cell: the peephole"),
    (LstmSpec(projection=True), drop("bw_projection_weights"), {}, "backward cell: recurrent_to_"),
    (LstmSpec(n_batch=2), options(merge_outputs=True), {}, "undefined"),
    (LstmSpec(n_batch=1), options(merge_outputs=True), {}, "takes 1 output"),
    (LstmSpec(), options(cell_clip=-1.0), {}, "cell_clip -1.0 is negative"),
    (LstmSpec(), options(proj_clip=-1.0), {}, "proj_clip -1.0 is negative"),
    (LstmSpec(), options(fused_activation_function=ACT_NONE), {}, "fused activation"),
    (LstmSpec(), options(time_major=True), {}, "has shape"),
    (LstmSpec(), lambda inputs, options: inputs.pop(), {}, "takes 48 inputs"),
    (LstmSpec(), lambda inputs, options: None, dict(state_variable=False), "variable tensor"),
])
def test_unsupported_nodes_are_rejected(spec, edit, kwargs, expected):
    reason = reason_of(edited(spec, edit, **kwargs))
    assert reason is not None and expected in reason, reason


def test_cells_of_different_sizes_are_rejected():
    """The backward cell's tensors taken from a model with 2 cells instead of 4 (the builder
    makes the same tensors in the same order, so the indices match)."""
    model_def, small = (read_model(bidirectional_lstm_model(LstmSpec(n_cell=n), np.random.default_rng(0))[0])
                        for n in (4, 2))
    operator = model_def.subgraphs[0].operators[0]
    for name, k in zip(BIDIRECTIONAL_INPUTS, operator.inputs):
        if name.startswith("bw_") and k >= 0:
            tensor, source = model_def.subgraphs[0].tensors[k], small.subgraphs[0].tensors[k]
            tensor.shape = source.shape
            if tensor.buffer:
                model_def.buffers[tensor.buffer] = small.buffers[source.buffer]
    assert "same (n_cell, n_output)" in reason_of(write_model(model_def))


def test_hybrid_weights_are_rejected():
    """Int8 weights (TFLite's hybrid kernel) are refused, naming the node."""
    model = with_int8_weights(bidirectional_lstm_model(LstmSpec(), np.random.default_rng(0))[0],
                              [BIDIRECTIONAL_INPUTS.index("fw_input_to_cell_weights")])
    assert "float32" in reason_of(model)
    with pytest.raises(ModelError, match=r"#0 \(BIDIRECTIONAL_SEQUENCE_LSTM\).*float32"):
        Interpreter(model_content=model).allocate_tensors()
