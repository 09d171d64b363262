"""Control flow: WHILE, IF and CALL_ONCE, whose kernels run other subgraphs of the model.

The kernels call back into the interpreter through `node.runtime` (subgraphs.Runtime: the
model's subgraphs as seen from the node's own), as TFLite's reach theirs through the context
(tensorflow/lite/kernels/while.cc, if.cc, call_once.cc). Values pass by copy, as in TFLite.

Output shapes follow TFLite's Prepare: a WHILE whose body gives each loop-carried tensor back in
the shape it took (for the shapes the node's inputs have) has outputs of those shapes; any
other body makes them dynamic (the shape rule gives None), decided at invoke by the loop
itself. IF's outputs are static when both branches give the same shapes. Planning those shapes
plans the called subgraphs for them (at allocate_tensors).

A WHILE whose condition never turns false runs forever, as in TFLite: there is no iteration
limit (KeyboardInterrupt stops it between two subgraph runs).
"""
import numpy as np

from .checks import Malformed, node_error

# The options of each op that name a subgraph it runs (subgraphs.Runtime checks them).
SUBGRAPH_OPTIONS = {"WHILE": ("cond_subgraph_index", "body_subgraph_index"),
                    "IF": ("then_subgraph_index", "else_subgraph_index"),
                    "CALL_ONCE": ("init_subgraph_index",)}
# Ops whose kernels use node.runtime: never folded, never run on stand-in values.
RUNTIME_OPS = frozenset(SUBGRAPH_OPTIONS)
_NO_RUNTIME = "runs subgraphs of the model, which only the Interpreter can call"


def calls(op, ops=SUBGRAPH_OPTIONS):
    """The subgraph indices operator `op` (an OperatorDef or a graph Node) names in the options
    `ops` gives for its op code, in option order ([] for a custom op)."""
    if op.custom:
        return []
    return [op.options[o] for o in ops.get(op.op, ()) if isinstance(op.options.get(o), int)]


def _calls_reason(node):
    """Why the node's subgraph options are unusable (out of range, recursive), or None."""
    if node.runtime is None:
        return _NO_RUNTIME
    for option in SUBGRAPH_OPTIONS[node.op]:
        reason = node.runtime.call_reason(node.options.get(option), option)
        if reason is not None:
            return reason
    return None


def _match_reason(what, tensors, expected):
    """Why the subgraph tensors `expected` (a list of (dtype, name)) do not fit the node's
    `tensors` one to one, or None."""
    if len(tensors) != len(expected):
        return f"{what} has {len(expected)} tensors, the node passes {len(tensors)}"
    for k, (tensor, (dtype, name)) in enumerate(zip(tensors, expected)):
        if tensor is None:
            return f"{what}: tensor {k} is omitted"
        if tensor.dtype is None or tensor.dtype != dtype:
            return f"{what}: tensor {k} ({name!r}) is {dtype}, the node's (tensor {tensor.index}) is {tensor.dtype}"
    return None


def _while_reason(node):
    reason = _calls_reason(node)
    if reason is not None:
        return reason
    cond, body = node.options["cond_subgraph_index"], node.options["body_subgraph_index"]
    if cond == body:
        return f"cond_subgraph_index and body_subgraph_index are both {cond}"
    if len(node.outputs) != len(node.inputs):
        return Malformed(f"takes as many outputs as inputs (the loop-carried tensors), got {len(node.inputs)} "
                         f"inputs and {len(node.outputs)} outputs")
    runtime = node.runtime
    cond_in, cond_out = runtime.signature(cond)
    body_in, body_out = runtime.signature(body)
    reason = (_match_reason(f"the inputs of cond subgraph {cond}", node.inputs, cond_in)
              or _match_reason(f"the inputs of body subgraph {body}", node.inputs, body_in)
              or _match_reason(f"the outputs of body subgraph {body}", node.outputs, body_out))
    if reason is None and (len(cond_out) != 1 or cond_out[0][0] != np.bool_):
        reason = f"cond subgraph {cond} must have one bool output, it has {[str(d) for d, _ in cond_out]}"
    return reason


def _if_reason(node):
    reason = _calls_reason(node)
    if reason is not None:
        return reason
    if not node.inputs or node.inputs[0] is None or node.inputs[0].dtype != np.bool_ or node.inputs[0].size != 1:
        return "input 0 (the condition) must be a bool tensor of one element"
    for option in SUBGRAPH_OPTIONS["IF"]:
        branch = node.options[option]
        inputs, outputs = node.runtime.signature(branch)
        reason = (_match_reason(f"the inputs of subgraph {branch}", node.inputs[1:], inputs)
                  or _match_reason(f"the outputs of subgraph {branch}", node.outputs, outputs))
        if reason is not None:
            return reason
    return None


def _call_once_reason(node):
    reason = _calls_reason(node)
    if reason is not None:
        return reason
    if node.inputs or node.outputs:
        return Malformed(f"takes no inputs and no outputs, got {len(node.inputs)} and {len(node.outputs)}")
    index = node.options["init_subgraph_index"]
    inputs, outputs = node.runtime.signature(index)
    if inputs or outputs:
        return f"init subgraph {index} must have no inputs and no outputs, it has {len(inputs)} and {len(outputs)}"
    return None


def _condition(node, value):
    """The loop condition of a WHILE: the cond subgraph's bool of shape [] or [1] (TFLite's
    CheckCondOutput)."""
    if value.dtype != np.bool_ or value.shape not in ((), (1,)):
        raise node_error(node, f"the cond subgraph gave a {value.dtype} of shape {list(value.shape)}, "
                               "not a bool of shape [] or [1]")
    return bool(value.reshape(-1)[0])


def while_kernel(node, inputs):
    """output = inputs; while cond(output): output = body(output)."""
    cond, body = node.options["cond_subgraph_index"], node.options["body_subgraph_index"]
    values = [np.array(x, copy=True) for x in inputs]
    while _condition(node, node.runtime.call(cond, values)[0]):
        values = node.runtime.call(body, values)
    return values


def if_kernel(node, inputs):
    """The outputs of the then subgraph when input 0 is true, else of the else subgraph, each run
    on inputs[1:]."""
    option = "then_subgraph_index" if bool(np.asarray(inputs[0]).reshape(-1)[0]) else "else_subgraph_index"
    return node.runtime.call(node.options[option], list(inputs[1:]))


def call_once_kernel(node, inputs):
    """Run the init subgraph, the first time any CALL_ONCE of this interpreter names it."""
    node.runtime.call_once(node.options["init_subgraph_index"])
    return []


def _while_shapes(node, shapes, values):
    if _while_reason(node) is not None:
        return None
    body = node.options["body_subgraph_index"]
    node.runtime.output_shapes(node.options["cond_subgraph_index"], shapes)  # plans it (TFLite's Prepare)
    return shapes if node.runtime.output_shapes(body, shapes) == shapes else None


def _if_shapes(node, shapes, values):
    if _if_reason(node) is not None:
        return None
    branches = [node.runtime.output_shapes(node.options[option], shapes[1:]) for option in SUBGRAPH_OPTIONS["IF"]]
    return branches[0] if branches[0] == branches[1] else None


KERNELS = {"WHILE": while_kernel, "IF": if_kernel, "CALL_ONCE": call_once_kernel}
SUPPORT = {"WHILE": _while_reason, "IF": _if_reason, "CALL_ONCE": _call_once_reason}
OUTPUT_SHAPES = {"WHILE": _while_shapes, "IF": _if_shapes, "CALL_ONCE": lambda node, shapes, values: []}
