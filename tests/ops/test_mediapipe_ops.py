"""MediaPipe's custom ops (LiteRT cannot resolve them): hand-derived cases, an independent loop
implementation that follows mediapipe/util/tflite/operations/*.cc line by line, the options of
the real face_landmark_with_attention model, and rejection of what the kernels don't implement."""
import math

import numpy as np
import pytest
from flatbuffers import flexbuffers

from gles_delegate import Interpreter
from gles_delegate import ops
from gles_delegate.errors import ModelError
from gles_delegate.graph import Graph
from gles_delegate.tflite import ModelBuilder, read_model
from tests.oplib import assert_close, reason_of, run_ours

VERSION = 2


def matrix_options(subset, left, right, out_w, out_h, scale_x=1.0, scale_y=1.0, target=0.0):
    return flexbuffers.Dumps({"subset_idxs": list(subset), "left_rotation_idx": left, "right_rotation_idx": right,
                              "target_rotation_radians": float(target), "output_width": out_w,
                              "output_height": out_h, "scale_x": float(scale_x), "scale_y": float(scale_y)})


def bilinear_options(out_h, out_w):
    return flexbuffers.Dumps({"output_height": out_h, "output_width": out_w})


def one_op_model(op, input_shapes, output_shape, custom_options=None, version=VERSION, dtype=np.float32):
    """A model of one custom op whose inputs are all fed at run time."""
    b = ModelBuilder()
    inputs = [b.input(f"in{k}", shape, dtype) for k, shape in enumerate(input_shapes)]
    out = b.tensor("out", output_shape, dtype)
    b.op(op, inputs, [out], version=version, custom=True, custom_options=custom_options)
    b.output(out)
    return b.build()


def run_one(op, values, output_shape, custom_options=None):
    """Run one op through our Interpreter (so SUPPORT and the declared shapes are exercised)."""
    model = one_op_model(op, [v.shape for v in values], output_shape, custom_options)
    return run_ours(model, values)[0]


def affine(linear, translation):
    """[1, 4, 4] float32 matrix of (x, y) -> linear @ (x, y) + translation."""
    m = np.eye(4, dtype=np.float32)
    m[:2, :2] = linear
    m[:2, 3] = translation
    return m[np.newaxis]


def landmarks_from_xy(xy, rng=None):
    """[1, N, 3] landmarks at (x, y); z, which must not matter, is 0, 1, 2, ... or, given rng,
    uniform in [-5, 5)."""
    points = np.zeros((1, len(xy), 3), np.float32)
    points[0, :, :2] = xy
    points[0, :, 2] = np.arange(len(xy)) if rng is None else rng.uniform(-5, 5, len(xy))
    return points


# -- Landmarks2TransformMatrix ------------------------------------------------------------
def mediapipe_landmarks_to_matrix(landmarks, subset, left, right, out_w, out_h, scale_x, scale_y, target):
    """MediaPipe's v2 kernel as written there: pairs of subset indices, Mat3 / Mat4 products."""
    data = landmarks.reshape(-1)

    def xyz(i):
        return [float(data[i * 3]), float(data[i * 3 + 1]), float(data[i * 3 + 2])]

    def matmul(a, b):
        return [[sum(a[r][k] * b[k][c] for k in range(len(b))) for c in range(len(b[0]))] for r in range(len(a))]

    l_, r_ = xyz(left), xyz(right)
    rotation = target - math.atan2(r_[1] - l_[1], r_[0] - l_[0])
    pairs = [(subset[2 * i], subset[2 * i + 1]) for i in range(len(subset) // 2)]
    if len(subset) % 2:
        pairs.append((subset[-1], subset[-1]))
    points = [xyz(i)[:2] + [1.0] for pair in pairs for i in pair]

    def rot3(r):
        return [[math.cos(r), -math.sin(r), 0.0], [math.sin(r), math.cos(r), 0.0], [0.0, 0.0, 1.0]]

    rotated = [[sum(rot3(rotation)[row][k] * p[k] for k in range(3)) for row in range(3)] for p in points]
    xs, ys = [p[0] for p in rotated], [p[1] for p in rotated]
    width, height = max(xs) - min(xs), max(ys) - min(ys)
    mid = [(max(xs) + min(xs)) / 2, (max(ys) + min(ys)) / 2, 1.0]
    center = [sum(rot3(-rotation)[row][k] * mid[k] for k in range(3)) for row in range(3)]

    def mat4(a, b, c, d, tx, ty):
        return [[a, b, 0.0, tx], [c, d, 0.0, ty], [0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]]

    r = -rotation
    t = mat4(1, 0, 0, 1, center[0], center[1])
    t = matmul(t, mat4(math.cos(r), -math.sin(r), math.sin(r), math.cos(r), 0.0, 0.0))
    t = matmul(t, mat4(scale_x * width / out_w, 0, 0, scale_y * height / out_h, 0.0, 0.0))
    t = matmul(t, mat4(1, 0, 0, 1, -out_w / 2.0, -out_h / 2.0))
    return np.array(t, np.float32)[np.newaxis]


def test_matrix_of_an_axis_aligned_box():
    # Box x in [1, 9], y in [2, 6] (center (5, 4), 8 x 4); the eye line is horizontal.
    xy = [(1, 2), (9, 2), (1, 6), (9, 6), (2, 5), (6, 5), (100, -50)]
    options = matrix_options(subset=[0, 1, 2, 3], left=4, right=5, out_w=16, out_h=8, scale_x=1.5, scale_y=2.0)
    got = run_one("Landmarks2TransformMatrix", [landmarks_from_xy(xy)], (1, 4, 4), options)
    # scale: 1.5 * 8 / 16 = 0.75 and 2 * 4 / 8 = 1; translation: center - scale * (16, 8) / 2.
    np.testing.assert_allclose(got, affine(np.diag([0.75, 1.0]), (5 - 0.75 * 8, 4 - 1.0 * 4)), atol=1e-6)


def test_matrix_of_a_box_rotated_by_90_degrees():
    # The right rotation landmark lies straight below the left one (image y points down), so the
    # eye line is at +90 degrees and the crop is turned by 90 degrees. Box x in [1, 5],
    # y in [2, 10]: along the turned axes it is 8 wide and 4 high, centered on (3, 6).
    xy = [(1, 2), (5, 2), (1, 10), (5, 10), (0, 0), (0, 3)]
    options = matrix_options(subset=[0, 1, 2, 3], left=4, right=5, out_w=8, out_h=8)
    got = run_one("Landmarks2TransformMatrix", [landmarks_from_xy(xy)], (1, 4, 4), options)
    a, b = 8 / 8, 4 / 8  # scale along the crop's u and v axes
    # R(90) @ diag(a, b) = [[0, -b], [a, 0]]; translation = center + that @ (-4, -4).
    expected = affine([[0, -b], [a, 0]], (3 + b * 4, 6 - a * 4))
    np.testing.assert_allclose(got, expected, atol=1e-6)
    # Output pixel (0, 0) lands on the box corner (5, 2).
    np.testing.assert_allclose(got[0] @ [0, 0, 0, 1], [5, 2, 0, 1], atol=1e-6)


def test_matrix_with_a_target_rotation():
    # Horizontal eye line, target +90 degrees: the box is measured along axes turned by -90.
    xy = [(0, 0), (4, 0), (0, 2), (4, 2), (0, 0), (1, 0)]
    options = matrix_options(subset=[0, 1, 2, 3], left=4, right=5, out_w=4, out_h=4, target=math.pi / 2)
    got = run_one("Landmarks2TransformMatrix", [landmarks_from_xy(xy)], (1, 4, 4), options)
    a, b = 2 / 4, 4 / 4
    expected = affine([[0, b], [-a, 0]], (2 - b * 2, 1 + a * 2))  # R(-90) @ diag(a, b), center (2, 1)
    np.testing.assert_allclose(got, expected, atol=1e-6)


@pytest.mark.parametrize("seed", range(8))
def test_matrix_matches_mediapipe_loops(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 40))
    landmarks = rng.uniform(-50, 250, (1, n, 3)).astype(np.float32)
    subset = [int(i) for i in rng.integers(0, n, int(rng.integers(1, 12)))]  # odd counts too
    left, right = (int(i) for i in rng.integers(0, n, 2))
    out_w, out_h = (int(v) for v in rng.integers(1, 64, 2))
    scale_x, scale_y = rng.uniform(0.5, 3, 2)
    target = float(rng.uniform(-math.pi, math.pi))
    options = matrix_options(subset, left, right, out_w, out_h, scale_x, scale_y, target)
    got = run_one("Landmarks2TransformMatrix", [landmarks], (1, 4, 4), options)
    expected = mediapipe_landmarks_to_matrix(landmarks, subset, left, right, out_w, out_h, scale_x, scale_y, target)
    assert_close(got, expected, what=f"seed {seed}")


# -- TransformTensorBilinear --------------------------------------------------------------
def mediapipe_transform_tensor(features, matrix, out_h, out_w):
    """MediaPipe's v2 kernel as written there: per pixel and channel, float32 coordinates."""
    f32 = np.float32
    _, height, width, channels = features.shape
    m = matrix.reshape(-1)
    x_t = [m[0], m[1], m[2], f32(float(m[3]) + (float(m[0]) * 0.5 + float(m[1]) * 0.5 - 0.5))]
    y_t = [m[4], m[5], m[6], f32(float(m[7]) + (float(m[4]) * 0.5 + float(m[5]) * 0.5 - 0.5))]
    out = np.zeros((1, out_h, out_w, channels), np.float32)
    for v in range(out_h):
        for u in range(out_w):
            tx = x_t[0] * f32(u) + x_t[1] * f32(v) + x_t[2] * f32(0) + x_t[3]
            ty = y_t[0] * f32(u) + y_t[1] * f32(v) + y_t[2] * f32(0) + y_t[3]
            if tx < 0 or tx > width - 1 or ty < 0 or ty > height - 1:
                continue
            fx, fy = math.floor(tx), math.floor(ty)

            def read(h, w, c):
                return 0.0 if h < 0 or w < 0 or h >= height or w >= width else float(features[0, h, w, c])

            for c in range(channels):
                right, lower = float(tx - fx), float(ty - fy)
                upper_row = f32((1.0 - right) * read(fy, fx, c) + right * read(fy, fx + 1, c))
                lower_row = f32((1.0 - right) * read(fy + 1, fx, c) + right * read(fy + 1, fx + 1, c))
                out[0, v, u, c] = lower * float(lower_row) + (1.0 - lower) * float(upper_row)
    return out


def bilinear(features, matrix, out_h, out_w):
    return run_one("TransformTensorBilinear", [features, matrix], (1, out_h, out_w, features.shape[3]),
                   bilinear_options(out_h, out_w))


def ramp(height, width, channels=2):
    """features[0, y, x, c] = 10 y + x + 100 c: bilinear interpolation reproduces it exactly."""
    y, x, c = np.meshgrid(np.arange(height), np.arange(width), np.arange(channels), indexing="ij")
    return (10.0 * y + x + 100.0 * c).astype(np.float32)[np.newaxis]


def test_identity_returns_the_input():
    features = np.random.default_rng(0).uniform(-1, 1, (1, 5, 7, 3)).astype(np.float32)
    np.testing.assert_array_equal(bilinear(features, affine(np.eye(2), (0, 0)), 5, 7), features)


def test_integer_translation_shifts_and_zeroes_outside():
    features = np.random.default_rng(1).uniform(1, 2, (1, 4, 6, 2)).astype(np.float32)
    got = bilinear(features, affine(np.eye(2), (2, 1)), 4, 6)
    expected = np.zeros_like(features)
    expected[0, :3, :4] = features[0, 1:, 2:]  # output (u, v) reads (u + 2, v + 1)
    np.testing.assert_array_equal(got, expected)


def test_scale_by_two_averages_2x2_blocks():
    features = np.random.default_rng(2).uniform(-1, 1, (1, 6, 8, 3)).astype(np.float32)
    got = bilinear(features, affine(2 * np.eye(2), (0, 0)), 3, 4)
    # Pixel centers: x = 2 (u + 0.5) - 0.5 = 2u + 0.5, halfway between columns 2u and 2u + 1.
    expected = features.reshape(1, 3, 2, 4, 2, 3).mean(axis=(2, 4))
    np.testing.assert_allclose(got, expected, atol=1e-6)


def test_rotation_by_90_degrees():
    n = 5
    features = np.random.default_rng(3).uniform(-1, 1, (1, n, n, 2)).astype(np.float32)
    # (x, y) = R(90) @ (u + .5, v + .5) + (n, 0) - .5 = (n - 1 - v, u): output[v, u] = input[u, n-1-v].
    got = bilinear(features, affine([[0, -1], [1, 0]], (n, 0)), n, n)
    np.testing.assert_array_equal(got[0], features[0].transpose(1, 0, 2)[::-1])


def test_fractional_translation_interpolates():
    features = ramp(4, 5)
    got = bilinear(features, affine(np.eye(2), (0.25, 0.5)), 4, 5)
    v, u = np.meshgrid(np.arange(4), np.arange(5), indexing="ij")
    inside = (u + 0.25 <= 4) & (v + 0.5 <= 3)
    expected = np.where(inside[..., None], ramp(4, 5)[0] + 10 * 0.5 + 0.25, 0)
    np.testing.assert_allclose(got[0], expected, atol=1e-5)
    assert got[0, 0, 4].tolist() == [0, 0] and got[0, 3, 0].tolist() == [0, 0]


def test_hand_computed_sample_between_four_pixels():
    features = np.array([1, 2, 3, 4], np.float32).reshape(1, 2, 2, 1)
    got = bilinear(features, affine(np.eye(2), (0.5, 0.5)), 1, 1)  # samples (0.5, 0.5)
    assert got.tolist() == [[[[2.5]]]]
    got = bilinear(features, affine(np.eye(2), (0.25, 0.75)), 1, 1)  # samples (0.25, 0.75)
    assert got[0, 0, 0, 0] == pytest.approx(0.25 * 0.25 * 2 + 0.75 * 0.25 * 1 + 0.25 * 0.75 * 4 + 0.75 * 0.75 * 3)


def test_out_of_bounds_edges():
    features = ramp(3, 4, channels=1)
    # Output u = 0 samples x = 3 = W - 1 exactly (inside: the pixel's own value); u = 1 samples
    # x = 4 (outside: 0). Starting at x = -1 instead gives 0 then column 0.
    got = bilinear(features, affine(np.eye(2), (3, 0)), 3, 2)
    np.testing.assert_array_equal(got[0, :, :, 0], [[3, 0], [13, 0], [23, 0]])
    got = bilinear(features, affine(np.eye(2), (-1, 0)), 3, 2)
    np.testing.assert_array_equal(got[0, :, :, 0], [[0, 0], [0, 10], [0, 20]])
    got = bilinear(features, affine(np.eye(2), (-0.001, 0)), 3, 1)
    np.testing.assert_array_equal(got, np.zeros((1, 3, 1, 1), np.float32))


@pytest.mark.parametrize("seed", range(8))
def test_bilinear_matches_mediapipe_loops(seed):
    rng = np.random.default_rng(seed)
    height, width, channels = (int(v) for v in rng.integers(2, 9, 3))
    out_h, out_w = (int(v) for v in rng.integers(1, 8, 2))
    angle, scale = rng.uniform(-math.pi, math.pi), rng.uniform(0.3, 2.0, 2)
    rotation = np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
    # Centered on the features with some overhang, so both in- and out-of-bounds samples occur.
    matrix = affine(rotation @ np.diag(scale), rng.uniform(-2, max(height, width) + 2, 2))
    features = rng.uniform(-1, 1, (1, height, width, channels)).astype(np.float32)
    got = bilinear(features, matrix, out_h, out_w)
    assert_close(got, mediapipe_transform_tensor(features, matrix, out_h, out_w), what=f"seed {seed}")


# -- TransformLandmarks -------------------------------------------------------------------
def mediapipe_transform_landmarks(landmarks, matrix):
    m = matrix.reshape(-1)
    out = landmarks.copy()
    for i in range(landmarks.shape[1]):
        x, y = landmarks[0, i, 0], landmarks[0, i, 1]
        out[0, i, 0] = m[0] * x + m[1] * y + m[2] * np.float32(0) + m[3]
        out[0, i, 1] = m[4] * x + m[5] * y + m[6] * np.float32(0) + m[7]
    return out


def transform_landmarks(landmarks, matrix):
    return run_one("TransformLandmarks", [landmarks, matrix], landmarks.shape)


def test_landmarks_under_translation_and_rotation():
    landmarks = np.array([[[1, 2], [3, -4], [0, 0]]], np.float32)
    np.testing.assert_array_equal(transform_landmarks(landmarks, affine(np.eye(2), (0, 0))), landmarks)
    np.testing.assert_array_equal(transform_landmarks(landmarks, affine(np.eye(2), (10, 20))),
                                  [[[11, 22], [13, 16], [10, 20]]])
    np.testing.assert_array_equal(transform_landmarks(landmarks, affine([[0, -1], [1, 0]], (0, 0))),
                                  [[[-2, 1], [4, 3], [0, 0]]])


def test_landmark_z_passes_through():
    landmarks = np.array([[[1, 2, 7], [3, 4, -5]]], np.float32)
    got = transform_landmarks(landmarks, affine(2 * np.eye(2), (1, 1)))
    np.testing.assert_array_equal(got, [[[3, 5, 7], [7, 9, -5]]])


@pytest.mark.parametrize("dims", [2, 3])
@pytest.mark.parametrize("seed", range(3))
def test_landmarks_match_mediapipe_loops(seed, dims):
    rng = np.random.default_rng(seed)
    landmarks = rng.uniform(-100, 100, (1, int(rng.integers(1, 90)), dims)).astype(np.float32)
    matrix = rng.uniform(-3, 3, (1, 4, 4)).astype(np.float32)
    assert_close(transform_landmarks(landmarks, matrix), mediapipe_transform_landmarks(landmarks, matrix))


# -- the real model -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def attention_graph(mediapipe_models):
    return Graph.from_model(read_model(str(mediapipe_models["face_landmark_with_attention"])))


def test_the_attention_models_custom_ops_are_supported(attention_graph):
    custom = [node for node in attention_graph.nodes if node.custom]
    assert sorted({node.op for node in custom}) == ["Landmarks2TransformMatrix", "TransformLandmarks",
                                                     "TransformTensorBilinear"]
    for node in custom:
        assert ops.unsupported_reason(node) is None, node.label


def test_the_attention_models_crop_chain(attention_graph):
    """Landmarks -> matrix -> crop with the model's own options (71 subset indices for the eyes:
    an odd count), through our Interpreter, against the loop implementations."""
    nodes = {node.op: node for node in attention_graph.nodes if node.custom}  # the last of each op
    to_matrix, crop = nodes["Landmarks2TransformMatrix"], nodes["TransformTensorBilinear"]
    options = flexbuffers.Loads(to_matrix.custom_options)
    assert len(options["subset_idxs"]) % 2 == 1
    b = ModelBuilder()
    landmarks = b.input("landmarks", to_matrix.inputs[0].shape)
    features = b.input("features", crop.inputs[0].shape)
    matrix, cropped = b.tensor("matrix", (1, 4, 4)), b.tensor("cropped", crop.outputs[0].shape)
    b.op(to_matrix.op, [landmarks], [matrix], version=to_matrix.version, custom_options=to_matrix.custom_options)
    b.op(crop.op, [features, matrix], [cropped], version=crop.version, custom_options=crop.custom_options)
    b.output(matrix)
    b.output(cropped)
    rng = np.random.default_rng(0)
    # Landmarks of a 48 x 48 feature map (the model scales 192-pixel landmarks by 1/4 before).
    points = np.concatenate([rng.uniform(8, 40, (1, 468, 2)), rng.uniform(-5, 5, (1, 468, 1))], axis=2)
    values = [points.astype(np.float32), rng.uniform(-1, 1, crop.inputs[0].shape).astype(np.float32)]
    got_matrix, got_crop = run_ours(b.build(), values)
    expected_matrix = mediapipe_landmarks_to_matrix(
        values[0], options["subset_idxs"], options["left_rotation_idx"], options["right_rotation_idx"],
        options["output_width"], options["output_height"], options["scale_x"], options["scale_y"],
        options["target_rotation_radians"])
    assert_close(got_matrix, expected_matrix)
    assert_close(got_crop, mediapipe_transform_tensor(values[1], got_matrix, 16, 16))
    assert np.count_nonzero(got_crop) > got_crop.size // 2  # the crop lies mostly inside


def test_refined_landmarks_land_on_the_mesh_regions_they_refine(mediapipe_models):
    """The whole attention model (needs every other op too): each refined region (lips, eyes)
    is predicted inside a crop made by Landmarks2TransformMatrix + TransformTensorBilinear and
    mapped back by TransformLandmarks, so it must cover the mesh landmarks its crop was cut
    around. A wrong matrix convention anywhere in the chain moves or scales it away."""
    path = mediapipe_models["face_landmark_with_attention"]
    graph = Graph.from_model(read_model(str(path)))
    subsets = [flexbuffers.Loads(n.custom_options)["subset_idxs"] for n in graph.nodes
               if n.op == "Landmarks2TransformMatrix"]
    interp = Interpreter(model_path=str(path), cpu_backend="fallback")
    interp.allocate_tensors()
    image = interp.get_input_details()[0]
    interp.set_tensor(image["index"], np.random.default_rng(0).uniform(0, 1, image["shape"]).astype(np.float32))
    interp.invoke()
    outputs = {d["name"]: interp.get_tensor(d["index"]).reshape(-1) for d in interp.get_output_details()}
    mesh = outputs["output_mesh_identity"].reshape(468, 3)[:, :2]
    for name, subset in zip(("output_lips", "output_left_eye", "output_right_eye"), subsets):
        region, refined = mesh[subset], outputs[name].reshape(-1, 2)
        # Pixels of the 192 x 192 input; the regions span 12 to 50 pixels.
        np.testing.assert_allclose(refined.min(axis=0), region.min(axis=0), atol=4, err_msg=name)
        np.testing.assert_allclose(refined.max(axis=0), region.max(axis=0), atol=4, err_msg=name)


# -- rejection ----------------------------------------------------------------------------
GOOD_MATRIX = dict(subset=[0, 1, 2], left=0, right=1, out_w=4, out_h=4)


def matrix_model(version=VERSION, landmarks=(1, 5, 3), output=(1, 4, 4), **overrides):
    options = overrides.pop("custom_options", None) or matrix_options(**{**GOOD_MATRIX, **overrides})
    return one_op_model("Landmarks2TransformMatrix", [landmarks], output, options, version)


def bilinear_model(version=VERSION, features=(1, 4, 4, 2), matrix=(1, 4, 4), output=(1, 3, 3, 2),
                   custom_options=None, dtype=np.float32):
    return one_op_model("TransformTensorBilinear", [features, matrix], output,
                        custom_options or bilinear_options(3, 3), version, dtype)


def landmarks_model(version=VERSION, landmarks=(1, 5, 2), matrix=(1, 4, 4), output=None):
    return one_op_model("TransformLandmarks", [landmarks, matrix], output or landmarks, None, version)


@pytest.mark.parametrize("model, expected", [
    (matrix_model(version=1), "version 1"),
    (matrix_model(left=-1), "left_rotation_idx"),
    (matrix_model(subset=[0, 5]), "out of range"),  # 5 landmarks: 0..4
    (matrix_model(subset=[]), "subset_idxs"),
    (matrix_model(out_w=0), "output_width"),
    (matrix_model(scale_y=0.0), "scale_y"),
    (matrix_model(custom_options=flexbuffers.Dumps({"scale_x": 1.0})), "missing"),
    (matrix_model(custom_options=b"\x07\x00garbage"), "flexbuffer"),
    (matrix_model(landmarks=(1, 5, 2)), "[1, N, 3]"),
    (matrix_model(output=(1, 16)), "declared"),
    (bilinear_model(version=1), "version 1"),
    (bilinear_model(features=(2, 4, 4, 2), output=(2, 3, 3, 2)), "[1, H, W, C]"),
    (bilinear_model(matrix=(1, 3, 3)), "4x4"),
    (bilinear_model(output=(1, 5, 3, 2)), "declared"),
    (bilinear_model(custom_options=flexbuffers.Dumps({"output_height": 3})), "output_width"),
    (bilinear_model(dtype=np.int8), "float32"),
    (landmarks_model(landmarks=(1, 5, 4)), "[1, N, 2]"),
    (landmarks_model(landmarks=(2, 5, 2)), "[1, N, 2]"),
    (landmarks_model(output=(1, 5, 3)), "declared"),
    (landmarks_model(version=3), "version 3"),
])
def test_unsupported_nodes_are_rejected(model, expected):
    reason = reason_of(model)
    assert reason is not None and expected in reason, reason
    with pytest.raises(ModelError, match="cannot run"):
        Interpreter(model_content=model).allocate_tensors()


def test_valid_option_models_are_supported():
    """The rejection cases above differ from these in one thing only."""
    for model in (matrix_model(), bilinear_model(), landmarks_model()):
        assert reason_of(model) is None


def test_options_parsed_once_are_a_fresh_dict_and_a_bad_map_names_each_node():
    """parse_custom_options keeps small maps it parsed: a caller changing what it got must not
    change what the next node with the same bytes gets, and a bad map cached once still names the
    node it is read for."""
    from gles_delegate.ops import mediapipe
    from gles_delegate.graph import Node
    good = Node(index=3, op="Landmarks2TransformMatrix", inputs=[], outputs=[], custom=True,
                custom_options=matrix_options([0, 1], 0, 1, 4, 4))
    first = mediapipe.parse_custom_options(good, mediapipe.MATRIX_OPTION_KINDS)
    first["subset_idxs"].append(99)
    first["scale_x"] = -1
    again = mediapipe.parse_custom_options(good, mediapipe.MATRIX_OPTION_KINDS)
    assert again["subset_idxs"] == [0, 1] and again["scale_x"] == 1.0
    for index in (5, 6):
        bad = Node(index=index, op="TransformTensorBilinear", inputs=[], outputs=[], custom=True,
                   custom_options=flexbuffers.Dumps({"output_height": 3}))
        with pytest.raises(ModelError, match=f"#{index} .*output_width"):
            mediapipe.parse_custom_options(bad, mediapipe.BILINEAR_OPTION_KINDS)
