"""Selection ops: SELECT / SELECT_V2 (kernels_glsl/select.glsl, with an epilogue) of float32, bool
or int32 values (a select moves an int32's bits: base.py), and ARG_MAX / ARG_MIN over any axis
(kernels_glsl/arg_extreme.glsl), whose int32 indices are exact at any length (int64 outputs,
tf.argmax's default, through the index view: gpu/index_view.py)."""
import numpy as np

from ...ops import select as reference
from ...ops.checks import normalized_axis
from ...registry import BINARY, OpFacts
from ..phwc4 import bhwc
from . import epilogue
from .base import Dispatch

VALUE_DTYPES = (np.dtype(np.float32), np.dtype(np.bool_), np.dtype(np.int32))  # what ARG_MAX / ARG_MIN compare
IS_MAX = {"ARG_MAX": 1, "ARG_MIN": 0}


# -- SELECT / SELECT_V2 ---------------------------------------------------------------------------
def select_supports(node):
    """The reference's checks; a condition that broadcasts right-aligned (SELECT's per-row
    condition does not); each operand readable at every output position (epilogue.operand_reason;
    int32 values are selected as their bits)."""
    reason = reference.SUPPORT[node.op](node)
    if reason:
        return reason
    condition, x, y = node.inputs
    out = node.outputs[0]
    if node.op == "SELECT" and condition.size > 1 and tuple(condition.shape) != tuple(x.shape):
        return "SELECT's per-row condition does not broadcast like the GPU's operands"
    return epilogue.operands_reason((condition, x, y), out, moves_int=True)


def select_build(node, env):
    """One select.glsl dispatch over the output, then the node's epilogue."""
    out = node.outputs[0]
    out4 = bhwc(out.shape)
    defines, params = epilogue.sources(node.inputs, "cxy", out, env)
    params.update(out_size=out4.as_ivec4(), out_channels=out4.c, out_offset=env.arena(out))
    runtime = tuple(dict.fromkeys(t for t in node.inputs if not t.is_const))
    reads, inplace = epilogue.apply(node, env, out, defines, params, runtime)
    # The select's value is one of its operands as stored, so a fused step's rounding of it to
    # half (EP0_STORED) changes nothing; NVIDIA's compiler got that rounding of a value straight
    # from unpackHalf2x16 wrong in highp math (fp16_fp32acc: NaN and values off by 6e3 on an H200).
    if defines.get("EP0_STORED"):
        defines["EP0_STORED"] = 0
    inplace += tuple(t for t in runtime if epilogue.same_layout(t, out))
    return [Dispatch("select", (out4.w, out4.h, out4.slices * out4.b), defines, params, reads=reads,
                     writes=(out,), inplace=inplace)]


# -- ARG_MAX / ARG_MIN ----------------------------------------------------------------------------
def arg_supports(node):
    """The reference's checks; a runtime float32, bool or int32 input; a constant axis; an int32
    output (an int64 one reaches the kernel as int32, gpu/index_view.py)."""
    reason = reference.SUPPORT[node.op](node)
    if reason:
        return reason
    x, axis, out = node.inputs[0], node.inputs[1], node.outputs[0]
    if x.is_const or x.dtype not in VALUE_DTYPES:
        return f"{node.op} input must be a runtime float32, bool or int32 tensor"
    if not axis.is_const:
        return "the axis must be constant"
    if out.dtype != np.int32:
        return f"{node.op} output of {out.dtype}: the GPU holds int32 indices only"
    return None


def arg_build(node, env):
    """One arg_extreme.glsl dispatch: one invocation per vec4 of the output; over the last axis
    a vec4 of the input's channels at a time, over any other each element of the line by its
    row-major index (`inner` elements apart)."""
    x, out = node.inputs[0], node.outputs[0]
    rank = len(x.shape)
    axis = normalized_axis(node, np.asarray(node.inputs[1].data).reshape(-1)[0], rank)
    inner = int(np.prod(x.shape[axis + 1:], dtype=np.int64))
    in4, out4 = bhwc(x.shape), bhwc(out.shape)
    params = {"in_size": in4.as_ivec4(), "in_channels": in4.c, "in_offset": env.arena(x),
              "out_size": out4.as_ivec4(), "out_channels": out4.c, "out_offset": env.arena(out)}
    defines = {"IS_MAX": IS_MAX[node.op], "INT_VALUES": int(x.dtype == np.int32), "LAST_AXIS": int(axis == rank - 1)}
    if axis != rank - 1:
        params.update(axis_size=int(x.shape[axis]), inner=inner)
        # TFLite lets a number replace a NaN extreme where elements follow the axis (ops/select.py)
        defines["NAN_YIELDS"] = int(inner > 1 and x.dtype != np.int32)
    return [Dispatch("arg_extreme", (out4.w, out4.h, out4.slices * out4.b), defines, params, reads=(x,),
                     writes=(out,))]


SUPPORT = {"SELECT": select_supports, "SELECT_V2": select_supports, "ARG_MAX": arg_supports,
           "ARG_MIN": arg_supports}
BUILD = {"SELECT": select_build, "SELECT_V2": select_build, "ARG_MAX": arg_build, "ARG_MIN": arg_build}
EPILOGUE = {"SELECT": None, "SELECT_V2": None}
FLOAT_VIEW = {op: None for op in SUPPORT}
# Any rank's view: SELECT's operands through epilogue.operand_reason; ARG_MAX / ARG_MIN reduce the
# channels (the last axis of every view) or read the input by row-major index.
HIGH_RANK = {op: None for op in SUPPORT}
# SELECT copies the integers of quantized values (quant.py keeps their grid).
FACTS = {"SELECT": OpFacts(arity=((3,), (), 1), integer_move=True),
         "SELECT_V2": OpFacts(arity=((3,), (), 1), integer_move=True),
         "ARG_MAX": OpFacts(arity=BINARY), "ARG_MIN": OpFacts(arity=BINARY)}
