"""Fully connected RNN family, float32: RNN (one step), UNIDIRECTIONAL_SEQUENCE_RNN and
BIDIRECTIONAL_SEQUENCE_RNN (tensorflow/lite/kernels/basic_rnn.cc, unidirectional_sequence_rnn.cc,
bidirectional_sequence_rnn.cc; the step is kernel_utils::RnnBatchStep).

One cell: input weights W [units, n_input], recurrent weights R [units, units], bias [units] and
a hidden state h [batch, units], a variable tensor the kernel updates in place (so the state
carries over from one invoke to the next). Each time step computes
  h = activation(x @ W^T + aux @ W_aux^T + h @ R^T + bias)
and outputs h; the fused activation is applied as a function (ApplyActivationToVector: NONE
leaves the sum, TANH is tanh, SIGN_BIT signbit, the RELU family clamps and takes NaN to its lower
bound). Non-finite values propagate as in TFLite, without numpy warnings.

BIDIRECTIONAL_SEQUENCE_RNN runs a forward and a backward cell (their units may differ); its
inputs are BIDIRECTIONAL_INPUTS. With aux weights, both cells add the aux input through them
(stacking with cross links); without, a given aux input is the backward cell's input (stacking
without cross links), but only in time-major layout: the batch-major loop reads `input` for the
backward cell whatever the aux input (as TFLite does).
Int8 weights (TFLite's hybrid kernels) are refused.
"""
import numpy as np

from .checks import Malformed, float32_reason, raise_problem, shapes_of
from .common import activation_to_vector, fused_activation

CELL_INPUTS = ("weights", "recurrent_weights", "bias", "hidden_state")
BIDIRECTIONAL_INPUTS = ("input", *(f"fw_{name}" for name in CELL_INPUTS), *(f"bw_{name}" for name in CELL_INPUTS),
                        "aux_input", "fw_aux_weights", "bw_aux_weights")


class _Cell:
    """One RNN cell: its weights and the node's fused activation."""

    def __init__(self, node, weights, recurrent_weights, bias, aux_weights=None):
        self.weights, self.recurrent_weights, self.bias = weights, recurrent_weights, bias
        self.aux_weights = aux_weights
        self.activation = fused_activation(node)

    def run(self, x, hidden, aux=None, reverse=False):
        """Run over x [time, batch, n_input] (and aux [time, batch, n_aux] through the aux
        weights), from the last time step to the first when `reverse`; returns the outputs
        [time, batch, units] and leaves the last step's output in `hidden` (in place)."""
        # The input contributions of all time steps at once.
        with np.errstate(invalid="ignore", over="ignore"):
            input_part = x @ self.weights.T + self.bias
            if aux is not None:
                input_part = input_part + aux @ self.aux_weights.T
        h = hidden.copy()
        outputs = np.empty(x.shape[:2] + hidden.shape[1:], np.float32)
        for t in range(x.shape[0] - 1, -1, -1) if reverse else range(x.shape[0]):
            with np.errstate(invalid="ignore", over="ignore"):
                h = activation_to_vector(input_part[t] + h @ self.recurrent_weights.T, self.activation)
            outputs[t] = h
        hidden[...] = h
        return outputs


# -- validation ---------------------------------------------------------------------------
def _cell_problem(x, cell, n_batch):
    """Why one cell's shapes ({CELL_INPUTS name: shape or None}) don't fit the input shape x
    (last axis n_input) and batch, or None."""
    missing = [name for name in CELL_INPUTS if cell[name] is None]
    if missing:
        return Malformed(f"required inputs are omitted: {', '.join(missing)}")
    weights = cell["weights"]
    if len(weights) != 2:
        return f"weights must be 2-D, got shape {list(weights)}"
    units = weights[0]
    expected = {"weights": (units, x[-1]), "recurrent_weights": (units, units), "bias": (units,),
                "hidden_state": (n_batch, units)}
    for name, shape in expected.items():
        if cell[name] != shape:
            return f"{name} has shape {list(cell[name])}, expected {list(shape)}"
    return None


def _rnn_problem(node, shapes, rank):
    """Why an RNN (rank 2 input) or UNIDIRECTIONAL_SEQUENCE_RNN (rank 3) node with these input
    shapes can't run, or None."""
    if len(shapes) != 5:
        return Malformed(f"takes 5 inputs, got {len(shapes)}")
    shapes = [None if s is None else tuple(s) for s in shapes]
    x = shapes[0]
    if x is None or len(x) != rank:
        return f"the input must have rank {rank}, got shape {None if x is None else list(x)}"
    time_major = rank == 3 and node.options.get("time_major", False)
    return _cell_problem(x, dict(zip(CELL_INPUTS, shapes[1:])), x[1] if time_major else x[0])


def _bidirectional_problem(node, shapes):
    """Why a BIDIRECTIONAL_SEQUENCE_RNN node with these input shapes can't run, or None."""
    if len(shapes) != len(BIDIRECTIONAL_INPUTS):
        return Malformed(f"takes {len(BIDIRECTIONAL_INPUTS)} inputs, got {len(shapes)}")
    given = dict(zip(BIDIRECTIONAL_INPUTS, [None if s is None else tuple(s) for s in shapes]))
    x, aux = given["input"], given["aux_input"]
    if x is None or len(x) != 3:
        return f"the input must have rank 3, got shape {None if x is None else list(x)}"
    time_major = node.options.get("time_major", False)
    for prefix, direction in (("fw_", "forward"), ("bw_", "backward")):
        cell = {name: given[prefix + name] for name in CELL_INPUTS}
        problem = _cell_problem(x, cell, x[1] if time_major else x[0])
        if problem is not None:
            return type(problem)(f"{direction} cell: {problem}")  # a Malformed one stays Malformed
    if (given["fw_aux_weights"] is None) != (given["bw_aux_weights"] is None):
        return "fw_aux_weights and bw_aux_weights must both be given or both omitted"
    if given["fw_aux_weights"] is None:
        # Time-major TFLite steps through the backward cell's input (the aux input) with the input's strides.
        if aux is not None and time_major and aux != x:
            return f"aux_input has shape {list(aux)}, TFLite's time-major kernel needs the input's {list(x)}"
        return None
    return _aux_problem(given, time_major)


def _aux_problem(given, time_major):
    """Why the aux input and weights of a cross-linked BIDIRECTIONAL_SEQUENCE_RNN don't fit, or None."""
    x, aux = given["input"], given["aux_input"]
    if aux is None:
        return "aux weights are given without aux_input"
    if len(aux) != 3 or aux[:2] != x[:2]:
        return f"aux_input has shape {list(aux)}, expected {list(x[:2])} + [n_aux]"
    # Time-major TFLite steps through the aux input with the input's strides.
    if time_major and aux[2] != x[2]:
        return f"aux_input has {aux[2]} features, TFLite's time-major kernel needs the input's {x[2]}"
    for prefix in ("fw_", "bw_"):
        expected = (given[prefix + "weights"][0], aux[2])
        if given[prefix + "aux_weights"] != expected:
            return f"{prefix}aux_weights has shape {list(given[prefix + 'aux_weights'])}, expected {list(expected)}"
    return None


# -- kernels ------------------------------------------------------------------------------
def rnn(node, inputs):
    """One step: input [batch, n_input] -> output [batch, units]; the hidden state is updated in place."""
    raise_problem(node, _rnn_problem(node, shapes_of(inputs), rank=2))
    x, weights, recurrent_weights, bias, hidden = inputs
    return [_Cell(node, weights, recurrent_weights, bias).run(x[np.newaxis], hidden)[0]]


def unidirectional_sequence_rnn(node, inputs):
    """input [time, batch, n_input] (time_major) or [batch, time, n_input] -> output of the same
    layout with `units` features; the hidden state is updated in place."""
    raise_problem(node, _rnn_problem(node, shapes_of(inputs), rank=3))
    x, weights, recurrent_weights, bias, hidden = inputs
    time_major = node.options.get("time_major", False)
    return [_time_first(_Cell(node, weights, recurrent_weights, bias).run(_time_first(x, time_major), hidden),
                        time_major)]


def bidirectional_sequence_rnn(node, inputs):
    """input [time, batch, n_input] (time_major) or [batch, time, n_input] -> the forward and
    backward outputs of the same layout, [..., fw_units] and [..., bw_units], or with
    merge_outputs one output [..., fw_units + bw_units]; the hidden states are updated in place."""
    raise_problem(node, _bidirectional_problem(node, shapes_of(inputs)))
    given = dict(zip(BIDIRECTIONAL_INPUTS, inputs))
    time_major = node.options.get("time_major", False)
    cross_links = given["fw_aux_weights"] is not None
    aux = _time_first(given["aux_input"], time_major) if cross_links else None
    # Without aux weights the aux input replaces the backward cell's input, but TFLite's
    # batch-major loop reads `input` regardless.
    replaced = not cross_links and time_major and given["aux_input"] is not None
    outputs = []
    for prefix, x, reverse in (("fw_", given["input"], False), ("bw_", given["aux_input" if replaced else "input"],
                                                                 True)):
        cell = _Cell(node, *(given[prefix + name] for name in CELL_INPUTS[:3]), given[prefix + "aux_weights"])
        outputs.append(cell.run(_time_first(x, time_major), given[prefix + "hidden_state"], aux, reverse))
    if node.options.get("merge_outputs", False):
        return [_time_first(np.concatenate(outputs, axis=-1), time_major)]
    return [_time_first(output, time_major) for output in outputs]


def _time_first(x, time_major):
    """A batch-major [batch, time, features] array as [time, batch, features], contiguous (its own
    inverse); x itself when time_major (or None)."""
    return x if x is None or time_major else np.ascontiguousarray(x.transpose(1, 0, 2))


# -- support ------------------------------------------------------------------------------
def _support(problem, states, outputs):
    """SUPPORT of an RNN op: `problem(node, shapes)`, the {input index: name} of the `states`
    that must be variable tensors, and `outputs(node)`, the number of outputs it takes."""
    def support(node):
        reason = float32_reason(node) or problem(node, shapes_of(node.inputs))
        if reason is not None:
            return reason
        if len(node.outputs) != outputs(node):
            return f"takes {outputs(node)} output(s) here, got {len(node.outputs)}"
        for k, name in states.items():
            tensor = node.inputs[k]
            # TFLite fetches the hidden state with GetVariableInput, which refuses anything else.
            if not tensor.is_variable or tensor.is_const:
                return f"{name} (tensor {tensor.index}) must be a variable tensor without initial data"
        return None
    return support


def _bidirectional_outputs(node):
    return 1 if node.options.get("merge_outputs", False) else 2


# -- output shapes ------------------------------------------------------------------------
def _rnn_shape(node, shapes, values):
    return [shapes[0][:-1] + shapes[1][:1]]


def _bidirectional_shapes(node, shapes, values):
    given = dict(zip(BIDIRECTIONAL_INPUTS, shapes))
    x, fw_units, bw_units = given["input"], given["fw_weights"][0], given["bw_weights"][0]
    if node.options.get("merge_outputs", False):
        return [x[:-1] + (fw_units + bw_units,)]
    return [x[:-1] + (fw_units,), x[:-1] + (bw_units,)]


KERNELS = {"RNN": rnn, "UNIDIRECTIONAL_SEQUENCE_RNN": unidirectional_sequence_rnn,
           "BIDIRECTIONAL_SEQUENCE_RNN": bidirectional_sequence_rnn}
SUPPORT = {"RNN": _support(lambda node, shapes: _rnn_problem(node, shapes, rank=2), {4: "hidden_state"},
                           lambda node: 1),
           "UNIDIRECTIONAL_SEQUENCE_RNN": _support(lambda node, shapes: _rnn_problem(node, shapes, rank=3),
                                                   {4: "hidden_state"}, lambda node: 1),
           "BIDIRECTIONAL_SEQUENCE_RNN": _support(_bidirectional_problem, {4: "fw_hidden_state", 8: "bw_hidden_state"},
                                                  _bidirectional_outputs)}
OUTPUT_SHAPES = {"RNN": _rnn_shape, "UNIDIRECTIONAL_SEQUENCE_RNN": _rnn_shape,
                 "BIDIRECTIONAL_SEQUENCE_RNN": _bidirectional_shapes}
