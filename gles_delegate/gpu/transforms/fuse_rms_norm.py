"""Fuse an RMS normalization written as separate nodes (T5's, LLaMA's, Gemma's: x * rsqrt(mean(x^2)
+ epsilon) * weight) into one LAYER_NORM node that does not center (gpu/kernels/layer_norm.py), one
dispatch. Converters write its statistic as

    r = RSQRT(ADD(MEAN(MUL(x, x) | SQUARE(x) | POW(x, 2), last axis), epsilon)),

litert-torch with the kept axis dropped by the MEAN and put back by a RESHAPE before the RSQRT
(unit RESHAPEs, which only add or drop size-1 dims, may stand anywhere between the MEAN and the
RSQRT); the tail after it (MUL by r, by a weight, an ADD) is checked as fuse_layer_norm checks
its own: it must compute x * r * gamma + beta. A litert-torch T5 encoder: 5 dispatches per
normalization became 1 (docs/compiler.md).
"""
import numpy as np

from ...ops.common import ACT_NONE, fused_activation
from ..kernels import epilogue
from .common import fused_operands, sole_reader
from .fuse_layer_norm import last_axis_mean, only_reader, replace_with_norm, scalar, tail_nodes, unit_reshape

ENABLED = True  # rewrite_partition skips the rule when False (gles-profile --set gpu.transforms.fuse_rms_norm.ENABLED=0)


def apply(graph, log):
    gone, operands = set(), fused_operands(graph)
    for mean in list(graph.nodes):
        if id(mean) in gone or not last_axis_mean(mean):
            continue
        square = graph.producer_of(mean.inputs[0])
        x = squared(square)
        if x is None or sole_reader(graph, square.outputs[0], operands) is not mean:
            continue  # no mean of squares of one tensor: not this rule's
        fused = _fuse(graph, x, square, mean, operands)
        if isinstance(fused, str):
            log.skipped(mean, fused)
        else:
            gone.update(map(id, fused))
            log.applied(mean, f"with {len(fused) - 1} nodes around it as one LAYER_NORM dispatch (not centered)")


def squared(node):
    """The tensor `node` squares (MUL of a tensor by itself, SQUARE, POW by a constant 2), with no
    fused activation or epilogue; else None."""
    if node is None or epilogue.steps_of(node) or fused_activation(node) != ACT_NONE:
        return None
    if node.op == "SQUARE" or (node.op == "MUL" and node.inputs[0] is node.inputs[1]):
        return node.inputs[0]
    if node.op == "POW" and scalar(node.inputs[1]) == 2.0:
        return node.inputs[0]
    return None


def _statistic(graph, mean, operands):
    """[the MEAN's readers up to the RSQRT] (unit RESHAPEs, the ADD, the RSQRT) and epsilon, or
    why not."""
    chain, tensor, epsilon = [], mean.outputs[0], None
    while True:
        reader = sole_reader(graph, tensor, operands)
        if reader is None or epilogue.steps_of(reader):
            return f"{chain[-1].label if chain else mean.label} is not read by one node alone"
        if reader.op == "RESHAPE" and unit_reshape(reader):
            pass
        elif reader.op == "ADD" and epsilon is None and fused_activation(reader) == ACT_NONE:
            epsilon = next((scalar(t) for t in reader.inputs if scalar(t) is not None), None)
            if epsilon is None:
                return f"{reader.label} adds no constant epsilon"
        elif reader.op == "RSQRT" and epsilon is not None and only_reader(graph, tensor, operands, "RSQRT"):
            return chain + [reader], epsilon
        else:
            return f"{reader.label} ({reader.op}) is not the ADD of epsilon, a unit RESHAPE or the RSQRT"
        chain.append(reader)
        tensor = reader.outputs[0]


def _fuse(graph, x, square, mean, operands):
    """Replace the RMS normalization of `x` whose mean of squares `mean` takes by a LAYER_NORM
    node; returns the nodes it replaced, or why not."""
    if x.dtype != np.float32 or tuple(square.outputs[0].shape) != tuple(x.shape):
        return f"{square.label} does not square a float32 tensor elementwise"
    found = _statistic(graph, mean, operands)
    if isinstance(found, str):
        return found
    chain, epsilon = found
    core = [square, mean] + chain
    r = core[-1].outputs[0]
    return replace_with_norm(graph, x, core, epsilon, tail_nodes(graph, x, (r,), square), operands)
