"""MediaPipe's custom ops on the GPU against the numpy reference (ops/mediapipe.py), in every
precision: random and hand-made landmarks, matrices and options; the crop chain of the real
face_landmark_with_attention model inside one GPU partition; what the GPU refuses; and the whole
model on the GPU against the reference interpreter.

In the FP16 modes the runtime inputs are first rounded to half (what the arena stores anyway):
a sample point or a box edge then moves by nothing, and the comparison measures the kernel rather
than a half-rounded matrix moving a sample across a pixel edge."""
import math

import numpy as np
import pytest

from gles_delegate import GpuDelegate, Interpreter
from gles_delegate.gpu import kernels
from gles_delegate.graph import Graph
from gles_delegate.tflite import ModelBuilder, read_model
from tests.gpu.gpulib import PRECISIONS, assert_gpu_matches, run_gpu
from tests.oplib import first_node, run_ours
from tests.ops.test_mediapipe_ops import affine, bilinear_options, landmarks_from_xy, matrix_options, one_op_model

MATRIX, BILINEAR, LANDMARKS = "Landmarks2TransformMatrix", "TransformTensorBilinear", "TransformLandmarks"


def as_stored(value, precision):
    """The value the arena holds: rounded to half in the FP16 modes."""
    return value if precision == "fp32" else value.astype(np.float16).astype(np.float32)


def check_model(model, values, precision, gpu_nodes=1, what=""):
    """Run `model` on the reference and on the GPU, compare every output; asserts how many nodes
    the GPU ran. Returns the reference outputs."""
    reference = run_ours(model, values)
    gpu, summary = run_gpu(model, values, precision)
    assert summary["gpu_nodes"] == gpu_nodes and summary["cpu_nodes"] == 0, f"{what}: {summary}"
    for k, (r, g) in enumerate(zip(reference, gpu)):
        assert_gpu_matches(r, g, precision, what=f"{what} output {k}")
    return reference


def check_op(op, values, output_shape, custom_options, precision):
    values = [as_stored(v.astype(np.float32), precision) for v in values]
    model = one_op_model(op, [v.shape for v in values], output_shape, custom_options)
    return check_model(model, values, precision, what=op)[0]


# -- Landmarks2TransformMatrix ------------------------------------------------------------
@pytest.mark.parametrize("precision", PRECISIONS)
def test_matrix_of_hand_made_boxes(precision):
    rng = np.random.default_rng(0)
    # Axis-aligned box x in [1, 9], y in [2, 6] with a horizontal eye line; the point at
    # (100, -50) is outside the subset.
    xy = [(1, 2), (9, 2), (1, 6), (9, 6), (2, 5), (6, 5), (100, -50)]
    got = check_op(MATRIX, [landmarks_from_xy(xy, rng)], (1, 4, 4),
                   matrix_options([0, 1, 2, 3], 4, 5, 16, 8, scale_x=1.5, scale_y=2.0), precision)
    np.testing.assert_allclose(got, affine(np.diag([0.75, 1.0]), (5 - 0.75 * 8, 4 - 1.0 * 4)), atol=1e-6)
    # Eye line at +90 degrees (right below left), and a target rotation.
    xy = [(1, 2), (5, 2), (1, 10), (5, 10), (0, 0), (0, 3)]
    check_op(MATRIX, [landmarks_from_xy(xy, rng)], (1, 4, 4), matrix_options([0, 1, 2, 3], 4, 5, 8, 8), precision)
    check_op(MATRIX, [landmarks_from_xy(xy, rng)], (1, 4, 4),
             matrix_options([0, 1, 2, 3], 4, 5, 4, 6, target=math.pi / 2), precision)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_matrix_with_the_same_left_and_right_landmark(precision):
    """A zero eye line: atan2(0, 0) = 0, so the box is measured along the target axes."""
    rng = np.random.default_rng(1)
    points = landmarks_from_xy(rng.uniform(0, 48, (6, 2)), rng)
    for target in (0.0, 0.7):
        check_op(MATRIX, [points], (1, 4, 4), matrix_options([0, 2, 3, 5], 1, 1, 16, 16, target=target), precision)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("seed", range(4))
def test_matrix_random(seed, precision):
    """Subsets of 1 to 150 indices (more than one per lane of the workgroup, repeats, odd counts)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 500))
    points = landmarks_from_xy(rng.uniform(0, 64, (n, 2)), rng)
    subset = [int(i) for i in rng.integers(0, n, int(rng.integers(1, 150)))]
    left, right = (int(i) for i in rng.choice(n, 2, replace=False))
    points[0, right, :2] = points[0, left, :2] + rng.uniform(10, 30, 2) * rng.choice([-1, 1], 2)
    options = matrix_options(subset, left, right, *(int(v) for v in rng.integers(1, 64, 2)),
                             *rng.uniform(0.5, 3, 2), target=float(rng.uniform(-math.pi, math.pi)))
    check_op(MATRIX, [points], (1, 4, 4), options, precision)


# -- TransformTensorBilinear --------------------------------------------------------------
def bilinear(features, matrix, out_h, out_w, precision):
    return check_op(BILINEAR, [features, matrix], (1, out_h, out_w, features.shape[3]),
                    bilinear_options(out_h, out_w), precision)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_bilinear_hand_made(precision):
    rng = np.random.default_rng(2)
    features = rng.uniform(-1, 1, (1, 5, 7, 6)).astype(np.float32)
    got = bilinear(features, affine(np.eye(2), (0, 0)), 5, 7, precision)
    np.testing.assert_array_equal(got, as_stored(features, precision))  # identity
    got = bilinear(features, affine(np.eye(2), (2, 1)), 5, 7, precision)  # shift; zeros outside
    assert not got[0, 4:].any() and not got[0, :, 5:].any()
    bilinear(features, affine(2 * np.eye(2), (0, 0)), 2, 3, precision)  # 2x2 averages
    bilinear(features, affine([[0, -1], [1, 0]], (5, 0)), 7, 5, precision)  # rotation by 90
    bilinear(features, affine(np.eye(2), (0.25, 0.5)), 5, 7, precision)  # fractional shift


@pytest.mark.parametrize("precision", PRECISIONS)
def test_bilinear_out_of_bounds_edges(precision):
    """x = W - 1 exactly is inside (its far neighbour reads 0 with weight 0), W - 1 + 1/16 and
    -1/16 are outside; the same along y."""
    features = np.arange(1, 1 + 3 * 4 * 5, dtype=np.float32).reshape(1, 3, 4, 5)  # no zeros
    got = bilinear(features, affine(np.eye(2), (3, 0)), 3, 2, precision)
    assert got[0, :, 0].all() and not got[0, :, 1].any()
    for d in (-1 / 16, 1 / 16):
        edge = 0 if d < 0 else -1
        got = bilinear(features, affine(np.eye(2), (d, 0)), 3, 4, precision)[0]
        assert not got[:, edge].any() and np.delete(got, edge % 4, axis=1).all()
        got = bilinear(features, affine(np.eye(2), (0, d)), 3, 4, precision)[0]
        assert not got[edge].any() and np.delete(got, edge % 3, axis=0).all()


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("seed", range(6))
def test_bilinear_random(seed, precision):
    """Rotated, scaled boxes partly outside the features; channel counts on and off slices."""
    rng = np.random.default_rng(seed)
    height, width = (int(v) for v in rng.integers(1, 20, 2))
    channels = int(rng.integers(1, 14))
    out_h, out_w = (int(v) for v in rng.integers(1, 12, 2))
    angle = rng.uniform(-math.pi, math.pi)
    rotation = np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
    matrix = affine(rotation @ np.diag(rng.uniform(0.3, 2.0, 2)), rng.uniform(-2, max(height, width) + 2, 2))
    features = rng.uniform(-1, 1, (1, height, width, channels)).astype(np.float32)
    bilinear(features, matrix, out_h, out_w, precision)


# -- TransformLandmarks -------------------------------------------------------------------
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("dims", [2, 3])
@pytest.mark.parametrize("count", [1, 5, 71, 300])
def test_transform_landmarks(count, dims, precision):
    rng = np.random.default_rng(count * dims)
    landmarks = rng.uniform(-100, 100, (1, count, dims)).astype(np.float32)
    matrix = rng.uniform(-3, 3, (1, 4, 4)).astype(np.float32)
    got = check_op(LANDMARKS, [landmarks, matrix], landmarks.shape, b"", precision)
    if dims == 3:
        np.testing.assert_array_equal(got[..., 2], as_stored(landmarks, precision)[..., 2])


@pytest.mark.parametrize("shape", [(16,), (4, 4), (1, 1, 4, 4), (2, 8)])
def test_other_matrix_shapes_whose_rows_are_consecutive(shape):
    rng = np.random.default_rng(3)
    landmarks = rng.uniform(-10, 10, (1, 7, 2)).astype(np.float32)
    matrix = rng.uniform(-3, 3, shape).astype(np.float32)
    check_op(LANDMARKS, [landmarks, matrix], landmarks.shape, b"", "fp32")


# -- the real model's crop chain ----------------------------------------------------------
@pytest.fixture(scope="module")
def attention_path(mediapipe_models):
    return str(mediapipe_models["face_landmark_with_attention"])


def test_the_attention_models_crop_chain(attention_path):
    """Landmarks -> matrix -> crop of the 48 x 48 x 32 features and the eye landmarks mapped back,
    with the model's own options, as one GPU partition (the matrix never leaves the arena).

    The features are smooth (a few pixels per period): the float32 matrix (1 or 2 ulps off the
    reference's float64-rounded one, as MediaPipe's own float32 one is) moves a sample by ~1e-5
    pixel, which white noise features would turn into an error the fp32 tolerance counts."""
    graph = Graph.from_model(read_model(attention_path))
    nodes = {node.op: node for node in graph.nodes if node.custom}  # the last of each op
    to_matrix, crop, back = nodes[MATRIX], nodes[BILINEAR], nodes[LANDMARKS]
    b = ModelBuilder()
    landmarks = b.input("landmarks", to_matrix.inputs[0].shape)
    features = b.input("features", crop.inputs[0].shape)
    local = b.input("local", back.inputs[0].shape)
    matrix, cropped = b.tensor("matrix", (1, 4, 4)), b.tensor("cropped", crop.outputs[0].shape)
    mapped = b.tensor("mapped", back.outputs[0].shape)
    b.op(MATRIX, [landmarks], [matrix], version=2, custom_options=to_matrix.custom_options)
    b.op(BILINEAR, [features, matrix], [cropped], version=2, custom_options=crop.custom_options)
    b.op(LANDMARKS, [local, matrix], [mapped], version=2, custom=True)
    for index in (matrix, cropped, mapped):
        b.output(index)
    rng = np.random.default_rng(0)
    points = np.concatenate([rng.uniform(8, 40, (1, 468, 2)), rng.uniform(-5, 5, (1, 468, 1))], axis=2)
    _, height, width, channels = crop.inputs[0].shape
    y, x, c = np.meshgrid(np.arange(height), np.arange(width), np.arange(channels), indexing="ij")
    smooth = np.sin(x / 5.0 + c) * np.cos(y / 7.0 - c)
    values = [points.astype(np.float32), smooth[np.newaxis].astype(np.float32),
              rng.uniform(0, 16, back.inputs[0].shape).astype(np.float32)]
    check_model(b.build(), values, "fp32", gpu_nodes=3, what="crop chain")


# -- refusals -----------------------------------------------------------------------------
def const_input_model(op, shapes, output_shape, const_index, custom_options):
    rng = np.random.default_rng(0)
    b = ModelBuilder()
    inputs = [b.const(f"c{k}", rng.uniform(-1, 1, s).astype(np.float32)) if k == const_index
              else b.input(f"in{k}", s) for k, s in enumerate(shapes)]
    out = b.tensor("out", output_shape)
    b.op(op, inputs, [out], version=2, custom=True, custom_options=custom_options)
    b.output(out)
    return b.build()


@pytest.mark.parametrize("model, expected", [
    (const_input_model(BILINEAR, [(1, 4, 4, 2), (1, 4, 4)], (1, 3, 3, 2), 1, bilinear_options(3, 3)), "constant"),
    (const_input_model(LANDMARKS, [(1, 5, 2), (1, 4, 4)], (1, 5, 2), 0, b""), "constant"),
    (one_op_model(LANDMARKS, [(1, 5, 2), (4, 2, 2)], (1, 5, 2), b""), "4 consecutive rows"),
    (one_op_model(BILINEAR, [(1, 4, 4, 2), (1, 2, 1, 8)], (1, 3, 3, 2), bilinear_options(3, 3)),
     "4 consecutive rows"),
    (one_op_model(MATRIX, [(1, 5, 3)], (1, 4, 4), matrix_options([0, 1, 2], 0, 1, 4, 4), version=1), "version 1"),
])
def test_gpu_refusals(model, expected):
    reason = kernels.unsupported_reason(first_node(model))
    assert reason is not None and expected in reason, reason


def test_refused_matrix_layout_still_runs_on_the_cpu():
    rng = np.random.default_rng(4)
    landmarks = rng.uniform(-10, 10, (1, 5, 2)).astype(np.float32)
    matrix = rng.uniform(-3, 3, (4, 2, 2)).astype(np.float32)
    model = one_op_model(LANDMARKS, [landmarks.shape, matrix.shape], landmarks.shape, b"")
    gpu, summary = run_gpu(model, [landmarks, matrix])
    assert summary["gpu_nodes"] == 0
    assert_gpu_matches(run_ours(model, [landmarks, matrix])[0], gpu[0], "fp32")


# -- the whole model ----------------------------------------------------------------------
def test_face_landmark_with_attention_runs_entirely_on_the_gpu(attention_path):
    """Needs a GPU kernel for every op of the model (conv family, PRELU, pooling, PAD, RESHAPE,
    STRIDED_SLICE, the MediaPipe ops): no CPU node, and every output within 1e-4 x max|ref| of
    the reference interpreter (fp32). About 20 s on llvmpipe."""
    def run(delegates):
        interp = Interpreter(model_path=attention_path, experimental_delegates=delegates)
        interp.allocate_tensors()
        image = interp.get_input_details()[0]
        interp.set_tensor(image["index"], np.random.default_rng(0).uniform(0, 1, image["shape"]).astype(np.float32))
        interp.invoke()
        return {d["name"]: interp.get_tensor(d["index"]) for d in interp.get_output_details()}

    reference = run([])
    with GpuDelegate(precision="fp32") as delegate:
        gpu = run([delegate])
        summary = delegate.summary()
    assert summary["cpu_nodes"] == 0 and summary["partitions"] == 1, summary
    assert gpu.keys() == reference.keys()
    for name, expected in reference.items():
        err = float(np.max(np.abs(gpu[name].astype(np.float64) - expected)))
        limit = 1e-4 * float(np.max(np.abs(expected)))
        assert err <= limit, f"{name}: max abs error {err:.3g} > {limit:.3g}"
