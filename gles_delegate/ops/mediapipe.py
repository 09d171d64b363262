"""MediaPipe's custom ops (mediapipe/util/tflite/operations/), version 2, float32.

They crop a region of interest inside the face landmark model with attention:
  Landmarks2TransformMatrix  landmarks [1, N, 3] -> matrix [1, 4, 4] mapping output-crop pixel
                             coordinates to landmark coordinates (a rotated, scaled box around
                             a subset of the landmarks)
  TransformTensorBilinear    features [1, H, W, C], matrix [1, 4, 4] -> [1, out_h, out_w, C],
                             the features sampled bilinearly at the matrix-mapped pixel centers
  TransformLandmarks         landmarks [1, N, 2 or 3], matrix [1, 4, 4] -> landmarks with x, y
                             mapped by the matrix (z unchanged)
Options come as a flexbuffer map in node.custom_options (TransformLandmarks has none).
"""
import functools

import numpy as np
from flatbuffers import flexbuffers

from ..errors import ModelError
from .checks import arity_reason, float32_reason, node_error

SUPPORTED_VERSION = 2
MATRIX_OPTION_KINDS = {
    "subset_idxs": "indices", "left_rotation_idx": "index", "right_rotation_idx": "index",
    "target_rotation_radians": "number", "output_height": "size", "output_width": "size",
    "scale_x": "scale", "scale_y": "scale",
}
BILINEAR_OPTION_KINDS = {"output_height": "size", "output_width": "size"}
CACHED_OPTION_BYTES = 4096  # MediaPipe's option maps are 40-400 bytes


# -- options ------------------------------------------------------------------------------
def parse_custom_options(node, kinds):
    """The node's flexbuffer options checked against {key: kind}; ModelError if one is missing
    or of the wrong kind. Kinds: index (int >= 0), indices (non-empty list of those), size
    (int > 0), scale (number > 0), number. A fresh dict (its lists copied) on every call."""
    data = bytes(node.custom_options or b"")
    check = _cached_options if len(data) <= CACHED_OPTION_BYTES else _checked_options
    options, problem = check(data, tuple(kinds.items()))
    if problem is not None:
        raise node_error(node, problem)
    return {key: list(value) if isinstance(value, list) else value for key, value in options.items()}


def _checked_options(data, kinds):
    """(options, None) for valid option bytes, else (None, why not)."""
    try:
        options = flexbuffers.Loads(data)
    except Exception as exc:  # the decoder raises assorted errors on malformed bytes
        return None, f"custom options are not a flexbuffer ({type(exc).__name__}: {exc})"
    if not isinstance(options, dict):
        return None, "custom options are not a flexbuffer map"
    for key, kind in kinds:
        if key not in options:
            return None, f"custom option {key!r} is missing"
        if not _is_kind(options[key], kind):
            return None, f"custom option {key!r} = {options[key]!r} is not a valid {kind}"
    return options, None


# The flexbuffers decoder is pure Python (0.1-0.3 ms an option map), and a node's options are
# read by the support check, the shape rule, the kernel and the GPU's, at every allocation.
# Only small maps are kept: a hostile model's megabytes of options are not held on to.
_cached_options = functools.lru_cache(maxsize=64)(_checked_options)


def _is_kind(value, kind):
    is_int = isinstance(value, int) and not isinstance(value, bool)
    is_number = is_int or isinstance(value, float)
    return {"index": is_int and value >= 0,
            "indices": isinstance(value, list) and len(value) > 0 and all(_is_kind(v, "index") for v in value),
            "size": is_int and value > 0,
            "scale": is_number and value > 0,
            "number": is_number and np.isfinite(value)}[kind]


# -- geometry -----------------------------------------------------------------------------
def _rotation(radians):
    """The 2x2 matrix rotating by `radians` (from +x towards +y)."""
    cos, sin = np.cos(radians), np.sin(radians)
    return np.array([[cos, -sin], [sin, cos]])


def _affine4(linear, translation):
    """The 4x4 matrix of x' = linear @ (x, y) + translation on (x, y, z, 1); z passes through."""
    matrix = np.eye(4)
    matrix[:2, :2] = linear
    matrix[:2, 3] = translation
    return matrix


def _matrix_rows(matrix):
    """The x and y rows of a 4x4 matrix input (any shape with 16 elements), float32 [4] each."""
    rows = np.asarray(matrix, np.float32).reshape(4, 4)
    return rows[0], rows[1]


# -- kernels ------------------------------------------------------------------------------
def landmarks_to_transform_matrix(node, inputs):
    """landmarks [1, N, 3] (x, y, z) -> [1, 4, 4] float32.

    The box: rotate the landmarks so that the left -> right rotation landmarks point along
    target_rotation_radians, take the bounding box of the subset landmarks there, and return
    the matrix that maps output pixel (u, v) of an output_width x output_height crop to
    center + R(-rotation) @ diag(scale_x * box_w / output_width, scale_y * box_h /
    output_height) @ (u - output_width / 2, v - output_height / 2).
    Computed in float64 and rounded once (MediaPipe uses float32 throughout).
    """
    options = parse_custom_options(node, MATRIX_OPTION_KINDS)
    points = inputs[0][0, :, :2].astype(np.float64)
    left, right = points[options["left_rotation_idx"]], points[options["right_rotation_idx"]]
    rotation = options["target_rotation_radians"] - np.arctan2(right[1] - left[1], right[0] - left[0])
    # MediaPipe pairs up subset_idxs (repeating the last of an odd count); the box only depends
    # on the set of points, so the pairing does not matter here.
    rotated = points[options["subset_idxs"]] @ _rotation(rotation).T
    low, high = rotated.min(axis=0), rotated.max(axis=0)
    center = _rotation(-rotation) @ ((low + high) / 2)
    output_size = np.array([options["output_width"], options["output_height"]], np.float64)
    scale = np.array([options["scale_x"], options["scale_y"]]) * (high - low) / output_size
    matrix = (_affine4(np.eye(2), center) @ _affine4(_rotation(-rotation), 0.0)
              @ _affine4(np.diag(scale), 0.0) @ _affine4(np.eye(2), -output_size / 2))
    return [matrix.astype(np.float32)[np.newaxis]]


def transform_tensor_bilinear(node, inputs):
    """features [1, H, W, C], matrix [1, 4, 4] -> [1, output_height, output_width, C] float32.

    Output pixel (u, v) samples the features at (x, y) = M @ (u + 0.5, v + 0.5) - 0.5 (pixel
    centers: MediaPipe's align-corners correction), bilinearly between the four neighbouring
    pixels. A sample point outside [0, W - 1] x [0, H - 1] gives 0. The arithmetic mirrors
    MediaPipe's: float32 coordinates, blends in double rounded to float.
    """
    options = parse_custom_options(node, BILINEAR_OPTION_KINDS)
    features = inputs[0][0]
    height, width = features.shape[:2]
    x, y = _sample_points(_matrix_rows(inputs[1]), options["output_height"], options["output_width"])
    inside = (x >= 0) & (x <= width - 1) & (y >= 0) & (y <= height - 1)
    x0 = np.where(inside, np.floor(x), 0).astype(np.intp)
    y0 = np.where(inside, np.floor(y), 0).astype(np.intp)
    # One zero row and column past the edge: the far neighbour of a point on the last row or
    # column reads zero there, as MediaPipe's ReadValue does (with weight 0).
    padded = np.pad(features, ((0, 1), (0, 1), (0, 0)))
    right = np.where(inside, x - x0, 0).astype(np.float64)[..., np.newaxis]
    lower = np.where(inside, y - y0, 0).astype(np.float64)[..., np.newaxis]
    upper_row = ((1 - right) * padded[y0, x0] + right * padded[y0, x0 + 1]).astype(np.float32)
    lower_row = ((1 - right) * padded[y0 + 1, x0] + right * padded[y0 + 1, x0 + 1]).astype(np.float32)
    result = (lower * lower_row + (1 - lower) * upper_row).astype(np.float32)
    return [np.where(inside[..., np.newaxis], result, np.float32(0))[np.newaxis]]


def _sample_points(rows, output_height, output_width):
    """Float32 sample coordinates (x, y), each [output_height, output_width], of the matrix
    rows for x and y."""
    v, u = np.meshgrid(np.arange(output_height, dtype=np.float32), np.arange(output_width, dtype=np.float32),
                       indexing="ij")
    return [row[0] * u + row[1] * v + _pixel_center_offset(row) for row in rows]


def _pixel_center_offset(row):
    """A row's translation with the pixel-center correction S @ M @ A folded in, the way
    MediaPipe computes it: row[3] += row[0] * 0.5 + row[1] * 0.5 - 0.5 in double, kept as float."""
    return np.float32(float(row[3]) + (float(row[0]) * 0.5 + float(row[1]) * 0.5 - 0.5))


def transform_landmarks(node, inputs):
    """landmarks [1, N, D] (D = 2: x, y; D = 3: x, y, z), matrix [1, 4, 4] -> [1, N, D]
    float32 with (x, y) -> (M @ (x, y, 0, 1))[:2] and z copied."""
    landmarks = inputs[0]
    x_row, y_row = _matrix_rows(inputs[1])
    x, y = landmarks[..., 0], landmarks[..., 1]
    out = landmarks.astype(np.float32, copy=True)
    # Same float32 order as MediaPipe's DotProduct: x * m0 + y * m1 (+ 0 * m2) + m3.
    out[..., 0] = x_row[0] * x + x_row[1] * y + x_row[3]
    out[..., 1] = y_row[0] * x + y_row[1] * y + y_row[3]
    return [out]


# -- support ------------------------------------------------------------------------------
def _common_problem(node, n_inputs):
    """What every op here requires: version 2, `n_inputs` inputs and one output, all float32."""
    if node.version != SUPPORTED_VERSION:
        return f"version {node.version} of {node.op} is not implemented (only version {SUPPORTED_VERSION})"
    return arity_reason(node, n_inputs) or float32_reason(node)


def _matrix_input_problem(node):
    matrix = node.inputs[1]
    if matrix.size != 16:
        return f"the matrix input must hold a 4x4 matrix, got shape {list(matrix.shape)}"
    return None


def _declared_output_problem(node, expected):
    """MediaPipe writes into the output tensor as the model declares it; it must be `expected`."""
    declared = tuple(node.outputs[0].shape)
    if declared != tuple(expected):
        return f"the output is declared {list(declared)}, the op produces {list(expected)}"
    return None


def _parsed_options(node, kinds):
    """(options, None), or (None, why they are unusable)."""
    try:
        return parse_custom_options(node, kinds), None
    except ModelError as exc:
        return None, str(exc)


def _landmarks_to_matrix_support(node):
    options, problem = _parsed_options(node, MATRIX_OPTION_KINDS)
    problem = _common_problem(node, n_inputs=1) or problem
    if problem is not None:
        return problem
    shape = tuple(node.inputs[0].shape)
    if len(shape) != 3 or shape[0] != 1 or shape[2] != 3:
        return f"landmarks must be [1, N, 3], got {list(shape)}"
    indices = [options["left_rotation_idx"], options["right_rotation_idx"], *options["subset_idxs"]]
    if max(indices) >= shape[1]:
        return f"landmark index {max(indices)} is out of range for {shape[1]} landmarks"
    return _declared_output_problem(node, (1, 4, 4))


def _transform_tensor_support(node):
    options, problem = _parsed_options(node, BILINEAR_OPTION_KINDS)
    problem = _common_problem(node, n_inputs=2) or problem or _matrix_input_problem(node)
    if problem is not None:
        return problem
    shape = tuple(node.inputs[0].shape)
    if len(shape) != 4 or shape[0] != 1:
        # MediaPipe reads only the first batch item (and writes one): larger batches are not its op.
        return f"the features must be [1, H, W, C], got {list(shape)}"
    return _declared_output_problem(node, (1, options["output_height"], options["output_width"], shape[3]))


def _transform_landmarks_support(node):
    problem = _common_problem(node, n_inputs=2) or _matrix_input_problem(node)
    if problem is not None:
        return problem
    shape = tuple(node.inputs[0].shape)
    if len(shape) != 3 or shape[0] != 1 or shape[2] not in (2, 3):
        # MediaPipe transforms only the first batch item, and only 2-D or 3-D landmarks.
        return f"landmarks must be [1, N, 2] or [1, N, 3], got {list(shape)}"
    return _declared_output_problem(node, shape)


KERNELS = {"Landmarks2TransformMatrix": landmarks_to_transform_matrix,
           "TransformTensorBilinear": transform_tensor_bilinear,
           "TransformLandmarks": transform_landmarks}
SUPPORT = {"Landmarks2TransformMatrix": _landmarks_to_matrix_support,
           "TransformTensorBilinear": _transform_tensor_support,
           "TransformLandmarks": _transform_landmarks_support}


def _transformed_tensor_shape(node, shapes, values):
    options = parse_custom_options(node, BILINEAR_OPTION_KINDS)
    return [(1, options["output_height"], options["output_width"], shapes[0][3])]


OUTPUT_SHAPES = {"Landmarks2TransformMatrix": lambda node, shapes, values: [(1, 4, 4)],
                 "TransformTensorBilinear": _transformed_tensor_shape,
                 "TransformLandmarks": lambda node, shapes, values: [shapes[0]]}
