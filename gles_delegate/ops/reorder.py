"""Layout ops that reorder elements by a map their parameter inputs define: REVERSE_V2,
SPACE_TO_BATCH_ND, BATCH_TO_SPACE_ND, REVERSE_SEQUENCE, and MATRIX_SET_DIAG (which writes a
diagonal). (The other value-moving ops are in layout.py.)

They take any dtype LiteRT's kernels take and copy stored values, so a quantized output keeps its
input's integers; SPACE_TO_BATCH_ND pads 8-bit quantized tensors with the output's zero point
(real 0), everything else with 0. Their parameters are int32 tensors (LiteRT reads an int64 one
as int32) and may be runtime inputs: the shape rules then return None.
"""
import numpy as np

from .checks import Unimplemented, arity_reason, index_input_reason, index_values, node_error, normalized_axis
from .common import is_quantized, zero_point_of

I8, U8, I16, I32, I64 = (np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.int32, np.int64))
F32, BOOL = np.dtype(np.float32), np.dtype(np.bool_)
# The dtypes LiteRT's builtin REVERSE_V2, SPACE_TO_BATCH_ND and BATCH_TO_SPACE_ND kernels take.
REORDER_TYPES = (F32, U8, I8, I16, I32, I64, BOOL)


def _support(n_inputs, index_inputs):
    """A SUPPORT check: `n_inputs` inputs, one output of the first input's dtype (one of
    REORDER_TYPES), the (input, name) pairs int32 tensors."""
    def check(node):
        reason = arity_reason(node, n_inputs)
        for k, what in index_inputs:
            reason = reason or index_input_reason(node, k, what, int32_only=True)
        if reason is None and node.inputs[0].dtype not in REORDER_TYPES:
            reason = Unimplemented(f"{node.inputs[0].dtype} is not supported (only "
                                   f"{', '.join(map(str, REORDER_TYPES))})")
        if reason is None and node.outputs[0].dtype != node.inputs[0].dtype:
            reason = f"the output is {node.outputs[0].dtype}, the input {node.inputs[0].dtype}"
        return reason
    return check


# -- REVERSE_V2 -----------------------------------------------------------------------------
def _reversed_axes(node, rank, axis_values):
    """The axes REVERSE_V2 reverses: a non-empty 1-D list (negative count from the end) that,
    sorted, is a run of consecutive axes, as TFLite's kernel requires."""
    if np.ndim(axis_values) != 1 or np.size(axis_values) == 0:
        # TFLite refuses any other rank at Prepare and reads past an empty list.
        raise node_error(node, f"axis must be a non-empty 1-D tensor, got shape {list(np.shape(axis_values))}")
    axes = sorted(normalized_axis(node, a, rank) for a in index_values(node, axis_values, "axis").tolist())
    if axes != list(range(axes[0], axes[0] + len(axes))):
        raise node_error(node, f"axes {axes} are not contiguous (TFLite reverses one run of axes)")
    return tuple(axes)


def reverse_v2(node, inputs):
    """REVERSE_V2: the input with the order along each axis of input 1 reversed."""
    x = inputs[0]
    return [np.flip(x, _reversed_axes(node, x.ndim, inputs[1]))]


def _reversed_shape(node, shapes, values):
    if values[1] is not None:
        _reversed_axes(node, len(shapes[0]), values[1])
    return [shapes[0]]


# -- SPACE_TO_BATCH_ND / BATCH_TO_SPACE_ND --------------------------------------------------
def _block_parameters(node, shape, block_values, edge_values, what):
    """(block [M], edges [M, 2]) of a 3-D or 4-D input with M = rank - 2 spatial dims, where
    edges are SPACE_TO_BATCH_ND's paddings or BATCH_TO_SPACE_ND's crops."""
    if len(shape) not in (3, 4):
        raise node_error(node, f"needs a 3-D or 4-D input, got shape {list(shape)}")
    spatial = len(shape) - 2
    if np.shape(block_values) != (spatial,) or np.shape(edge_values) != (spatial, 2):
        raise node_error(node, f"block_shape {list(np.shape(block_values))} and {what} "
                               f"{list(np.shape(edge_values))} must be [{spatial}] and [{spatial}, 2]")
    block = index_values(node, block_values, "block_shape")
    edges = index_values(node, edge_values, what).reshape(spatial, 2)
    if (block < 1).any() or (edges < 0).any():
        # LiteRT 2.3 takes negative paddings; newer TFLite refuses them, as it refuses crops.
        raise node_error(node, f"block_shape {block.tolist()} must be >= 1 and {what} {edges.tolist()} >= 0")
    return block.tolist(), edges.tolist()


def _space_to_batch_shape(node, shape, block_values, paddings):
    block, pads = _block_parameters(node, shape, block_values, paddings, "paddings")
    padded = [d + before + after for d, (before, after) in zip(shape[1:], pads)]
    if any(p % b for p, b in zip(padded, block)):
        raise node_error(node, f"padded spatial dims {padded} are not multiples of block_shape {block}")
    return (shape[0] * int(np.prod(block)),) + tuple(p // b for p, b in zip(padded, block)) + tuple(shape[1 + len(block):])


def space_to_batch_nd(node, inputs):
    """SPACE_TO_BATCH_ND: pad the spatial dims, cut them into blocks, and move each position
    within a block to the batch: out[(i * block_w + j) * N + n, h, w] = padded[n, h * block_h + i,
    w * block_w + j]."""
    x, block_values, paddings = inputs
    shape = _space_to_batch_shape(node, x.shape, block_values, paddings)
    block, pads = _block_parameters(node, x.shape, block_values, paddings, "paddings")
    out = node.outputs[0]
    fill = zero_point_of(out) if out.dtype in (I8, U8) and is_quantized(out) else 0
    spatial = len(block)
    padded = np.pad(x, [(0, 0)] + pads + [(0, 0)] * (x.ndim - 1 - spatial), constant_values=fill)
    split = [x.shape[0]] + [d for s, b in zip(padded.shape[1:], block) for d in (s // b, b)] + list(x.shape[1 + spatial:])
    order = [2 + 2 * k for k in range(spatial)] + [0] + [1 + 2 * k for k in range(spatial)] + \
        list(range(1 + 2 * spatial, len(split)))
    return [padded.reshape(split).transpose(order).reshape(shape)]


def _batch_to_space_shape(node, shape, block_values, crops):
    block, crops = _block_parameters(node, shape, block_values, crops, "crops")
    blocks = int(np.prod(block))
    spatial = [d * b - before - after for d, b, (before, after) in zip(shape[1:], block, crops)]
    if shape[0] % blocks or min(spatial) < 0:
        raise node_error(node, f"batch {shape[0]} must be a multiple of {blocks} (block_shape {block}) and crops "
                               f"{crops} must leave the spatial dims {[d * b for d, b in zip(shape[1:], block)]} >= 0")
    return (shape[0] // blocks,) + tuple(spatial) + tuple(shape[1 + len(block):])


def batch_to_space_nd(node, inputs):
    """BATCH_TO_SPACE_ND: SPACE_TO_BATCH_ND's inverse with crops in place of paddings:
    out[n, h * block_h + i - crop_top, w * block_w + j - crop_left] = x[(i * block_w + j) * N + n, h, w]."""
    x, block_values, crops = inputs
    shape = _batch_to_space_shape(node, x.shape, block_values, crops)
    block, crops = _block_parameters(node, x.shape, block_values, crops, "crops")
    spatial = len(block)
    split = block + [shape[0]] + list(x.shape[1:])
    order = [spatial] + [d for k in range(spatial) for d in (spatial + 1 + k, k)] + \
        list(range(2 * spatial + 1, len(split)))
    joined = x.reshape(split).transpose(order).reshape(
        [shape[0]] + [d * b for d, b in zip(x.shape[1:], block)] + list(x.shape[1 + spatial:]))
    window = tuple(slice(before, before + size) for (before, _), size in zip(crops, shape[1:1 + spatial]))
    return [joined[(slice(None),) + window]]


def _block_rule(shape_of):
    """An OUTPUT_SHAPES rule from `shape_of(node, shape, block, edges)`: None while the block or
    edges are runtime values."""
    def rule(node, shapes, values):
        if values[1] is None or values[2] is None:
            return None
        return [shape_of(node, shapes[0], values[1], values[2])]
    return rule


# -- REVERSE_SEQUENCE, MATRIX_SET_DIAG ------------------------------------------------------------
SEQUENCE_TYPES = (F32, U8, I16, I32, I64)  # reverse_sequence.cc's (no int8, no bool)
# LiteRT 2.3 runs a bool MATRIX_SET_DIAG but scrambles its values (not the op's semantics): refused.
MATRIX_TYPES = (F32, U8, I8, I16, I32, I64)


def reverse_sequence(node, inputs):
    """REVERSE_SEQUENCE: x, seq_lengths [x.shape[batch_dim]] (int32 / int64) -> x with, for each
    index b along batch_dim, its first seq_lengths[b] elements along seq_dim reversed (a length
    below 2 leaves them; one past the dimension fails, as in TFLite)."""
    x, lengths = inputs
    seq_dim, batch_dim = node.options.get("seq_dim", 0), node.options.get("batch_dim", 0)
    lengths = index_values(node, lengths, "seq_lengths", count=x.shape[batch_dim])
    if np.any(lengths > x.shape[seq_dim]):
        raise node_error(node, f"seq_lengths {lengths.tolist()} exceed dimension {seq_dim} ({x.shape[seq_dim]})")
    out = np.array(x, copy=True)
    source, target = (np.moveaxis(a, (batch_dim, seq_dim), (0, 1)) for a in (x, out))
    for b, length in enumerate(lengths.tolist()):
        if length > 1:
            target[b, :length] = source[b, length - 1::-1]
    return [out]


def _reverse_sequence_support(node):
    reason = arity_reason(node, 2)
    if reason:
        return reason
    (x, lengths), rank = node.inputs, len(node.inputs[0].shape)
    seq_dim, batch_dim = node.options.get("seq_dim", 0), node.options.get("batch_dim", 0)
    if x.dtype not in SEQUENCE_TYPES or node.outputs[0].dtype != x.dtype:
        return Unimplemented(f"REVERSE_SEQUENCE of {x.dtype} -> {node.outputs[0].dtype} is not supported")
    if lengths.dtype not in (I32, I64) or len(lengths.shape) != 1:
        return "seq_lengths must be an int32 or int64 vector"
    if not (0 <= seq_dim < rank and 0 <= batch_dim < rank) or seq_dim == batch_dim:
        return f"seq_dim {seq_dim} and batch_dim {batch_dim} must be two different dimensions of the rank-{rank} input"
    if lengths.shape[0] != x.shape[batch_dim]:
        return f"seq_lengths holds {lengths.shape[0]} values for batch dimension {batch_dim} of {x.shape[batch_dim]}"
    return None


def matrix_set_diag(node, inputs):
    """MATRIX_SET_DIAG: x [..., M, N], diagonal [..., min(M, N)] -> x with each innermost
    matrix's main diagonal replaced."""
    x, diagonal = inputs
    size = min(x.shape[-2:])
    if diagonal.shape != x.shape[:-2] + (size,):
        raise node_error(node, f"diagonal shape {list(diagonal.shape)} does not fit matrices {list(x.shape)}")
    out = np.array(x, copy=True)
    out[..., np.arange(size), np.arange(size)] = diagonal
    return [out]


def _matrix_set_diag_support(node):
    reason = arity_reason(node, 2)
    if reason:
        return reason
    x, diagonal = node.inputs
    if x.dtype not in MATRIX_TYPES or diagonal.dtype != x.dtype or node.outputs[0].dtype != x.dtype:
        return Unimplemented(f"MATRIX_SET_DIAG of {x.dtype} / {diagonal.dtype} -> {node.outputs[0].dtype} is not "
                             "supported")
    if len(x.shape) < 2 or tuple(diagonal.shape) != tuple(x.shape[:-2]) + (min(x.shape[-2:]),):
        return f"diagonal shape {list(diagonal.shape)} does not fit matrices {list(x.shape)}"
    return None


KERNELS = {"REVERSE_V2": reverse_v2, "SPACE_TO_BATCH_ND": space_to_batch_nd, "BATCH_TO_SPACE_ND": batch_to_space_nd,
           "REVERSE_SEQUENCE": reverse_sequence, "MATRIX_SET_DIAG": matrix_set_diag}
SUPPORT = {"REVERSE_V2": _support(2, ((1, "axis"),)),
           "SPACE_TO_BATCH_ND": _support(3, ((1, "block_shape"), (2, "paddings"))),
           "BATCH_TO_SPACE_ND": _support(3, ((1, "block_shape"), (2, "crops"))),
           "REVERSE_SEQUENCE": _reverse_sequence_support, "MATRIX_SET_DIAG": _matrix_set_diag_support}
OUTPUT_SHAPES = {"REVERSE_V2": _reversed_shape, "SPACE_TO_BATCH_ND": _block_rule(_space_to_batch_shape),
                 "BATCH_TO_SPACE_ND": _block_rule(_batch_to_space_shape),
                 "REVERSE_SEQUENCE": lambda node, shapes, values: [shapes[0]],
                 "MATRIX_SET_DIAG": lambda node, shapes, values: [shapes[0]]}
