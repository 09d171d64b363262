"""Fuse a DEPTHWISE_CONV_2D into the pointwise (1x1, stride 1) CONV_2D that alone reads its
output: the convolution kernel computes each depthwise value as it reads it, so the pair costs one
dispatch and the intermediate tensor is never stored.

The price is recomputation: every group of output slices of the pointwise kernel computes the
depthwise values of its pixels again. Where that extra work is small the fusion wins (a GPU
spends several microseconds on any dispatch and the barrier before it); above MAX_RECOMPUTE_MACS
the pair stays two dispatches."""
from ..gpu.kernels import epilogue
from ..gpu.kernels.conv import DEPTHWISE_PROLOGUE, EXPLICIT_PADDING, SLICE_CHOICES
from ..ops.conv import strides_of
from .common import only_reader_blocker, producer_of

# Multiply-adds the fused kernel may repeat (measured on an H200 with tools/profile_model.py: a
# dispatch with its barrier costs about 5 us there, the time of some 20M multiply-adds in these
# memory-bound kernels).
MAX_RECOMPUTE_MACS = 8_000_000


def recompute_macs(dw, pw):
    """Multiply-adds the fused kernel adds: the depthwise taps of every input channel of every
    output pixel, once per group of output slices (the convolution kernel's widest block)."""
    n, h, w, c = pw.inputs[0].shape
    kh, kw = dw.inputs[1].shape[1:3]
    out_slices = -(-pw.outputs[0].shape[-1] // 4)
    return n * h * w * kh * kw * (-(-c // 4) * 4) * -(-out_slices // SLICE_CHOICES[0])


def blocker(graph, pw):
    """Why pointwise node `pw` cannot absorb the depthwise node computing its input, or None."""
    dw = producer_of(graph, pw.inputs[0])
    if dw is None or dw.op != "DEPTHWISE_CONV_2D":
        return "its input is not computed by a DEPTHWISE_CONV_2D"
    if dw.outputs[0].shape[-1] != dw.inputs[0].shape[-1]:
        return f"{dw.label} has a channel multiplier"
    if epilogue.steps_of(dw):
        return f"{dw.label} applies an epilogue"
    reason = only_reader_blocker(graph, pw.inputs[0], dw)
    if reason:
        return reason
    macs = recompute_macs(dw, pw)
    if macs > MAX_RECOMPUTE_MACS:
        return f"recomputing {dw.label} would cost {macs:,} multiply-adds (more than {MAX_RECOMPUTE_MACS:,})"
    return None


def apply(graph, log):
    for pw in list(graph.nodes):
        if pw.op != "CONV_2D" or tuple(pw.inputs[1].shape[1:3]) != (1, 1) or strides_of(pw) != (1, 1):
            continue
        if EXPLICIT_PADDING in pw.options:
            log.skipped(pw, "it reads explicit padding")
            continue
        reason = blocker(graph, pw)
        if reason:
            log.skipped(pw, reason)
            continue
        dw = producer_of(graph, pw.inputs[0])
        pw.options[DEPTHWISE_PROLOGUE] = dw
        graph.remove_node(dw)
        log.applied(pw, f"computes {dw.label} as it reads it ({recompute_macs(dw, pw):,} multiply-adds again)")
