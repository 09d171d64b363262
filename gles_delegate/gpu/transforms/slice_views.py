"""Read a SLICE / STRIDED_SLICE / SPLIT / SPLIT_V output in place: an output whose PHWC4 storage
is one contiguous block of its input's (phwc4.block_offset: a channel range starting at a
multiple of 4 of a batch-1 tensor, ending at a multiple of 4 or at the last channel; a range of
the outermost dim of more than one element, such as an attention's q, k, v of a [3, ...] tensor)
is a view of that block (KernelEnv.view): its readers read the input's storage at its offset,
and the op's copy dispatch goes. A slice reading through a removed layout op
(read_through_layout) is a view of the tensor it reads, where its composed map is a block of it
(a row of a [rows, C] FULLY_CONNECTED output, reshaped to [rows, 1, C]). MixNet's channel groups, vit_tiny_96's and mobilevit_xxs's
q / k / v."""
from ...ops.common import ACT_NONE, fused_activation
from ..kernels import epilogue, layout
from ..phwc4 import block_offset
from .common import StorageTree

ENABLED = True  # rewrite_partition skips the rule when False (gles-profile --set gpu.transforms.slice_views.ENABLED=0)
OPS = ("SLICE", "STRIDED_SLICE", "SPLIT", "SPLIT_V")


def apply(graph, log):
    tree = StorageTree(graph)
    for node in graph.nodes:
        if node.op not in OPS:
            continue
        reason = node_blocker(node)
        if reason:
            log.skipped(node, reason)
            continue
        x = layout.stored_source(node, node.inputs[layout.DATA_INPUT.get(node.op, 0)])
        views, reasons = [], []
        for k, (out, index_map) in enumerate(zip(node.outputs, layout.slice_maps(node))):
            offset = block_offset(x.shape, index_map)
            reason = tree.view_blocker(out, x) or (
                None if offset is not None else "it is no contiguous block of the input's PHWC4 storage")
            if reason:
                reasons.append(f"output {k}: {reason}")
                continue
            tree.place(out, x)
            views.append((k, offset))
        if not views:
            log.skipped(node, "; ".join(reasons))
            continue
        graph.set_options(node, {**node.options, layout.VIEW_OUTPUTS: tuple(views)})
        log.applied(node, ", ".join(f"tensor {node.outputs[k].index} reads tensor {x.index} in place at element "
                                    f"{offset}" for k, offset in views) + "".join(f"; {r}" for r in reasons))


def node_blocker(node):
    """Why none of `node`'s outputs can be a view of its input, or None."""
    if layout.SUPPORT[node.op](node):
        return "it does not run as a layout map"
    if fused_activation(node) != ACT_NONE or epilogue.steps_of(node):
        return "it applies epilogue steps (a view would skip them)"
    return None
