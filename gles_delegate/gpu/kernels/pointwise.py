"""POINTWISE_DAG, a fused op only the rewrite rule fuse_pointwise_dag makes: a connected group of
elementwise nodes (epilogue steps joined by the tensors between them, the gates and state update
of a recurrent cell) in one dispatch of kernels_glsl/pointwise.glsl, which stores every tensor of
the group read outside it.

Node: inputs, the tensors the group reads from outside it (runtime or constant); outputs, the
tensors it writes, all of one shape (the output shape); options[PROGRAM], a Program. Each slot of
the program is one epilogue step (epilogue.py: its op code, math and half rounding) on two
values, each an earlier slot's register, a program input read at the output position, or a
scalar. It applies no epilogue of its own: the rule runs after every rule that fuses into one.

With a Layer (rule fuse_dense_into_dag: the FULLY_CONNECTED computing a recurrent cell's gates
from its state) the one workgroup of LAYER_LANES invocations first computes that layer's output
into shared memory, as fully_connected.glsl would (the same split of K and order of sums, its
activation and epilogue, the half rounding of its store), and the program's Input.layer entries
read it there: the layer's dispatch and a barrier go.

With options[PLACED] (rule concat_stored_by_producers) the dispatch also stores outputs into
their boxes of CONCATENATIONs that read them (an unrolled RNN's h at step t into the rows of
all steps): the concatenation's copy dispatch for that input goes.
"""
from typing import NamedTuple

import numpy as np

from ...registry import OpFacts
from ..phwc4 import bhwc
from . import epilogue
from .base import Dispatch
from .conv import k_split, pack_bias
from .fully_connected import pack_weights

OP = "POINTWISE_DAG"
PROGRAM = "pointwise_program"  # node.options key
# node.options key: ((output position, the concatenation's output tensor, origin (x, y, slice,
# batch) of the box in its BHWC view), ...), at most MAX_PLACED (what the template holds).
PLACED = "placed"
MAX_PLACED = 2
MAX_SLOTS, MAX_INPUTS, MAX_OUTPUTS = 16, 8, 4  # what the template holds
REG, INPUT, SCALAR = range(3)  # Ref kinds: PW_REG, PW_INPUT, PW_SCALAR in the template
# With a Layer: the workgroup (OpenGL ES 3.1's minimum of GL_MAX_COMPUTE_WORK_GROUP_INVOCATIONS,
# so no device clamps it), one output vec4 per invocation at most, and the shared vec4s the
# layer's partial sums and outputs may take (GL_MAX_COMPUTE_SHARED_MEMORY_SIZE's minimum).
LAYER_LANES = 128
LAYER_SHARED_VEC4S = 16384 // 16


class Ref(NamedTuple):
    """A value a slot reads: kind REG (the register of slot `index`; `stored`: rounded to half in
    half storage, as the store of the tensor that held it in the unfused graph did), INPUT
    (program input `index`, read at the output position) or SCALAR (`value`)."""
    kind: int
    index: int = 0
    value: float = 0.0
    stored: bool = False


class Slot(NamedTuple):
    """r = op(a) or op(a, b) (b op a when `swap`): an epilogue step (epilogue.UNARY_CODES /
    BINARY_CODES) whose value is `a` and operand `b`."""
    op: str
    a: Ref
    b: Ref
    swap: bool = False


class Input(NamedTuple):
    """Program input: node.inputs[tensor], broadcast over the output as an epilogue operand
    (epilogue.tensor_source); or with `block`, a tensor the output's shape lies in as one
    contiguous block of PHWC4 storage `shift` vec4 elements in (a channel slice at a multiple
    of 4: phwc4.block_offset), read at the output's own index plus `shift`. padded_c: it has
    fewer channels than the output and reads zero past them (rule pad_into_operand)."""
    tensor: int
    shift: int = 0
    block: bool = False
    padded_c: bool = False
    layer: bool = False  # the Layer's output, read at the output's own index plus `shift`


class Layer(NamedTuple):
    """A FULLY_CONNECTED of one row the program reads (rule fuse_dense_into_dag): node.inputs
    indices of its input x (a single pixel of `depth` channels), its constant weights [U, depth]
    and bias (-1: none); its fused activation code and epilogue steps (tensor operands among
    node.inputs, read at the layer output's position); `output`, the tensor it wrote in the
    unfused graph (its shape places the operands), which no dispatch stores."""
    x: int
    weights: int
    bias: int
    activation: int
    steps: tuple
    output: object


class Program(NamedTuple):
    """inputs (Input), slots (Slot), outputs: per node output, the register it is stored from;
    layer: a Layer computed before the slots, or None."""
    inputs: tuple
    slots: tuple
    outputs: tuple
    layer: Layer | None = None


def support(node):
    """Why the kernel cannot run `node`, or None: a program within the template's limits whose
    registers are all written before they are read, outputs of one shape, inputs it can read."""
    program = node.options.get(PROGRAM)
    if node.custom or not isinstance(program, Program):
        return f"{OP} is the fused op of rule fuse_pointwise_dag, with its program"
    if len(program.slots) > MAX_SLOTS or len(program.inputs) > MAX_INPUTS or not 0 < len(node.outputs) <= MAX_OUTPUTS:
        return (f"{len(program.slots)} slots, {len(program.inputs)} inputs, {len(node.outputs)} outputs: the template "
                f"holds {MAX_SLOTS}, {MAX_INPUTS}, 1 to {MAX_OUTPUTS}")
    out = node.outputs[0]
    if any(tuple(t.shape) != tuple(out.shape) for t in node.outputs) or len(program.outputs) != len(node.outputs):
        return "its outputs differ in shape, or in number from the program's"
    if any(t.dtype == np.int32 for t in (*node.inputs, *node.outputs)):
        return "int32 tensors hold bits, which its float steps do not compute on"
    return (_program_reason(node, program) or _inputs_reason(node, program) or _layer_reason(node, program)
            or _placed_reason(node))


def _placed_reason(node):
    """Why the PLACED boxes do not hold the outputs they name, or None."""
    placed = node.options.get(PLACED, ())
    if len(placed) > MAX_PLACED:
        return f"{len(placed)} placed stores, the template holds {MAX_PLACED}"
    for j, whole, (x, y, slice_, b) in placed:
        part, into = bhwc(node.outputs[j].shape), bhwc(whole.shape)
        if min(x, y, slice_, b) < 0 or x + part.w > into.w or y + part.h > into.h or \
                slice_ + part.slices > into.slices or b + part.b > into.b:
            return f"output {j} does not fit tensor {whole.index} at {(x, y, slice_, b)}"
    return None


def _program_reason(node, program):
    """Why the program's slots or outputs read a register not yet written, an input it lacks or
    an unknown op, or None."""
    for k, slot in enumerate(program.slots):
        if slot.op not in epilogue.UNARY_CODES and slot.op not in epilogue.BINARY_CODES:
            return f"slot {k}: unknown step {slot.op}"
        for ref in (slot.a, slot.b):
            if (ref.kind == REG and not 0 <= ref.index < k) or \
                    (ref.kind == INPUT and not 0 <= ref.index < len(program.inputs)):
                return f"slot {k} reads {ref}, which does not exist when it runs"
    if any(not 0 <= r < len(program.slots) for r in program.outputs):
        return "an output is stored from a register no slot writes"
    return None


def _inputs_reason(node, program):
    """Why a program input cannot be read at each output position, or None."""
    out = node.outputs[0]
    for j, entry in enumerate(program.inputs):
        if not 0 <= entry.tensor < len(node.inputs):
            return f"input {j} is no input of the node"
        tensor = node.inputs[entry.tensor]
        if entry.layer:
            continue  # _layer_reason checks what it reads
        if entry.block:
            s4, o4 = bhwc(tensor.shape), bhwc(out.shape)
            if tensor.is_const or entry.shift < 0 or entry.shift + o4.elements > s4.elements:
                return f"input {j}: tensor {tensor.index} holds no block of the output's size at {entry.shift}"
        elif not entry.padded_c:
            reason = epilogue.operand_reason(tensor, out)
            if reason:
                return f"input {j}: {reason}"
    return None


def _layer_reason(node, program):
    """Why the program's Layer cannot run in the template's one workgroup, or None."""
    layer = program.layer
    if layer is None:
        return None if not any(e.layer for e in program.inputs) else "an input reads a layer the program lacks"
    x, weights = node.inputs[layer.x], node.inputs[layer.weights]
    x4, units = bhwc(x.shape), weights.shape[0]
    if x.is_const or x4.b * x4.h * x4.w != 1 or len(weights.shape) != 2 or x4.c != weights.shape[1]:
        return f"its layer's input tensor {x.index} is not one pixel of {list(weights.shape[1:])} channels"
    if bhwc(node.outputs[0].shape).elements > LAYER_LANES:
        return f"with a layer, its output takes more than one workgroup ({LAYER_LANES} vec4s)"
    if _layer_shared(layer, node) > LAYER_SHARED_VEC4S:
        return f"its layer's {units} units need more than {16 * LAYER_SHARED_VEC4S} bytes of shared memory"
    slices = -(-units // 4)
    for entry in program.inputs:
        if entry.layer and not 0 <= entry.shift <= slices - bhwc(node.outputs[0].shape).elements:
            return f"an input reads past its layer's {units} units"
    return None


def _layer_split(layer, node):
    """Lanes per output slice of the layer: fully_connected.py's split of K for its one row."""
    depth, units = node.inputs[layer.weights].shape[1], node.inputs[layer.weights].shape[0]
    return k_split(-(-depth // 4), -(-units // 4))


def _layer_shared(layer, node):
    """Shared vec4s of the layer: each output slice's partial sums, then the outputs."""
    slices = -(-node.inputs[layer.weights].shape[0] // 4)
    return slices * (_layer_split(layer, node) + 1)


def build(node, env):
    """One dispatch over the output shape: the program's slots, then a store per output (with a
    Layer, one workgroup of LAYER_LANES computing the layer first)."""
    program, out = node.options[PROGRAM], node.outputs[0]
    out4 = bhwc(out.shape)
    defines = {"EP_COUNT": 0, "PW_COUNT": len(program.slots), "PW_INPUTS": len(program.inputs),
               "PW_OUTPUTS": len(node.outputs), "PW_LAYER": int(program.layer is not None)}
    params = {"out_size": out4.as_ivec4(), "out_channels": out4.c}
    for j, entry in enumerate(program.inputs):
        _input_source(node.inputs[entry.tensor], entry, out, env).put(f"in{j}", defines, params)
        defines[f"IN{j}_ZERO_C"], defines[f"IN{j}_SHIFT"] = int(entry.padded_c), entry.shift
        defines[f"IN{j}_LAYER"] = int(entry.layer)
    for k, slot in enumerate(program.slots):
        _put_slot(k, slot, defines, params)
    for j, (tensor, register) in enumerate(zip(node.outputs, program.outputs)):
        defines[f"PW_OUT{j}"], params[f"out{j}_offset"] = register, env.arena(tensor)
    reads = tuple({id(t): t for t in node.inputs if not t.is_const}.values())
    writes = tuple(node.outputs) + _put_placed(node, program, env, defines, params)
    if program.layer is None:
        return [Dispatch("pointwise", (out4.w, out4.h, out4.slices * out4.b), defines, params,
                         reads=reads, writes=writes)]
    _put_layer(node, program.layer, env, defines, params)
    return [Dispatch("pointwise", (LAYER_LANES, 1, 1), defines, params, reads=reads, writes=writes,
                     workgroup=(LAYER_LANES, 1, 1))]


def _put_placed(node, program, env, defines, params):
    """The PLACED stores' defines (PW_PLACED, PW_PLACEDk: the register) and params (placedk_offset,
    placedk_size, placedk_origin); returns the tensors they write."""
    placed = node.options.get(PLACED, ())
    defines["PW_PLACED"] = len(placed)
    for k, (j, whole, origin) in enumerate(placed):
        defines[f"PW_PLACED{k}"] = program.outputs[j]
        params.update({f"placed{k}_offset": env.arena(whole), f"placed{k}_size": bhwc(whole.shape).as_ivec4(),
                       f"placed{k}_origin": tuple(origin)})
    return tuple({id(whole): whole for _, whole, _ in placed}.values())


def _put_layer(node, layer, env, defines, params):
    """The Layer's defines (its split, slices, chunks, output stage and epilogue) and params."""
    weights = node.inputs[layer.weights]
    units, depth = weights.shape
    bias = None if layer.bias < 0 else node.inputs[layer.bias].data
    defines.update({"LAYER_LANES": LAYER_LANES, "LAYER_SPLIT": _layer_split(layer, node),
                    "LAYER_SLICES": -(-units // 4), "LAYER_CHUNKS": -(-depth // 4),
                    "ACTIVATION": layer.activation, "CLAMP_FINITE": 1})
    params.update({"layer_in_offset": env.arena(node.inputs[layer.x]), "layer_units": units,
                   "layer_weights_offset": env.constant(pack_weights(np.asarray(weights.data, np.float32))),
                   "layer_bias_offset": env.constant(pack_bias(bias, units))})
    epilogue.specialize(layer.steps, layer.output, env, defines, params)


def _input_source(tensor, entry, out, env):
    """The epilogue.Source of program input `entry` (of `tensor`) read over `out`: a block is read
    in the output's own layout from the tensor's storage (plus the shift); the Layer's output is
    read from shared memory (the source, never read, is a scalar)."""
    if entry.layer:
        return epilogue.Source(epilogue.SRC_SCALAR, 0, (1, 1, 1, 1), False)
    if entry.block:
        return epilogue.Source(epilogue.SRC_ARENA, env.arena(tensor), bhwc(out.shape).as_ivec4(), False)
    return epilogue.tensor_source(tensor, out, env)


def _put_slot(k, slot, defines, params):
    """Slot k's defines (PWk_OP, PWk_SWAP, and per value its kind, index, rounding) and its
    scalar param pwk_value."""
    code = epilogue.UNARY_CODES.get(slot.op)
    defines[f"PW{k}_OP"] = code if code is not None else epilogue.BINARY_BASE + epilogue.BINARY_CODES[slot.op]
    defines[f"PW{k}_SWAP"] = int(slot.swap)
    for name, ref in (("A", slot.a), ("B", slot.b)):
        defines[f"PW{k}_{name}_KIND"], defines[f"PW{k}_{name}"] = ref.kind, ref.index
        defines[f"PW{k}_{name}_STORED"] = int(ref.stored)
    params[f"pw{k}_value"] = float(slot.b.value)


SUPPORT = {OP: support}
BUILD = {OP: build}
FLOAT_VIEW = {OP: None}  # bool tensors (comparisons, logical ops) as 0.0 / 1.0; support() refuses int32
HIGH_RANK = {OP: None}  # the members' BHWC views, which their own kernels took
# 1 to MAX_INPUTS inputs (none omitted), 1 to MAX_OUTPUTS outputs (support() checks the bound).
FACTS = {OP: OpFacts(arity=(tuple(range(1, MAX_INPUTS + 1)), (), None))}
