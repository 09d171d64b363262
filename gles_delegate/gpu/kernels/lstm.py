"""UNIDIRECTIONAL_SEQUENCE_LSTM and LSTM (full and basic kernel types), float32, mirroring
ops/lstm.py.

Full layout (kernels_glsl/lstm_input.glsl, lstm_step.glsl, lstm_copy.glsl):
  1 dispatch   the input contributions of every time step at once (a matmul over T x B rows,
               plus the gate biases) into a scratch tensor: per row 4 gates x ceil(n_cell / 4)
               vec4s, gate-major (input, forget, cell, output)
  T dispatches one per time step: the recurrent matmul (split over a workgroup when the
               state is long), peepholes, gates and cell update for 4 cells of one batch item;
               the new cell state goes back into cell_state in place, the new hidden state into
               the output sequence at step t, which is where step t + 1 reads it from (step 0
               reads output_state)
  1 dispatch   output_state <- the output at the last step
CIFG, peepholes, diagonal recurrent weights, cell_clip, every defined cell activation and
time_major run here; projection and layer normalization do not (the support check says so).

Basic kernel (lstm_concat.glsl, lstm_input.glsl, lstm_basic.glsl): concat = [x, prev_activation],
pre_activations = concat @ W^T + b, then the gates; activation and state are written to their
outputs and, in place, to prev_activation and prev_state.

State tensors are variable tensors: the partition uploads their value each invoke and downloads
what the kernels wrote into the same arena tensor (see partition.boundary), so the state
carries over between invokes and Interpreter.reset_all_variables() resets it.
"""
import numpy as np

from ...ops import lstm as reference
from ...ops.common import fused_activation
from ..phwc4 import bhwc
from .base import Dispatch, scratch
from .conv import pack_bias
from .fully_connected import pack_weights

MAX_SPLIT = 16        # lanes sharing the recurrent matmul of one output vec4 (the workgroup width)
CHUNKS_PER_LANE = 2   # split the recurrent matmul only while every lane keeps this many chunks
GATE_SLOTS = reference.GATES  # scratch / weight order: input, forget, cell, output


def recurrent_split(chunks):
    """Lanes for a recurrent matmul over `chunks` vec4s of state: a power of two <= MAX_SPLIT
    that leaves every lane at least CHUNKS_PER_LANE chunks (the step is latency-bound: T of them
    run one after another, so a short step beats a full GPU)."""
    split = 1
    while split < MAX_SPLIT and chunks >= 2 * split * CHUNKS_PER_LANE:
        split *= 2
    return split


# -- support ------------------------------------------------------------------------------
def _runtime_input_problem(tensor, role):
    if tensor.is_const:
        return f"{role} tensor {tensor.index} is constant (fold the node first)"
    return None


def _constants_problem(tensors):
    for name, tensor in tensors:
        if tensor is not None and not tensor.is_const:
            return f"{name} (tensor {tensor.index}) is computed at run time; the GPU needs a constant"
    return None


def _declared_problem(tensor, expected):
    if tuple(tensor.shape) != tuple(expected):
        return f"output tensor {tensor.index} has shape {list(tensor.shape)}, the op computes {list(expected)}"
    return None


def _full_gpu_problem(node):
    named = reference.named_inputs(node.inputs)
    problem = _runtime_input_problem(named["input"], "input")
    if problem:
        return problem
    if named["projection_weights"] is not None:
        return "projection is not implemented on the GPU"
    if named["forget_layer_norm_coefficients"] is not None:
        return "layer normalization is not implemented on the GPU"
    weights = [(name, named[name]) for name in reference.INPUT_NAMES[1:]
               if name not in ("output_state", "cell_state")]
    problem = _constants_problem(weights)
    if problem:
        return problem
    x, n_cell = named["input"], named["input_to_output_weights"].shape[0]
    return _declared_problem(node.outputs[0], tuple(x.shape[:-1]) + (n_cell,))


def _basic_gpu_problem(node):
    x, prev_activation, weights, bias, prev_state = node.inputs
    problem = _runtime_input_problem(x, "input") or _constants_problem([("weights", weights), ("bias", bias)])
    if problem:
        return problem
    for name, tensor in (("prev_activation", prev_activation), ("prev_state", prev_state)):
        # The partition downloads the state it writes back only for variable tensors.
        if not tensor.is_variable:
            return (f"{name} (tensor {tensor.index}) is not a variable tensor; "
                    "the GPU writes the new state back only into those")
    (n_batch, n_input), depth = x.shape, prev_state.shape[1]
    expected = [(n_batch, depth), (n_batch, depth), (n_batch, n_input + depth), (n_batch, 4 * depth)]
    for tensor, shape in zip(node.outputs, expected):
        problem = _declared_problem(tensor, shape)
        if problem:
            return problem
    return None


def _support(op):
    check = reference.SUPPORT[op]

    def support(node):
        problem = check(node)
        if problem is not None:
            return problem
        if op == "LSTM" and node.options.get("kernel_type", reference.KERNEL_TYPE_FULL) == reference.KERNEL_TYPE_BASIC:
            return _basic_gpu_problem(node)
        return _full_gpu_problem(node)
    return support


# -- shared pieces ------------------------------------------------------------------------
def _strides(shape, time_major, sequence):
    """(t, b, s) element strides of a [B, T, C] / [T, B, C] (sequence) or [B, C] tensor in PHWC4."""
    s4 = bhwc(shape)
    if not sequence:
        return 0, s4.slices, 1                     # B x 1 x 1 x C: element b * S + s
    plane = s4.h * s4.w                             # 1 x H x W x C: element (s * H + h) * W + w
    return (s4.w, 1, plane) if time_major else (1, s4.w, plane)


def _input_dispatch(x, x_strides, weights, bias, out, out_strides, units, n_time, n_batch, env, label):
    """out[t, b, unit slice q] = bias + W @ x[t, b] for every time step and batch item."""
    depth = weights.shape[1]
    params = {"in_offset": env.arena(x), "in_strides": x_strides, "chunks": -(-depth // 4),
              "out_offset": env.arena(out), "out_strides": out_strides, "units": units,
              "weights_offset": env.constant(pack_weights(weights)),
              "bias_offset": env.constant(pack_bias(bias, units))}
    return Dispatch("lstm_input", (-(-units // 4), n_batch, n_time), {}, params, reads=(x,), writes=(out,),
                    label=label)


# -- full layout --------------------------------------------------------------------------
def build_full(node, env):
    """The dispatches of a full-layout LSTM node: the input matmul, one step per time step, the
    copy of the last output into output_state (see the module docstring)."""
    named = reference.named_inputs(node.inputs)
    x, y = named["input"], node.outputs[0]
    h_state, c_state = named["output_state"], named["cell_state"]
    sequence = node.op == "UNIDIRECTIONAL_SEQUENCE_LSTM"
    time_major = sequence and node.options.get("time_major", False)
    n_batch, n_cell = c_state.shape
    n_time = (x.shape[0] if time_major else x.shape[1]) if sequence else 1
    slices = -(-n_cell // 4)
    cifg = named["input_to_input_weights"] is None
    diagonal = bool(node.options.get("diagonal_recurrent_tensors", False))

    def const(name):
        tensor = named[name]
        return None if tensor is None else np.asarray(tensor.data, np.float32)

    # Input contributions: a matmul with 4 gate blocks of `slices` vec4s (zero rows pad each
    # block to whole slices, and stand in for CIFG's missing input gate).
    n_input = x.shape[-1]
    stacked_w = np.zeros((4, slices * 4, n_input), np.float32)
    stacked_b = np.zeros((4, slices * 4), np.float32)
    for g, gate in enumerate(GATE_SLOTS):
        if cifg and gate == "input":
            continue
        stacked_w[g, :n_cell] = const(f"input_to_{gate}_weights")
        stacked_b[g, :n_cell] = const(f"{gate}_gate_bias")
    units = 16 * slices
    pre = scratch(node, 0, (n_time * n_batch * 4 * slices, 4))  # flat vec4s: row (t, b), gate, slice
    x_strides = _strides(x.shape, time_major, sequence)
    pre_strides = (n_batch * 4 * slices, 4 * slices, 1)
    dispatches = [_input_dispatch(x, x_strides, stacked_w.reshape(units, n_input), stacked_b.reshape(-1), pre,
                                  pre_strides, units, n_time, n_batch, env, f"{node.label} input")]

    split = 1 if diagonal else recurrent_split(slices)
    defines = {"CIFG": int(cifg), "DIAGONAL": int(diagonal), "K_SPLIT": split,
               "PEEPHOLE": int(named["cell_to_forget_weights"] is not None),
               "CELL_ACTIVATION": fused_activation(node),
               "CELL_CLIP": int(node.options.get("cell_clip", 0.0) > 0)}
    params = {"n_cell": n_cell, "slices": slices, "cell_clip": float(node.options.get("cell_clip", 0.0)),
              "pre_offset": env.arena(pre), "c_offset": env.arena(c_state)}
    for gate in GATE_SLOTS:
        if cifg and gate == "input":
            continue
        recurrent = const(f"recurrent_to_{gate}_weights")
        packed = pack_bias(recurrent, n_cell) if diagonal else pack_weights(recurrent)
        params[f"w_{gate}_offset"] = env.constant(packed)
        if defines["PEEPHOLE"] and gate != "cell" and not (cifg and gate == "input"):
            params[f"peephole_{gate}_offset"] = env.constant(pack_bias(const(f"cell_to_{gate}_weights"), n_cell))
    y_strides = _strides(y.shape, time_major, sequence)
    state_strides = (0, slices, 1)  # [B, n_cell]: element b * slices + s
    workgroup = (split, max(1, min(slices, 64 // split)), 1)
    for t in range(n_time):
        # Step t reads the hidden state of step t - 1 from the output sequence (step 0: the state).
        source, source_strides, source_t = (h_state, state_strides, 0) if t == 0 else (y, y_strides, t - 1)
        step = {**params, "t": t, "h_offset": env.arena(source),
                "h_base": source_t * source_strides[0], "h_strides": source_strides[1:],
                "out_offset": env.arena(y), "out_base": t * y_strides[0], "out_strides": y_strides[1:]}
        dispatches.append(Dispatch("lstm_step", (split, slices, n_batch), defines, step,
                                   reads=(pre, source, c_state), writes=(c_state, y), workgroup=workgroup,
                                   label=f"{node.label} step {t}"))
    copy = {"src_offset": env.arena(y), "src_base": (n_time - 1) * y_strides[0], "src_strides": y_strides[1:],
            "dst_offset": env.arena(h_state), "dst_strides": state_strides[1:]}
    dispatches.append(Dispatch("lstm_copy", (slices, n_batch, 1), {}, copy, reads=(y,), writes=(h_state,),
                               label=f"{node.label} output_state"))
    return dispatches


# -- basic kernel -------------------------------------------------------------------------
def build_basic(node, env):
    """The dispatches of a basic-kernel LSTM node: concat, pre-activations, gates (see the module
    docstring)."""
    x, prev_activation, weights, bias, prev_state = node.inputs
    activation, state, concat, pre = node.outputs
    n_batch, n_input = x.shape
    depth = prev_state.shape[1]
    concat_params = {"x_offset": env.arena(x), "x_slices": bhwc(x.shape).slices, "n_input": n_input,
                     "prev_offset": env.arena(prev_activation), "depth": depth,
                     "out_offset": env.arena(concat), "out_slices": bhwc(concat.shape).slices}
    dispatches = [Dispatch("lstm_concat", (bhwc(concat.shape).slices, n_batch, 1), {}, concat_params,
                           reads=(x, prev_activation), writes=(concat,), label=f"{node.label} concat")]
    pre_slices = bhwc(pre.shape).slices
    dispatches.append(_input_dispatch(concat, (0, bhwc(concat.shape).slices, 1),
                                      np.asarray(weights.data, np.float32), np.asarray(bias.data, np.float32),
                                      pre, (0, pre_slices, 1), 4 * depth, 1, n_batch, env,
                                      f"{node.label} pre-activations"))
    slices = -(-depth // 4)
    gate_params = {"depth": depth, "slices": slices, "pre_offset": env.arena(pre), "pre_slices": pre_slices,
                   "prev_state_offset": env.arena(prev_state), "prev_activation_offset": env.arena(prev_activation),
                   "activation_offset": env.arena(activation), "state_offset": env.arena(state)}
    dispatches.append(Dispatch("lstm_basic", (slices, n_batch, 1), {}, gate_params,
                               reads=(pre, prev_state), writes=(activation, state, prev_activation, prev_state),
                               label=f"{node.label} gates"))
    return dispatches


def build_lstm(node, env):
    """LSTM: build_basic or build_full, by its kernel_type option."""
    if node.options.get("kernel_type", reference.KERNEL_TYPE_FULL) == reference.KERNEL_TYPE_BASIC:
        return build_basic(node, env)
    return build_full(node, env)


SUPPORT = {"UNIDIRECTIONAL_SEQUENCE_LSTM": _support("UNIDIRECTIONAL_SEQUENCE_LSTM"), "LSTM": _support("LSTM")}
BUILD = {"UNIDIRECTIONAL_SEQUENCE_LSTM": build_full, "LSTM": build_lstm}
