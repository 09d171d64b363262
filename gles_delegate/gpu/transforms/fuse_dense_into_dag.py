"""Compute the FULLY_CONNECTED that feeds a POINTWISE_DAG inside the DAG's dispatch: an unrolled
recurrent cell (litert-torch's LSTM / GRU: the state's dense layer, then the gates and the state
update) becomes one dispatch per step instead of two, each a barrier apart.

The layer must have one row (a single pixel of `depth` channels: the cell's state), constant
float weights and bias, and an output read by the DAG alone, only as whole-vec4 blocks (its gate
slices); the DAG's output must fit one workgroup (pointwise.LAYER_LANES vec4s). The workgroup
computes the layer as fully_connected.glsl would (gpu/kernels/pointwise.py, Layer). Runs right
after fuse_pointwise_dag, which makes the DAGs."""
import dataclasses

import numpy as np

from ...graph import option_operands
from ...ops.common import fused_activation
from .. import kernels
from ..kernels import epilogue, pointwise
from ..kernels.conv import optional_input
from ..phwc4 import bhwc
from .common import is_boundary, producer_of, readers_of

ENABLED = True  # rewrite_partition skips the rule when False, for A/B measurements (gles-profile --set gpu.transforms.fuse_dense_into_dag.ENABLED=0)
# One workgroup runs the layer: past this many weights (multiply-adds) it keeps a dispatch of
# its own, spread over the GPU (squeeze_excite's bound for the same one-workgroup layers).
MAX_WEIGHTS = 65536


def apply(graph, log):
    for dag in list(graph.nodes):
        if dag.op != pointwise.OP or dag.options[pointwise.PROGRAM].layer is not None:
            continue
        for fc in _dense_producers(graph, dag):
            reason = _blocker(graph, fc, dag)
            if reason:
                log.skipped(fc, reason)
                continue
            _fuse(graph, fc, dag)
            log.applied(fc, f"computed by {dag.label}'s workgroup before its program reads it")
            break  # one layer per DAG


def _dense_producers(graph, dag):
    """The FULLY_CONNECTED nodes writing a runtime input of `dag`, in input order."""
    found = []
    for tensor in dag.inputs:
        node = producer_of(graph, tensor)
        if node is not None and node.op == "FULLY_CONNECTED" and all(node is not f for f in found):
            found.append(node)
    return found


def _blocker(graph, fc, dag):
    """Why `fc` cannot run inside `dag`'s dispatch, or None."""
    x, weights, bias, out = fc.inputs[0], fc.inputs[1], optional_input(fc, 2), fc.outputs[0]
    if not weights.is_const or weights.dtype != np.float32 or len(weights.shape) != 2:
        return "its weights are not constant float32 [U, K]"
    if bias is not None and (not bias.is_const or bias.dtype != np.float32):
        return "its bias is not constant float32"
    if weights.size > MAX_WEIGHTS:
        return f"it has {weights.size} weights, more than one workgroup runs well ({MAX_WEIGHTS})"
    x4, out4 = bhwc(x.shape), bhwc(out.shape)
    if x.is_const or x4.b * x4.h * x4.w != 1 or x4.c != weights.shape[1] or out4.b * out4.h * out4.w != 1:
        return f"its input tensor {x.index} is not one row of {weights.shape[1]} values"
    if is_boundary(graph, out) or any(r is not dag for r in readers_of(graph, out)):
        return f"its output tensor {out.index} is also read outside {dag.label}"
    program = dag.options[pointwise.PROGRAM]
    if any(dag.inputs[e.tensor] is out and not e.block for e in program.inputs):
        return f"{dag.label} reads its output broadcast, not as channel blocks"
    if bhwc(dag.outputs[0].shape).elements > pointwise.LAYER_LANES:
        return f"{dag.label}'s output takes more than one workgroup ({pointwise.LAYER_LANES} vec4s)"
    if len(_fused_inputs(dag, fc)) > pointwise.MAX_INPUTS:
        return f"{dag.label} would read more than {pointwise.MAX_INPUTS} tensors"
    fused = dataclasses.replace(dag, **_fused(fc, dag))
    reason = kernels.unsupported_reason(fused)  # the layer's shared memory, the template's limits
    return f"{dag.label} could not run it: {reason}" if reason else None


def _fused_inputs(dag, fc):
    """The DAG's inputs with the layer's output replaced by what the layer reads."""
    out = fc.outputs[0]
    kept = [t for t in dag.inputs if t is not out]
    for tensor in [fc.inputs[0], *fc.inputs[1:3], *option_operands(fc)]:
        if tensor is not None and all(tensor is not t for t in kept):
            kept.append(tensor)
    return kept


def _fused(fc, dag):
    """{inputs, options} of the DAG once it computes `fc`: it reads the layer's inputs instead
    of its output, and the layer's entries read shared memory."""
    program, out = dag.options[pointwise.PROGRAM], fc.outputs[0]
    inputs = _fused_inputs(dag, fc)
    position = {id(t): k for k, t in enumerate(inputs)}
    bias = optional_input(fc, 2)
    layer = pointwise.Layer(position[id(fc.inputs[0])], position[id(fc.inputs[1])],
                            -1 if bias is None else position[id(bias)], fused_activation(fc),
                            epilogue.steps_of(fc), out)
    x = position[id(fc.inputs[0])]
    entries = tuple(e._replace(tensor=x, layer=True) if dag.inputs[e.tensor] is out
                    else e._replace(tensor=position[id(dag.inputs[e.tensor])]) for e in program.inputs)
    return {"inputs": inputs,
            "options": {**dag.options, pointwise.PROGRAM: program._replace(inputs=entries, layer=layer)}}


def _fuse(graph, fc, dag):
    """The DAG computes the layer (_fused); the FULLY_CONNECTED goes."""
    fused = _fused(fc, dag)
    graph.set_inputs(dag, fused["inputs"])
    graph.set_options(dag, fused["options"])
    graph.remove_nodes([fc])
