"""Resource variables: VAR_HANDLE, READ_VARIABLE, ASSIGN_VARIABLE.

As in TFLite (tensorflow/lite/kernels/var_handle.cc, read_variable.cc, assign_variable.cc): a
VAR_HANDLE gives the resource tensor the id of the variable its (container, shared_name)
names, the same id in every subgraph of the interpreter; ASSIGN_VARIABLE stores a copy of a
value (any type and shape) as that variable; READ_VARIABLE copies it out, a dynamic output
whose shape is the variable's. Variables live in the interpreter (node.runtime.variables) and
keep their values across invokes; reset_all_variables() leaves them, as LiteRT's does.
"""
import numpy as np

from .checks import node_error

RUNTIME_OPS = frozenset({"VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE"})
_NO_RUNTIME = "uses the interpreter's resource variables, which only the Interpreter holds"


def _handle_reason(tensor, what):
    """Why `tensor` cannot hold a resource id (a resource or int32 tensor of one element), or None."""
    if tensor is None or tensor.dtype != np.int32 or tensor.size != 1:
        return f"{what} must be a resource (or int32) tensor of one element"
    return None


def _var_handle_reason(node):
    if node.runtime is None:
        return _NO_RUNTIME
    if node.inputs or len(node.outputs) != 1:
        return f"takes no inputs and one output, got {len(node.inputs)} and {len(node.outputs)}"
    return _handle_reason(node.outputs[0], "its output")


def _read_reason(node):
    if node.runtime is None:
        return _NO_RUNTIME
    if len(node.inputs) != 1 or len(node.outputs) != 1:
        return f"takes one input and one output, got {len(node.inputs)} and {len(node.outputs)}"
    if node.outputs[0].dtype is None:
        return f"its output is {node.outputs[0].type_name}, a type numpy cannot hold"
    return _handle_reason(node.inputs[0], "input 0")


def _assign_reason(node):
    if node.runtime is None:
        return _NO_RUNTIME
    if len(node.inputs) != 2 or node.outputs:
        return f"takes two inputs and no outputs, got {len(node.inputs)} and {len(node.outputs)}"
    if node.inputs[1] is None or node.inputs[1].dtype is None:
        return "input 1 (the value) must be a tensor of a type numpy can hold"
    return _handle_reason(node.inputs[0], "input 0")


def var_handle(node, inputs):
    """The resource id of the variable (container, shared_name), in the output's shape."""
    resource = node.runtime.resource_id(node.options.get("container", ""), node.options.get("shared_name", ""))
    return [np.full(node.outputs[0].shape, resource, np.int32)]


def _resource(handle):
    return int(np.asarray(handle).reshape(-1)[0])


def read_variable(node, inputs):
    """A copy of the variable's value; a ModelError naming the node when nothing assigned it
    yet or its type is not the output's (TFLite's checks)."""
    value = node.runtime.variables.get(_resource(inputs[0]))
    if value is None:
        raise node_error(node, f"reads resource variable {_resource(inputs[0])}, which nothing has assigned yet")
    if value.dtype != node.outputs[0].dtype:
        raise node_error(node, f"reads a {value.dtype} variable into a {node.outputs[0].dtype} output")
    return [value.copy()]


def assign_variable(node, inputs):
    """Store a copy of input 1 as the variable input 0 names (creating it)."""
    node.runtime.variables[_resource(inputs[0])] = np.array(inputs[1], copy=True)
    return []


KERNELS = {"VAR_HANDLE": var_handle, "READ_VARIABLE": read_variable, "ASSIGN_VARIABLE": assign_variable}
SUPPORT = {"VAR_HANDLE": _var_handle_reason, "READ_VARIABLE": _read_reason, "ASSIGN_VARIABLE": _assign_reason}
# READ_VARIABLE's output is dynamic, as TFLite makes it: its shape is the variable's at invoke.
OUTPUT_SHAPES = {"VAR_HANDLE": lambda node, shapes, values: [tuple(node.outputs[0].shape)],
                 "READ_VARIABLE": lambda node, shapes, values: None,
                 "ASSIGN_VARIABLE": lambda node, shapes, values: []}
