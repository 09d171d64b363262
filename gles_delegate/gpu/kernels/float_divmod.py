"""FLOOR_DIV and FLOOR_MOD of float32 tensors (kernels_glsl/float_divmod.glsl), bit for bit as
TFLite's CPU kernels compute them: floor(double(a) / double(b)) converted to float, and fmodf plus
the divisor where the signs differ, computed from the operands' bits in integer arithmetic (a GPU's
division is not correctly rounded, so the floor of it would be one off where the quotient is an
integer the division rounds below). Operands broadcast as the float kernels' do
(epilogue.operand_reason). A zero divisor of FLOOR_DIV fails the invoke naming the node, as
TFLite's does (KernelEnv.status_word); FLOOR_MOD's gives fmodf's NaN.

The first candidates of their ops (kernels.ORDER), before integer.py's int32 kernels."""
import numpy as np

from ... import ops
from ...ops.checks import node_error
from ..phwc4 import bhwc
from . import epilogue
from .base import Dispatch

OP_CODES = {"FLOOR_DIV": 0, "FLOOR_MOD": 1}  # float_divmod.glsl's DIVMOD_OP


def supports(node):
    """The reference's checks; float32 operands; each operand readable at every output position."""
    reason = ops.SUPPORT[node.op](node)
    if reason:
        return reason
    if any(t.dtype != np.float32 for t in node.inputs[:2]):
        return f"the float {node.op} kernel takes float32 operands, got {node.inputs[0].dtype}"
    return epilogue.operands_reason(node.inputs[:2], node.outputs[0])


def build(node, env):
    """One float_divmod.glsl dispatch over the output."""
    out = node.outputs[0]
    out4 = bhwc(out.shape)
    operands = node.inputs[:2]
    defines, params = epilogue.sources(operands, "ab", out, env)
    defines.update(DIVMOD_OP=OP_CODES[node.op], EP_COUNT=0)  # EP_COUNT: epilogue.glsl's ep_fetch, no steps
    params.update(out_size=out4.as_ivec4(), out_channels=out4.c, out_offset=env.arena(out))
    if node.op == "FLOOR_DIV":
        params["status_offset"] = env.status_word(str(node_error(node, "division by zero")))
        defines["IO_STATUS"] = 1
    runtime = tuple(dict.fromkeys(t for t in operands if not t.is_const))
    return [Dispatch("float_divmod", (out4.w, out4.h, out4.slices * out4.b), defines, params, reads=runtime,
                     writes=(out,), inplace=tuple(t for t in runtime if epilogue.same_layout(t, out)))]


SUPPORT = {op: supports for op in OP_CODES}
BUILD = {op: build for op in OP_CODES}
HIGH_RANK = {op: None for op in OP_CODES}  # a broadcast across merged dims: epilogue.operand_reason
