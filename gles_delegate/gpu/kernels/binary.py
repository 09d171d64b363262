"""Broadcasting binary ops (ADD, SUB, MUL, DIV, MAXIMUM, MINIMUM, SQUARED_DIFFERENCE, POW, ATAN2 (of
two tensors of one shape, as TFLite takes it); and on
the float view, the comparisons and LOGICAL_AND / LOGICAL_OR): the elementwise kernel
(elementwise.py) with the op and the fused activation as its first steps. ADD_N of float32: the
same kernel, its first input then one ADD step per further input (each clamped to
[-FLT_MAX, FLT_MAX], as LiteRT's AddN clamps after every addition)."""
import numpy as np

from ...ops import binary as reference
from ...ops.common import fused_activation
from ...registry import BINARY, OpFacts
from . import elementwise, epilogue

OP_CODES = epilogue.BINARY_CODES
VIEW_OPS = tuple(epilogue.VIEW_BINARY_CODES)


def supports(node):
    """A float fused activation, and each operand broadcasts to the output without changing its layout (epilogue.operand_reason)."""
    if fused_activation(node) not in _ACTIVATIONS:
        return f"fused activation {fused_activation(node)} is not supported"
    out = node.outputs[0]
    return epilogue.operand_reason(node.inputs[0], out) or epilogue.operand_reason(node.inputs[1], out)


_ACTIVATIONS = frozenset((0, *epilogue.ACTIVATION_STEPS))  # NONE and those with a step


def view_supports(node):
    """A comparison or logical op, or ATAN2: the reference's rules (bool operands for the logical
    ops and equality; comparisons of float32 here, since a runtime int32 operand is exact only
    to 2^24 in the float view, which operand_reason refuses; ATAN2's operands of one shape),
    then the broadcasting checks."""
    return reference.SUPPORT[node.op](node) or supports(node)


ADD_N_MAX_INPUTS = epilogue.MAX_STEPS + 1  # the first input, then a template step per further one


def add_n_supports(node):
    """The reference's checks (two or more inputs of one shape and dtype), float32 (an int32 sum
    wraps, which the float view does not), at most ADD_N_MAX_INPUTS inputs, each readable at
    every output position."""
    reason = reference.SUPPORT["ADD_N"](node)
    if reason:
        return reason
    if node.inputs[0].dtype != np.float32:
        return f"ADD_N of {node.inputs[0].dtype} runs on the CPU (an int32 sum wraps; the GPU's float view does not)"
    out = node.outputs[0]
    return next((r for r in (epilogue.operand_reason(t, out) for t in node.inputs) if r is not None), None)


# Ops whose reference checks come first: the comparisons' dtypes, ATAN2's one shape.
CHECKED_OPS = (*VIEW_OPS, "ATAN2")
SUPPORT = {**{op: view_supports if op in CHECKED_OPS else supports for op in OP_CODES}, "ADD_N": add_n_supports}
BUILD = {op: elementwise.build for op in (*OP_CODES, "ADD_N")}
EPILOGUE = {op: None for op in OP_CODES}
FLOAT_VIEW = {op: None for op in VIEW_OPS}
HIGH_RANK = {op: None for op in (*OP_CODES, "ADD_N")}  # a broadcast across merged dims: epilogue.operand_reason
FACTS = {"ADD_N": OpFacts(arity=(tuple(range(2, ADD_N_MAX_INPUTS + 1)), (), 1)),
         **{op: OpFacts(arity=BINARY) for op in OP_CODES},
         **{op: OpFacts(arity=BINARY, fused_activation=True) for op in ("ADD", "SUB", "MUL", "DIV")},
         **{op: OpFacts(arity=BINARY, integer_move=True) for op in ("MAXIMUM", "MINIMUM")}}
