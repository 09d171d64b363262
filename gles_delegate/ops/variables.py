"""Resource variables: VAR_HANDLE, READ_VARIABLE, ASSIGN_VARIABLE.

As in LiteRT (tflite/kernels/var_handle.cc, read_variable.cc, assign_variable.cc): a
VAR_HANDLE gives the resource tensor the id of the variable its (container, shared_name)
names, the same id in every subgraph of the interpreter; ASSIGN_VARIABLE stores a copy of a
value (any type and shape) as that variable; READ_VARIABLE copies it out. Its output is dynamic,
of the variable's shape, only where the model declares it of rank 0 (scalar or unranked);
otherwise it keeps its declared shape and LiteRT copies that many elements (their bytes) from
the start of the variable: a larger variable is read truncated, in row-major order, and one
with fewer elements (LiteRT would read past it) is a ModelError naming the node.
Variables live in the interpreter (node.runtime.variables, a variable_store.VariableStore: a
GPU partition may hold the latest value, which reading it here downloads) and keep their values
across invokes; reset_all_variables() leaves them, as LiteRT's does.
"""
import numpy as np

from .checks import Malformed, node_error

# The node option under which allocate_tensors() records the variable a READ_VARIABLE /
# ASSIGN_VARIABLE uses (resource_variables.VariableRef), when a VAR_HANDLE of its subgraph makes its handle.
VARIABLE = "variable"
# The node option that records, at allocate_tensors(), whether READ_VARIABLE's output is dynamic
# (declared of rank 0): a dynamic read's output takes the shape of each value it reads.
DYNAMIC_READ = "dynamic_output"
RUNTIME_OPS = frozenset({"VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE"})
_NO_RUNTIME = "uses the interpreter's resource variables, which only the Interpreter holds"


def _handle_reason(tensor, what):
    """Why `tensor` cannot hold a resource id (a resource or int32 tensor of one element), or None."""
    if tensor is None:
        return Malformed(f"{what} is omitted")
    if tensor.dtype != np.int32 or tensor.size != 1:
        return f"{what} must be a resource (or int32) tensor of one element"
    return None


def _var_handle_reason(node):
    if node.runtime is None:
        return _NO_RUNTIME
    if node.inputs or len(node.outputs) != 1:
        return Malformed(f"takes no inputs and one output, got {len(node.inputs)} and {len(node.outputs)}")
    return _handle_reason(node.outputs[0], "its output")


def _read_reason(node):
    if node.runtime is None:
        return _NO_RUNTIME
    if len(node.inputs) != 1 or len(node.outputs) != 1:
        return Malformed(f"takes one input and one output, got {len(node.inputs)} and {len(node.outputs)}")
    if node.outputs[0].dtype is None:
        return f"its output is {node.outputs[0].type_name}, a type numpy cannot hold"
    return _handle_reason(node.inputs[0], "input 0")


def _assign_reason(node):
    if node.runtime is None:
        return _NO_RUNTIME
    if len(node.inputs) != 2 or node.outputs:
        return Malformed(f"takes two inputs and no outputs, got {len(node.inputs)} and {len(node.outputs)}")
    if node.inputs[1] is None:
        return Malformed("input 1 (the value) is omitted")
    if node.inputs[1].dtype is None:
        return "input 1 (the value) must be a tensor of a type numpy can hold"
    return _handle_reason(node.inputs[0], "input 0")


def ref_of(node):
    """The resource_variables.VariableRef of a READ_VARIABLE / ASSIGN_VARIABLE node, or None."""
    return node.options.get(VARIABLE)


def var_handle(node, inputs):
    """The resource id of the variable (container, shared_name), in the output's shape."""
    resource = node.runtime.resource_id(node.options.get("container", ""), node.options.get("shared_name", ""))
    return [np.full(node.outputs[0].shape, resource, np.int32)]


def _resource(handle):
    return int(np.asarray(handle).reshape(-1)[0])


def dynamic_read(node):
    """Whether READ_VARIABLE `node`'s output is dynamic (declared of rank 0, LiteRT's Prepare)."""
    return node.options.get(DYNAMIC_READ, len(node.outputs[0].shape) == 0)


def read_variable(node, inputs):
    """A copy of the variable's value (of the declared output's size unless dynamic: the module
    docstring); a ModelError naming the node when nothing assigned it yet, its type is not the
    output's (LiteRT's checks) or it has fewer elements than the output."""
    value = node.runtime.variables.read(_resource(inputs[0]))
    if value is None:
        raise node_error(node, f"reads resource variable {_resource(inputs[0])}, which nothing has assigned yet")
    if value.dtype != node.outputs[0].dtype:
        raise node_error(node, f"reads a {value.dtype} variable into a {node.outputs[0].dtype} output")
    if dynamic_read(node):
        return [value.copy()]
    shape = tuple(node.outputs[0].shape)
    size = int(np.prod(shape, dtype=np.int64))
    if value.size < size:
        raise node_error(node, f"reads resource variable {_resource(inputs[0])} of shape {list(value.shape)} into "
                               f"an output of shape {list(shape)}: LiteRT would copy past its end")
    return [value.reshape(-1)[:size].reshape(shape).copy()]


def assign_variable(node, inputs):
    """Store a copy of input 1 as the variable input 0 names (creating it)."""
    node.runtime.variables.assign(_resource(inputs[0]), np.array(inputs[1], copy=True))
    return []


def _read_shapes(node, shapes, values):
    """The declared shape, or None for a dynamic read (decided at invoke)."""
    return None if dynamic_read(node) else [tuple(node.outputs[0].shape)]


KERNELS = {"VAR_HANDLE": var_handle, "READ_VARIABLE": read_variable, "ASSIGN_VARIABLE": assign_variable}
SUPPORT = {"VAR_HANDLE": _var_handle_reason, "READ_VARIABLE": _read_reason, "ASSIGN_VARIABLE": _assign_reason}
# READ_VARIABLE's output is dynamic only where declared of rank 0, as in LiteRT.
OUTPUT_SHAPES = {"VAR_HANDLE": lambda node, shapes, values: [tuple(node.outputs[0].shape)],
                 "READ_VARIABLE": _read_shapes,
                 "ASSIGN_VARIABLE": lambda node, shapes, values: []}
