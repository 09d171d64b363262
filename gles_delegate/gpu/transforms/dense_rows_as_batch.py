"""Store a FULLY_CONNECTED's output as [rows, U] when slicing ops alone read it and more of their
outputs are then views of it. keep_num_dims leaves the output of a [1, T, K] input [1, T, U]: in
its PHWC4 view row t is pixel t of a 1 x T image, its channels T vec4s apart, so a slice of one
row is no block of the storage and costs a copy dispatch. As [rows, U] row t is batch t, one
block of ceil(U / 4) vec4s, and rule slice_views (next) reads such a slice in place. The FC
computes the same rows either way (TFLite's [rows, U] without keep_num_dims); its readers index
it by row-major position (layout.READ_THROUGH), which a reshape keeps. litert-torch's unrolled
GRU / LSTM: the input projection of every time step is one FULLY_CONNECTED, sliced per step and
gate (torch_gru: 120 such slices)."""
from ..kernels import epilogue, layout
from ..phwc4 import bhwc, block_offset, lane_offset
from . import slice_views
from .common import dense_variant, fused_operands, is_boundary, readers_of

ENABLED = True  # rewrite_partition skips the rule when False (gles-profile --set gpu.transforms.dense_rows_as_batch.ENABLED=0)
SLICING = ("SLICE", "STRIDED_SLICE", "SPLIT", "SPLIT_V")


def apply(graph, log):
    operands = fused_operands(graph)
    for fc in list(graph.nodes):
        if fc.op != "FULLY_CONNECTED" or len(fc.outputs) != 1:
            continue
        dense = fc.outputs[0]
        rows = (dense.size // dense.shape[-1], dense.shape[-1]) if dense.shape else None
        if rows is None or bhwc(dense.shape) == bhwc(rows):
            continue  # its rows already are the batch
        slicers, reason = _slicers(graph, fc, dense, operands)
        if reason is None:
            before, after = _views(slicers, dense.shape), _views(slicers, rows)
            if after <= before:
                reason = f"its slices make {after} views as [rows, U] against {before} as {list(dense.shape)}"
        if reason:
            log.skipped(fc, reason)
            continue
        flat = _store_as_rows(graph, fc, dense, rows, slicers)
        if isinstance(flat, str):
            log.skipped(fc, flat)
            continue
        log.applied(fc, f"tensor {flat.index} {list(rows)} holds tensor {dense.index} {list(dense.shape)}: "
                        f"{after} of its slices' outputs become views (against {before})")


def _slicers(graph, fc, dense, operands):
    """([slicing nodes that read `dense`, directly or through a removed layout op], None), or
    (None, why not): every reader must be such a node, reading it as its data."""
    if epilogue.steps_of(fc):
        return None, "it has epilogue steps, which index its output by its own shape"
    if is_boundary(graph, dense) or dense.is_variable or id(dense) in operands:
        return None, "its output leaves the partition or a fused step reads it"
    direct = readers_of(graph, dense)
    through = [n for n in graph.nodes if n not in direct and
               any(source is dense for _, source, _ in n.options.get(layout.READ_THROUGH, ()))]
    slicers = direct + through
    for node in slicers:
        x = node.inputs[layout.DATA_INPUT.get(node.op, 0)]
        if node.op not in SLICING or layout.SUPPORT[node.op](node) or layout.stored_source(node, x) is not dense \
                or any(t is dense for t in node.inputs if t is not x):
            return None, f"{node.label} reads it and is no slicing op reading it as its data"
    if not slicers:
        return None, "nothing slices it"
    return slicers, None


def _views(slicers, shape):
    """How many outputs of `slicers` rules slice_views and lane_views would make views (a block,
    a lane view) of a whole of `shape`: none of a slice that computes (epilogue steps)."""
    return sum(block_offset(shape, m) is not None or lane_offset(shape, m) is not None
               for node in slicers if slice_views.node_blocker(node) is None for m in layout.slice_maps(node))


def _store_as_rows(graph, fc, dense, rows, slicers):
    """Give `fc` a [rows, U] output in place of `dense` and make `slicers` read it in its place;
    the new tensor, or why not."""
    flat = graph.new_tensor(f"{dense.name}/rows", rows, dense.dtype, quantization=dense.quantization)
    node, reason = dense_variant(fc, fc.inputs, flat, keep_num_dims=False)
    if reason:
        return reason
    graph.replace_node(fc, [node])
    for reader in slicers:
        entries = reader.options.get(layout.READ_THROUGH, ())
        if not any(source is dense for _, source, _ in entries):
            entries += ((dense, dense, None),)  # read directly: now a reshape's read of the rows
        graph.set_options(reader, {**reader.options, layout.READ_THROUGH: tuple(
            (shown, flat if source is dense else source, map_) for shown, source, map_ in entries)})
    return flat
