"""Remove a layout op that moves values (RESHAPE, TRANSPOSE, SLICE, GATHER, ...: the ops whose map
layout.py reads off the reference kernel) when every node reading its output is itself a layout
op: those run layout_map.glsl, whose map ends in a row-major index of its source, so they read
the removed op's source through its map instead. A reshape keeps the row-major order, so any
layout op reads through it (a detection head's RESHAPE -> CONCATENATION becomes one copy); any
other op has a map of its own, which the readers compose with theirs (layout.READ_THROUGH): a
reader whose map the kernel can take, then, is one whose map is read off the reference too, and
whose composed map is a strided view of the source once its dims are split into digits
(ShuffleNet's channel shuffle, TRANSPOSE -> RESHAPE -> TRANSPOSE -> RESHAPE -> TRANSPOSE ->
SLICE, becomes the slices alone). Chains collapse node by node, in graph order."""
from ...ops.common import ACT_NONE, fused_activation
from ..kernels import epilogue, layout
from .common import bypass, fused_operands, is_boundary, readers_of

ENABLED = True  # rewrite_partition skips the rule when False (gles-profile --set gpu.transforms.read_through_layout.ENABLED=0)


def data_inputs(node):
    """The input positions whose values a layout node moves (the others are constants)."""
    if node.op == "CONCATENATION":
        return range(len(node.inputs))
    return (layout.DATA_INPUT.get(node.op, 0),)


def blocker(graph, node, operands, through):
    """Why the layout op `node` must stay, or None. operands: ids of the tensors fused steps
    read (common.fused_operands), which no layout map reads through; through: its map
    (layout.source_map: None for a reshape's)."""
    x, out = node.inputs[layout.DATA_INPUT.get(node.op, 0)], node.outputs[0]
    if x.is_const or x.is_variable or out.is_variable:
        return "it reads a constant or a variable tensor"
    if fused_activation(node) != ACT_NONE or epilogue.steps_of(node):
        return "it has a fused activation or epilogue steps"
    if is_boundary(graph, out):
        return "its output leaves the partition"
    if id(out) in operands:
        return "a fused step (an epilogue operand, an input gate) reads its output"
    source = layout.stored_source(node, x)
    for reader in readers_of(graph, out):
        if reader.op not in layout.BUILD:
            return f"{reader.label} is not a layout op"
        if layout.SUPPORT[reader.op](reader):
            return f"{reader.label} runs another kernel (a GATHER of runtime indices)"
        if any(t is out for k, t in enumerate(reader.inputs) if k not in data_inputs(reader)):
            return f"{reader.label} reads it as a parameter"
        if through is None:
            continue
        entries = reader.options.get(layout.READ_THROUGH, ()) + ((out, source, through),)
        reason = layout.read_through_reason(reader, entries)
        if reason:
            return f"{reader.label} cannot read through it: {reason}"
    return None


def apply(graph, log):
    operands = fused_operands(graph)
    for node in list(graph.nodes):
        if node.op not in layout.REMAP_OPS:
            continue
        if len(node.outputs) != 1:
            reason = "it has several outputs"
        elif layout.SUPPORT[node.op](node):
            reason = "it does not run as a layout map (a GATHER of runtime indices)"
        else:
            through = layout.source_map(node)
            if _copies_unchanged(graph, node, through, operands) and _bypassed(graph, node, log):
                continue
            reason = blocker(graph, node, operands, through)
        if reason:
            log.skipped(node, reason)
            continue
        out = node.outputs[0]
        source = layout.stored_source(node, node.inputs[layout.DATA_INPUT.get(node.op, 0)])
        readers = readers_of(graph, out)
        for reader in readers:
            reader.options[layout.READ_THROUGH] = reader.options.get(layout.READ_THROUGH, ()) + ((out, source, through),)
        graph.remove_node(node)
        log.applied(node, f"{', '.join(r.label for r in readers)} read tensor {source.index} in its place")


def _copies_unchanged(graph, node, through, operands):
    """Whether layout op `node` writes its stored source's values in their own order and shape
    (a reshape back to the shape a removed reshape came from): its output is its source."""
    x, out = node.inputs[layout.DATA_INPUT.get(node.op, 0)], node.outputs[0]
    source = layout.stored_source(node, x)
    return (through is None and tuple(out.shape) == tuple(source.shape) and out.dtype == source.dtype
            and not (source.is_const or source.is_variable or out.is_variable) and id(out) not in operands
            and fused_activation(node) == ACT_NONE and not epilogue.steps_of(node))


def _bypassed(graph, node, log):
    """Remove the unchanged copy `node` (common.bypass): True once it is gone."""
    source = layout.stored_source(node, node.inputs[layout.DATA_INPUT.get(node.op, 0)])
    if bypass(graph, node, source, node.outputs[0]) is not None:
        return False
    log.applied(node, f"it copies tensor {source.index} unchanged: its readers read that tensor")
    return True
