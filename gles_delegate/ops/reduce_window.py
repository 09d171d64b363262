"""Window reductions: STABLEHLO_REDUCE_WINDOW (as litert-torch writes avg_pool2d with ceil_mode or
count_include_pad=False, local_response_norm, and what no TFLite pool expresses) and the deprecated
REDUCE_WINDOW, with LiteRT's semantics (stablehlo_reduce_window.cc).

The input is dilated (base_dilations - 1 init values between neighbours), padded with init values
(a negative padding crops), and each output is init combined with the window's elements one after
the other in row-major order, acc = op(acc, x), in the input's type: a float sum rounds as
LiteRT's, integers wrap, max is `acc >= x ? acc : x` (so a NaN wins only where it comes last) and
min `acc <= x ? acc : x`. LiteRT's kernel does not run the body subgraph: it reads the op code of
its one kernel (ADD, MUL, MAXIMUM, MINIMUM, LOGICAL_AND, LOGICAL_OR or their StableHLO twins);
Graph.from_model resolves it into options[graph.BODY_OP]. The deprecated REDUCE_WINDOW takes the
window, strides and window dilations as constant int64 inputs and its op from reduce_function,
with no base dilation and no padding.
"""
import functools
from dataclasses import dataclass

import numpy as np

from ..graph import BODY_OP
from .checks import Unimplemented, arity_reason, dtype_reason, node_error

# The body's op code (graph.BODY_OP) -> the reduction.
REDUCERS = {"ADD": "add", "STABLEHLO_ADD": "add", "MUL": "mul", "STABLEHLO_MULTIPLY": "mul",
            "MAXIMUM": "max", "STABLEHLO_MAXIMUM": "max", "MINIMUM": "min", "STABLEHLO_MINIMUM": "min",
            "LOGICAL_AND": "all", "STABLEHLO_AND": "all", "LOGICAL_OR": "any", "STABLEHLO_OR": "any"}
# REDUCE_WINDOW's options.reduce_function (the schema's ReduceWindowFunction) -> the reduction.
FUNCTIONS = {1: "add", 2: "mul", 3: "min", 4: "max", 5: "all", 6: "any"}
# acc = op(acc, x) as LiteRT's functors compute it (std::plus, std::multiplies, its Max / Min,
# std::logical_and / logical_or, whose bool converts back to the element type).
COMBINE = {"add": lambda acc, x: acc + x, "mul": lambda acc, x: acc * x,
           "max": lambda acc, x: np.where(acc >= x, acc, x), "min": lambda acc, x: np.where(acc <= x, acc, x),
           "all": lambda acc, x: np.logical_and(acc, x).astype(acc.dtype),
           "any": lambda acc, x: np.logical_or(acc, x).astype(acc.dtype)}
DTYPES = {np.dtype(t) for t in (np.float32, np.int32, np.int64, np.int16, np.int8, np.uint8, np.bool_)}
MAX_RANK = 6  # LiteRT's kMaxReduceWindowRank
# The reference loops over the window's taps in Python (each a numpy pass over the outputs): a
# window of more taps goes to LiteRT's kernel (cpu_backend 'auto'), or is refused without it.
MAX_TAPS = 1 << 20
INT32_MAX = (1 << 31) - 1


@dataclass(frozen=True)
class Geometry:
    """Per dimension: window size, stride, base and window dilations, padding before (negative:
    cropped) and after, the dilated input's size, and the output's size."""
    window: tuple
    strides: tuple
    base_dilations: tuple
    window_dilations: tuple
    pad_before: tuple
    pad_after: tuple
    dilated: tuple
    out_shape: tuple

    @property
    def taps(self):
        return int(np.prod(self.window, dtype=object))


def reducer(node):
    """The reduction of a window node ('add', 'mul', 'max', 'min', 'all', 'any'), or None."""
    if node.op == "REDUCE_WINDOW":
        return FUNCTIONS.get(node.options.get("reduce_function"))
    return REDUCERS.get(node.options.get(BODY_OP))


def _attributes(node, values):
    """(window, strides, base dilations, window dilations, padding pairs) as int lists; `values`
    the node's input values (REDUCE_WINDOW's constant inputs 2-4)."""
    if node.op == "REDUCE_WINDOW":
        window, strides, dilations = ([int(v) for v in np.asarray(values[k]).reshape(-1)] for k in (2, 3, 4))
        rank = len(window)
        return window, strides, [1] * rank, dilations, [0] * (2 * rank)
    options = node.options
    return tuple([int(v) for v in options.get(name, ())] for name in
                 ("window_dimensions", "window_strides", "base_dilations", "window_dilations", "padding"))


def geometry_reason(node, in_shape, values):
    """(Geometry, None), or (None, why the node's window attributes do not fit an input of
    `in_shape`): one value per dimension (two of padding), all but the padding positive."""
    rank = len(in_shape)
    window, strides, base, dilations, padding = _attributes(node, values)
    if not 1 <= rank <= MAX_RANK:
        return None, f"input rank {rank} is outside [1, {MAX_RANK}]"
    for name, attribute, count in (("window_dimensions", window, rank), ("window_strides", strides, rank),
                                   ("base_dilations", base, rank), ("window_dilations", dilations, rank),
                                   ("padding", padding, 2 * rank)):
        if len(attribute) != count:
            return None, f"{name} holds {len(attribute)} values, the input's rank {rank} needs {count}"
        if name != "padding" and min(attribute) < 1:
            return None, f"{name} {attribute} must all be positive"
    if min(in_shape) < 1:
        return None, f"an empty input {list(in_shape)}"
    dilated = tuple((n - 1) * d + 1 for n, d in zip(in_shape, base))
    padded = [n + padding[2 * k] + padding[2 * k + 1] for k, n in enumerate(dilated)]
    if min(padded) < 1:
        return None, f"padding {padding} leaves an empty tensor of {padded}"
    spans = [(w - 1) * d + 1 for w, d in zip(window, dilations)]
    if max(*dilated, *padded, *spans) > INT32_MAX:
        # LiteRT's kernel computes these as CheckedInt<int32_t> and fails its Prepare past them.
        return None, f"the dilated, padded or window sizes {dilated}, {padded}, {spans} overflow int32"
    out_shape = tuple(0 if p < s else (p - s) // stride + 1 for p, s, stride in zip(padded, spans, strides))
    return Geometry(tuple(window), tuple(strides), tuple(base), tuple(dilations), tuple(padding[0::2]),
                    tuple(padding[1::2]), dilated, out_shape), None


def _support(node):
    n_inputs = 5 if node.op == "REDUCE_WINDOW" else 2
    reason = arity_reason(node, n_inputs, 1)
    if reason:
        return reason
    x, init, out = node.inputs[0], node.inputs[1], node.outputs[0]
    if node.op == "REDUCE_WINDOW" and any(not t.is_const or t.dtype != np.int64 for t in node.inputs[2:]):
        return "the window shape, strides and dilations (inputs 2-4) must be constant int64 tensors"
    if reducer(node) is None:
        what = f"reduce_function {node.options.get('reduce_function')}" if node.op == "REDUCE_WINDOW" \
            else f"a body subgraph of {node.options.get(BODY_OP) or 'anything but one binary op'}"
        return Unimplemented(f"{what}: LiteRT's kernel reduces with ADD, MUL, MAXIMUM, MINIMUM, LOGICAL_AND "
                             f"or LOGICAL_OR")
    if x.dtype == np.bool_ and reducer(node) in ("add", "mul"):
        return Unimplemented("a bool window reduced by ADD or MUL (LiteRT adds bools as int8)")
    if init.dtype != x.dtype or out.dtype != x.dtype:
        return f"input {x.dtype}, init value {init.dtype} and output {out.dtype} must share a type"
    if init.size != 1:
        return f"the init value (tensor {init.index}) must hold one value, it has shape {list(init.shape)}"
    values = [t.data for t in node.inputs]
    geometry, reason = geometry_reason(node, x.shape, values)
    if reason is None and geometry.taps > MAX_TAPS:
        return Unimplemented(f"a window of {geometry.taps} taps (the reference loops over at most {MAX_TAPS})")
    return reason or dtype_reason(node, x, DTYPES, "input")


def positions(geometry, dim, tap):
    """For every output index along `dim` at window tap `tap`: (the input index, whether the tap
    reads the input rather than an init value of the dilation or the padding)."""
    p = np.arange(geometry.out_shape[dim]) * geometry.strides[dim] + tap * geometry.window_dilations[dim] \
        - geometry.pad_before[dim]
    base = geometry.base_dilations[dim]
    reads = (p >= 0) & (p < geometry.dilated[dim]) & (p % base == 0)
    return np.where(reads, p // base, 0), reads


def _axis_shape(rank, dim):
    return (1,) * dim + (-1,) + (1,) * (rank - dim - 1)


def reduce_window(node, inputs):
    """[STABLEHLO_]REDUCE_WINDOW: x [...] (rank 1-6), init [] -> [out_shape], each output init
    combined with its window's elements in row-major order (see the module docstring)."""
    x, init = inputs[0], np.asarray(inputs[1]).reshape(())
    geometry, reason = geometry_reason(node, x.shape, inputs)
    if reason is not None:
        raise node_error(node, reason)
    combine = COMBINE[reducer(node)]
    acc = np.full(geometry.out_shape, init, x.dtype)
    if acc.size == 0:
        return [acc]
    with np.errstate(all="ignore"):  # wrapping integers, inf - inf: as in C++
        for taps in np.ndindex(*geometry.window):
            indices, reads = zip(*(positions(geometry, d, t) for d, t in enumerate(taps)))
            # np.ix_ would take boolean vectors for masks: each is given its own axis by hand.
            inside = functools.reduce(np.logical_and,
                                      (r.reshape(_axis_shape(len(reads), d)) for d, r in enumerate(reads)))
            acc = combine(acc, np.where(inside, x[np.ix_(*indices)], init)).astype(x.dtype)
    return [acc]


def _shapes(node, shapes, values):
    if node.op == "REDUCE_WINDOW" and any(v is None for v in values[2:5]):
        return None
    geometry, reason = geometry_reason(node, shapes[0], values)
    return None if reason else [geometry.out_shape]


OPS = ("STABLEHLO_REDUCE_WINDOW", "REDUCE_WINDOW")
KERNELS = {op: reduce_window for op in OPS}
SUPPORT = {op: _support for op in OPS}
OUTPUT_SHAPES = {op: _shapes for op in OPS}
