"""NON_MAX_SUPPRESSION_V4 / V5 (ops/detection.py) against LiteRT's builtin kernels: random boxes
(corners in either order, empty boxes), tied scores, every threshold regime, Soft-NMS."""
import numpy as np
import pytest

from tests.oplib import In, assert_kernel_error, assert_rejected, check_op

V4, V5 = "NON_MAX_SUPPRESSION_V4", "NON_MAX_SUPPRESSION_V5"


def random_boxes(rng, n, clustered=True):
    """n boxes [y1, x1, y2, x2] in a unit square, a few around the same spots so that they
    overlap; some with swapped corners, some empty (zero height)."""
    centers = rng.uniform(0, 1, (3 if clustered else n, 2))[rng.integers(0, 3 if clustered else n, n)]
    centers += rng.normal(0, 0.05, (n, 2))
    sizes = rng.uniform(0.05, 0.4, (n, 2))
    boxes = np.concatenate([centers - sizes / 2, centers + sizes / 2], axis=1)
    swap = rng.random(n) < 0.2
    boxes[swap] = boxes[swap][:, [2, 3, 0, 1]]
    empty = rng.random(n) < 0.05
    boxes[empty, 2] = boxes[empty, 0]
    return boxes.astype(np.float32)


def nms_inputs(boxes, scores, max_output, iou, score_threshold, sigma=None, runtime_size=False):
    inputs = [In(boxes), In(scores), In(np.asarray(max_output, np.int32), const=not runtime_size),
              In(np.float32(iou), const=True), In(np.float32(score_threshold), const=True)]
    return inputs + ([] if sigma is None else [In(np.float32(sigma), const=True)])


def check_nms(op, inputs):
    v5 = op == V5
    dtypes = [np.int32, np.float32, np.int32] if v5 else [np.int32, np.int32]
    ours, _ = check_op(op, inputs, output_dtypes=dtypes, n_outputs=len(dtypes))
    return ours


@pytest.mark.parametrize("op", [V4, V5])
def test_nms_matches_litert(op):
    rng = np.random.default_rng(31)
    for n, max_output, iou, score_threshold in [(1, 1, 0.5, 0.0), (12, 5, 0.5, 0.2), (40, 40, 0.3, -np.inf),
                                                (40, 10, 0.0, 0.5), (60, 20, 1.0, 0.1), (25, 0, 0.5, 0.0)]:
        boxes = random_boxes(rng, n)
        scores = rng.uniform(0, 1, n).astype(np.float32)
        check_nms(op, nms_inputs(boxes, scores, max_output, iou, score_threshold, 0.0 if op == V5 else None))


def test_tied_scores_pop_in_litert_heap_order():
    """Scores of three levels only: std::priority_queue pops ties in its heap's order, which the
    reference replays; indices in index order would differ from LiteRT's."""
    rng = np.random.default_rng(32)
    for n in (7, 16, 33, 64):
        boxes = random_boxes(rng, n, clustered=False)
        scores = rng.integers(1, 4, n).astype(np.float32) / 4
        ours = check_nms(V4, nms_inputs(boxes, scores, n, 0.99, 0.0))
        selected = ours[0][:int(ours[1])]
        assert len(np.unique(scores[selected])) < len(selected)  # ties were selected


@pytest.mark.parametrize("sigma", [0.1, 0.5, 2.0])
def test_soft_nms_matches_litert(sigma):
    """Soft-NMS decays overlapping scores (the selected scores differ from the inputs) and
    re-queues candidates still above the threshold."""
    rng = np.random.default_rng(33)
    for n, max_output, iou, score_threshold in [(20, 10, 0.9, 0.05), (50, 30, 1.0, 0.3), (30, 30, 0.5, 0.0)]:
        boxes = random_boxes(rng, n)
        scores = rng.uniform(0, 1, n).astype(np.float32)
        check_nms(V5, nms_inputs(boxes, scores, max_output, iou, score_threshold, sigma))


def test_runtime_max_output_size():
    rng = np.random.default_rng(34)
    boxes, scores = random_boxes(rng, 15), rng.uniform(0, 1, 15).astype(np.float32)
    check_nms(V4, nms_inputs(boxes, scores, 6, 0.4, 0.1, runtime_size=True))


def test_negative_sigma_and_size_fail():
    boxes, scores = np.zeros((3, 4), np.float32), np.ones(3, np.float32)
    assert_kernel_error(V5, nms_inputs(boxes, scores, 2, 0.5, 0.0, -1.0), match="soft_nms_sigma -1.0 is negative",
                        output_dtypes=[np.int32, np.float32, np.int32], n_outputs=3)
    assert_kernel_error(V4, nms_inputs(boxes, scores, -1, 0.5, 0.0, runtime_size=True),
                        match="max_output_size -1 is negative", output_dtypes=[np.int32, np.int32], n_outputs=2)


@pytest.mark.parametrize("boxes,scores,match", [
    (np.zeros((3, 4), np.int8), np.zeros(3, np.int8), "must be float32"),
    (np.zeros((3, 5), np.float32), np.zeros(3, np.float32), r"not \[N, 4\]"),
    (np.zeros((3, 4), np.float32), np.zeros(2, np.float32), r"not \[N, 4\]"),
])
def test_unsupported_nms_is_rejected(boxes, scores, match):
    inputs = [In(boxes, quant=(0.1, 0) if boxes.dtype == np.int8 else None),
              In(scores, quant=(0.1, 0) if scores.dtype == np.int8 else None),
              In(np.asarray(2, np.int32), const=True), In(np.float32(0.5), const=True), In(np.float32(0), const=True)]
    assert_rejected(V4, inputs, match=match, outputs=[((2,), np.int32, None), ((), np.int32, None)])
