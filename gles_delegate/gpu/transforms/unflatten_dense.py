"""Run a FULLY_CONNECTED between a flattening RESHAPE and the RESHAPE that restores the leading
dims on the unflattened tensor, with keep_num_dims: Keras' Dense on a rank-3 or rank-4 input
(x [..., C] -> RESHAPE [rows, C] -> FULLY_CONNECTED [rows, U] -> RESHAPE [..., U]) computes the
same products as one FULLY_CONNECTED of x that keeps its dims, and the two RESHAPEs are copies on
the GPU (a rank-2 tensor's PHWC4 layout is not [1, H, W, C]'s). Three dispatches become one, and
the ops after the Dense (its bias ADD, its activation) can then join the FULLY_CONNECTED's
epilogue. Likewise a FULLY_CONNECTED of a rank-3 or rank-4 input without keep_num_dims whose
[rows, U] output one elementwise op alone reads, with a tensor of the input's leading dims + [U]
(litert-torch's transformer MLP: FC [1, N, C] -> [N, C], then the residual ADD with [1, N, C]): it
keeps the dims, the op's operands then have one shape, and the ADD can join the epilogue.
"""
import math

from .common import dense_variant, fused_operands, sole_reader

ENABLED = True  # rewrite_partition skips the rule when False, for A/B measurements (gles-profile --set gpu.transforms.unflatten_dense.ENABLED=0)


# Elementwise ops of two operands that broadcast [rows, U] against leading dims + [U].
BROADCASTING = ("ADD", "SUB", "MUL", "DIV", "MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE")


def apply(graph, log):
    operands = fused_operands(graph)
    for fc in list(graph.nodes):
        if fc.op != "FULLY_CONNECTED" or fc.options.get("keep_num_dims") or len(fc.outputs) != 1:
            continue
        flatten = graph.producer_of(fc.inputs[0])
        if flatten is not None and flatten.op == "RESHAPE" and len(flatten.inputs[0].shape) >= 3:
            reason = _unflatten(graph, fc, flatten, operands)
            done = f"on the input of {flatten.label}, keeping its dims"
        elif len(fc.inputs[0].shape) >= 3:
            reason = _keep_dims_for_reader(graph, fc, operands)
            done = "keeping its input's leading dims, as the op reading it broadcasts it to them"
        else:
            continue
        if reason:
            log.skipped(fc, reason)
        else:
            log.applied(fc, done)


def _keep_dims_for_reader(graph, fc, operands):
    """Give `fc` (input of rank >= 3) keep_num_dims and an output of its input's leading dims +
    [U] when the one op reading its output broadcasts it to that shape; returns why not, or None
    once done."""
    dense = fc.outputs[0]
    kept = tuple(fc.inputs[0].shape[:-1]) + (dense.shape[-1],)
    reader = sole_reader(graph, dense, operands)
    if reader is None or reader.op not in BROADCASTING or len(reader.inputs) != 2:
        return "its output is not read by one elementwise op of two operands alone"
    other = reader.inputs[1] if reader.inputs[0] is dense else reader.inputs[0]
    if other is dense or tuple(other.shape) != kept or tuple(reader.outputs[0].shape) != kept:
        return f"{reader.label} does not broadcast it to {list(kept)}"
    shaped = graph.new_tensor(f"{dense.name}/kept_dims", kept, dense.dtype, quantization=dense.quantization)
    node, reason = dense_variant(fc, fc.inputs, shaped, keep_num_dims=True)
    if reason:
        return reason
    graph.replace_node(fc, [node])
    graph.set_inputs(reader, [shaped if t is dense else t for t in reader.inputs])
    return None


def _unflatten(graph, fc, flatten, operands):
    """Replace flatten -> fc -> its restoring RESHAPE by one FULLY_CONNECTED keeping x's dims;
    returns why not, or None once done."""
    x, flat, dense = flatten.inputs[0], flatten.outputs[0], fc.outputs[0]
    leading = tuple(x.shape[:-1])
    if tuple(flat.shape) != (math.prod(leading), x.shape[-1]):
        return f"{flatten.label} does not flatten {list(x.shape)} to [rows, {x.shape[-1]}]"
    restore = sole_reader(graph, dense, operands)
    if restore is None or restore.op != "RESHAPE":
        return "its output is not read by one RESHAPE alone"
    out = restore.outputs[0]
    if tuple(out.shape) != leading + (dense.shape[-1],):
        return f"{restore.label} does not restore the leading dims {list(leading)}"
    if sole_reader(graph, flat, operands) is None:
        return f"the output of {flatten.label} is also read elsewhere"
    node, reason = dense_variant(fc, [x, *fc.inputs[1:]], out, keep_num_dims=True)
    if reason:
        return reason
    graph.replace_node(restore, [node])
    graph.remove_node(fc)
    graph.remove_node(flatten)
    return None
