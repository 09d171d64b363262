"""Fuse a channel gate, MUL(x, gate) with gate [B, 1, 1, C] broadcast over H and W (the end of a
squeeze-excite block), into the CONV_2D that alone reads its output: the convolution multiplies
each input vec4 it loads by the gate's (conv.INPUT_GATE), and the MUL's dispatch and its output
tensor go away."""
from ..kernels import epilogue
from ..kernels.conv import INPUT_GATE
from ..phwc4 import Shape4, bhwc
from .common import fuse_into_readers, sole_plain_reader

ENABLED = True  # rewrite_partition skips the rule when False, for A/B measurements (gles-profile --set gpu.transforms.channel_gate.ENABLED=0)


def apply(graph, log):
    fuse_into_readers(graph, log, "MUL", _convolution, _fuse)


def _fuse(graph, node, conv, operands):
    x, gate = _operands(node)
    conv.options[INPUT_GATE] = gate
    graph.set_inputs(conv, [x] + conv.inputs[1:])
    graph.remove_node(node)
    operands.add(id(gate))
    return f"into {conv.label}, which gates its input as it loads it"


def _operands(node):
    """(x, gate) of a MUL: the gate is the operand with one pixel per batch item (the first one
    when both have)."""
    a, b = node.inputs[:2]
    return (b, a) if _one_pixel(a) and not _one_pixel(b) else (a, b)


def _one_pixel(tensor):
    s4 = bhwc(tensor.shape)
    return s4.h == s4.w == 1


def _convolution(graph, node, operands):
    """(the CONV_2D that can take MUL `node` of x and a gate as its input gate, None), (None,
    why not), or (None, None) for a MUL of a constant (no gate)."""
    if any(t.is_const for t in node.inputs[:2]):
        return None, None
    x, gate = _operands(node)
    out = node.outputs[0]
    x4, g4 = bhwc(x.shape), bhwc(gate.shape)
    if len(x.shape) != 4 or tuple(out.shape) != tuple(x.shape):
        return None, f"its output {list(out.shape)} is not its input x {list(x.shape)}"
    # Read at (batch, slice): its broadcast view must be its stored layout (a [B, C] gate with
    # B > 1 broadcasts along W, not over the batch).
    if not epilogue.aligned_shape4(gate, len(x.shape)) == g4 == Shape4(x4.b, 1, 1, x4.c):
        return None, f"operand {list(gate.shape)} is not a [{x4.b}, 1, 1, {x4.c}] gate of x {list(x.shape)}"
    conv, why = sole_plain_reader(graph, node, operands)
    if why:
        return None, why
    if conv.op != "CONV_2D" or any(t is out for t in conv.inputs[1:]):
        return None, f"{conv.label} does not read it as a convolution's input"
    if conv.options.get(INPUT_GATE) is not None:
        return None, f"{conv.label} gates its input already"
    return conv, None
