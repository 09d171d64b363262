"""LSTM family, float32: UNIDIRECTIONAL_SEQUENCE_LSTM, BIDIRECTIONAL_SEQUENCE_LSTM and LSTM (full
and basic kernel types).

The full layout (tensorflow/lite/kernels/lstm_eval.cc) has 24 inputs, or 20 in models older
than layer normalization; INPUT_NAMES lists them. With n_batch, n_input, n_cell (units) and
n_output (n_cell, or the projection size):
  input weights [n_cell, n_input], recurrent weights [n_cell, n_output] (a diagonal [n_cell]
  with diagonal_recurrent_tensors), peephole weights, gate biases and layer-norm coefficients
  [n_cell], projection weights [n_output, n_cell] and bias [n_output], output state
  [n_batch, n_output] and cell state [n_batch, n_cell]: variable tensors the kernel updates in
  place, so the state carries over from one invoke to the next.
Omitting the input gate's weights selects CIFG: the input gate becomes 1 - forget gate.
The basic kernel (optimized_ops::LstmCell) is a different 5-input, 4-output op; see basic_lstm.

BIDIRECTIONAL_SEQUENCE_LSTM (tensorflow/lite/kernels/bidirectional_sequence_lstm.cc) runs one
full-layout cell forward and another backward over the sequence (both without layer norm, with
the same n_cell and n_output); BIDIRECTIONAL_INPUTS lists its 48 inputs. Its auxiliary input
either feeds both cells through their aux weights (stacking with cross links), or, without aux
weights, replaces the input of the backward cell.
"""
import numpy as np

from .checks import Malformed, float32_reason, raise_problem, shapes_of
from .common import ACT_RELU, ACT_RELU6, ACT_RELU_N1_TO_1, ACT_TANH, activation_to_vector, fused_activation

GATES = ("input", "forget", "cell", "output")
INPUT_NAMES = (
    "input",
    *(f"input_to_{gate}_weights" for gate in GATES),
    *(f"recurrent_to_{gate}_weights" for gate in GATES),
    "cell_to_input_weights", "cell_to_forget_weights", "cell_to_output_weights",
    *(f"{gate}_gate_bias" for gate in GATES),
    "projection_weights", "projection_bias",
    "output_state", "cell_state",
    *(f"{gate}_layer_norm_coefficients" for gate in GATES),
)
FULL_INPUT_COUNTS = (20, 24)
AUX_WEIGHT_NAMES = tuple(f"aux_input_to_{gate}_weights" for gate in GATES)
# One direction of BIDIRECTIONAL_SEQUENCE_LSTM: the full layout's inputs 1-17 (weights, peepholes,
# biases, projection), then its two states and its aux weights elsewhere in the 48 inputs.
DIRECTION_NAMES = INPUT_NAMES[1:18]
BIDIRECTIONAL_INPUTS = (
    "input",
    *(f"fw_{name}" for name in DIRECTION_NAMES), *(f"bw_{name}" for name in DIRECTION_NAMES),
    "fw_output_state", "fw_cell_state", "bw_output_state", "bw_cell_state",
    "aux_input", *(f"fw_{name}" for name in AUX_WEIGHT_NAMES), *(f"bw_{name}" for name in AUX_WEIGHT_NAMES),
)
KERNEL_TYPE_FULL, KERNEL_TYPE_BASIC = 0, 1
# TFLite's ApplyActivationToVector writes nothing for NONE (the cell gate then keeps whatever
# its scratch buffer held), so only these activations have a defined result.
CELL_ACTIVATIONS = (ACT_RELU, ACT_RELU_N1_TO_1, ACT_RELU6, ACT_TANH)
LAYER_NORM_EPSILON = np.float32(1e-8)  # kNormalizationEpsilon of MeanStddevNormalization


def _sigmoid(x):
    # tanh form: exact sigmoid without exp overflow for large negative x.
    return (0.5 + 0.5 * np.tanh(0.5 * x)).astype(np.float32, copy=False)


def _layer_normalize(x):
    """TFLite's MeanStddevNormalization over the last axis (one row per batch)."""
    mean = x.mean(axis=-1, keepdims=True)
    variance = np.square(x - mean).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + LAYER_NORM_EPSILON)


def named_inputs(inputs):
    """{input name: array or shape, None when omitted} of a full-layout node."""
    return dict(zip(INPUT_NAMES, list(inputs) + [None] * (len(INPUT_NAMES) - len(inputs))))


class _FullCell:
    """The weights and options of one full-layout LSTM node, split per gate."""

    def __init__(self, node, named):
        self.cifg = named["input_to_input_weights"] is None
        self.gates = GATES[1:] if self.cifg else GATES
        self.input_weights = {g: named[f"input_to_{g}_weights"] for g in self.gates}
        self.recurrent_weights = {g: named[f"recurrent_to_{g}_weights"] for g in self.gates}
        self.peepholes = {g: named.get(f"cell_to_{g}_weights") for g in self.gates}
        self.biases = {g: named[f"{g}_gate_bias"] for g in self.gates}
        self.aux_weights = {g: named.get(f"aux_input_to_{g}_weights") for g in self.gates}
        self.layer_norms = None
        if named["forget_layer_norm_coefficients"] is not None:
            self.layer_norms = {g: named[f"{g}_layer_norm_coefficients"] for g in self.gates}
        self.projection_weights = named["projection_weights"]
        self.projection_bias = named["projection_bias"]
        self.activation = fused_activation(node)
        self.cell_clip = node.options.get("cell_clip", 0.0)
        self.proj_clip = node.options.get("proj_clip", 0.0)
        self.diagonal = node.options.get("diagonal_recurrent_tensors", False)

    def run(self, x, output_state, cell_state, aux=None, reverse=False):
        """Run over x [time, batch, n_input] (and aux [time, batch, n_aux] through the aux
        weights), from the last time step to the first when `reverse`; returns the outputs
        [time, batch, n_output] and leaves the last step's states in output_state / cell_state
        (updated in place)."""
        # The input contributions of all time steps at once: one matmul per gate. Without layer
        # norm the bias joins them here; with it, the bias comes after the normalization.
        input_parts = {g: x @ w.T for g, w in self.input_weights.items()}
        if aux is not None:
            input_parts = {g: part + aux @ self.aux_weights[g].T for g, part in input_parts.items()}
        if self.layer_norms is None:
            input_parts = {g: part + self.biases[g] for g, part in input_parts.items()}
        h, c = output_state.copy(), cell_state.copy()
        outputs = np.empty(x.shape[:2] + output_state.shape[1:], np.float32)
        for t in range(x.shape[0] - 1, -1, -1) if reverse else range(x.shape[0]):
            h, c = self.step({g: part[t] for g, part in input_parts.items()}, h, c)
            outputs[t] = h
        output_state[...] = h
        cell_state[...] = c
        return outputs

    def step(self, input_part, h, c):
        """One time step for the whole batch: (new output state, new cell state)."""
        forget = _sigmoid(self.gate("forget", input_part, h, c))
        if self.cifg:
            input_gate = 1.0 - forget
        else:
            input_gate = _sigmoid(self.gate("input", input_part, h, c))
        cell_input = activation_to_vector(self.gate("cell", input_part, h, c), self.activation)
        c = forget * c + input_gate * cell_input
        if self.cell_clip > 0:
            c = np.clip(c, -self.cell_clip, self.cell_clip)
        # The output gate's peephole looks at the updated cell state.
        output_gate = _sigmoid(self.gate("output", input_part, h, c))
        return self.project(output_gate * activation_to_vector(c, self.activation)), c

    def gate(self, gate, input_part, h, c):
        """A gate's pre-activation [batch, n_cell]."""
        recurrent = self.recurrent_weights[gate]
        z = input_part[gate] + (h * recurrent if self.diagonal else h @ recurrent.T)
        if self.peepholes[gate] is not None:
            z = z + self.peepholes[gate] * c
        if self.layer_norms is not None:
            z = _layer_normalize(z) * self.layer_norms[gate] + self.biases[gate]
        return z

    def project(self, hidden):
        if self.projection_weights is None:
            return hidden
        out = hidden @ self.projection_weights.T
        if self.projection_bias is not None:
            out = out + self.projection_bias
        if self.proj_clip > 0:
            out = np.clip(out, -self.proj_clip, self.proj_clip)
        return out


# -- validation ---------------------------------------------------------------------------
def _full_presence_problem(named):
    """Why the omitted inputs of a full-layout node don't form a valid LSTM, or None."""
    required = [f"input_to_{g}_weights" for g in GATES[1:]] + [f"recurrent_to_{g}_weights" for g in GATES[1:]] + \
        [f"{g}_gate_bias" for g in GATES[1:]] + ["output_state", "cell_state"]
    missing = [name for name in required if named[name] is None]
    if missing:
        return Malformed(f"required inputs are omitted: {', '.join(missing)}")
    cifg = named["input_to_input_weights"] is None
    for name in ("recurrent_to_input_weights", "input_gate_bias"):
        if (named[name] is None) != cifg:
            return f"{name} must be given exactly when input_to_input_weights is (CIFG omits both)"
    groups = {"peephole": ["cell_to_forget_weights", "cell_to_output_weights"],
              "layer-norm": [f"{g}_layer_norm_coefficients" for g in GATES[1:]]}
    for what, names in groups.items():
        if len({named[n] is None for n in names}) > 1:
            return f"the {what} inputs {', '.join(names)} must all be given or all omitted"
    peephole = named["cell_to_forget_weights"] is not None
    # CIFG has no input gate, so its cell_to_input_weights may be there or not (it is unused).
    if not cifg and (named["cell_to_input_weights"] is not None) != peephole:
        return "cell_to_input_weights must be given exactly when the other peephole weights are"
    if cifg and not peephole and named["cell_to_input_weights"] is not None:
        return "cell_to_input_weights is given without the other peephole weights"
    uses_layer_norm = named["forget_layer_norm_coefficients"] is not None
    if (named["input_layer_norm_coefficients"] is not None) != (uses_layer_norm and not cifg):
        return "input_layer_norm_coefficients must be given exactly when layer norm is used with an input gate"
    if named["projection_bias"] is not None and named["projection_weights"] is None:
        return "projection_bias is given without projection_weights"
    return None


def _full_expected_shapes(named, n_batch, n_input, diagonal):
    """{input name: the shape TFLite requires} for a full-layout node's inputs."""
    n_cell = named["input_to_output_weights"][0]
    projection = named["projection_weights"]
    # A malformed projection keeps n_output = n_cell here; the shape comparison then reports it.
    n_output = projection[0] if projection is not None and len(projection) == 2 else n_cell
    expected = {"output_state": (n_batch, n_output), "cell_state": (n_batch, n_cell),
                "projection_weights": (n_output, n_cell), "projection_bias": (n_output,)}
    for gate in GATES:
        expected[f"input_to_{gate}_weights"] = (n_cell, n_input)
        expected[f"recurrent_to_{gate}_weights"] = (n_cell,) if diagonal else (n_cell, n_output)
        expected[f"cell_to_{gate}_weights"] = (n_cell,)
        expected[f"{gate}_gate_bias"] = (n_cell,)
        expected[f"{gate}_layer_norm_coefficients"] = (n_cell,)
        expected[f"aux_input_to_{gate}_weights"] = (n_cell, n_input)
    return expected


def _full_problem(node, shapes, rank):
    """Why a full-layout node with these input shapes (None: omitted) can't run, or None.

    rank: the input's rank, 3 ([time, batch, n_input] or [batch, time, n_input]) or 2."""
    if len(shapes) not in FULL_INPUT_COUNTS:
        return Malformed(f"takes 20 or 24 inputs, got {len(shapes)}")
    return _cell_problem(node, named_inputs([None if s is None else tuple(s) for s in shapes]), rank)


def _cell_problem(node, named, rank):
    """Why one cell's {input name: shape or None} can't run, or None (_full_problem)."""
    problem = _full_presence_problem(named) or _aux_presence_problem(named)
    if problem is not None:
        return problem
    x = named["input"]
    if x is None or len(x) != rank:
        return f"the input must have rank {rank}, got shape {None if x is None else list(x)}"
    if len(named["input_to_output_weights"]) != 2:
        return f"input_to_output_weights must be 2-D, got shape {list(named['input_to_output_weights'])}"
    diagonal = node.options.get("diagonal_recurrent_tensors", False)
    if diagonal and named["projection_weights"] is not None:
        return "diagonal recurrent weights cannot be combined with a projection"
    n_batch = x[0] if rank == 2 or not node.options.get("time_major", False) else x[1]
    expected = _full_expected_shapes(named, n_batch, x[-1], diagonal)
    for name, shape in named.items():
        if shape is not None and name in expected and shape != expected[name]:
            return f"{name} has shape {list(shape)}, expected {list(expected[name])}"
    return None


def _aux_presence_problem(named):
    """Why a cell fed an aux input lacks aux weights, or None (no aux input: no aux weights used)."""
    if named.get("aux_input") is None:
        return None
    # TFLite reads the input gate's aux weights whenever the cell has an input gate.
    needed = AUX_WEIGHT_NAMES[1:] if named["input_to_input_weights"] is None else AUX_WEIGHT_NAMES
    missing = [name for name in needed if named[name] is None]
    return f"aux weights are omitted: {', '.join(missing)}" if missing else None


def direction_inputs(inputs):
    """The forward and backward cells of BIDIRECTIONAL_SEQUENCE_LSTM's 48 inputs (arrays, shapes
    or tensors, None when omitted): two {full-layout input name: value} dicts, without layer
    norm, with aux_input and aux_input_to_<gate>_weights. As in TFLite: with aux weights, both
    cells add the aux input through them; without, a given aux input is the backward cell's
    input (stacking without cross links)."""
    given = dict(zip(BIDIRECTIONAL_INPUTS, inputs))
    cross_links = given["fw_aux_input_to_forget_weights"] is not None
    cells = []
    for prefix in ("fw_", "bw_"):
        cell = {name: given.get(prefix + name) for name in INPUT_NAMES[1:] + AUX_WEIGHT_NAMES}
        cell.update(input=given["input"], aux_input=given["aux_input"] if cross_links else None)
        cells.append(cell)
    if not cross_links and given["aux_input"] is not None:
        cells[1]["input"] = given["aux_input"]
    return cells


def _bidirectional_problem(node, shapes):
    """Why a BIDIRECTIONAL_SEQUENCE_LSTM node with these input shapes can't run, or None."""
    if len(shapes) != len(BIDIRECTIONAL_INPUTS):
        return Malformed(f"takes {len(BIDIRECTIONAL_INPUTS)} inputs, got {len(shapes)}")
    shapes = [None if s is None else tuple(s) for s in shapes]
    given = dict(zip(BIDIRECTIONAL_INPUTS, shapes))
    aux_weights = [f"{d}_{name}" for d in ("fw", "bw") for name in AUX_WEIGHT_NAMES[1:]]
    if len({given[name] is None for name in aux_weights}) > 1:
        return f"the aux weights {', '.join(aux_weights)} must all be given or all omitted"
    if given[aux_weights[0]] is not None and given["aux_input"] is None:
        return "aux weights are given without aux_input"
    # TFLite steps through the aux input with the input's strides (lstm_eval.cc's input_step).
    if given["aux_input"] is not None and given["aux_input"] != given["input"]:
        return f"aux_input has shape {list(given['aux_input'])}, TFLite's kernel needs the input's " \
               f"{None if given['input'] is None else list(given['input'])}"
    cells = direction_inputs(shapes)
    for direction, cell in zip(("forward", "backward"), cells):
        problem = _cell_problem(node, cell, rank=3)
        if problem is not None:
            return type(problem)(f"{direction} cell: {problem}")  # a Malformed one stays Malformed
    sizes = [(cell["input_to_output_weights"][0], cell["recurrent_to_output_weights"][1]) for cell in cells]
    if sizes[0] != sizes[1]:
        return f"the forward and backward cells must have the same (n_cell, n_output), got {sizes[0]} and {sizes[1]}"
    time_major = node.options.get("time_major", False)
    if node.options.get("merge_outputs", False) and not time_major and given["input"][0] > 1:
        # lstm_eval.cc finds batch item b's output state at b * (the merged output's width), past
        # the end of the state tensor (LiteRT 2.3 reads and writes outside it: measured).
        return "batch-major merge_outputs with a batch of more than 1 is undefined in TFLite's kernel"
    return None


def _full_support(node, rank):
    problem = float32_reason(node) or _full_problem(node, shapes_of(node.inputs), rank) or \
        _outputs_problem(node, 1) or _cell_options_problem(node)
    if problem is not None:
        return problem
    named = named_inputs(node.inputs)
    return _state_problem([(name, named[name]) for name in ("output_state", "cell_state")])


def _bidirectional_support(node):
    outputs = 1 if node.options.get("merge_outputs", False) else 2
    problem = float32_reason(node) or _bidirectional_problem(node, shapes_of(node.inputs)) or \
        _outputs_problem(node, outputs, "merge_outputs" if outputs == 1 else "without merge_outputs") or \
        _cell_options_problem(node)
    if problem is not None:
        return problem
    given = dict(zip(BIDIRECTIONAL_INPUTS, node.inputs))
    return _state_problem([(name, given[name]) for name in BIDIRECTIONAL_INPUTS[35:39]])


def _outputs_problem(node, count, why=""):
    if len(node.outputs) != count:
        return f"takes {count} output{'s' if count > 1 else ''}{' ' + why if why else ''}, got {len(node.outputs)}"
    return None


def _cell_options_problem(node):
    """Why the full-layout cell's options are unsupported, or None."""
    activation = fused_activation(node)
    if activation not in CELL_ACTIVATIONS:
        return f"fused activation {activation} is not supported (RELU, RELU_N1_TO_1, RELU6 or TANH)"
    for name in ("cell_clip", "proj_clip"):
        # TFLite refuses a negative clip (0 means no clipping).
        if node.options.get(name, 0.0) < 0:
            return f"{name} {node.options[name]} is negative"
    return None


def _state_problem(states):
    """Why one of the (name, tensor) states is not a variable tensor, or None."""
    for name, tensor in states:
        # TFLite fetches the states with GetVariableInput, which refuses anything else.
        if not tensor.is_variable or tensor.is_const:
            return f"{name} (tensor {tensor.index}) must be a variable tensor without initial data"
    return None


# -- kernels ------------------------------------------------------------------------------
def unidirectional_sequence_lstm(node, inputs):
    """input [time, batch, n_input] (time_major) or [batch, time, n_input] -> output of the
    same layout with n_output features; the states are updated in place."""
    raise_problem(node, _full_problem(node, shapes_of(inputs), rank=3))
    return [_run_sequence(node, named_inputs(inputs))]


def bidirectional_sequence_lstm(node, inputs):
    """input [time, batch, n_input] (time_major) or [batch, time, n_input] -> the forward and
    backward outputs [..., n_output] of the same layout, or with merge_outputs one output
    [..., 2 * n_output] (forward features first); the four states are updated in place."""
    raise_problem(node, _bidirectional_problem(node, shapes_of(inputs)))
    forward, backward = (_run_sequence(node, cell, reverse) for cell, reverse in zip(direction_inputs(inputs),
                                                                                    (False, True)))
    if node.options.get("merge_outputs", False):
        return [np.concatenate([forward, backward], axis=-1)]
    return [forward, backward]


def _run_sequence(node, cell, reverse=False):
    """One cell ({full-layout input name: array}) over its input sequence in the node's layout
    (time_major or batch-major); returns its outputs in that layout."""
    def time_first(x):
        return x if x is None or time_major else x.transpose(1, 0, 2)
    time_major = node.options.get("time_major", False)
    outputs = _FullCell(node, cell).run(time_first(cell["input"]), cell["output_state"], cell["cell_state"],
                                        time_first(cell.get("aux_input")), reverse)
    return np.ascontiguousarray(time_first(outputs))


def lstm(node, inputs):
    """One LSTM step: input [batch, n_input] -> output [batch, n_output] (full kernel type),
    or the basic kernel's four outputs."""
    if node.options.get("kernel_type", KERNEL_TYPE_FULL) == KERNEL_TYPE_BASIC:
        return basic_lstm(node, inputs)
    raise_problem(node, _full_problem(node, shapes_of(inputs), rank=2))
    named = named_inputs(inputs)
    outputs = _FullCell(node, named).run(inputs[0][np.newaxis], named["output_state"], named["cell_state"])
    return [outputs[0]]


def basic_lstm(node, inputs):
    """TFLite's basic LSTM cell (optimized_ops::LstmCell).

    inputs: x [batch, n_input], prev_activation [batch, depth], weights [4 * depth,
    n_input + depth], bias [4 * depth], prev_state [batch, depth].
    outputs: activation [batch, depth], state [batch, depth], concat [batch, n_input + depth],
    pre-activations [batch, 4 * depth] (gate blocks: input, new input, forget, output).
    Like TFLite, it copies the new activation and state back into prev_activation and
    prev_state, which is how the state reaches the next invoke. The options (activation, clips)
    are ignored, as in TFLite.
    """
    raise_problem(node, _basic_problem(shapes_of(inputs)))
    x, prev_activation, weights, bias, prev_state = inputs
    concat = np.concatenate([x, prev_activation], axis=1)
    pre_activations = concat @ weights.T + bias
    input_gate, new_input, forget_gate, output_gate = np.split(pre_activations, 4, axis=1)
    state = _sigmoid(input_gate) * np.tanh(new_input) + _sigmoid(forget_gate) * prev_state
    activation = _sigmoid(output_gate) * np.tanh(state)
    prev_activation[...] = activation
    prev_state[...] = state
    return [activation, state, concat, pre_activations]


def _basic_problem(shapes):
    """Why a basic-kernel node with these input shapes can't run, or None."""
    if len(shapes) != 5 or any(s is None for s in shapes):
        return Malformed(f"the basic kernel takes 5 inputs, got {sum(s is not None for s in shapes)}")
    x, prev_activation, weights, bias, prev_state = (tuple(s) for s in shapes)
    if len(x) != 2 or len(prev_activation) != 2:
        return f"input and prev_activation must be 2-D, got {list(x)} and {list(prev_activation)}"
    n_batch, depth = prev_activation
    expected = {"input": (n_batch, x[1]), "weights": (4 * depth, x[1] + depth), "bias": (4 * depth,),
                "prev_state": (n_batch, depth)}
    for name, shape in zip(("input", "weights", "bias", "prev_state"), (x, weights, bias, prev_state)):
        if shape != expected[name]:
            return f"{name} has shape {list(shape)}, expected {list(expected[name])}"
    return None


def _basic_support(node):
    problem = float32_reason(node) or _basic_problem(shapes_of(node.inputs))
    if problem is not None:
        return problem
    if len(node.outputs) != 4:
        return f"the basic kernel takes 4 outputs, got {len(node.outputs)}"
    for k, name in ((1, "prev_activation"), (4, "prev_state")):
        if node.inputs[k].is_const:
            return f"{name} (tensor {node.inputs[k].index}) is constant, but the kernel writes the new state into it"
    return None


def _lstm_support(node):
    kernel_type = node.options.get("kernel_type", KERNEL_TYPE_FULL)
    if kernel_type == KERNEL_TYPE_BASIC:
        return _basic_support(node)
    if kernel_type != KERNEL_TYPE_FULL:
        return f"unknown kernel_type {kernel_type}"
    return _full_support(node, rank=2)


KERNELS = {"UNIDIRECTIONAL_SEQUENCE_LSTM": unidirectional_sequence_lstm, "LSTM": lstm,
           "BIDIRECTIONAL_SEQUENCE_LSTM": bidirectional_sequence_lstm}
SUPPORT = {"UNIDIRECTIONAL_SEQUENCE_LSTM": lambda node: _full_support(node, rank=3), "LSTM": _lstm_support,
           "BIDIRECTIONAL_SEQUENCE_LSTM": _bidirectional_support}


# -- output shapes ------------------------------------------------------------------------
def _sequence_shape(node, shapes, values):
    """UNIDIRECTIONAL_SEQUENCE_LSTM and the full-layout LSTM: the input's shape with n_output
    features (the output state's)."""
    return [shapes[0][:-1] + named_inputs(shapes)["output_state"][-1:]]


def _bidirectional_shapes(node, shapes, values):
    n_output = dict(zip(BIDIRECTIONAL_INPUTS, shapes))["fw_output_state"][-1]
    if node.options.get("merge_outputs", False):
        return [shapes[0][:-1] + (2 * n_output,)]
    return [shapes[0][:-1] + (n_output,)] * 2


def _lstm_shapes(node, shapes, values):
    if node.options.get("kernel_type", KERNEL_TYPE_FULL) != KERNEL_TYPE_BASIC:
        return _sequence_shape(node, shapes, values)
    (n_batch, n_input), (_, depth) = shapes[0], shapes[1]
    return [(n_batch, depth), (n_batch, depth), (n_batch, n_input + depth), (n_batch, 4 * depth)]


OUTPUT_SHAPES = {"UNIDIRECTIONAL_SEQUENCE_LSTM": _sequence_shape, "LSTM": _lstm_shapes,
                 "BIDIRECTIONAL_SEQUENCE_LSTM": _bidirectional_shapes}
