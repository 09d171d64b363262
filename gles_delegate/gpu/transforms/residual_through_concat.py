"""A GhostNet module's residual ADD applied by its depthwise convolution: ADD(CONCATENATION(x,
DEPTHWISE_CONV_2D(x)), r) along channels, where the convolution keeps x's size (stride 1,
multiplier 1), becomes CONCATENATION(x + r_a, depthwise(x) + r_b), both halves stored by the
convolution's one dispatch (depthwise.PASS_THROUGH: x + r_a from the input it reads; r_b an
epilogue step), r_a / r_b the channel SLICEs of r (views, rule slice_views). The ADD's dispatch
and a barrier go; the concatenation then stays in place (rule concat_in_place).

The ADD's inputs stay as the unfused graph stored them: x and the convolution's output are
rounded to half in half storage before the add (ep_stored / the stored step), so the outputs are
the unfused graph's. Runs after the epilogue fusions (the convolution's own activation and batch
norm are in its epilogue by then; fuse_residual_add could not take this ADD, whose input is a
concatenation)."""
import numpy as np

from ...graph import Node
from ...ops.common import ACT_NONE, fused_activation
from ...ops.conv import strides_of
from ..kernels import depthwise, epilogue
from .common import is_boundary, new_constant, producer_of, readers_of, runs_before

ENABLED = True  # rewrite_partition skips the rule when False, for A/B measurements (gles-profile --set gpu.transforms.residual_through_concat.ENABLED=0)


def apply(graph, log):
    for add in list(graph.nodes):
        if add.op != "ADD" or len(add.inputs) != 2:
            continue
        found, reasons = None, []
        for concat_value, residual in (add.inputs, add.inputs[::-1]):
            reason = _blocker(graph, add, concat_value, residual)
            if reason is None:
                found = (concat_value, residual)
                break
            reasons.append(reason)
        if found is None:
            if any(r is not None and "is not a CONCATENATION" not in r for r in reasons):
                log.skipped(add, "; ".join(r for r in reasons if "is not a CONCATENATION" not in r))
            continue
        conv = _rewrite(graph, add, *found)
        log.applied(add, f"{conv.label} stores both halves of the concatenation plus the residual")


def _blocker(graph, add, value, residual):
    """Why ADD(value, residual) is not a residual over a concatenation [x, depthwise(x)] that the
    convolution can apply, or None."""
    concat = producer_of(graph, value)
    if concat is None or concat.op != "CONCATENATION":
        return f"tensor {value.index} is not a CONCATENATION's"
    if fused_activation(add) != ACT_NONE or epilogue.steps_of(add):
        return f"{add.label} applies an activation or epilogue steps"
    if is_boundary(graph, add.outputs[0]):
        # Its dispatch would store it straight into the I/O buffer as float32; the concatenation's
        # halves are stored in the arena's precision.
        return f"{add.label}'s output leaves the partition"
    shape = tuple(value.shape)
    if len(shape) != 4 or shape[0] != 1 or concat.options.get("axis", 0) % 4 != 3 or len(concat.inputs) != 2:
        return f"{concat.label} does not join two batch-1 tensors along channels"
    if fused_activation(concat) != ACT_NONE or epilogue.steps_of(concat):
        return f"{concat.label} applies an activation"
    if tuple(residual.shape) != shape or residual.is_const or residual.dtype != np.float32:
        return f"the residual tensor {residual.index} is not a runtime float32 tensor of shape {list(shape)}"
    x, half = concat.inputs
    conv = producer_of(graph, half)
    if conv is None or conv.op != "DEPTHWISE_CONV_2D" or conv.inputs[0] is not x or conv.outputs[0] is not half:
        return f"{concat.label}'s second input is not a DEPTHWISE_CONV_2D of its first"
    if tuple(half.shape) != tuple(x.shape) or strides_of(conv) != (1, 1) or x.shape[3] % 4:
        return f"{conv.label} does not keep its input's shape (stride 1, multiplier 1, channels a multiple of 4)"
    if len(conv.outputs) != 1 or conv.options.get(depthwise.TILE_SUMS):
        return f"{conv.label} writes tile sums"
    if len(epilogue.steps_of(conv)) + 1 > epilogue.MAX_STEPS:
        return f"the epilogue of {conv.label} is full ({epilogue.MAX_STEPS} steps)"
    for tensor, readers in ((value, [add]), (half, [concat]), (x, [conv, concat])):
        if is_boundary(graph, tensor) or {id(n) for n in readers_of(graph, tensor)} != {id(n) for n in readers}:
            return f"tensor {tensor.index} is read outside the module or leaves the partition"
    if not runs_before(graph, residual, conv):
        return f"the residual tensor {residual.index} is computed after {conv.label}"
    return None


def _rewrite(graph, add, value, residual):
    """The slices of r before the convolution, its second output and epilogue step, the
    concatenation of them writing the ADD's output; the ADD goes. Returns the convolution."""
    concat = producer_of(graph, value)
    x, half = concat.inputs
    conv = producer_of(graph, half)
    channels = x.shape[3]
    parts = []
    for k in range(2):
        part = graph.new_tensor(f"{residual.name}/part{k}", tuple(x.shape), np.float32)
        begin = new_constant(graph, f"{residual.name}/part{k}_begin", [0, 0, 0, k * channels], np.int32)
        size = new_constant(graph, f"{residual.name}/part{k}_size", list(x.shape), np.int32)
        graph.insert_before(Node(index=add.index, op="SLICE", inputs=[residual, begin, size], outputs=[part]), conv)
        parts.append(part)
    passed = graph.new_tensor(f"{x.name}/plus_residual", tuple(x.shape), np.float32)
    step = epilogue.Step("ADD", parts[1], stored=True)
    graph.set_options(conv, {**conv.options, depthwise.PASS_THROUGH: parts[0],
                             epilogue.KEY: epilogue.steps_of(conv) + (step,)})
    graph.set_outputs(conv, [half, passed])
    graph.set_inputs(concat, [passed, half])
    out = add.outputs[0]
    graph.remove_node(add)
    graph.set_outputs(concat, [out])
    return conv
