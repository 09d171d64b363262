"""Fuse the square of a tensor (MUL of it by itself, SQUARE, POW by 2) read only by a reduction
(SUM, MEAN, ...) into that reduction: it squares each element it loads (reduce.INPUT_SQUARED), and
the square's dispatch and its output tensor go away. ConvNeXt-V2's global response normalization
sums x * x over H and W in every block; an L2 norm written out (sqrt(sum(x^2))) does the same.

The square is then computed in highp from x as stored, where before it was stored: rounded to the
storage precision, and past half's 65504 from |x| = 256 on.
"""
import numpy as np

from ...ops.common import ACT_NONE, fused_activation
from ..kernels import epilogue
from ..kernels.reduce import INPUT_ADDEND, INPUT_SQUARED, OP_CODES
from .common import fuse_into_readers, sole_reader

# rewrite_partition skips the rule when False (gles-profile --set gpu.transforms.square_into_reduce.ENABLED=0)
ENABLED = True
SQUARES = ("MUL", "SQUARE", "POW")


def apply(graph, log):
    for op in SQUARES:
        fuse_into_readers(graph, log, op, _reduction, _fuse)


def _fuse(graph, node, reduction, operands):
    graph.set_options(reduction, {**reduction.options, INPUT_SQUARED: True})
    graph.set_inputs(reduction, [node.inputs[0]] + reduction.inputs[1:])
    graph.remove_node(node)
    return f"into {reduction.label}, which squares each element it loads"


def _squared(node):
    """Whether `node` computes x * x of its first input, with nothing after it."""
    x = node.inputs[0]
    if fused_activation(node) != ACT_NONE or epilogue.steps_of(node) or x.is_const:
        return False
    if x.dtype != np.float32 or node.outputs[0].dtype != np.float32:
        return False
    if node.op == "SQUARE":
        return True
    other = node.inputs[1]
    if node.op == "MUL":
        return other is x
    return other.is_const and other.size == 1 and float(np.asarray(other.data).reshape(-1)[0]) == 2.0  # POW


def _reduction(graph, node, operands):
    """(the reduction that can square `node`'s input itself, None), (None, why not), or (None,
    None) for a node that computes no square."""
    if not _squared(node):
        return None, None
    out = node.outputs[0]
    if tuple(out.shape) != tuple(node.inputs[0].shape):
        return None, "it broadcasts its input"
    reduction = sole_reader(graph, out, operands)
    if reduction is None:
        return None, "its output is read by more than one node or leaves the partition"
    if reduction.op not in OP_CODES or reduction.inputs[0] is not out or any(t is out for t in reduction.inputs[1:]):
        return None, f"its reader {reduction.label} does not reduce it"
    if reduction.options.get(INPUT_SQUARED) or reduction.options.get(INPUT_ADDEND) is not None:
        return None, f"{reduction.label} already squares or adds to its input"
    return reduction, None
