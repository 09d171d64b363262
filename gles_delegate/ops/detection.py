"""Detection post-processing: NON_MAX_SUPPRESSION_V4 (hard NMS) and NON_MAX_SUPPRESSION_V5
(Soft-NMS with Gaussian weighting), float32, with TFLite's semantics (non_max_suppression.cc,
reference_ops::NonMaxSuppression).

Candidates above the score threshold sit in a std::priority_queue ordered by score alone, so
equal scores leave it in the order of libstdc++'s heap algorithms: Heap below replays them
(push_heap / pop_heap) to pop ties in the same order as LiteRT. The IoU is computed in float32
step by step as TFLite does (a box of non-positive area overlaps nothing).
"""
import math

import numpy as np

from .checks import arity_reason, node_error

F32, I32 = np.dtype(np.float32), np.dtype(np.int32)
V5 = "NON_MAX_SUPPRESSION_V5"


class Heap:
    """A max-heap of (score, index, suppress_begin) candidates ordered by score only, laid out
    and reordered exactly as std::priority_queue over libstdc++'s push_heap / pop_heap."""

    def __init__(self):
        self.items = []

    def __len__(self):
        return len(self.items)

    def push(self, item):
        self.items.append(item)
        self._sift_up(len(self.items) - 1, 0, item)

    def pop(self):
        """Remove and return the top (highest score)."""
        items = self.items
        top, last = items[0], items.pop()
        if items:
            self._adjust(last)
        return top

    def _sift_up(self, hole, top, value):
        """std::__push_heap: move the hole up while its parent scores below value."""
        items = self.items
        parent = (hole - 1) // 2
        while hole > top and items[parent][0] < value[0]:
            items[hole] = items[parent]
            hole, parent = parent, (parent - 1) // 2
        items[hole] = value

    def _adjust(self, value):
        """std::__adjust_heap from the root: walk the hole down to a leaf by the larger child
        (the right one unless it scores below the left), then sift `value` up from there."""
        items, length = self.items, len(self.items)
        hole = child = 0
        while child < (length - 1) // 2:
            child = 2 * (child + 1)
            if items[child][0] < items[child - 1][0]:
                child -= 1
            items[hole], hole = items[child], child
        if length % 2 == 0 and child == (length - 2) // 2:
            child = 2 * (child + 1)
            items[hole], hole = items[child - 1], child - 1
        self._sift_up(hole, 0, value)


def _corners(boxes):
    """[N, 4] boxes (y1, x1, y2, x2, either corner order) -> (ymin, xmin, ymax, xmax, area), float32."""
    y1, x1, y2, x2 = boxes.T
    ymin, ymax, xmin, xmax = np.minimum(y1, y2), np.maximum(y1, y2), np.minimum(x1, x2), np.maximum(x1, x2)
    return ymin, xmin, ymax, xmax, (ymax - ymin) * (xmax - xmin)


def _ious(corners, i, others):
    """float32 IoU of box i with each box of `others` (an index array), TFLite's float steps: 0
    when either area is not positive or the union is 0."""
    ymin, xmin, ymax, xmax, area = corners
    zero = np.float32(0)
    height = np.maximum(np.minimum(ymax[i], ymax[others]) - np.maximum(ymin[i], ymin[others]), zero)
    width = np.maximum(np.minimum(xmax[i], xmax[others]) - np.maximum(xmin[i], xmin[others]), zero)
    intersection = height * width
    union = area[i] + area[others] - intersection
    with np.errstate(invalid="ignore", divide="ignore"):
        iou = intersection / union
    return np.where((area[i] <= 0) | (area[others] <= 0) | (union == 0), zero, iou).astype(np.float32)


def _scalar(node, value, what):
    value = np.asarray(value)
    if value.size != 1:
        raise node_error(node, f"{what} must hold one value, got shape {list(value.shape)}")
    return value.reshape(-1)[0]


def _suppress(corners, candidate, selected, iou_threshold, score_threshold, scale):
    """The inner loop of NonMaxSuppression for one popped candidate [score, index, begin]:
    compare it with the boxes selected since its last visit, newest first; `scale` is
    -0.5 / sigma for Soft-NMS, else None. Returns (hard suppressed, its decayed score)."""
    score, index, begin = candidate
    ious = _ious(corners, index, np.asarray(selected[begin:], np.int64))[::-1]
    for iou in ious:
        if iou >= iou_threshold:
            return True, score
        if scale is not None:
            # score * expf(scale * iou * iou) in float32; expf as glibc's (correctly rounded)
            # rather than numpy's vectorized float32 exp, which may land an ulp away.
            score = np.float32(score * np.float32(math.exp(float(np.float32(scale * iou * iou)))))
        if score <= score_threshold:
            break
    return False, score


def non_max_suppression(node, inputs):
    """NON_MAX_SUPPRESSION_V4 / V5: boxes [N, 4], scores [N], max_output_size [] (int32),
    iou_threshold [], score_threshold [] (V5: soft_nms_sigma []) -> selected indices
    [max_output_size] (int32, zero past the selections), (V5: their scores [max_output_size],
    zero past them), and the count of selections [] (int32)."""
    boxes, scores = (np.asarray(x, np.float32) for x in inputs[:2])
    max_output_size = int(_scalar(node, inputs[2], "max_output_size"))
    iou_threshold, score_threshold = (np.float32(_scalar(node, x, what)) for x, what in
                                      zip(inputs[3:5], ("iou_threshold", "score_threshold")))
    sigma = np.float32(_scalar(node, inputs[5], "soft_nms_sigma")) if node.op == V5 else np.float32(0)
    if max_output_size < 0:
        raise node_error(node, f"max_output_size {max_output_size} is negative")
    if sigma < 0:
        raise node_error(node, f"soft_nms_sigma {sigma} is negative")
    if boxes.ndim != 2 or boxes.shape[1] != 4 or scores.shape != boxes.shape[:1]:
        raise node_error(node, f"boxes {list(boxes.shape)} and scores {list(scores.shape)} are not [N, 4] and [N]")
    heap = Heap()
    for index in np.flatnonzero(scores > score_threshold).tolist():
        heap.push([scores[index], index, 0])
    count = min(len(heap), max_output_size)
    scale = np.float32(-0.5) / sigma if sigma > 0 else None
    corners, selected, selected_scores = _corners(boxes), [], []
    while len(selected) < count and len(heap):
        candidate = heap.pop()
        original = candidate[0]
        hard, candidate[0] = _suppress(corners, candidate, selected, iou_threshold, score_threshold, scale)
        candidate[2] = len(selected)
        if hard:
            continue
        if candidate[0] == original:
            selected.append(candidate[1])
            selected_scores.append(candidate[0])
        if candidate[0] > score_threshold:  # soft-suppressed but still above: back in the queue
            heap.push(candidate)
    indices = np.zeros(max_output_size, np.int32)
    indices[:len(selected)] = selected
    total = np.asarray(len(selected), np.int32)
    if node.op != V5:
        return [indices, total]
    chosen = np.zeros(max_output_size, np.float32)
    chosen[:len(selected)] = selected_scores
    return [indices, chosen, total]


def _support(node):
    """float32 boxes, scores, thresholds (and sigma); int32 max_output_size and outputs but the
    selected scores. TFLite also runs int8 / int16 NMS with its own fixed-point IoU: refused."""
    v5 = node.op == V5
    reason = arity_reason(node, 6 if v5 else 5, 3 if v5 else 2)
    if reason:
        return reason
    floats = [t for k, t in enumerate(node.inputs) if k != 2] + ([node.outputs[1]] if v5 else [])
    if any(t.dtype != F32 for t in floats):
        return "boxes, scores, thresholds" + (", sigma and selected scores" if v5 else "") + \
            " must be float32 (quantized NMS is not in the reference)"
    if node.inputs[2].dtype != I32 or node.outputs[0].dtype != I32 or node.outputs[-1].dtype != I32:
        return "max_output_size, the selected indices and their count must be int32"
    boxes, scores = node.inputs[0].shape, node.inputs[1].shape
    if len(boxes) != 2 or boxes[1] != 4 or tuple(scores) != tuple(boxes[:1]):
        return f"boxes {list(boxes)} and scores {list(scores)} are not [N, 4] and [N]"
    if any(len(t.shape) != 0 for k, t in enumerate(node.inputs) if k >= 2):
        return "max_output_size, the thresholds and sigma must be scalars"
    return None


def _shapes(node, shapes, values):
    """[max_output_size] per selection output and a scalar count; None while the size is a
    runtime value."""
    if values[2] is None:
        return None
    size = int(np.asarray(values[2]).reshape(-1)[0])
    if size < 0:
        return None  # the kernel says why
    return [(size,)] * (2 if node.op == V5 else 1) + [()]


KERNELS = {"NON_MAX_SUPPRESSION_V4": non_max_suppression, V5: non_max_suppression}
SUPPORT = {op: _support for op in KERNELS}
OUTPUT_SHAPES = {op: _shapes for op in KERNELS}
