"""Read a channel slice, or write a concatenation's input, in place where it starts or ends
mid-vec4: a SLICE / STRIDED_SLICE / SPLIT / SPLIT_V output or CONCATENATION input that is
channels [c0, c0 + n) of a batch-1 tensor, fitting its own ceil(n / 4) slices from the whole's
slice c0 // 4 (phwc4.lane_offset), is a lane view of the whole (layout.LANE_VIEWS,
KernelEnv.view with lanes): every dispatch reading it realigns each vec4 from the whole's two
(common.glsl's load), the one writing it stores only its own lanes, two at a time
(common.glsl's store: a concatenation input's shift and lane count must be even, since half
storage packs two lanes per 32-bit word and a word stored by two invocations at once would
lose one), and the copy dispatch goes. Runs after slice_views and concat_in_place, which take
the whole-vec4 blocks, on what they left: EdgeNeXt's channel splits at 30 and 60 of 88.

A dispatch tells a lane view from other tensors by its element range, so no node reading or
writing one may touch another tensor of the same outermost storage (their ranges could
overlap), and a lane view holds no other tensor (an alias or a view inside it would be read
as stored)."""
from ...graph import read_tensors
from ...ops.common import ACT_NONE, fused_activation
from ..kernels import epilogue, layout, pointwise
from ..kernels.base import MAX_LANE_READS
from ..phwc4 import bhwc, block_offset, lane_offset
from .common import StorageTree, is_boundary, producer_of, readers_of

ENABLED = True  # rewrite_partition skips the rule when False (gles-profile --set gpu.transforms.lane_views.ENABLED=0)
SLICING = ("SLICE", "STRIDED_SLICE", "SPLIT", "SPLIT_V")


def apply(graph, log):
    tree = StorageTree(graph)
    for node in graph.nodes:
        if node.op not in SLICING + ("CONCATENATION",):
            continue
        reason = _node_blocker(node)
        if reason:
            log.skipped(node, reason)
            continue
        made, notes, reasons = _lane_views_of(graph, tree, node)
        if made:
            graph.set_options(node, {**node.options, layout.LANE_VIEWS: tuple(made)})
            log.applied(node, "; ".join(notes + reasons))
        elif reasons:
            log.skipped(node, "; ".join(reasons))


def _lane_views_of(graph, tree, node):
    """([(position, offset, Lanes)] of the outputs / inputs of `node` made lane views (placed in
    `tree`), [what each is], [why each other is not]); a whole-vec4 block is none of them (rules
    slice_views and concat_in_place take it, or leave it while switched off)."""
    made, notes, reasons = [], [], []
    role = "output" if node.op in SLICING else "input"
    for position, tensor, whole, index_map in _candidates(node):
        if block_offset(whole.shape, index_map) is not None:
            continue
        found = lane_offset(whole.shape, index_map)
        reason = _blocker(graph, tree, node, tensor, whole, found)
        if not reason and role == "input":
            reason = _earlier_copy_blocker(node, position, whole, made)
        if reason:
            reasons.append(f"{role} {position}: {reason}")
            continue
        tree.place(tensor, whole)
        made.append((position, *found))
        first = int(index_map.flat[0]) % whole.shape[-1]
        notes.append(f"{role} {position} (tensor {tensor.index}) is channels {first}..{first + found[1].channels} "
                     f"of tensor {whole.index} in place")
    return made, notes, reasons


def _tensor(node, k):
    """Lane view position k of `node`: an output of a slicing op, an input of a concatenation."""
    return node.outputs[k] if node.op in SLICING else node.inputs[k]


def _node_blocker(node):
    """Why none of `node`'s outputs / inputs can be a lane view, or None."""
    if layout.SUPPORT[node.op](node):
        return "it does not run as a layout map"
    if fused_activation(node) != ACT_NONE or epilogue.steps_of(node):
        return "it applies an activation or epilogue steps (a view would skip them)"
    return None


def _candidates(node):
    """(position, tensor, whole, its index map into the whole) of each output (a slicing op) or
    input (a concatenation) that no view rule took yet."""
    if node.op in SLICING:
        taken = {k for k, _ in node.options.get(layout.VIEW_OUTPUTS, ())}
        source = layout.stored_source(node, node.inputs[layout.DATA_INPUT.get(node.op, 0)])
        maps = layout.slice_maps(node)
        return [(k, out, source, maps[k]) for k, out in enumerate(node.outputs) if k not in taken]
    taken = {j for j, _ in node.options.get(layout.IN_PLACE_INPUTS, ())}
    maps = layout.concatenation_maps(node)
    return [(j, x, node.outputs[0], maps[j]) for j, x in enumerate(node.inputs) if j not in taken]


def _blocker(graph, tree, node, tensor, whole, found):
    """Why `tensor` cannot be a lane view of `whole` found at `found` ((offset, Lanes) or None), or None."""
    if found is None:
        return "it is no channel range of a batch-1 tensor that fits its own vec4s from the whole's"
    if is_boundary(graph, tensor):
        return "it enters or leaves the partition"
    reason = tree.view_blocker(tensor, whole)
    if reason:
        return reason
    if not tree.alone(tensor):
        return f"tensor {tensor.index} shares its storage with another tensor (an alias) or holds a view"
    if id(whole) in _lane_views(graph):
        return f"tensor {whole.index} is a lane view itself (its storage is not laid out as its own)"
    if node.op == "CONCATENATION":
        reason = _writer_blocker(graph, tree, node, tensor, whole, found[1])
    return reason or _readers_blocker(graph, tree, node, tensor, whole)


def _writer_blocker(graph, tree, node, tensor, whole, lanes):
    """Why the node computing concatenation input `tensor` cannot store it as lanes of `whole`."""
    if lanes.shift % 2 or lanes.limit % 2:
        return ("its channels start or end mid-pair of lanes (half storage packs two per 32-bit word, which "
                "two invocations would store at once)")
    if sum(t is tensor for t in node.inputs) > 1:
        return f"tensor {tensor.index} is concatenated twice"
    if layout.stored_source(node, tensor) is not tensor:
        return "it is read through a removed layout op (rule read_through_layout)"
    producer = producer_of(graph, tensor)
    if producer.op in layout.JOINS:
        return f"{producer.label} merges its own inputs' lanes into it (a lane view takes no merge)"
    outermost = tree.outermost(whole)
    if any(t is not tensor and tree.outermost(t) == outermost for t in producer.outputs):
        return f"{producer.label} writes another tensor of tensor {whole.index}'s storage"
    if producer.op == pointwise.OP and any(id(t) in _lane_views(graph) for t in producer.outputs):
        return f"{producer.label} writes a lane view already, in the same dispatch (common.glsl stores one)"
    return None


def _earlier_copy_blocker(node, position, whole, made):
    """Why concatenation input `position` cannot be written in place because the copy dispatch
    of an earlier input stores the vec4s it starts in, or None: layout_map.glsl stores zeros in
    the lanes past a copy's channels (for a later input's dispatch to fill, MERGE keeping those
    below its own), and that copy runs after this input's producer stored its lanes."""
    channels = bhwc(whole.shape).c
    maps = layout.concatenation_maps(node)
    first_slice = int(maps[position].flat[0]) % channels // 4
    written_in_place = {j for j, _ in node.options.get(layout.IN_PLACE_INPUTS, ())} | {j for j, *_ in made}
    for k in range(position):
        end = int((maps[k] % channels).max()) + 1 if maps[k].size else 0
        if k not in written_in_place and end > 4 * first_slice:
            return (f"input {k}'s copy stores zeros past its channels in the vec4 this input starts in, after this "
                    f"input's producer stored its lanes")
    return None


def _readers_blocker(graph, tree, node, tensor, whole):
    """Why a node reading `tensor` (but the concatenation writing it in place) cannot tell it
    from the other tensors it reads, or reads too many lane views, or None."""
    outermost, views = tree.outermost(whole), _lane_views(graph)
    for reader in readers_of(graph, tensor):
        if reader is node and node.op == "CONCATENATION":
            continue
        # what it reads in storage: a layout op reading through a removed one reads that one's source
        others = [layout.stored_source(reader, t) for t in read_tensors(reader) if t is not tensor]
        if any(not t.is_const and tree.outermost(t) == outermost for t in others):
            return f"{reader.label} also reads another tensor of tensor {whole.index}'s storage"
        if len({id(t) for t in others if id(t) in views}) + 1 > MAX_LANE_READS:
            return f"{reader.label} reads more than {MAX_LANE_READS} lane views"
    return None


def _lane_views(graph):
    """ids of the tensors made lane views so far."""
    return {id(_tensor(n, entry[0])) for n in graph.nodes for entry in n.options.get(layout.LANE_VIEWS, ())}
