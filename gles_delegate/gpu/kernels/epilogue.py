"""Epilogue steps: elementwise work a kernel applies to each output value before it stores it
(kernels_glsl/epilogue.glsl).

A rewrite rule fuses an activation, a residual ADD or a chain of elementwise nodes into the node
that produces their input by appending Steps to node.options["epilogue"]; that node's kernel then
specializes the template with one op code per step (specialize()) and reads each step's operand
at the output position it stores. Only rewritten partition copies carry epilogues: the reference
kernels never see one.
"""
import functools
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ...graph import EPILOGUE_KEY
from ...ops.common import ACT_NONE, ACT_RELU, ACT_RELU6, ACT_RELU_N1_TO_1, ACT_TANH, fused_activation
from ...ops.quantize import REQUANTIZE_FROM
from ..phwc4 import bhwc

KEY = EPILOGUE_KEY  # node.options[KEY]: a tuple of Steps (graph.fused_reads reads their operands)
# node.options[CAST_OUTPUT]: a CAST's own output dtype (its name), kept when fused steps make it write another
# tensor (absorb): its own step converts to that dtype, the fused ones go on from there.
CAST_OUTPUT = "cast_output_dtype"
MAX_STEPS = 8     # what the template holds: a kernel's own steps plus the fused ones
# Step op codes: the numbers live only here; kernels_glsl/epilogue.glsl names them EP_OP_<op>
# (glsl_defines()). A unary op's code is its own, a binary op's BINARY_BASE + its code.
UNARY_CODES = {"RELU": 0, "RELU6": 1, "RELU_N1_TO_1": 2, "RELU_0_TO_1": 3, "LEAKY_RELU": 4, "PRELU": 4,
               "LOGISTIC": 5, "TANH": 6, "EXP": 7, "LOG": 8, "SQRT": 9, "RSQRT": 10, "ABS": 11, "NEG": 12,
               "HARD_SWISH": 13, "ELU": 14, "GELU": 15, "GELU_EXACT": 16, "ROUND_HALF_AWAY": 17,
               "SQUARE": 18, "SIGN": 19, "SIN": 20, "COS": 21, "FLOOR": 22, "CEIL": 23, "ROUND": 24,
               "SWISH": 25}
FAKE_QUANT = "QUANTIZE_AND_DEQUANTIZE"  # quant.py's fake-quant node, fused as five steps
BINARY_CODES = {"ADD": 0, "SUB": 1, "MUL": 2, "DIV": 3, "MAXIMUM": 4, "MINIMUM": 5, "SQUARED_DIFFERENCE": 6,
                "POW": 7, "ATAN2": 8}
BINARY_BASE = 64

# -- steps of the float and int views (base.py: bool as 0.0 / 1.0, int32 as its bits) ------------
# Codes in ranges of their own (unary 48-63, binary from 16), so the float codes above grow
# without meeting them (tests/gpu/test_epilogue.py checks that no two ops share a code).
# Comparisons and logical ops yield 0.0 / 1.0 (of float or bool operands); CAST's step is named
# by its input and output kinds (CAST_STEPS): the value of an int32 tensor in an epilogue is its
# bits, which only an int step reads.
VIEW_UNARY_CODES = {"LOGICAL_NOT": 48, "CAST_TO_FLOAT": 49, "CAST_TO_BOOL": 50, "CAST_TO_INT32": 51,
                    "CAST_INT_TO_FLOAT": 52, "CAST_INT_TO_BOOL": 53, "CAST_INT_TO_INT": 54}
VIEW_BINARY_CODES = {"GREATER": 16, "GREATER_EQUAL": 17, "LESS": 18, "LESS_EQUAL": 19, "EQUAL": 20,
                     "NOT_EQUAL": 21, "LOGICAL_AND": 22, "LOGICAL_OR": 23}
_F32, _BOOL, _I32 = np.dtype(np.float32), np.dtype(np.bool_), np.dtype(np.int32)
CAST_DTYPES = (_F32, _BOOL, _I32)
# (input dtype, output dtype) -> the step; bool -> int32 is float -> int32 of 0.0 / 1.0.
CAST_STEPS = {**{(x, _F32): "CAST_TO_FLOAT" for x in (_F32, _BOOL)},
              **{(x, _BOOL): "CAST_TO_BOOL" for x in (_F32, _BOOL)},
              **{(x, _I32): "CAST_TO_INT32" for x in (_F32, _BOOL)},
              (_I32, _F32): "CAST_INT_TO_FLOAT", (_I32, _BOOL): "CAST_INT_TO_BOOL", (_I32, _I32): "CAST_INT_TO_INT"}
UNARY_CODES.update(VIEW_UNARY_CODES)
BINARY_CODES.update(VIEW_BINARY_CODES)

# Codes of steps that are no graph op of their own (SWISH: x * LOGISTIC(x), two nodes, fuse_swish).
STEP_ONLY = ("GELU_EXACT", "ROUND_HALF_AWAY", "SWISH", *sorted(set(CAST_STEPS.values())))
UNARY_OPS = tuple(op for op in UNARY_CODES if op not in STEP_ONLY) + ("CAST",)
SRC_NONE, SRC_SCALAR, SRC_CONST, SRC_ARENA = range(4)
# TFLite fused activations as steps (SIGN_BIT has no float meaning and no step).
ACTIVATION_STEPS = {ACT_RELU: "RELU", ACT_RELU_N1_TO_1: "RELU_N1_TO_1", ACT_RELU6: "RELU6", ACT_TANH: "TANH"}


def glsl_defines():
    """The #define lines of the named constants epilogue.glsl uses: EP_OP_<op> of every step op,
    EP_BINARY, EP_MAX and the operand sources EP_SRC_*."""
    codes = {**UNARY_CODES, **{op: BINARY_BASE + code for op, code in BINARY_CODES.items()}}
    sources = {"NONE": SRC_NONE, "SCALAR": SRC_SCALAR, "CONST": SRC_CONST, "ARENA": SRC_ARENA}
    lines = [f"#define EP_OP_{op} {code}" for op, code in codes.items()]
    lines += [f"#define EP_BINARY {BINARY_BASE}", f"#define EP_MAX {MAX_STEPS}"]
    return "\n".join(lines + [f"#define EP_SRC_{name} {code}" for name, code in sources.items()]) + "\n"


@dataclass(frozen=True)
class Step:
    """One epilogue step. op: a unary op (UNARY_CODES) of the value, or a binary op
    (BINARY_CODES) of the value and `operand` (value OP operand; operand OP value when `swap`).
    operand: a Tensor (constant, or computed at run time with the output's layout) or a float;
    for LEAKY_RELU / PRELU it is the slope. stored: the step starts a node, whose input the
    unfused graph stored in a tensor (in half storage the kernel rounds the value as that did).
    padded_c: the operand has fewer channels than the output and reads as zero past them (rule
    pad_into_operand: a channel PAD of zeros folded into its readers)."""
    op: str
    operand: object = None
    swap: bool = False
    stored: bool = False
    padded_c: bool = False

    def __repr__(self):
        operand = self.operand
        text = "" if operand is None else f" {operand:g}" if isinstance(operand, float) else f" t{operand.index}"
        return f"Step({'operand ' if self.swap else ''}{self.op}{text})"


def steps_of(node):
    """The epilogue steps a rewrite attached to `node` (a tuple, empty when none)."""
    return tuple(node.options.get(KEY, ()))


def activation_steps(node):
    """The node's fused activation as steps ([] for NONE)."""
    activation = fused_activation(node)
    return [] if activation == ACT_NONE else [Step(ACTIVATION_STEPS[activation])]


def node_steps(node, value):
    """The steps that compute elementwise `node` (a unary op of UNARY_CODES or a binary op of
    BINARY_CODES) from its input tensor `value`, one of node.inputs; the first is `stored`
    (but after an int32 value, which no storage rounds)."""
    if node.op == "CAST":
        target = np.dtype(node.options.get(CAST_OUTPUT, node.outputs[0].dtype))
        return [Step(CAST_STEPS[node.inputs[0].dtype, target], stored=value.dtype != _I32)]
    if node.op == "ADD_N":  # LiteRT's AddN: the first input, then a clamped ADD per further one
        return [Step("ADD", t, stored=k == 0) for k, t in enumerate(node.inputs[1:])]
    if node.op in BINARY_CODES:
        a, b = node.inputs[:2]
        other, swap = (b, False) if value is a else (a, True)
        return [Step(node.op, other, swap, stored=True)] + activation_steps(node)
    if node.op == "LEAKY_RELU":
        return [Step("LEAKY_RELU", float(node.options.get("alpha", 0.0)), stored=True)]
    if node.op == "PRELU":
        return [Step("PRELU", node.inputs[1], stored=True)]
    if node.op == "GELU" and not node.options.get("approximate", False):
        return [Step("GELU_EXACT", stored=True)]
    if node.op == FAKE_QUANT:
        return fake_quant_steps(node)
    return [Step(node.op, stored=True)]


def fake_quant_steps(node):
    """A per-tensor fake-quant node as steps: (clamp(round(x / s) + zp, qmin, qmax) - zp) * s is
    clamp(round(x / s), qmin - zp, qmax - zp) * s, zp being an integer."""
    q = node.outputs[0].quantization
    scale, zero_point = float(q.scales[0]), int(q.zero_points[0])
    return [Step("DIV", scale, stored=True), Step("ROUND_HALF_AWAY"),
            Step("MAXIMUM", float(node.options["qmin"] - zero_point)),
            Step("MINIMUM", float(node.options["qmax"] - zero_point)), Step("MUL", scale)]


def is_fusable_fake_quant(node):
    """A fake-quant node to a per-tensor grid (activations are always quantized per tensor)."""
    q = node.outputs[0].quantization if node.op == FAKE_QUANT else None
    return q is not None and q.scales.size == 1 and REQUANTIZE_FROM not in node.options  # no table lookup in steps


def own_steps(node):
    """How many template steps the node's own kernel spends on its own op before any fused
    step: an elementwise node's op (and a binary op's activation), else none."""
    if node.op in BINARY_CODES:
        return 1 + len(activation_steps(node))
    if node.op == "ADD_N":
        return len(node.inputs) - 1
    return 1 if node.op in UNARY_OPS else 0


def aligned_shape4(tensor, rank):
    """BHWC view of an operand after numpy's right-aligned broadcasting to `rank` dimensions."""
    return bhwc((1,) * (rank - len(tensor.shape)) + tuple(tensor.shape))


def operand_reason(operand, out, moves_int=False):
    """None when a kernel writing `out` can read `operand` (a Tensor) at each output position:
    it broadcasts to out's shape without growing it, and a runtime operand is float32 or bool
    (an int32 one holds bits, which float steps do not compute on: kernels/integer.py does), or
    with `moves_int` int32 too (a kernel that only selects or copies it). Else why not."""
    reason = _broadcast_reason(tuple(operand.shape), tuple(out.shape))
    if reason is None and not operand.is_const and \
            operand.dtype not in ((_F32, _BOOL, _I32) if moves_int else (_F32, _BOOL)):
        return f"runtime operand {operand.index} is {operand.dtype}"
    return reason


@functools.lru_cache(maxsize=4096)
def _broadcast_reason(shape, out_shape):
    """operand_reason's shape check of an operand of `shape` against an output of `out_shape`
    (cached: a graph holds few distinct pairs, and the support checks and rewrite rules ask it
    several times per node)."""
    if len(shape) > len(out_shape):
        return f"operand {list(shape)} has a higher rank than the output {list(out_shape)}"
    aligned = (1,) * (len(out_shape) - len(shape)) + shape
    s4, o4 = bhwc(aligned), bhwc(out_shape)
    if any(d not in (1, o) for d, o in zip((s4.b, s4.h, s4.w, s4.c), (o4.b, o4.h, o4.w, o4.c))):
        if all(d in (1, o) for d, o in zip(aligned, out_shape)):  # numpy broadcasts it, the view does not
            return (f"operand {list(shape)} broadcasts along some but not all of the dims that the "
                    f"rank-{len(out_shape)} view of {list(out_shape)} merges into its batch")
        return f"operand shape {list(shape)} does not broadcast to {list(out_shape)}"
    return None


def same_layout(tensor, out):
    """True when `tensor` is read at exactly the element index of `out` being written."""
    return _same_layout(tuple(tensor.shape), tuple(out.shape))


@functools.lru_cache(maxsize=4096)
def _same_layout(shape, out_shape):
    return bhwc((1,) * (len(out_shape) - len(shape)) + shape) == bhwc(out_shape) == bhwc(shape)


class Source(NamedTuple):  # a tuple: made for every operand of every dispatch, a frozen dataclass took 3x as long
    """Where a kernel reads a tensor broadcast over its output (epilogue.glsl's ep_fetch): kind
    SRC_CONST or SRC_ARENA at `offset`; size: the broadcast view (w, h, slices, batch); plane:
    0, or for a runtime tensor stored in a layout of its own (bhwc of its shape, not the view:
    [N, C] is stored Nx1x1xC but broadcasts against rank 3 as 1x1xNxC) its stored H x W. Both
    layouts hold the same row-major pixels, so the pixel's row-major index in the view finds it."""
    kind: int
    offset: object
    size: tuple
    scalar_c: bool
    plane: int = 0

    def put(self, name, defines, params):
        """Pass this source to a template as `name`: into `defines` NAME_SRC, NAME_SCALAR_C,
        NAME_PLANE (the param name_plane, or 0 so the compiler folds the branch), into `params`
        name_offset, name_size[, name_plane]."""
        src, scalar_c, plane_define, offset, size, plane = _field_names(name)
        defines[src], defines[scalar_c] = self.kind, int(self.scalar_c)
        defines[plane_define] = plane if self.plane else 0
        params[offset], params[size] = self.offset, tuple(self.size)
        if self.plane:
            params[plane] = self.plane


@functools.lru_cache(maxsize=None)
def _field_names(name):
    """The define and param names of Source.put(name), made once per name (a few names, asked
    for every dispatch)."""
    upper = name.upper()
    return (f"{upper}_SRC", f"{upper}_SCALAR_C", f"{upper}_PLANE", f"{name}_offset", f"{name}_size",
            f"{name}_plane")


def tensor_source(x, out, env):
    """The Source that reads tensor `x` broadcast over `out`: a constant is packed in its
    broadcast layout, a runtime tensor read where it is stored."""
    view, size, scalar_c, plane = _source_geometry(tuple(x.shape), tuple(out.shape))
    if x.is_const:
        return Source(SRC_CONST, env.packed(x, view), size, scalar_c)
    return Source(SRC_ARENA, env.arena(x), size, scalar_c, plane)


@functools.lru_cache(maxsize=4096)
def _source_geometry(shape, out_shape):
    """(the broadcast view (a Shape4), its (w, h, slices, batch), whether one channel is read for
    all, the stored plane of a runtime tensor stored in another layout or 0) of tensor_source,
    from the shapes alone (cached: asked for every operand of every dispatch)."""
    view, o4 = bhwc((1,) * (len(out_shape) - len(shape)) + shape), bhwc(out_shape)
    stored = bhwc(shape)
    return view, view.as_ivec4(), view.c == 1 and o4.c > 1, stored.h * stored.w if stored != view else 0


def operands_reason(operands, out, moves_int=False):
    """The first operand_reason of `operands` (Tensors read at each position of `out`), or None."""
    return next((r for r in (operand_reason(t, out, moves_int) for t in operands) if r), None)


def sources(tensors, names, out, env):
    """(defines, params) passing each of `tensors`, read broadcast over `out`, to a template under
    its name in `names` (Source.put)."""
    defines, params = {}, {}
    for name, tensor in zip(names, tensors):
        tensor_source(tensor, out, env).put(name, defines, params)
    return defines, params


def _operand(step, out, env):
    """(Source, value) of a step's operand; value: the scalar of SRC_SCALAR."""
    x = step.operand
    if x is None:
        return _NO_SOURCE, 0.0
    if isinstance(x, float):
        return _SCALAR_SOURCE, x
    if x.is_const and x.size == 1 and x.dtype != _I32:  # a scalar constant needs no memory read (an int's bits: no float param)
        return _SCALAR_SOURCE, float(np.asarray(x.data, np.float32).reshape(-1)[0])
    return tensor_source(x, out, env), 0.0


_NO_SOURCE = Source(SRC_NONE, 0, (1, 1, 1, 1), False)
_SCALAR_SOURCE = Source(SRC_SCALAR, 0, (1, 1, 1, 1), False)


# Per step k: its Source.put name and its define and param names (made once, not per dispatch).
_STEP_NAMES = [(f"ep{k}", f"EP{k}_OP", f"EP{k}_SWAP", f"EP{k}_STORED", f"EP{k}_ZERO_C", f"ep{k}_value")
               for k in range(MAX_STEPS)]


def specialize(steps, out, env, defines, params):
    """Add to `defines` and `params` what epilogue.glsl needs to apply `steps` to values of
    `out`; returns the runtime operands the steps read."""
    if len(steps) > MAX_STEPS:
        raise ValueError(f"{len(steps)} epilogue steps, the template holds {MAX_STEPS}")
    defines["EP_COUNT"] = len(steps)
    reads = []
    for k, step in enumerate(steps):
        source, value = _operand(step, out, env)
        name, op, swap, stored, zero_c, value_name = _STEP_NAMES[k]
        defines[op] = UNARY_CODES[step.op] if step.op in UNARY_CODES else BINARY_BASE + BINARY_CODES[step.op]
        defines[swap], defines[stored], defines[zero_c] = int(step.swap), int(step.stored), int(step.padded_c)
        source.put(name, defines, params)
        params[value_name] = float(value)
        if source.kind == SRC_ARENA and all(step.operand is not r for r in reads):
            reads.append(step.operand)
    return reads


def apply(node, env, out, defines, params, reads, own_steps=()):
    """Add the epilogue of `node` (after `own_steps`, the kernel's own elementwise work) to a
    dispatch's defines and params; returns (reads plus the epilogue's runtime operands, the
    operands the output may overwrite in place: read at the very index written)."""
    operands = specialize(tuple(own_steps) + steps_of(node), out, env, defines, params)
    if not operands:  # constant and scalar operands only (most steps)
        return tuple(reads), ()
    inplace = tuple(t for t in operands if same_layout(t, out) and all(t is not r for r in reads))
    return tuple(reads) + tuple(t for t in operands if all(t is not r for r in reads)), inplace
