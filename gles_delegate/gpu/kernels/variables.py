"""Resource variables in a GPU partition: VAR_HANDLE, READ_VARIABLE, ASSIGN_VARIABLE.

A variable a partition reads or assigns lives in the partition's arena, in storage the memory
planner lends to no other tensor (KernelEnv.persist), so it keeps its value between invokes.
gpu/variables.bind() first rewrites the partition: each READ_VARIABLE / ASSIGN_VARIABLE reads /
writes that storage tensor (its input 0) instead of its handle, and the VAR_HANDLEs go; then
READ_VARIABLE copies the variable into its output and ASSIGN_VARIABLE copies its value into the
variable (layout_map.glsl). gpu/variable_sync.GpuVariables keeps that storage in step with the
interpreter's other copies (variable_store.py).

Only our Interpreter's variables can live there (node.runtime, set by the Interpreter): LiteRT's
are its own, which no delegate API reads or writes, so on LiteRT's Interpreter these nodes stay
on LiteRT's CPU kernels.
"""
import numpy as np

from ...ops.variables import ref_of
from ...registry import OpFacts
from .layout import copy_of, gather_dispatch

# options[IN_PLACE] (rule assign_in_place): the ASSIGN_VARIABLE's value (input 1) is its
# variable's storage (its producer writes it there); no dispatch.
IN_PLACE = "assign_in_place"
_LITERT = "its resource variables are the interpreter's own (on LiteRT's Interpreter, LiteRT's CPU runs it)"


def _var_handle_reason(node):
    return _LITERT if node.runtime is None else None


def _access_reason(node, tensor):
    """Why a GPU partition cannot hold the variable `node` reads or assigns as `tensor`, or None."""
    if node.runtime is None:
        return _LITERT
    ref = ref_of(node)
    if ref is None:
        return "its handle does not come from a VAR_HANDLE of its subgraph"
    if ref.shape is None:
        return ref.why
    if ref.gpu_reason is not None:
        return f"{ref.label}: {ref.gpu_reason}"
    if tuple(tensor.shape) != ref.shape:
        return f"tensor {tensor.index} has shape {list(tensor.shape)}, {ref.label} {list(ref.shape)}"
    if tensor.dtype != np.float32:
        return f"tensor {tensor.index} is {tensor.dtype}: the GPU holds variables as float32 (8-bit ones as floats)"
    return None


def _variable(node):
    """The storage tensor gpu/variables.bind() gave `node` (input 0), registered as persistent."""
    ref, var = ref_of(node), node.inputs[0]
    if var.dtype != np.float32 or tuple(var.shape) != ref.shape:
        raise ValueError(f"{node.label}: input 0 is not the storage of {ref.label} (gpu/variables.bind first)")
    return var


def _read(node, env):
    """Copy the variable into the output."""
    var = _variable(node)
    env.persist(var, ref_of(node).key)
    return [gather_dispatch(node.outputs[0], copy_of(var), env)]


def _assign(node, env):
    """Copy the value (input 1) into the variable, or with IN_PLACE let it be the variable."""
    var = _variable(node)
    env.persist(var, ref_of(node).key)
    if node.options.get(IN_PLACE):
        env.alias(node.inputs[1], var)
        return []
    return [gather_dispatch(var, copy_of(node.inputs[1]), env)]


SUPPORT = {"VAR_HANDLE": _var_handle_reason,
           "READ_VARIABLE": lambda node: _access_reason(node, node.outputs[0]),
           "ASSIGN_VARIABLE": lambda node: _access_reason(node, node.inputs[1])}
# VAR_HANDLE makes no dispatch: bind() removes it (a handle read outside the partition is
# written by GpuVariables after each run).
BUILD = {"VAR_HANDLE": lambda node, env: [], "READ_VARIABLE": _read, "ASSIGN_VARIABLE": _assign}
FACTS = {"VAR_HANDLE": OpFacts(arity=((0,), (), 1)), "READ_VARIABLE": OpFacts(arity=((1,), (), 1)),
         "ASSIGN_VARIABLE": OpFacts(arity=((2,), (), 0))}
FLOAT_VIEW = {op: None for op in SUPPORT}  # the handles are int32 tensors (_access_reason checks the values)
