"""A CONCATENATION input that is no block of the output's storage (rules concat_in_place and
lane_views leave it a copy dispatch) is stored into its box of the output by the POINTWISE_DAG
that computes it, beside its own store (pointwise.PLACED): an unrolled LSTM's / GRU's h of step t
into the rows [t] of the sequence output, which PHWC4 keeps a row per slice apart. The copy
dispatch goes (torch_lstm: 20 per layer). Runs last, knowing every view.

The box must be one of the output's BHWC view (ranks 1 to 4), at a whole slice along channels,
and an input whose channels do not fill its last vec4 must end the output's channels (the store
writes whole vec4s, its padded lanes zero). The output stays in the partition (a partition
output is stored to the I/O buffer by its copies)."""
from ...ops.common import ACT_NONE, fused_activation
from ..kernels import epilogue, layout, pointwise
from ..phwc4 import bhwc
from .common import is_boundary, producer_of

ENABLED = True  # rewrite_partition skips the rule when False, for A/B measurements (gles-profile --set gpu.transforms.concat_stored_by_producers.ENABLED=0)


def apply(graph, log):
    for concat in list(graph.nodes):
        if concat.op != "CONCATENATION":
            continue
        copied = _copied_inputs(concat)
        if not copied:
            continue
        stored, reasons = [], []
        for j, origin in copied:
            reason = _blocker(graph, concat, j, origin)
            if reason:
                reasons.append(f"input {j}: {reason}")
                continue
            dag = producer_of(graph, concat.inputs[j])
            entry = (dag.outputs.index(concat.inputs[j]), concat.outputs[0], origin)
            graph.set_options(dag, {**dag.options, pointwise.PLACED: dag.options.get(pointwise.PLACED, ()) + (entry,)})
            stored.append(j)
        if stored:
            graph.set_options(concat, {**concat.options, layout.PRODUCER_STORES: tuple(stored)})
            log.applied(concat, f"inputs {stored} stored into their boxes by their producers"
                                + (f"; {'; '.join(reasons)}" if reasons else ""))
        elif reasons:
            log.skipped(concat, "; ".join(reasons))


def _copied_inputs(concat):
    """[(input position, origin (x, y, slice, batch) of its box)] of the inputs the kernel would
    copy (no view), or [] where the output has no BHWC view of one axis per dim (rank > 4)."""
    out = concat.outputs[0]
    rank = len(out.shape)
    if not 1 <= rank <= 4:
        return []
    axis = concat.options.get("axis", 0) % rank
    along = (0, 3)[axis] if rank == 2 else axis + 4 - rank  # BHWC axis: 0 b, 1 h, 2 w, 3 c (phwc4.bhwc)
    viewed = {j for j, *_ in concat.options.get(layout.IN_PLACE_INPUTS, ())} | \
             {j for j, *_ in concat.options.get(layout.LANE_VIEWS, ())}
    copied, offset = [], 0
    for j, x in enumerate(concat.inputs):
        if j not in viewed:
            copied.append((j, _origin(along, offset)))
        offset += x.shape[axis]
    return copied


def _origin(along, offset):
    """(x, y, slice, batch) of a box starting `offset` along BHWC axis `along`; a channel
    offset in slices, or None when it is not a whole one."""
    if along == 3:
        return None if offset % 4 else (0, 0, offset // 4, 0)
    return {0: (0, 0, 0, offset), 1: (0, offset, 0, 0), 2: (offset, 0, 0, 0)}[along]


def _blocker(graph, concat, j, origin):
    """Why input j's producer cannot store it at `origin` of the output, or None."""
    x, out = concat.inputs[j], concat.outputs[0]
    dag = producer_of(graph, x)
    if dag is None or dag.op != pointwise.OP:
        return "it is not computed by a POINTWISE_DAG"
    if origin is None:
        return "its channels start mid-vec4"
    if fused_activation(concat) != ACT_NONE or epilogue.steps_of(concat):
        return f"{concat.label} applies an activation"
    if is_boundary(graph, out):
        return f"tensor {out.index} leaves the partition"
    part, whole = bhwc(x.shape), bhwc(out.shape)
    if part.c % 4 and origin[2] * 4 + part.c != whole.c:
        return "its channels end mid-vec4 before the output's last"
    if len(dag.options.get(pointwise.PLACED, ())) >= pointwise.MAX_PLACED:
        return f"{dag.label} stores {pointwise.MAX_PLACED} boxes already"
    return None
