"""Reductions (SUM, MEAN, REDUCE_MAX, REDUCE_MIN, REDUCE_PROD; REDUCE_ALL and REDUCE_ANY of bool
tensors, stored as 0.0 / 1.0: a minimum and a maximum) over constant axes:
kernels_glsl/reduce.glsl. Also runs global pooling (pool.py).

Axes are mapped onto the input's BHWC view. Three variants of the template: one invocation per
output vec4 (short reductions), one workgroup per output (long reductions with few outputs, e.g. a
global mean over a large H x W), and a gather when the output's PHWC4 layout is not the input's
with the reduced axes set to 1 (channels reduced, or dims dropped by keep_dims=false).
A reduction may also add a second tensor of the input's shape to each element it loads
(INPUT_ADDEND, rule fuse_add_into_reduce): it then reduces the ADD of the two; square each element
it loads (INPUT_SQUARED, rule square_into_reduce), after the addend: it then reduces the square;
and apply epilogue steps to its result (epilogue.py), but where the output's layout is not the
keep-dims one (the gather variant).
"""
import numpy as np

from ...graph import INPUT_ADDEND_KEY
from ...ops import reduce as reference
from ...registry import BINARY, OpFacts
from ..phwc4 import BHWC_AXES, Shape4, bhwc
from . import epilogue
from .base import Dispatch

OP_CODES = {"SUM": 0, "MEAN": 1, "REDUCE_MAX": 2, "REDUCE_MIN": 3, "REDUCE_PROD": 4}
# The template's ops: also MAX_POOL_2D (pool.py's global pools), a max that skips NaN as TFLite's
# max pooling does, where REDUCE_MAX / MIN give what LiteRT's row-major scan gives (SCANNED).
TEMPLATE_CODES = {**OP_CODES, "MAX_POOL_2D": OP_CODES["REDUCE_MAX"]}
# Reductions of bool tensors (0.0 / 1.0, base.py): all is the minimum, any the maximum.
BOOL_CODES = {"REDUCE_ALL": OP_CODES["REDUCE_MIN"], "REDUCE_ANY": OP_CODES["REDUCE_MAX"]}
TEMPLATE_CODES.update(BOOL_CODES)
SCANNED_OPS = ("REDUCE_MAX", "REDUCE_MIN")
# node.options[INPUT_ADDEND] = a runtime tensor of the input's shape added to each input element
# as it is loaded (the ADD that computed the input, fused in).
INPUT_ADDEND = INPUT_ADDEND_KEY
# node.options[INPUT_SQUARED] = True: each element is squared as it is loaded (the MUL of a
# tensor by itself that computed the input, fused in; in highp, unlike a stored square, which
# would round to the storage precision and overflow half's 65504 at 256).
INPUT_SQUARED = "input_squared"
# A workgroup reduces one output when the reduction is at least this long (in vec4 elements) and
# there are few enough outputs that one invocation each would not fill the GPU anyway. On an H200
# a workgroup per output is already faster for a 7x7 mean over 1280 channels (49 elements, 320
# outputs), and about 50x faster for a 72x128 mean over 16 channels.
PARALLEL_MIN_ELEMENTS = 16
PARALLEL_MAX_OUTPUTS = 8192
# Reductions in which the zeros of padded channels would count.
MASKED_OPS = ("REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD", "REDUCE_ALL")
# The invocations (x, y) that share one output in the parallel variant: one workgroup (the
# template stays correct for any other, the workgroup clamped to small devices included).
PARALLEL_LANES = (16, 8)


def _axes(node):
    """The reduced axes as given (int list), or a reason string."""
    x, axes = node.inputs[:2]
    if not axes.is_const:
        return f"axes tensor {axes.index} is computed at run time"
    values = np.asarray(axes.data).reshape(-1)
    if values.dtype.kind not in "iu":
        return f"axes tensor {axes.index} is {values.dtype}, expected integers"
    rank = len(x.shape)
    if any(not -rank <= int(a) < rank for a in values):
        return f"axes {values.tolist()} out of range for rank {rank}"
    return [int(a) % rank for a in values]


def reduced_axes(node):
    """The reduced axes of a reduction node (constant, in range: non-negative ints), or a reason
    string; the output shape they imply checked too."""
    axes = _axes(node)
    if isinstance(axes, str):
        return axes
    x, out = node.inputs[0], node.outputs[0]
    keep = [1 if a in axes else d for a, d in enumerate(x.shape)]
    expected = keep if node.options.get("keep_dims", False) else \
        [d for a, d in enumerate(x.shape) if a not in axes]
    if list(out.shape) != expected:
        return f"output shape {list(out.shape)}, expected {expected}"
    return axes


def supports(node):
    """The reference kernel's checks (arity, dtypes), constant axes in range, and the output shape
    they imply; int32 inputs are integer.py's. At rank 5 / 6 the axes must be axes of the view."""
    reason = reference.SUPPORT[node.op](node)
    if reason:
        return reason
    if node.inputs[0].dtype == np.int32:
        return "an int32 reduction (the integer kernel's)"
    axes = reduced_axes(node)
    return axes if isinstance(axes, str) else _merged_reason(node.inputs[0].shape, axes)


def _merged_reason(shape, axes):
    """Why reducing `axes` of `shape` (rank 5 / 6: its leading dims merged into B) is no reduction
    of its BHWC view, or None: the merged dims of more than one element must be all reduced or
    all kept (a 3D net's global pool over D, H, W of [1, D, H, W, C] reduces the whole B)."""
    rank = len(shape)
    merged = [k for k in range(rank) if BHWC_AXES[rank][k] == 0 and shape[k] > 1] if rank > 4 else []
    if len({k in axes for k in merged}) > 1:
        return (f"axes {sorted(axes)} reduce part of dims {merged} of {list(shape)}, which its rank-{rank} view "
                "merges into one batch axis")
    return None


def _same_layout(a, b):
    """True when Shape4 a and b (same element count) have identical PHWC4 layouts: the same
    channels, and with more than one slice the same batch and the same H x W."""
    return a.c == b.c and (a.slices == 1 or (a.b == b.b and a.h * a.w == b.h * b.w))


def _runs(in4, axes4):
    """The reduced PHWC4 elements as at most two runs [(count, stride)]: memory order is w, h,
    slices, batch (strides 1, W, H W, S H W); neighbouring reduced axes merge, size-1 axes are
    skipped, and a kept axis between two reduced ones splits them."""
    axes = [(in4.w, 1, 2), (in4.h, in4.w, 1), (in4.slices, in4.h * in4.w, 3),
            (in4.b, in4.slices * in4.h * in4.w, 0)]
    runs, in_run = [], False
    for size, stride, axis in axes:
        if size == 1:
            continue
        if axis in axes4 and in_run:
            runs[-1] = (runs[-1][0] * size, runs[-1][1])
        elif axis in axes4:
            runs.append((size, stride))
        in_run = axis in axes4
    return runs or [(1, 1)]


def _keep(x, axes4):
    """The keep-dims Shape4 of reducing x over BHWC axes `axes4`."""
    in4 = bhwc(x.shape)
    return Shape4(*(1 if a in axes4 else d for a, d in enumerate((in4.b, in4.h, in4.w, in4.c))))


def reduction(x, out, axes4, op, env, node, stage=None):
    """Dispatches of `node` reducing x over BHWC axes `axes4` (a set of 0 b, 1 h, 2 w, 3 c) into
    out, applying the node's epilogue steps.

    op: a key of TEMPLATE_CODES; stage: the output stage of a pooling node run as a reduction
    (KernelEnv.output_stage), None for a reduction op (it has no fused activation). The node's
    INPUT_ADDEND (a tensor of x's shape added to x element by element) and INPUT_SQUARED apply
    before the reduction."""
    in4, out4 = bhwc(x.shape), bhwc(out.shape)
    dims = (in4.b, in4.h, in4.w, in4.c)
    keep = _keep(x, axes4)
    addend = node.options.get(INPUT_ADDEND)
    runs = _runs(in4, axes4)
    (count, stride), (outer_count, outer_stride) = runs[0], runs[1] if len(runs) == 2 else (1, 0)
    elements = count * outer_count
    params = {"in_size": in4.as_ivec4(), "in_channels": in4.c, "run": (count, stride, outer_stride),
              "elements": elements, "k_size": keep.as_ivec4(), "out_channels": out4.c,
              "in_offset": env.arena(x), "out_offset": env.arena(out)}
    if op == "MEAN":
        params["values"] = int(np.prod([d for a, d in enumerate(dims) if a in axes4]))
    gather = not _same_layout(keep, out4)
    outputs = keep.elements
    parallel = not gather and elements >= PARALLEL_MIN_ELEMENTS and outputs <= PARALLEL_MAX_OUTPUTS
    reduce_c = 3 in axes4
    defines = {"OP": TEMPLATE_CODES[op], **(stage or {}), "RUNS": len(runs), "REDUCE_C": int(reduce_c),
               "SCANNED": int(op in SCANNED_OPS),
               "MASK_C": int(reduce_c and in4.c % 4 != 0 and op in MASKED_OPS),
               "PARALLEL": int(parallel), "GATHER": int(gather), "ADDEND": int(addend is not None),
               "SQUARED": int(bool(node.options.get(INPUT_SQUARED)))}
    if addend is not None:
        params["addend_offset"] = env.arena(addend)
    if gather:
        params.update(out_size=out4.as_ivec4(), k_channels=keep.c)
        grid = (out4.w, out4.h, out4.slices * out4.b)
    elif parallel:
        grid = PARALLEL_LANES + (outputs,)
    else:
        grid = (keep.w, keep.h, keep.slices * keep.b)
    # The parallel variant's lanes share one output through shared memory: one workgroup of them.
    workgroup = PARALLEL_LANES + (1,) if parallel else None
    reads, inplace = epilogue.apply(node, env, out, defines, params, (x,) if addend is None else (x, addend))
    return [Dispatch("reduce", grid, defines, params, reads=reads, writes=(out,), workgroup=workgroup,
                     inplace=inplace)]


def _axes4(node):
    """The reduced BHWC axes. At rank 5 / 6 a reduced dim of one element is left out: it may
    share B with kept dims (_merged_reason), and reducing it changes nothing."""
    shape = node.inputs[0].shape
    return {BHWC_AXES[len(shape)][a] for a in _axes(node) if len(shape) <= 4 or shape[a] > 1}


def build(node, env):
    """The reduce.glsl Dispatch of a reduction node over its constant axes (see reduction)."""
    return reduction(node.inputs[0], node.outputs[0], _axes4(node), node.op, env, node)


def epilogue_reason(node):
    """Why the node's kernel applies no epilogue steps, or None. The steps read their operands
    at the keep-dims position of each result, which must be the output's own position: not in
    the gather variant (the output's layout is not the keep-dims one), nor where dropped dims
    give the output other coordinates over the same memory ([1, 8, 1, 5] summed over its
    channels to [1, 8, 1]: gles-fuzz-graphs seed 56 case 465)."""
    if supports(node) is not None:
        return "its reduction does not run on the GPU"
    if _keep(node.inputs[0], _axes4(node)) != bhwc(node.outputs[0].shape):
        return "its output's coordinates are not the reduced input's (a gather, or dims dropped), which apply no epilogue"
    return None


SUPPORT = {op: supports for op in (*OP_CODES, *BOOL_CODES)}
BUILD = {op: build for op in (*OP_CODES, *BOOL_CODES)}
EPILOGUE = {op: epilogue_reason for op in OP_CODES}  # a bool result takes no float epilogue
FACTS = {**{op: OpFacts(arity=BINARY, integer_move=op in ("REDUCE_MAX", "REDUCE_MIN")) for op in OP_CODES},
         **{op: OpFacts(arity=BINARY) for op in BOOL_CODES}}  # x, axes
HIGH_RANK = {op: None for op in (*OP_CODES, *BOOL_CODES)}  # where the axes are the view's (_merged_reason)
FLOAT_VIEW = {op: None for op in BOOL_CODES}  # bool tensors, as 0.0 / 1.0 (the reference checks the dtype)
