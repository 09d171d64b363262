"""Layout ops: every op that only moves values runs kernels_glsl/layout_map.glsl, specialized by a
Gather (how one output box maps to its source).

The map sends an output coordinate to the source's row-major index (base + sum of digit *
stride), then unravels it by the source's shape. Ops whose map is affine per output axis
(RESHAPE, SQUEEZE, EXPAND_DIMS, TRANSPOSE, SLICE, STRIDED_SLICE, SPLIT, SPLIT_V, UNPACK, GATHER,
REVERSE_V2, BROADCAST_TO) read it off the reference kernel run on an iota: output element i holds
the source index it copies (a broadcast dim steps 0), so the masks and conventions of these ops
live in one place (ops/layout.py, ops/generate.py). PAD / PADV2 / MIRROR_PAD / TILE add an edge
rule, DEPTH_TO_SPACE / SPACE_TO_DEPTH / BATCH_TO_SPACE_ND split axes into digits, CONCATENATION
and PACK run one dispatch per input on its box of the output, and SPACE_TO_BATCH_ND one per
position within a block on its box of batches.

Ranks 5 and 6 (HIGH_RANK): the view merges the leading dims into B (phwc4.py), whose coordinate
the map splits back into one digit per merged dim (up to the template's 3), so every op whose map
is affine per dim runs at any rank; a box along a merged dim (CONCATENATION, a GATHER's runs)
exists only where the dims merged outside it are 1 (phwc4.merged_dim_reason).
"""
from dataclasses import dataclass

import numpy as np

from ... import ops
from ...graph import READ_THROUGH_KEY
from ...ops.common import ACT_TANH
from ...registry import BINARY, UNARY, OpFacts
from ..phwc4 import BHWC_AXES, bhwc, dims_in_box, merged_dim_reason, to_phwc4
from . import epilogue
from .base import Dispatch, stored_values

MOVED_DTYPES = (np.dtype(np.float32), np.dtype(np.bool_), np.dtype(np.int32))

EDGE_NONE, EDGE_CONSTANT, EDGE_WRAP, EDGE_MIRROR = range(4)
# options[ALIAS] (rule alias_reshape): a reshape whose output is its input's storage; no dispatch.
ALIAS = "alias_input"
# options[READ_THROUGH] (rule read_through_layout): ((input tensor, tensor read in its place,
# through), ...) for each input whose producer, a layout op, was removed: `through` holds, per
# element of the input in row-major order, the row-major index of the source element it was
# copied from (None: the same index, as a reshape keeps), so the node's own map composed with
# it reads the source directly (the stored tensor's shape unravels the index).
READ_THROUGH = READ_THROUGH_KEY  # graph.fused_reads counts the sources among what the node reads
# options[VIEW_OUTPUTS] (rule slice_views): ((output position, vec4 offset), ...) of the outputs
# that are a block of the input's storage (phwc4.block_offset): no dispatch, KernelEnv.view.
VIEW_OUTPUTS = "view_outputs"
# options[IN_PLACE_INPUTS] (rule concat_in_place): ((input position, vec4 offset), ...) of a
# CONCATENATION's or PACK's inputs that are a block of the output's storage, written there by
# their producers: no dispatch, KernelEnv.view.
IN_PLACE_INPUTS = "in_place_inputs"
# options[PRODUCER_STORES] (rule concat_stored_by_producers): input positions of a CONCATENATION
# whose producers also store them into their box of the output (pointwise.PLACED): no dispatch.
PRODUCER_STORES = "producer_stores"
# options[LANE_VIEWS] (rule lane_views): ((output position of a slicing op, or input position of a
# CONCATENATION, vec4 offset, phwc4.Lanes), ...) of the outputs / inputs that are channels of the
# other tensor starting or ending mid-vec4 (phwc4.lane_offset): no dispatch, KernelEnv.view with
# lanes.
LANE_VIEWS = "lane_views"
MIRROR_SYMMETRIC = 1  # MirrorPadOptions.mode
MAX_GATHER_RUNS = 16  # a GATHER costs one dispatch per run of evenly spaced indices
# Which input holds the values (the others are constant shapes, axes, indices).
DATA_INPUT = {"SPLIT": 1}


@dataclass(frozen=True)
class Edge:
    """What an output coordinate outside [lead, lead + extent) of the source reads (BHWC):
    EDGE_CONSTANT: `value`; EDGE_WRAP: the source again (tile); EDGE_MIRROR: its reflection,
    repeating the edge when mirror_shift is 1 (symmetric)."""
    mode: int
    extent: tuple
    value: float = 0.0
    mirror_shift: int = 0


@dataclass(frozen=True)
class Gather:
    """One dispatch of layout_map.glsl: output box [origin, origin + extent) (BHWC; extent None =
    the whole output) reads source[base + sum(digits(o - lead) * strides)], a row-major index.

    axes: per BHWC axis, its digits ((radix, stride), ...) from outer to inner; the outer
    radix is None, and an axis of one digit is not split.
    """
    source: object
    base: int
    axes: tuple
    lead: tuple = (0, 0, 0, 0)
    origin: tuple = (0, 0, 0, 0)
    extent: tuple = None
    edge: Edge = None


# -- shapes -----------------------------------------------------------------------------------
def _place(values, rank, fill=0):
    """Per-dim values of a rank-`rank` tensor as a BHWC 4-tuple, `fill` where it has no dim."""
    out = [fill] * 4
    for slot, value in zip(BHWC_AXES[rank], values):
        out[slot] = int(value)
    return tuple(out)


def _strided_axes(shape, strides, slots=None):
    """Per BHWC axis of the view of `shape`, the digits of a map whose dim k steps strides[k]:
    one digit per dim of more than one element, outer first (an axis of ranks 5, 6 merges several
    dims), adjacent digits that step as one merged, the outer radix None, ((None, 0),) for an
    axis of no such dim. `slots`: the BHWC axis of each dim when `shape` splits the dims of a
    view into digits (_digit_affine), else the view's own."""
    axes = [[] for _ in range(4)]
    for slot, n, stride in zip(BHWC_AXES[len(shape)] if slots is None else slots, shape, strides):
        digits = axes[slot]
        if n == 1:
            continue
        if digits and digits[-1][1] == stride * n:  # the outer digit continues this one
            digits[-1] = (None if digits[-1][0] is None else digits[-1][0] * n, stride)
        else:
            digits.append((n, stride))
    return tuple(((None, digits[0][1]),) + tuple(digits[1:]) if digits else ((None, 0),) for digits in axes)


def _dims(shape):
    s4 = bhwc(shape)
    return (s4.b, s4.h, s4.w, s4.c)


def _dense_axes(shape):
    """The digits of an identity map: a tensor's own row-major strides, one digit per axis."""
    b, h, w, c = _dims(shape)
    return tuple(((None, s),) for s in (h * w * c, w * c, c, 1))


def copy_of(source):
    """The Gather that copies all of `source` into an output of its shape."""
    return Gather(source, 0, _dense_axes(source.shape))


def _entries(node, read_through):
    """The READ_THROUGH entries of `node`, or `read_through` in their place when given."""
    return node.options.get(READ_THROUGH, ()) if read_through is None else read_through


def stored_source(node, tensor, read_through=None):
    """The tensor that holds input `tensor` of layout node `node` (itself, unless a layout op
    was removed in between: READ_THROUGH, or `read_through` in its place)."""
    return next((source for shown, source, _ in _entries(node, read_through) if shown is tensor), tensor)


def _through(node, tensor, read_through=None):
    """The index map through which `node` reads input `tensor` (READ_THROUGH, or `read_through`
    in its place), or None."""
    return next((through for shown, _, through in _entries(node, read_through) if shown is tensor), None)


# -- the dispatch -----------------------------------------------------------------------------
def _vec4(g, src_c, box_c):
    """Whether each 4-aligned run of output channels maps to 4 consecutive channels of one
    source vec4, so the kernel moves whole vec4s. The channel axis (or its inner digit) must
    step through source channels one by one from a 4-aligned start, every other stride must
    keep that start 4-aligned (step whole source rows, or whole vec4s when rows are), a run
    must not cross a row whose length is not a multiple of 4, and the edge rule must treat
    the 4 channels of a run alike."""
    radix, stride = g.axes[3][-1]
    if (stride != 1 and box_c > 1) or (radix is not None and radix % 4) or g.lead[3] % 4:
        return False
    row = 4 if src_c % 4 == 0 else src_c
    others = [s for k, digits in enumerate(g.axes) for _, s in (digits if k < 3 else digits[:-1])]
    if any(s % row for s in others) or g.base % row % 4:
        return False
    span = radix or g.origin[3] + box_c - g.lead[3]  # the channel digit runs over [0, span)
    if g.edge is not None:
        span = min(span, g.edge.extent[3])
    if src_c % 4 and g.base % src_c + span > src_c:
        return False
    return g.edge is None or _edge_keeps_vec4s(g.edge, g.lead[3], box_c, src_c, g.base)


def _edge_keeps_vec4s(edge, lead_c, box_c, src_c, base):
    if lead_c == 0 and edge.extent[3] >= box_c:
        return True  # no padding or tiling along the channels
    if edge.mode == EDGE_CONSTANT:
        # A run straddling the edge reads the source's lanes past it: its zero padding only where
        # the edge is the end of the source's channels (not where a PAD reads through a SLICE of
        # fewer channels than its source: gles-fuzz-graphs, seed 1).
        return edge.extent[3] % 4 == 0 or (edge.value == 0 and base % src_c + edge.extent[3] == src_c)
    return edge.mode == EDGE_WRAP and edge.extent[3] % 4 == 0


def _digits(axes):
    """(outer strides, mid radices, mid strides, inner radices, inner strides) as BHWC tuples,
    an axis of fewer digits padded with radix 1 / stride 0 (digits that are always 0)."""
    padded = [(digits[0],) + ((1, 0),) * (3 - len(digits)) + digits[1:] for digits in axes]
    outer = tuple(d[0][1] for d in padded)
    return (outer, tuple(d[1][0] for d in padded), tuple(d[1][1] for d in padded),
            tuple(d[2][0] for d in padded), tuple(d[2][1] for d in padded))


def gather_dispatch(out, g, env, activation=0, node=None):
    """The layout_map.glsl Dispatch that writes Gather `g`'s box of `out`, applying `node`'s
    epilogue steps (an elementwise op fused into a remap) when given."""
    src, src4, out4 = g.source, bhwc(g.source.shape), bhwc(out.shape)
    (b0, h0, w0, c_lo), (nb, nh, nw, nc) = g.origin, g.extent or _dims(out.shape)
    slices = -(-(c_lo + nc) // 4) - c_lo // 4
    split = any(len(digits) > 1 for digits in g.axes)
    edge = g.edge or Edge(EDGE_NONE, ())
    defines = {"EDGE": edge.mode, "SPLIT": int(split), "VEC4": int(_vec4(g, src4.c, nc)), "MERGE": int(c_lo % 4 != 0),
               "SOURCE_CONST": int(src.is_const), "ACTIVATION": activation}
    outer, mid_radix, mid_stride, inner_radix, inner_stride = _digits(g.axes)
    params = {"out_size": out4.as_ivec4(), "out_offset": env.arena(out), "box_origin": (b0, h0, w0),
              "channel_begin": c_lo, "channel_end": c_lo + nc, "lead": g.lead, "base": g.base, "stride_outer": outer,
              "in_size": src4.as_ivec4(), "in_channels": src4.c}
    if src.is_const:
        data = stored_values(src.data).reshape(src4.b, src4.h, src4.w, src4.c)
        params["in_offset"] = env.constant(to_phwc4(data))
    else:
        params["in_offset"] = env.arena(src)
    if split:
        params.update(radix_mid=mid_radix, stride_mid=mid_stride, radix_inner=inner_radix, stride_inner=inner_stride)
    if edge.mode != EDGE_NONE:
        params["edge_extent"] = edge.extent
    if edge.mode == EDGE_CONSTANT:
        params["pad_value"] = float(edge.value)
    if edge.mode == EDGE_MIRROR:
        params["mirror_shift"] = edge.mirror_shift
    reads = (() if src.is_const else (src,)) + ((out,) if defines["MERGE"] else ())
    if node is None:
        defines["EP_COUNT"], inplace = 0, ()
    else:
        reads, inplace = epilogue.apply(node, env, out, defines, params, reads)
    box = None if g.extent is None else ((b0, b0 + nb), (c_lo // 4, c_lo // 4 + slices), (h0, h0 + nh), (w0, w0 + nw))
    return Dispatch("layout_map", (nw, nh, slices * nb), defines, params, reads=reads, writes=(out,), box=box,
                    inplace=inplace)


# -- what the reference kernel says ----------------------------------------------------------
def _constant_reason(node, data_inputs):
    """Why an input outside `data_inputs` (the values moved) is not a constant, or None."""
    for j, tensor in enumerate(node.inputs):
        if j not in data_inputs and tensor is not None and not tensor.is_const:
            return f"input {j} (tensor {tensor.index}) must be constant"
    return None


def _reference(node, values):
    """(outputs, None) of the reference kernel on `values`, or (None, why the GPU cannot take
    the node): the reference refuses it, or its output shapes are not the declared ones (the
    dispatches are sized by the declared shapes and must never read past their source)."""
    try:
        outputs = ops.run_node(node, values)
    except (ValueError, IndexError) as error:  # ModelError, or numpy refusing a malformed shape
        return None, f"invalid node: {error}"
    for tensor, value in zip(node.outputs, outputs):
        if tuple(value.shape) != tuple(tensor.shape):
            return None, (f"output tensor {tensor.index} is declared {list(tensor.shape)}, "
                          f"the op makes {list(value.shape)}")
    return outputs, None


def _index_maps(node, read_through=None):
    """Per output, the source row-major index each output element copies: the reference kernel
    run on an iota in place of the data input (the other inputs are constants), composed with
    the map of a removed layout op in between (READ_THROUGH, or `read_through` in its place);
    and a reason when the GPU cannot take the node."""
    k = DATA_INPUT.get(node.op, 0)
    values = [None if t is None else t.data for t in node.inputs]
    values[k] = np.arange(node.inputs[k].size, dtype=np.int64).reshape(node.inputs[k].shape)
    maps, reason = _reference(node, values)
    through = _through(node, node.inputs[k], read_through)
    if maps is None or through is None:
        return maps, reason
    return [through[index_map] for index_map in maps], None


def source_map(node):
    """Per element of the one output of REMAP_OPS node `node`, in row-major order, the row-major
    index of the element of its stored source (stored_source) it copies; None when that is the
    element's own index (a reshape)."""
    maps, reason = _index_maps(node)
    if reason:
        raise ValueError(f"{node.label}: {reason}")  # a node the GPU took has a map
    flat = maps[0].reshape(-1)
    return None if np.array_equal(flat, np.arange(flat.size)) else flat


def read_through_reason(node, read_through):
    """Why layout node `node` cannot read its data inputs through `read_through` (READ_THROUGH
    entries) with one gather per output piece (per input of a concatenation), or None."""
    if node.op in DENSE_READS:
        if any(_source_axes(node, x, read_through) is None for x in node.inputs[:DENSE_READS[node.op]]):
            return "the composed index map is not a strided view of the source"
        return None
    if node.op not in REMAP_OPS:
        return f"{node.op} reads its input in row-major order only"
    maps, reason = _index_maps(node, read_through)
    if reason:
        return reason
    for index_map in maps:
        pieces = _pieces(node, index_map, read_through)
        if pieces is None or len(pieces) > MAX_GATHER_RUNS:
            return "the composed index map is not a strided view of the source"
    return None


def _source_axes(node, x, read_through=None, shape=None):
    """(stored source, base, Gather axes) of a read of input `x` of `node` in x's own row-major
    order, through the map of a removed layout op in between (READ_THROUGH, or `read_through`);
    None when that map is no strided view of the source. shape: the dims the read is indexed by
    (x's elements in their order: x.shape with unit dims added, a PACK's box), default x.shape."""
    shape = x.shape if shape is None else shape
    source, through = stored_source(node, x, read_through), _through(node, x, read_through)
    if through is None:
        return source, 0, _dense_axes(shape)
    fit = _strided_fit(through.reshape(shape))
    return None if fit is None else (source, *fit)


def _strided_fit(index_map):
    """(base, Gather axes) of an index map that is a strided view of its source, its dims split
    into digits where need be (_digit_affine), or None."""
    fit = _affine(index_map)
    return (fit[0], _strided_axes(index_map.shape, fit[1])) if fit is not None else _digit_affine(index_map)


def _affine(index_map):
    """(base, per-dim strides) with index_map[i] == base + sum(i * strides), or None."""
    if index_map.ndim == 0:
        return int(index_map), []
    base = int(index_map.flat[0])
    strides = [int(np.take(index_map, 1, axis=k).flat[0]) - base if n > 1 else 0
               for k, n in enumerate(index_map.shape)]
    expected = np.full(index_map.shape, base, np.int64)
    for k, (n, stride) in enumerate(zip(index_map.shape, strides)):
        expected += (np.arange(n) * stride).reshape([n if j == k else 1 for j in range(index_map.ndim)])
    return (base, strides) if np.array_equal(expected, index_map) else None


def _runs(values):
    """[start, stop) ranges that cut `values` into arithmetic progressions, greedily."""
    runs, start = [], 0
    while start < len(values):
        stop = min(start + 2, len(values))
        while stop < len(values) and values[stop] - values[stop - 1] == values[start + 1] - values[start]:
            stop += 1
        runs.append((start, stop))
        start = stop
    return runs


def _radices(line):
    """Radices, outer first, that split the positions of `line` (a 1-D int array) into digits
    over which it is affine (line[i] = base + sum of digit * stride), or None. The inner radix
    is the longest divisor of the length within the first run of even steps that repeats."""
    n = len(line)
    steps = np.diff(line)
    uneven = np.flatnonzero(steps != steps[0]) if n > 2 else ()
    if len(uneven) == 0:
        return [n]  # radix <= uneven[0] + 1 < n below: the outer line has 2 values or more
    for radix in range(int(uneven[0]) + 1, 1, -1):
        if n % radix:
            continue
        blocks = line.reshape(-1, radix)
        if np.array_equal(blocks - blocks[:, :1], np.broadcast_to(line[:radix] - line[0], blocks.shape)):
            outer = _radices(blocks[:, 0])
            if outer is not None:
                return outer + [radix]
    return None


def _digit_affine(index_map):
    """(base, Gather axes) of an index map that is affine once its dims are split into digits
    (a transpose of a reshape of a transpose: ShuffleNet's channel shuffle), or None, also when
    an axis of the view would need more digits than the template has (3)."""
    if index_map.ndim == 0 or index_map.size < 2:
        return None
    digit_shape, slots = [], []
    for dim, (n, slot) in enumerate(zip(index_map.shape, BHWC_AXES[index_map.ndim])):
        line = index_map[tuple(slice(None) if k == dim else 0 for k in range(index_map.ndim))]
        radices = _radices(line.astype(np.int64)) if n > 1 else [1]
        if radices is None:
            return None
        digit_shape += radices
        slots += [slot] * len(radices)
    fit = _affine(index_map.reshape(digit_shape))
    if fit is None:
        return None
    axes = _strided_axes(digit_shape, fit[1], slots)
    return (fit[0], axes) if all(len(digits) <= 3 for digits in axes) else None


def _pieces(node, index_map, read_through=None):
    """The Gathers that write one output, with its index map: one affine box (its dims split
    into digits where need be), or for a GATHER along an axis, one box per run of evenly spaced
    indices. None if neither fits. read_through: READ_THROUGH in place of the node's own."""
    source = stored_source(node, node.inputs[DATA_INPUT.get(node.op, 0)], read_through)
    fit = _strided_fit(index_map)
    if fit is not None:
        return [Gather(source, *fit)]
    indices = _run_indices(node)
    if indices is None or merged_dim_reason(index_map.shape, _gather_axis(node)):
        return None
    axis = _gather_axis(node)
    pieces = []
    for start, stop in _runs(indices.astype(np.int64)):
        piece = np.take(index_map, range(start, stop), axis=axis)
        fit = _affine(piece)
        if fit is None:  # a run read through a removed layout op need not be one affine box
            return None
        base, strides = fit
        origin, extent = dims_in_box(index_map.shape, axis, start, stop)
        pieces.append(Gather(source, base, _strided_axes(piece.shape, strides), lead=origin, origin=origin,
                             extent=extent))
    return pieces


def _run_indices(node):
    """A GATHER's constant indices when _pieces may split them into runs (1-D, batch_dims 0),
    else None."""
    if node.op != "GATHER" or node.options.get("batch_dims", 0) or np.ndim(node.inputs[1].data) != 1:
        return None
    return node.inputs[1].data


def _gather_axis(node):
    """GATHER's axis as a dim of its output (batch_dims 0 and 1-D indices: _pieces' runs)."""
    return node.options.get("axis", 0) % len(node.inputs[0].shape)


def _runs_box_reason(node, index_map):
    """Why the runs of a GATHER's 1-D indices have no box each in the output's view, or None."""
    if _run_indices(node) is None:
        return None
    return merged_dim_reason(index_map.shape, _gather_axis(node))


def _remap_support(node):
    reason = _constant_reason(node, (DATA_INPUT.get(node.op, 0),))
    if reason:
        return reason
    maps, reason = _index_maps(node)
    if reason:
        return reason
    for index_map in maps:
        pieces = _pieces(node, index_map)
        if pieces is None:
            return _runs_box_reason(node, index_map) or "the index map is not a strided view of the input"
        if len(pieces) > MAX_GATHER_RUNS:
            return f"the indices form {len(pieces)} runs (at most {MAX_GATHER_RUNS} dispatches)"
    return None


def _remap(node, env):
    if node.options.get(ALIAS) and same_storage(node.inputs[0], node.outputs[0]):
        env.alias(node.outputs[0], node.inputs[0])
        return []
    views = {k: (offset, None) for k, offset in node.options.get(VIEW_OUTPUTS, ())}
    views.update((k, (offset, lanes)) for k, offset, lanes in node.options.get(LANE_VIEWS, ()))
    for k, (offset, lanes) in views.items():
        env.view(node.outputs[k], stored_source(node, node.inputs[DATA_INPUT.get(node.op, 0)]), offset, lanes)
    return [gather_dispatch(out, g, env, node=node)
            for k, (out, index_map) in enumerate(zip(node.outputs, _index_maps(node)[0])) if k not in views
            for g in _pieces(node, index_map)]


def same_storage(x, out):
    """Whether runtime tensor `x` reshaped to `out` (same elements, row-major order kept) is the
    very same PHWC4 storage: the same channels and, with more than one slice, the same batch and
    H x W (with one slice PHWC4 is just the row-major order of the pixels)."""
    a, b = bhwc(x.shape), bhwc(out.shape)
    return (not x.is_const and x.size == out.size and a.c == b.c
            and (a.slices == 1 or (a.b == b.b and a.h * a.w == b.h * b.w)))


# -- PAD / PADV2 / MIRROR_PAD / TILE ---------------------------------------------------------
def _support(node):
    """PAD, PADV2, MIRROR_PAD, TILE, CONCATENATION, PACK, DEPTH_TO_SPACE, SPACE_TO_DEPTH,
    SPACE_TO_BATCH_ND, BATCH_TO_SPACE_ND: every input but the values moved is constant, and the
    reference accepts the node as declared (paddings in range, divisible depths, matching shapes)."""
    data = range(len(node.inputs)) if node.op in JOINS else (0,)
    activation = node.options.get("fused_activation_function", 0)
    if not 0 <= activation <= ACT_TANH:
        return f"fused activation {activation} is not supported"
    reason = _constant_reason(node, data)
    if reason:
        return reason
    zeros = [None if t is None else t.data if t.is_const else np.zeros(t.shape, np.float32) for t in node.inputs]
    return _reference(node, zeros)[1]


def _pads(node):
    """A PAD's paddings [rank, 2] (before, after per dim)."""
    return np.asarray(node.inputs[1].data).reshape(-1, 2)


def _pad_support(node):
    """_support, and at rank 5 / 6 a padding the view can take: padding a dim merged into the
    batch (a litert-torch Conv3d's explicit PAD of depth) is padding the view's B only where every
    other dim merged with it is 1 (a batch of one)."""
    reason = _support(node)
    shape = node.inputs[0].shape
    if reason or len(shape) <= 4:
        return reason
    merged = [k for k in range(len(shape)) if BHWC_AXES[len(shape)][k] == 0]
    padded = [k for k in merged if _pads(node)[k].any()]
    others = [shape[j] for j in merged if j not in padded[:1]]
    if len(padded) > 1 or (padded and max(others) > 1):
        return (f"it pads dims {padded} of {list(shape)}, which its rank-{len(shape)} view merges into one batch "
                f"axis with dims {others}")
    return None


def _pad(node, env):
    """PAD / PADV2 (constant value, default 0) and MIRROR_PAD (REFLECT or SYMMETRIC). At rank 5 / 6
    at most one dim merged into the batch has padding (_pad_support): the B padding is theirs."""
    x, out = node.inputs[0], node.outputs[0]
    slots = BHWC_AXES[len(x.shape)]
    before = tuple(sum(int(p) for k, p in enumerate(_pads(node)[:, 0]) if slots[k] == slot) for slot in range(4))
    if node.op == "MIRROR_PAD":
        shift = int(node.options.get("mode", 0) == MIRROR_SYMMETRIC)
        edge = Edge(EDGE_MIRROR, _dims(x.shape), mirror_shift=shift)
    else:
        edge = Edge(EDGE_CONSTANT, _dims(x.shape), value=float(_pad_value(node) or 0.0))
    return [gather_dispatch(out, Gather(*_source_axes(node, x), lead=before, edge=edge), env)]


def _pad_value(node):
    """A PAD / PADV2's constant pad value (a number), None for any other op or when omitted."""
    if node.op not in ("PAD", "PADV2") or len(node.inputs) < 3 or node.inputs[2] is None:
        return None
    return np.asarray(node.inputs[2].data).reshape(-1)[0]


def _tile(node, env):
    x = node.inputs[0]
    g = Gather(*_source_axes(node, x), edge=Edge(EDGE_WRAP, _dims(x.shape)))
    return [gather_dispatch(node.outputs[0], g, env)]


# -- CONCATENATION ----------------------------------------------------------------------------
def _concatenation(node, env):
    """One dispatch per input, each writing its box of the output (in input order), except for
    the inputs written in place (IN_PLACE_INPUTS, LANE_VIEWS) and those their producers store
    there (PRODUCER_STORES)."""
    out = node.outputs[0]
    axis = _concatenation_axis(node)
    in_place = {j: (offset, None) for j, offset in node.options.get(IN_PLACE_INPUTS, ())}
    in_place.update((j, (offset, lanes)) for j, offset, lanes in node.options.get(LANE_VIEWS, ()))
    stored = set(node.options.get(PRODUCER_STORES, ()))
    dispatches, offset = [], 0
    for j, x in enumerate(node.inputs):
        if j in in_place:
            env.view(x, out, *in_place[j])
        elif j not in stored:
            origin, extent = dims_in_box(out.shape, axis, offset, offset + x.shape[axis])
            g = Gather(*_source_axes(node, x), lead=origin, origin=origin, extent=extent)
            dispatches.append(gather_dispatch(out, g, env, env.activation(node)))
        offset += x.shape[axis]
    return dispatches


def concatenation_maps(node):
    """Per input of a CONCATENATION or PACK, the row-major index in the output of each of its
    elements (an array of the input's shape)."""
    out = node.outputs[0]
    axis = _concatenation_axis(node)
    iota = np.arange(out.size, dtype=np.int64).reshape(out.shape)
    if node.op == "PACK":
        return [np.take(iota, j, axis=axis) for j in range(len(node.inputs))]
    bounds = np.cumsum([0] + [x.shape[axis] for x in node.inputs])
    return [np.take(iota, range(a, b), axis=axis) for a, b in zip(bounds[:-1], bounds[1:])]


def slice_maps(node):
    """Per output of a SLICE / STRIDED_SLICE / SPLIT / SPLIT_V (any REMAP_OPS node), the
    row-major index in its stored source (stored_source of its data input) of each of its
    elements (an array of the output's shape); None when the GPU cannot take the node."""
    return _index_maps(node)[0]


def _concatenation_axis(node):
    return node.options.get("axis", 0) % len(node.outputs[0].shape)


# -- PACK -------------------------------------------------------------------------------------
def _pack(node, env):
    """One dispatch per input, each writing its slab of the output: the output's box at index j
    of the new axis, which holds input j's elements in their row-major order; none for the
    inputs written in place (IN_PLACE_INPUTS, rule concat_in_place)."""
    out = node.outputs[0]
    axis = _concatenation_axis(node)
    in_place = dict(node.options.get(IN_PLACE_INPUTS, ()))
    dispatches = []
    for j, x in enumerate(node.inputs):
        if j in in_place:
            env.view(x, out, in_place[j], None)
            continue
        origin, extent = dims_in_box(out.shape, axis, j, j + 1)
        slab = tuple(1 if k == axis else n for k, n in enumerate(out.shape))
        g = Gather(*_source_axes(node, x, shape=slab), lead=origin, origin=origin, extent=extent)
        dispatches.append(gather_dispatch(out, g, env))
    return dispatches


def _concatenation_support(node):
    """_support, and a box of the output's view per input (merged_dim_reason); a PACK's too."""
    return _support(node) or merged_dim_reason(node.outputs[0].shape, _concatenation_axis(node))


# -- DEPTH_TO_SPACE / SPACE_TO_DEPTH ----------------------------------------------------------
def _depth_to_space(node, env):
    """out (b, y * k + i, x * k + j, c) = in (b, y, x, (i * k + j) * c_out + c)."""
    x, out = node.inputs[0], node.outputs[0]
    _, h, w, c = x.shape
    k, c_out = node.options["block_size"], out.shape[3]
    axes = (((None, h * w * c),), ((None, w * c), (k, k * c_out)), ((None, c), (k, c_out)), ((None, 1),))
    return [gather_dispatch(out, Gather(stored_source(node, x), 0, axes), env)]


def _space_to_depth(node, env):
    """out (b, y, x, (i * k + j) * c + ch) = in (b, y * k + i, x * k + j, ch)."""
    x, out = node.inputs[0], node.outputs[0]
    _, h, w, c = x.shape
    k = node.options["block_size"]
    axes = (((None, h * w * c),), ((None, k * w * c),), ((None, k * c),), ((None, w * c), (k, c), (c, 1)))
    return [gather_dispatch(out, Gather(stored_source(node, x), 0, axes), env)]


# -- SPACE_TO_BATCH_ND / BATCH_TO_SPACE_ND ---------------------------------------------------
def _row_major_strides(shape):
    return [int(np.prod(shape[k + 1:], dtype=np.int64)) for k in range(len(shape))]


def _place_axes(axes, rank):
    """Per-dim digits of a rank-`rank` tensor as BHWC digits (a dim it lacks: always 0)."""
    out = [((None, 0),)] * 4
    for slot, digits in zip(BHWC_AXES[rank], axes):
        out[slot] = digits
    return tuple(out)


def _block_inputs(node):
    """(block sizes, the paddings' or crops' leading edges) of a constant-parameter node."""
    block = [int(b) for b in np.asarray(node.inputs[1].data).reshape(-1)]
    return block, [int(e) for e in np.asarray(node.inputs[2].data).reshape(-1, 2)[:, 0]]


def _batch_to_space(node, env):
    """out[n, y, x] = in[(i * block_w + j) * N + n, h, w] where y + crop_top = h * block_h + i
    (and x likewise): each spatial axis of the output, shifted by its crop, splits into the
    digits (h, i), i stepping through the input's batches."""
    x, out = node.inputs[0], node.outputs[0]
    block, crops = _block_inputs(node)
    strides, rank, spatial = _row_major_strides(x.shape), len(x.shape), len(block)
    axes = [((None, strides[0]),)]
    for k, size in enumerate(block):
        axes.append(((None, strides[k + 1]), (size, strides[0] * out.shape[0] * int(np.prod(block[k + 1:])))))
    axes += [((None, stride),) for stride in strides[spatial + 1:]]
    lead = _place([0] + [-crop for crop in crops] + [0] * (rank - 1 - spatial), rank)
    return [gather_dispatch(out, Gather(stored_source(node, x), 0, _place_axes(axes, rank), lead=lead), env)]


def _block_offset_rows(offset, size, pad, source_size, out_size):
    """The output rows [first, first + count) of one position `offset` within blocks of `size`
    that read the source (row first * size + offset - pad onward); the others read padding."""
    first = max(0, -(-(pad - offset) // size))
    stop = min(out_size, -(-(source_size + pad - offset) // size))
    return first, max(stop - first, 0)


def _space_to_batch(node, env):
    """out[(i * block_w + j) * N + n, h, w] = padded[n, h * block_h + i, w * block_w + j]: one
    dispatch per position (i, j) within a block, on its N batches of the output, reading the
    source rows in range (a box) and padding (0) elsewhere."""
    x, out = node.inputs[0], node.outputs[0]
    block, pads = _block_inputs(node)
    strides, rank, spatial, batch = _row_major_strides(x.shape), len(x.shape), len(block), x.shape[0]
    axes = _place_axes([((None, strides[0]),)] + [((None, b * s),) for b, s in zip(block, strides[1:])] +
                       [((None, s),) for s in strides[spatial + 1:]], rank)
    inner = list(x.shape[spatial + 1:])
    dispatches = []
    for position in np.ndindex(*block):
        first_batch = int(np.ravel_multi_index(position, block)) * batch
        rows = [_block_offset_rows(*args) for args in zip(position, block, pads, x.shape[1:], out.shape[1:])]
        base = sum((first * size + offset - pad) * stride
                   for (first, _), offset, size, pad, stride in zip(rows, position, block, pads, strides[1:]))
        edge = Edge(EDGE_CONSTANT, _place([batch] + [count for _, count in rows] + inner, rank, fill=1))
        g = Gather(stored_source(node, x), base, axes, edge=edge,
                   lead=_place([first_batch] + [first for first, _ in rows] + [0] * len(inner), rank),
                   origin=_place([first_batch] + [0] * (rank - 1), rank),
                   extent=_place([batch] + list(out.shape[1:]), rank, fill=1))
        dispatches.append(gather_dispatch(out, g, env))
    return dispatches


def _space_to_batch_support(node):
    reason = _support(node)
    blocks = int(np.prod(_block_inputs(node)[0])) if reason is None else 0
    if blocks > MAX_GATHER_RUNS:
        return f"a block of {blocks} positions (one dispatch each, at most {MAX_GATHER_RUNS})"
    return reason


# Ops whose map is read off the reference kernel, and ops whose map is built here.
REMAP_OPS = ("RESHAPE", "SQUEEZE", "EXPAND_DIMS", "TRANSPOSE", "SLICE", "STRIDED_SLICE", "SPLIT", "SPLIT_V",
             "UNPACK", "GATHER", "REVERSE_V2", "BROADCAST_TO")
BUILD_OPS = ("PAD", "PADV2", "MIRROR_PAD", "TILE", "DEPTH_TO_SPACE", "SPACE_TO_DEPTH", "BATCH_TO_SPACE_ND")
JOINS = ("CONCATENATION", "PACK")  # every input moved, each into its box of the output
# Built ops that read their first n inputs in their own row-major order (_source_axes), so they
# read through any removed layout op whose map is a strided view (None: every input).
DENSE_READS = {"CONCATENATION": None, "PAD": 1, "PADV2": 1, "MIRROR_PAD": 1, "TILE": 1}


def _moved_dtype_reason(node):
    """Why the values moved are of a dtype the GPU does not hold exactly, or None: float32,
    bool (0.0 / 1.0) and int32 (its bits: base.py) are moved as they are stored."""
    for tensor in node.outputs:
        if tensor.dtype not in MOVED_DTYPES:
            return f"moving {tensor.dtype} values (tensor {tensor.index}): the GPU moves float32, bool and int32"
    if node.inputs[0].dtype == np.int32 and _pad_value(node) not in (None, 0):
        return "a pad of int32 values with a nonzero pad value (the kernel pads with a float)"
    return None


def _checked(support):
    """A SUPPORT function: the moved values' dtype (_moved_dtype_reason), then `support`."""
    return lambda node: _moved_dtype_reason(node) or support(node)


PADS = ("PAD", "PADV2", "MIRROR_PAD")
SUPPORT = {**{op: _checked(_remap_support) for op in REMAP_OPS}, **{op: _checked(_support) for op in BUILD_OPS},
           **{op: _checked(_pad_support) for op in PADS},
           "SPACE_TO_BATCH_ND": _checked(_space_to_batch_support),
           **{op: _checked(_concatenation_support) for op in JOINS}}
BUILD = {**{op: _remap for op in REMAP_OPS}, "PAD": _pad, "PADV2": _pad, "MIRROR_PAD": _pad, "TILE": _tile,
         "CONCATENATION": _concatenation, "PACK": _pack, "DEPTH_TO_SPACE": _depth_to_space,
         "SPACE_TO_DEPTH": _space_to_depth,
         "SPACE_TO_BATCH_ND": _space_to_batch, "BATCH_TO_SPACE_ND": _batch_to_space}


def _moves(arity, noop_input=0):
    """OpFacts of an op that only moves values: TFLite's quantized kernel copies integers, and
    the op may pass input `noop_input` (the values moved) through unchanged."""
    return OpFacts(arity=arity, integer_move=True, noop_input=noop_input)


def _epilogue_reason(node):
    """Why a remap cannot apply epilogue steps, or None: one output, written by dispatches (not
    an alias of its input, which would skip them). A reshape that could be an alias takes them
    too (rule alias_reshape then keeps it a copy): it may read through a removed layout op by
    then (read_through_layout runs later), and if not, its copy applying an elementwise op costs
    the one dispatch the op would have taken."""
    if len(node.outputs) != 1:
        return f"{node.op} has {len(node.outputs)} outputs"
    if node.options.get(ALIAS):
        return "it is an alias of its input, without a dispatch to apply them (rule alias_reshape)"
    return None


# A remap applies its epilogue as it stores each vec4: the scale MUL of an attention's query lands
# in the gather that lays it out for BATCH_MATMUL.
EPILOGUE = {op: _epilogue_reason for op in REMAP_OPS}
FLOAT_VIEW = {op: None for op in SUPPORT}  # bool masks and int32 values move exactly (_moved_dtype_reason)
# Ranks 5, 6 through the view (module docstring): the ops whose map is read off the reference, and
# CONCATENATION and PACK; the edge rules and block ops index their dims one BHWC axis each.
HIGH_RANK = {op: None for op in REMAP_OPS + JOINS + PADS}
FACTS = {"RESHAPE": _moves(((1, 2), (1,), 1)), "SQUEEZE": _moves(UNARY), "EXPAND_DIMS": _moves(BINARY),
         "TRANSPOSE": _moves(BINARY), "SLICE": _moves(((3,), (), 1)), "STRIDED_SLICE": _moves(((4,), (), 1)),
         "SPLIT": _moves(((2,), (), None), noop_input=1), "SPLIT_V": _moves(((3,), (), None)),
         "UNPACK": _moves(((1,), (), None)), "BROADCAST_TO": _moves(BINARY),
         "GATHER": _moves(BINARY), "PAD": _moves(((2, 3), (2,), 1)), "PADV2": _moves(((2, 3), (2,), 1)),
         "MIRROR_PAD": _moves(BINARY), "TILE": _moves(BINARY), "DEPTH_TO_SPACE": _moves(UNARY),
         "SPACE_TO_DEPTH": _moves(UNARY), "REVERSE_V2": _moves(BINARY), "SPACE_TO_BATCH_ND": _moves(((3,), (), 1)),
         "BATCH_TO_SPACE_ND": _moves(((3,), (), 1)),
         # Any count of inputs (arity_reason's own case); its quantized kernels rescale (quant.GRID_KEEPING).
         "CONCATENATION": OpFacts(fused_activation=True, noop_input=0),
         "PACK": OpFacts(integer_move=True)}  # any count of inputs; TFLite's 8-bit PACK copies one grid
