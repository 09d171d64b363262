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
    if node.op in layout.JOINS:
        return range(len(node.inputs))
    return (layout.DATA_INPUT.get(node.op, 0),)


def own_blocker(node, x, operands):
    """Why the layout op `node` (data input `x`) must stay whatever reads it, or None.
    operands: ids of the tensors fused steps read (common.fused_operands), which no layout map
    reads through."""
    out = node.outputs[0]
    if len(node.outputs) != 1:
        return "it has several outputs"
    if layout.SUPPORT[node.op](node):
        return "it does not run as a layout map (a GATHER of runtime indices)"
    if x.is_const or x.is_variable or out.is_variable:
        return "it reads a constant or a variable tensor"
    if fused_activation(node) != ACT_NONE or epilogue.steps_of(node):
        return "it has a fused activation or epilogue steps"
    if id(out) in operands:
        return "a fused step (an epilogue operand, an input gate) reads its output"
    return None


def readers_blocker(graph, out, source, through):
    """Why the readers of `out`, the output of a layout op whose stored source is `source`, cannot
    read that source through `through` (layout.source_map: None for a reshape's), or None."""
    if is_boundary(graph, out):
        return "its output leaves the partition"
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
        x, out = node.inputs[layout.DATA_INPUT.get(node.op, 0)], node.outputs[0]
        source = layout.stored_source(node, x)
        reason = own_blocker(node, x, operands)
        if reason is None:
            through = layout.source_map(node)
            # A copy of its source unchanged (a reshape back to where a removed one came from):
            # its readers, whatever they are, read the source.
            if through is None and tuple(out.shape) == tuple(source.shape) and out.dtype == source.dtype \
                    and bypass(graph, node, source, out) is None:
                log.applied(node, f"it copies tensor {source.index} unchanged: its readers read that tensor")
                continue
            reason = readers_blocker(graph, out, source, through)
        if reason:
            log.skipped(node, reason)
            continue
        readers = readers_of(graph, out)
        for reader in readers:
            graph.set_options(reader, {**reader.options, layout.READ_THROUGH:
                                       reader.options.get(layout.READ_THROUGH, ()) + ((out, source, through),)})
        graph.remove_node(node)
        log.applied(node, f"{', '.join(r.label for r in readers)} read tensor {source.index} in its place")
