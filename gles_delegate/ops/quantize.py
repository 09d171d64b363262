"""QUANTIZE, DEQUANTIZE, DENSIFY and the QUANTIZE_AND_DEQUANTIZE pseudo-op: storage conversions.

QUANTIZE, DEQUANTIZE and DENSIFY convert between real, quantized, half and sparse storage;
QUANTIZE_AND_DEQUANTIZE snaps real values to a quantization grid, in the float view of quantized
models (gles_delegate/quant.py).

DEQUANTIZE of float16 weights and DENSIFY of sparse weights are how MediaPipe models store their
constants; fold_constants.py runs these kernels once at allocate time.
"""
import numpy as np

from ..errors import ModelError
from .checks import Malformed, Unimplemented, node_error, quantization_reason, with_arity
from .common import (dequantize, multiply_by_quantized_multiplier, quant_params, quantize, quantized_multiplier,
                     round_half_away, saturate, scale_of, zero_point_of)

F16, F32 = np.dtype(np.float16), np.dtype(np.float32)
INTEGER_QUANTIZED = {np.dtype(t) for t in (np.int8, np.uint8, np.int16)}


# -- QUANTIZE / DEQUANTIZE ------------------------------------------------------------------
def requantize(source, target, values):
    """Integer -> integer QUANTIZE (TFLite's Requantize): (q - zp_in) times the Q31 multiplier
    of scale_in / scale_out, plus zp_out, saturated to the target dtype."""
    multiplier, shift = quantized_multiplier(scale_of(source) / scale_of(target))
    centered = values.astype(np.int64) - zero_point_of(source)
    return saturate(multiply_by_quantized_multiplier(centered, multiplier, shift) + zero_point_of(target),
                    target.dtype)


def requantize_table(source, target):
    """requantize() of every integer of `source`'s 8-bit type, in order from its least: int64
    [256]. The float view looks its integer -> integer QUANTIZE up here (REQUANTIZE_FROM): the
    Q31 multiply rounds twice, so it is not the real value rounded once (one step off for about
    one value in ten), and a steep op downstream (LOGISTIC) would make that step several."""
    info = np.iinfo(source.dtype)
    return requantize(source, target, np.arange(info.min, info.max + 1)).astype(np.int64)


def quantize_op(node, inputs):
    """QUANTIZE: [float32 array] or [int8 / uint8 / int16 array] -> [array of the output dtype].
    From float32 see common.quantize (NaN becomes the zero point, infinities saturate)."""
    x, source, target = np.asarray(inputs[0]), node.inputs[0], node.outputs[0]
    if x.dtype == F32:
        return [quantize(target, x)]
    return [np.asarray(requantize(source, target, x))]


def dequantize_op(node, inputs):
    """DEQUANTIZE: float16 -> float32 exactly; int8 / uint8 / int16 -> scale * (q - zero_point),
    per tensor or per channel along the quantized dimension."""
    x = np.asarray(inputs[0])
    if x.dtype == F16:
        return [x.astype(F32)]
    return [dequantize(node.inputs[0], x)]


def _channel_reason(node, tensor, shape):
    """A per-channel quantization must run along an existing axis (of `shape`) of matching size."""
    q = tensor.quantization
    axis = q.quantized_dimension
    if q.scales.size > 1 and not (0 <= axis < len(shape) and shape[axis] == q.scales.size):
        return (f"{node.op}: tensor {tensor.index} has {q.scales.size} scales along dimension "
                f"{q.quantized_dimension} of shape {list(shape)}")
    return None


def quantize_support(node):
    """Why QUANTIZE cannot run this node, or None (the arity is with_arity's check)."""
    source, target = node.inputs[0], node.outputs[0]
    if target.dtype not in INTEGER_QUANTIZED:
        return Unimplemented(f"QUANTIZE to {target.type_name or target.dtype} is not supported")
    if source.dtype == F32:
        return quantization_reason(node, [target], per_channel=True) or _channel_reason(node, target, source.shape)
    if source.dtype not in INTEGER_QUANTIZED:
        return Unimplemented(f"QUANTIZE from {source.type_name or source.dtype} is not supported")
    return quantization_reason(node, [source, target])


def dequantize_support(node):
    """Why DEQUANTIZE cannot run this node, or None (the arity is with_arity's check)."""
    source, target = node.inputs[0], node.outputs[0]
    if target.dtype != F32:
        return Unimplemented(f"DEQUANTIZE to {target.type_name or target.dtype} is not supported")
    if source.dtype == F16:
        return None
    if source.dtype not in INTEGER_QUANTIZED:
        return Unimplemented(f"DEQUANTIZE from {source.type_name or source.dtype} is not supported")
    return quantization_reason(node, [source], per_channel=True) or _channel_reason(node, source, source.shape)


# -- QUANTIZE_AND_DEQUANTIZE (a pseudo-op) ------------------------------------------------
# options[REQUANTIZE_FROM]: (scale, zero point, qmin, table) of the per-tensor grid the input lies
# on, the view of a model's integer -> integer QUANTIZE: the input's integer q (from the real
# value) maps to table[q - qmin] (requantize_table), not to the real value's nearest step.
REQUANTIZE_FROM = "requantize_from"


def fake_quantize(real, scales, zero_points, qmin, qmax):
    """Real values snapped to a quantization grid: (clamp(round(x / scale) + zp, qmin, qmax) - zp)
    * scale. x / scale in float32 as TFLite's QUANTIZE divides, rounded half away from zero;
    NaN -> 0 (the zero point) and +-inf saturate, as common.quantize does. scales / zero_points
    broadcast against `real` (0-d per tensor). Returns float32."""
    real = np.asarray(real, F32)
    scales32 = np.asarray(scales, F32)
    with np.errstate(over="ignore", invalid="ignore"):
        steps = round_half_away(np.where(np.isnan(real), np.float32(0), real / scales32).astype(np.float64))
    q = np.clip(steps + zero_points, qmin, qmax)
    return np.asarray((q - zero_points) * np.asarray(scales, np.float64), F32)


def quantize_and_dequantize(node, inputs):
    """QUANTIZE_AND_DEQUANTIZE: float32 x -> float32 x snapped to the output tensor's grid
    (fake_quantize), per tensor or per channel along its quantized dimension, between
    options["qmin"] and options["qmax"] (the integer range of the type the grid belonged to:
    -128 / 127 for int8).

    TFLite has no such builtin: gles_delegate/quant.py inserts it, in the float view of a
    quantized partition, after every op whose output was quantized (what TFLite's GPU delegate
    calls QuantizeAndDequantize), so it never appears in a .tflite file. TFLite's GPU shader
    rounds floor((clamp(x, min, max) - min) / scale + 0.5), halves upwards; this follows TFLite's
    CPU QUANTIZE instead (halves away from zero), which is what the quantized model computes."""
    scales, zero_points = quant_params(node.outputs[0], np.ndim(inputs[0]))
    if REQUANTIZE_FROM in node.options:
        return [_requantized(inputs[0], node.options[REQUANTIZE_FROM], scales, zero_points)]
    return [fake_quantize(inputs[0], scales, zero_points, node.options["qmin"], node.options["qmax"])]


def _requantized(real, source, scale, zero_point):
    """Real values on the grid `source` = (scale, zero point, qmin, table) -> float32 real values
    of the output grid (scale, zero_point) the table's integers stand for."""
    source_scale, source_zero_point, qmin, table = source
    table = np.asarray(table, np.int64)
    with np.errstate(over="ignore", invalid="ignore"):
        steps = round_half_away(np.where(np.isnan(real), 0, np.asarray(real, F32) / np.float32(source_scale))
                                .astype(np.float64))
    q = np.clip(steps + source_zero_point, qmin, qmin + table.size - 1).astype(np.int64)
    return np.asarray((table[q - qmin] - zero_point) * np.asarray(scale, np.float64), F32)


def quantize_and_dequantize_support(node):
    """Why QUANTIZE_AND_DEQUANTIZE cannot run this node, or None (the arity is with_arity's check)."""
    source, target = node.inputs[0], node.outputs[0]
    if source.dtype != F32 or target.dtype != F32:
        return f"QUANTIZE_AND_DEQUANTIZE maps float32 to float32, got {source.dtype} -> {target.dtype}"
    if tuple(source.shape) != tuple(target.shape):
        return f"output shape {list(target.shape)} differs from input {list(source.shape)}"
    qmin, qmax = node.options.get("qmin"), node.options.get("qmax")
    if not (isinstance(qmin, (int, np.integer)) and isinstance(qmax, (int, np.integer)) and qmin <= qmax):
        return f"QUANTIZE_AND_DEQUANTIZE needs integer options qmin <= qmax, got {qmin!r}, {qmax!r}"
    if target.quantization is None or target.quantization.scales.size == 0:
        return f"QUANTIZE_AND_DEQUANTIZE: output tensor {target.index} has no quantization"
    return quantization_reason(node, [target], per_channel=True) or _channel_reason(node, target, target.shape)


# -- DENSIFY --------------------------------------------------------------------------------
def _block_sizes(rank, sparsity):
    """Block size of each blocked dimension. TFLite (InitSparseToDenseConverter) reads it from
    dim_metadata[traversal_order[rank + k]].dense_size."""
    order, metas = sparsity.traversal_order, sparsity.dim_metadata
    return [metas[order[rank + k]].dense_size for k in range(len(sparsity.block_map))]


def level_sizes(shape, sparsity):
    """The extent of each traversal level: a dimension of the blocked shape (a blocked
    dimension divided by its block size) or, for the trailing block levels, a block size."""
    rank, block_sizes = len(shape), _block_sizes(len(shape), sparsity)
    blocks = dict(zip(sparsity.block_map, block_sizes))
    extents = [shape[d] // blocks.get(d, 1) for d in range(rank)] + block_sizes
    return [extents[d] for d in sparsity.traversal_order]


def _walk_levels(sparsity, sizes, label):
    """FormatConverter::Populate's depth-first walk, done breadth-first one level at a time:
    returns [n, levels] int64, the index taken at each traversal level by each of the n stored
    values, in storage order. A DENSE level enumerates 0..size-1 under every path; a SPARSE_CSR
    level takes array_indices[segments[p] : segments[p + 1]] under the path at position p
    (positions number the paths of a level: p * size + i below a dense level, the index into
    array_indices below a sparse one). Malformed index arrays raise ModelError; the work is
    bounded by the dense size and the index arrays' lengths."""
    positions = np.zeros(1, np.int64)
    links = []  # per level: (parent of each path, index it takes)
    for level, (meta, size) in enumerate(zip(sparsity.dim_metadata, sizes)):
        if meta.format == "DENSE":
            parents = np.repeat(np.arange(positions.size), size)
            index = np.tile(np.arange(size, dtype=np.int64), positions.size)
            positions = positions[parents] * size + index
        else:
            parents, positions, index = _csr_children(meta, positions, size, f"operator {label}: level {level}")
        links.append((parents, index))
    # Follow each stored value's path back up, level by level (one gather per level).
    taken = np.empty((positions.size, len(links)), np.int64)
    path = np.arange(positions.size)
    for level in range(len(links) - 1, -1, -1):
        parents, index = links[level]
        taken[:, level] = index[path]
        path = parents[path]
    return taken


def _csr_children(meta, positions, size, where):
    """(parent of each child, child positions, child indices) of one SPARSE_CSR level."""
    segments, indices = np.asarray(meta.array_segments, np.int64), np.asarray(meta.array_indices, np.int64)
    if positions.size and positions.max() + 1 >= segments.size:
        raise ModelError(f"{where} has {segments.size} array_segments, too few for position {positions.max()}")
    starts, ends = segments[positions], segments[positions + 1]
    counts = ends - starts
    if np.any(starts < 0) or np.any(counts < 0) or np.any(ends > indices.size) or counts.sum() > indices.size:
        raise ModelError(f"{where} array_segments are not a non-decreasing partition of its "
                         f"{indices.size} array_indices")
    parents = np.repeat(np.arange(positions.size), counts)
    children = starts[parents] + np.arange(parents.size) - np.repeat(np.cumsum(counts) - counts, counts)
    index = indices[children]
    if np.any((index < 0) | (index >= size)):
        raise ModelError(f"{where} has array_indices outside [0, {size})")
    return parents, children, index


def sparse_coordinates(shape, sparsity, label):
    """Dense coordinates [n, rank] of the n stored values of a TFLite sparse tensor of dense
    `shape`, in storage order (what FormatConverter::SparseToDense writes where)."""
    rank, order = len(shape), sparsity.traversal_order
    taken = _walk_levels(sparsity, level_sizes(shape, sparsity), label)
    coordinates = np.zeros((taken.shape[0], rank), np.int64)
    coordinates[:, list(order[:rank])] = taken[:, :rank]
    for level, block_size in zip(range(rank, len(order)), _block_sizes(rank, sparsity)):
        dim = sparsity.block_map[order[level] - rank]
        coordinates[:, dim] = coordinates[:, dim] * block_size + taken[:, level]
    return coordinates


def densify(node, inputs):
    """DENSIFY: the flat stored values of a constant sparse tensor -> its dense array."""
    tensor = node.inputs[0]
    values = np.asarray(inputs[0]).reshape(-1)
    coordinates = sparse_coordinates(tensor.shape, tensor.sparsity, node.label)
    if coordinates.shape[0] != values.size:
        raise node_error(node, f"the sparsity metadata addresses {coordinates.shape[0]} values, the tensor "
                               f"stores {values.size}")
    dense = np.zeros(tensor.shape, values.dtype)
    dense[tuple(coordinates.T)] = values
    return [dense]


def sparsity_reason(shape, sparsity):
    """None when the sparsity parameters are structurally valid for a dense `shape`, else why
    not (the walk in densify checks what depends on the index arrays' contents)."""
    rank, order, block_map = len(shape), tuple(sparsity.traversal_order), tuple(sparsity.block_map)
    total = rank + len(block_map)
    if len(order) != total or len(sparsity.dim_metadata) != total:
        return (f"traversal_order ({len(order)}) and dim_metadata ({len(sparsity.dim_metadata)}) must both "
                f"have rank + blocked dims = {total} entries")
    if sorted(order[:rank]) != list(range(rank)) or sorted(order[rank:]) != list(range(rank, total)):
        return f"traversal_order {list(order)} is not dims 0..{rank - 1} then block dims {rank}..{total - 1}"
    if any(not 0 <= d < rank for d in block_map) or list(block_map) != sorted(set(block_map)):
        return f"block_map {list(block_map)} is not an increasing list of dimensions"
    for dim, block_size in zip(block_map, _block_sizes(rank, sparsity)):
        if block_size <= 0 or shape[dim] % block_size:
            return f"block size {block_size} does not divide dimension {dim} of shape {list(shape)}"
    for level, (meta, size) in enumerate(zip(sparsity.dim_metadata, level_sizes(shape, sparsity))):
        if meta.format == "DENSE" and meta.dense_size != size:
            # Also what bounds the walk: no level can enumerate more than the tensor holds.
            return f"DENSE level {level} has dense_size {meta.dense_size}, the dimension it walks has {size}"
        if meta.format == "SPARSE_CSR" and (meta.array_segments is None or meta.array_indices is None):
            return f"SPARSE_CSR level {level} lacks array_segments or array_indices"
        if meta.format not in ("DENSE", "SPARSE_CSR"):
            return f"level {level} has unknown format {meta.format}"
    return None


def densify_support(node):
    """Why DENSIFY cannot run this node, or None (the arity is with_arity's check)."""
    source, target = node.inputs[0], node.outputs[0]
    if source.sparsity is None:
        return f"DENSIFY input tensor {source.index} has no sparsity parameters"
    if not source.is_const:
        return f"DENSIFY input tensor {source.index} is not a constant"
    # The output shape is checked too: the folded value is stored in the declared shape.
    if source.dtype is None or target.dtype != source.dtype or tuple(target.shape) != tuple(source.shape):
        return (f"DENSIFY output {target.dtype} {list(target.shape)} does not match its input "
                f"{source.type_name} {list(source.shape)}")
    reason = sparsity_reason(source.shape, source.sparsity)
    return None if reason is None else Malformed(f"DENSIFY input tensor {source.index}: {reason}")


KERNELS = {"QUANTIZE": quantize_op, "DEQUANTIZE": dequantize_op, "DENSIFY": densify,
           "QUANTIZE_AND_DEQUANTIZE": quantize_and_dequantize}
SUPPORT = {"QUANTIZE": with_arity(1, 0, quantize_support), "DEQUANTIZE": with_arity(1, 0, dequantize_support),
           "DENSIFY": with_arity(1, 0, densify_support),
           "QUANTIZE_AND_DEQUANTIZE": with_arity(1, 0, quantize_and_dequantize_support)}
# Output shapes (shape propagation after a resize): each keeps its input's shape (DENSIFY, whose
# input is a constant, is never resized).
OUTPUT_SHAPES = {op: lambda node, shapes, values: [shapes[0]] for op in ("QUANTIZE", "DEQUANTIZE",
                                                                         "QUANTIZE_AND_DEQUANTIZE")}
