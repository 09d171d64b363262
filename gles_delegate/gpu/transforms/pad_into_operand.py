"""Fold a PAD that only appends zero channels into the epilogue steps that read its output:
MediaPipe's blocks pad a pooled or strided shortcut to the next block's width and add it to the
block's convolution (rule fuse_residual_add makes that ADD a step of the convolution's epilogue
reading the PAD's output). The step reads the unpadded tensor instead, as zero past its channels
(epilogue Step.padded_c, EPk_ZERO_C), and the PAD's dispatch and output go:
face_detection_short_range 56 -> 45 dispatches, face_landmark_with_attention 204 -> 195."""
import dataclasses

import numpy as np

from ...graph import EPILOGUE_KEY, INPUT_ADDEND_KEY, INPUT_GATE_KEY
from ..kernels import epilogue
from ..phwc4 import bhwc
from .common import is_boundary, readers_of

ENABLED = True  # rewrite_partition skips the rule when False (gles-profile --set gpu.transforms.pad_into_operand.ENABLED=0)


def apply(graph, log):
    for node in list(graph.nodes):
        if node.op not in ("PAD", "PADV2"):
            continue
        reason = _blocker(graph, node)
        if reason:
            log.skipped(node, reason)
            continue
        x, out = node.inputs[0], node.outputs[0]
        readers = readers_of(graph, out)  # every one through its epilogue steps alone (_blocker)
        for reader in readers:
            steps = tuple(dataclasses.replace(s, operand=x, padded_c=True) if s.operand is out else s
                          for s in epilogue.steps_of(reader))
            graph.set_options(reader, {**reader.options, EPILOGUE_KEY: steps})
        graph.remove_node(node)
        log.applied(node, f"{', '.join(r.label for r in readers)} read tensor {x.index}, zero past its channels")


def _blocker(graph, node):
    """Why the PAD `node` stays, or None."""
    x, out = node.inputs[0], node.outputs[0]
    pads = node.inputs[1]
    if not pads.is_const or (len(node.inputs) > 2 and node.inputs[2] is not None
                             and (not node.inputs[2].is_const or np.any(np.asarray(node.inputs[2].data) != 0))):
        return "its paddings or its value are not constants, or the value is not zero"
    rows = np.asarray(pads.data).reshape(-1, 2)
    if rows[:-1].any() or rows[-1, 0] != 0 or rows[-1, 1] <= 0:
        return "it pads more than zero channels after the last"
    if x.is_const or x.dtype != np.float32 or x.quantization is not None or x.shape[-1] < 2:
        return "its input is no runtime float32 tensor of two or more channels"
    if is_boundary(graph, out) or not all(_reads_as_operand(r, out) for r in readers_of(graph, out)):
        return "its output is read otherwise than as an epilogue step's operand, or leaves the partition"
    for reader in readers_of(graph, out):
        if bhwc(reader.outputs[0].shape) != bhwc(out.shape) or len(reader.outputs[0].shape) != len(out.shape):
            return f"{reader.label} does not read it at the position it writes"
    return None


def _reads_as_operand(reader, out):
    """Whether `reader` reads `out` only as an epilogue step's binary operand."""
    return (all(t is not out for t in reader.inputs) and reader.options.get(INPUT_GATE_KEY) is not out
            and reader.options.get(INPUT_ADDEND_KEY) is not out
            and any(s.operand is out for s in epilogue.steps_of(reader)))
