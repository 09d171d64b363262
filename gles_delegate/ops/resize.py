"""Image resize on NHWC tensors: RESIZE_BILINEAR and RESIZE_NEAREST_NEIGHBOR.

Coordinates follow TFLite's kernels bit for bit: float32 scales, align_corners and
half_pixel_centers as reference_ops computes them, and the integer variants LiteRT's builtin
kernels use for 8-bit tensors (10-bit fixed point bilinear for int8, 16.16 fixed point nearest
neighbor for 1-byte types).
"""
import numpy as np

from .checks import Unimplemented, arity_reason, index_input_reason, node_error
from .common import round_half_away

_BILINEAR_DTYPES = (np.dtype(np.float32), np.dtype(np.uint8), np.dtype(np.int8))


def _output_size(node, x, size):
    """(out_h, out_w) from the size input; TFLite needs a 4-D input and positive sizes."""
    size = np.asarray(size).reshape(-1)
    if x.ndim != 4 or size.size != 2 or (size <= 0).any():
        raise node_error(node, f"needs a 4-D input and two positive sizes, got input shape {list(x.shape)} "
                               f"and size {size.tolist()}")
    return int(size[0]), int(size[1])


def input_scale(in_size, out_size, align_corners):
    """Input pixels per output pixel along one axis, in float32 as TFLite computes it (the GPU
    kernel, gpu/kernels/resize.py, takes it from here)."""
    if align_corners and out_size > 1:
        return np.float32(in_size - 1) / np.float32(out_size - 1)
    return np.float32(in_size) / np.float32(out_size)


def _options(node):
    return bool(node.options.get("align_corners", False)), bool(node.options.get("half_pixel_centers", False))


# -- bilinear ---------------------------------------------------------------------------------
def _source_coords(in_size, out_size, align_corners, half_pixel):
    """TFLite's ComputeInterpolationValues along one axis: (float32 source coordinate,
    lower index, upper index) per output position."""
    position = np.arange(out_size, dtype=np.float32)
    scale = input_scale(in_size, out_size, align_corners)
    source = (position + np.float32(0.5)) * scale - np.float32(0.5) if half_pixel else position * scale
    lower = np.maximum(np.floor(source), 0).astype(np.int64)
    upper = np.minimum(np.ceil(source).astype(np.int64), in_size - 1)
    return source, lower, upper


def _source_coords_fixed(in_size, out_size, align_corners, half_pixel):
    """TFLite's ComputeInterpolationValuesInteger: the same in 10-bit fixed point (1024 = 1 pixel)."""
    if align_corners and out_size > 1:
        scale = ((1 << 10) * (in_size - 1) + (out_size - 1) // 2) // (out_size - 1)
    else:
        scale = ((1 << 10) * in_size + out_size // 2) // out_size
    position = np.arange(out_size, dtype=np.int64)
    source = position * scale + scale // 2 - (1 << 9) if half_pixel else position * scale
    # Where source < 0 C's truncating division and floor differ, but max(., 0) hides it.
    lower = np.maximum(source // (1 << 10), 0)
    upper = np.minimum((source + (1 << 10) - 1) // (1 << 10), in_size - 1)
    return source, lower, upper


def _corners(x, rows, cols):
    """x at (rows[i], cols[j]) for the four (lower/upper row, lower/upper col) combinations."""
    (y0, y1), (x0, x1) = rows, cols
    return [x[:, r][:, :, c] for r, c in ((y0, x0), (y0, x1), (y1, x0), (y1, x1))]


def _bilinear_float(x, out_hw, align_corners, half_pixel):
    """reference_ops::ResizeBilinear: float32 weights; an 8-bit (uint8) result adds 0.5 and
    truncates, as LiteRT's optimized uint8 kernel does."""
    (sy, y0, y1), (sx, x0, x1) = [_source_coords(i, o, align_corners, half_pixel)
                                  for i, o in zip(x.shape[1:3], out_hw)]
    dy = (sy - y0.astype(np.float32))[None, :, None, None]
    dx = (sx - x0.astype(np.float32))[None, None, :, None]
    one = np.float32(1)
    weights = [(one - dy) * (one - dx), (one - dy) * dx, dy * (one - dx), dy * dx]
    corners = _corners(x.astype(np.float32), (y0, y1), (x0, x1))
    result = corners[0] * weights[0] + corners[1] * weights[1] + corners[2] * weights[2] + corners[3] * weights[3]
    if x.dtype == np.float32:
        return result
    return np.trunc(result + np.float32(0.5)).astype(x.dtype)


def _bilinear_int8(x, out_hw, align_corners, half_pixel):
    """reference_ops::ResizeBilinearInteger: 10-bit weights, a 20-bit product rounded half away
    from zero."""
    (sy, y0, y1), (sx, x0, x1) = [_source_coords_fixed(i, o, align_corners, half_pixel)
                                  for i, o in zip(x.shape[1:3], out_hw)]
    one = 1 << 10
    dy = (sy - one * y0)[None, :, None, None]
    dx = (sx - one * x0)[None, None, :, None]
    corners = _corners(x.astype(np.int64), (y0, y1), (x0, x1))
    total = (corners[0] * (one - dy) * (one - dx) + corners[1] * (one - dy) * dx
             + corners[2] * dy * (one - dx) + corners[3] * dy * dx)
    half = 1 << 19
    return np.where(total > 0, (total + half) >> 20, -((half - total) >> 20)).astype(x.dtype)


def resize_bilinear(node, inputs):
    """RESIZE_BILINEAR: [N, H, W, C] -> [N, size[0], size[1], C] (float32, uint8, int8)."""
    x, size = inputs
    out_hw = _output_size(node, x, size)
    kernel = _bilinear_int8 if x.dtype == np.int8 else _bilinear_float
    return [kernel(x, out_hw, *_options(node))]


def _bilinear_support(node):
    reason = arity_reason(node, 2) or index_input_reason(node, 1, "size", int32_only=True)
    if reason is None and node.inputs[0].dtype not in _BILINEAR_DTYPES:
        reason = Unimplemented(f"input type {node.inputs[0].dtype} is not float32, uint8 or int8")
    if reason is None and all(_options(node)):
        reason = "half_pixel_centers requires align_corners to be false"
    return reason


# -- nearest neighbor -------------------------------------------------------------------------
def _nearest_indices(in_size, out_size, align_corners, half_pixel, one_byte):
    """TFLite's GetNearestNeighbor along one axis. LiteRT's optimized kernel, which serves the
    1-byte types when neither flag is set, uses 16.16 fixed point instead (it picks a different
    pixel for some sizes over 256)."""
    if one_byte and not (align_corners or half_pixel):
        scale = (in_size << 16) // out_size + 1
        return np.minimum((np.arange(out_size, dtype=np.int64) * scale) >> 16, in_size - 1)
    offset = np.float32(0.5 if half_pixel else 0.0)
    source = (np.arange(out_size, dtype=np.float32) + offset) * input_scale(in_size, out_size, align_corners)
    index = np.minimum((round_half_away(source) if align_corners else np.floor(source)).astype(np.int64),
                       in_size - 1)
    return np.maximum(index, 0) if half_pixel else index


def resize_nearest_neighbor(node, inputs):
    """RESIZE_NEAREST_NEIGHBOR: [N, H, W, C] -> [N, size[0], size[1], C], any dtype."""
    x, size = inputs
    align_corners, half_pixel = _options(node)
    rows, cols = [_nearest_indices(i, o, align_corners, half_pixel, x.dtype.itemsize == 1)
                  for i, o in zip(x.shape[1:3], _output_size(node, x, size))]
    return [x[:, rows][:, :, cols]]


def _nearest_support(node):
    return arity_reason(node, 2) or index_input_reason(node, 1, "size", int32_only=True)


KERNELS = {"RESIZE_BILINEAR": resize_bilinear, "RESIZE_NEAREST_NEIGHBOR": resize_nearest_neighbor}
SUPPORT = {"RESIZE_BILINEAR": _bilinear_support, "RESIZE_NEAREST_NEIGHBOR": _nearest_support}


def _resized_shape(node, shapes, values):
    """[N, size[0], size[1], C] once the size input is known."""
    if values[1] is None or len(shapes[0]) != 4:
        return None
    size = np.asarray(values[1]).reshape(-1)
    return [(shapes[0][0], int(size[0]), int(size[1]), shapes[0][3])] if size.size == 2 else None


OUTPUT_SHAPES = {"RESIZE_BILINEAR": _resized_shape, "RESIZE_NEAREST_NEIGHBOR": _resized_shape}
