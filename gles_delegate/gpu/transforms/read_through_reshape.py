"""Remove a RESHAPE / SQUEEZE / EXPAND_DIMS that moves values (no alias) when every node reading
its output is itself a layout op (CONCATENATION, TRANSPOSE, PAD, ...): those run layout_map.glsl,
whose map ends in a row-major index of its source, and a reshape keeps the row-major order, so
they can read the reshape's input with the very same map. The reshape's dispatch and its
intermediate tensor go away (a detection head's RESHAPE -> CONCATENATION becomes one copy)."""
from ..kernels import layout
from .common import fused_operands, is_boundary, readers_of
from .alias_reshape import OPS


def data_inputs(node):
    """The input positions whose values a layout node moves (the others are constants)."""
    if node.op == "CONCATENATION":
        return range(len(node.inputs))
    return (layout.DATA_INPUT.get(node.op, 0),)


def blocker(graph, node, operands):
    """Why the reshape `node` must stay, or None. operands: ids of the tensors fused steps read
    (common.fused_operands), which no layout map reads through."""
    x, out = node.inputs[0], node.outputs[0]
    if node.options.get(layout.ALIAS):
        return "it is free already (an alias)"
    if x.is_const or x.is_variable or out.is_variable:
        return "it reads a constant or a variable tensor"
    if is_boundary(graph, out):
        return "its output leaves the partition"
    if id(out) in operands:
        return "a fused step (an epilogue operand, an input gate) reads its output"
    for reader in readers_of(graph, out):
        if reader.op not in layout.BUILD:
            return f"{reader.label} is not a layout op"
        if reader.options.get(layout.ALIAS):
            return f"{reader.label} shares its storage (an alias)"
        if any(t is out for k, t in enumerate(reader.inputs) if k not in data_inputs(reader)):
            return f"{reader.label} reads it as a parameter"
    return None


def apply(graph, log):
    operands = fused_operands(graph)
    for node in list(graph.nodes):
        if node.op not in OPS:
            continue
        reason = blocker(graph, node, operands)
        if reason:
            log.skipped(node, reason)
            continue
        x, out = node.inputs[0], node.outputs[0]
        source = layout.stored_source(node, x)  # a reshape of a reshape reads the first one's input
        readers = readers_of(graph, out)
        for reader in readers:
            reader.options[layout.ROW_MAJOR_SOURCES] = reader.options.get(layout.ROW_MAJOR_SOURCES, ()) + ((out, source),)
        graph.remove_node(node)
        log.applied(node, f"{', '.join(r.label for r in readers)} read tensor {source.index} in its place")
