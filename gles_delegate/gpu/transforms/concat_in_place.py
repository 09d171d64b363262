"""Write a CONCATENATION's or PACK's inputs in place: an input whose PHWC4 storage is one
contiguous block of the output's (phwc4.block_offset: channels of a batch-1 tensor from a
multiple of 4, to a multiple of 4 or the last channel; a range of the outermost dim of more than
one element; a PACK's slab along its first axis) is a view of that block (KernelEnv.view): the
kernel computing it writes it straight into its place in the output, and the input's copy
dispatch goes. Readers of the input elsewhere read it there. GhostNet's and MixNet's channel
concatenations, SqueezeNet's fire modules, a tf.stack of feature maps."""
from ...ops.common import ACT_NONE, fused_activation
from ..kernels import epilogue, layout
from ..phwc4 import block_offset
from .common import StorageTree

ENABLED = True  # rewrite_partition skips the rule when False (gles-profile --set gpu.transforms.concat_in_place.ENABLED=0)


def apply(graph, log):
    tree = StorageTree(graph)
    for node in graph.nodes:
        if node.op not in layout.JOINS:
            continue
        reason = _node_blocker(node)
        if reason:
            log.skipped(node, reason)
            continue
        out, in_place, reasons, seen = node.outputs[0], [], [], set()
        for j, (x, index_map) in enumerate(zip(node.inputs, layout.concatenation_maps(node))):
            offset = block_offset(out.shape, index_map)
            reason = _input_blocker(node, x, seen) or tree.view_blocker(x, out) or (
                None if offset is not None else "it is no contiguous block of the output's PHWC4 storage")
            seen.add(id(x))
            if reason:
                reasons.append(f"input {j}: {reason}")
                continue
            tree.place(x, out)
            in_place.append((j, offset))
        if not in_place:
            log.skipped(node, "; ".join(reasons))
            continue
        graph.set_options(node, {**node.options, layout.IN_PLACE_INPUTS: tuple(in_place)})
        log.applied(node, ", ".join(f"tensor {node.inputs[j].index} is written in place at element {offset}"
                                    for j, offset in in_place) + "".join(f"; {r}" for r in reasons))


def _node_blocker(node):
    """Why none of `node`'s inputs can be written in place, or None."""
    if layout.SUPPORT[node.op](node):
        return "it does not run as a layout map"
    if fused_activation(node) != ACT_NONE or epilogue.steps_of(node):
        return "it has a fused activation or epilogue steps (the inputs' producers would skip them)"
    return None


def _input_blocker(node, x, seen):
    """Why input `x` of `node` cannot be written in place for a reason of its own, or None."""
    if id(x) in seen:
        return f"tensor {x.index} is concatenated twice (one copy is written in place)"
    if layout.stored_source(node, x) is not x:
        return "it is read through a removed layout op (rule read_through_layout)"
    return None
