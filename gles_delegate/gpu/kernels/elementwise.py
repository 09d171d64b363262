"""Elementwise unary ops (activations and math functions; CAST between float32, bool and int32, and
LOGICAL_NOT) on kernels_glsl/elementwise.glsl, the kernel the broadcasting
binary ops (binary.py) run too.

The node's own op is the first epilogue step (epilogue.py) of a kernel that reads its first
operand at the output position, so a chain of elementwise nodes fused into one (rules
fuse_activation, fuse_residual_add, fuse_elementwise) is just more steps.

Accuracy: SIN and COS run GLSL's sin / cos, whose precision the GLSL ES spec leaves to the driver;
hardware that reduces the argument to one period in its own float precision loses a few ulps of
|x| (absolute), which no support check can foresee since it depends on the values.
tests/gpu/test_elementwise.py holds them to tolerance() plus 128 float32 ulps of |x| (FP32; 10
half ulps in FP16 modes) for |x| up to ~16; Mesa's llvmpipe stays within a float32 ulp of the
reference even at |x| = 1e6. FLOOR, CEIL and ROUND (roundEven: halves to even) are exact on the
stored value."""
import numpy as np

from ...ops import elementwise as reference
from ...registry import BINARY, UNARY, OpFacts
from ..phwc4 import bhwc
from . import epilogue
from .base import Dispatch

OPS = epilogue.UNARY_OPS


def supports(node):
    """The reference kernel's checks (arity, dtypes; PRELU's alpha broadcasts to the input, so
    its BHWC view does too), an output of the input's shape, and a slope the kernel can read."""
    reason = reference.SUPPORT[node.op](node)
    if reason:
        return reason
    x, out = node.inputs[0], node.outputs[0]
    if x.dtype == np.int32 and node.op != "CAST":  # its bits: integer.py computes on them
        return f"{node.op} of int32 runs on the integer kernel"
    if x.shape != out.shape:
        return f"output shape {list(out.shape)} differs from input {list(x.shape)}"
    if node.op == "CAST":
        return cast_reason(x, out)
    return epilogue.operand_reason(node.inputs[1], out) if node.op == "PRELU" else None


def cast_reason(x, out):
    """CAST between float32, bool and int32 (base.py: bool as 0.0 / 1.0, int32 as its bits) gives
    TFLite's result for every value; other dtypes stay on the CPU."""
    for tensor in (x, out):
        if tensor.dtype not in epilogue.CAST_DTYPES:
            return f"CAST of {tensor.dtype} (tensor {tensor.index}) does not run on the GPU"
    return None


def build(node, env):
    """One dispatch over the output: x = the first input (broadcast), then the node's own steps
    and its epilogue. Runtime inputs of the output's layout may share its storage (in place)."""
    x, out = node.inputs[0], node.outputs[0]
    out4 = bhwc(out.shape)
    defines, params = {}, {}
    epilogue.tensor_source(x, out, env).put("x", defines, params)
    params.update({"out_size": out4.as_ivec4(), "out_channels": out4.c, "out_offset": env.arena(out)})
    main = () if x.is_const else (x,)
    reads, inplace = epilogue.apply(node, env, out, defines, params, main, epilogue.node_steps(node, x))
    inplace += tuple(t for t in main if epilogue.same_layout(t, out))
    return [Dispatch("elementwise", (out4.w, out4.h, out4.slices * out4.b), defines, params,
                     reads=reads, writes=(out,), inplace=inplace)]


SUPPORT = {op: supports for op in OPS}
BUILD = {op: build for op in OPS}
EPILOGUE = {op: None for op in OPS}
FLOAT_VIEW = {"CAST": None, "LOGICAL_NOT": None}
HIGH_RANK = {op: None for op in OPS}  # any view of the shape; PRELU's slope: epilogue.operand_reason
FACTS = {op: OpFacts(arity=BINARY if op == "PRELU" else UNARY) for op in OPS}  # PRELU: x and its slope
