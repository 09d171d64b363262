"""POINTWISE_DAG, a fused op only the rewrite rule fuse_pointwise_dag makes: a connected group of
elementwise nodes (epilogue steps joined by the tensors between them, the gates and state update
of a recurrent cell) in one dispatch of kernels_glsl/pointwise.glsl, which stores every tensor of
the group read outside it.

Node: inputs, the tensors the group reads from outside it (runtime or constant); outputs, the
tensors it writes, all of one shape (the output shape); options[PROGRAM], a Program. Each slot of
the program is one epilogue step (epilogue.py: its op code, math and half rounding) on two
values, each an earlier slot's register, a program input read at the output position, or a
scalar. It applies no epilogue of its own: the rule runs after every rule that fuses into one.
"""
from typing import NamedTuple

import numpy as np

from ...registry import OpFacts
from ..phwc4 import bhwc
from . import epilogue
from .base import Dispatch

OP = "POINTWISE_DAG"
PROGRAM = "pointwise_program"  # node.options key
MAX_SLOTS, MAX_INPUTS, MAX_OUTPUTS = 16, 8, 4  # what the template holds
REG, INPUT, SCALAR = range(3)  # Ref kinds: PW_REG, PW_INPUT, PW_SCALAR in the template


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


class Program(NamedTuple):
    """inputs (Input), slots (Slot), outputs: per node output, the register it is stored from."""
    inputs: tuple
    slots: tuple
    outputs: tuple


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
    return _program_reason(node, program) or _inputs_reason(node, program)


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
        if entry.block:
            s4, o4 = bhwc(tensor.shape), bhwc(out.shape)
            if tensor.is_const or entry.shift < 0 or entry.shift + o4.elements > s4.elements:
                return f"input {j}: tensor {tensor.index} holds no block of the output's size at {entry.shift}"
        elif not entry.padded_c:
            reason = epilogue.operand_reason(tensor, out)
            if reason:
                return f"input {j}: {reason}"
    return None


def build(node, env):
    """One dispatch over the output shape: the program's slots, then a store per output."""
    program, out = node.options[PROGRAM], node.outputs[0]
    out4 = bhwc(out.shape)
    defines = {"EP_COUNT": 0, "PW_COUNT": len(program.slots), "PW_INPUTS": len(program.inputs),
               "PW_OUTPUTS": len(node.outputs)}
    params = {"out_size": out4.as_ivec4(), "out_channels": out4.c}
    for j, entry in enumerate(program.inputs):
        _input_source(node.inputs[entry.tensor], entry, out, env).put(f"in{j}", defines, params)
        defines[f"IN{j}_ZERO_C"], defines[f"IN{j}_SHIFT"] = int(entry.padded_c), entry.shift
    for k, slot in enumerate(program.slots):
        _put_slot(k, slot, defines, params)
    for j, (tensor, register) in enumerate(zip(node.outputs, program.outputs)):
        defines[f"PW_OUT{j}"], params[f"out{j}_offset"] = register, env.arena(tensor)
    reads = tuple({id(t): t for t in node.inputs if not t.is_const}.values())
    return [Dispatch("pointwise", (out4.w, out4.h, out4.slices * out4.b), defines, params,
                     reads=reads, writes=tuple(node.outputs))]


def _input_source(tensor, entry, out, env):
    """The epilogue.Source of program input `entry` (of `tensor`) read over `out`: a block is read
    in the output's own layout from the tensor's storage (plus the shift)."""
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
