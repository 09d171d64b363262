"""Where an Interpreter's subgraph keeps its tensors on the host: one block of bytes, in which
intermediates whose lifetimes do not overlap share memory, as LiteRT's arena planner shares
them (and as gpu/memory.py shares a GPU partition's arena).

A tensor's lifetime runs over the steps of the execution plan (a CPU node, a LiteRT sub-model,
a GPU partition), from the step that writes it to the last step that reads it. Memory of its
own, for the whole block's life, goes to what the caller keeps (interpreter._Executor.
own_memory: graph inputs and outputs, variables, dynamic tensors, what a GPU partition or a
LiteRT sub-model outputs or keeps to itself, everything when preserving all tensors) and to
tensors read before a step writes them (they hold the zero fill). Memory a step never writes
costs nothing: the block is one calloc, whose pages the OS maps only once written. A chain of 64 ADDs of 32 MiB tensors, each in memory of its own,
peaked at 2.1 GB more than before allocate_tensors(); LiteRT at 125 MB
(tests/reliability/test_cpu_memory.py).
"""
import bisect

import numpy as np

from .gpu import memory

ALIGN = 64  # bytes: every tensor starts on a cache line
# Pairs of shared tensors alive at once above which the plan gives up sharing (every tensor then
# has memory of its own, as before planning): first fit looks at each such pair, and a hostile
# model (50,000 tensors all read by one last node) would make that quadratic.
MAX_OVERLAPS = 1 << 20


def aligned_bytes(tensor):
    """The bytes tensor `tensor` takes in the block, rounded up to ALIGN."""
    return -(-tensor.size * np.dtype(tensor.dtype).itemsize // ALIGN) * ALIGN


def lifetimes(steps):
    """{tensor index: (first, last)} of the tensors whose memory may be shared: written by step
    `first` (a position in `steps`, each with its `nodes`), touched last by step `last`. Left
    out: those read before written."""
    written, first_read, last_touch = {}, {}, {}
    for k, step in enumerate(steps):
        for node in step.nodes:
            for t in node.inputs:
                if t is not None:
                    first_read.setdefault(t.index, k)
                    last_touch[t.index] = k
            for t in node.outputs:
                if t is not None:
                    written.setdefault(t.index, k)
                    last_touch[t.index] = k
    spans = {}
    for index, first in written.items():
        if first_read.get(index, first) >= first:
            spans[index] = (first, last_touch[index])
    return spans


def overlapping_pairs(spans):
    """How many pairs of `spans` ({key: (first, last)}) are alive at one step (about: spans that
    start together count both ways): for each span, those alive when it starts."""
    firsts = sorted(first for first, _ in spans.values())
    lasts = sorted(last for _, last in spans.values())
    return sum(bisect.bisect_right(firsts, first) - bisect.bisect_left(lasts, first) - 1
               for first, _ in spans.values())


def place(tensors, steps, kept):
    """({tensor index: byte offset}, the block's size in bytes, {indices of the tensors that share
    memory}) for `tensors` (those the block holds) run by `steps`; `kept`: indices that get
    memory of their own. The shared ones are placed first fit, largest first (gpu/memory.py's
    greedy_by_size, TFLite's default arena strategy), the others after them."""
    sizes = {t.index: aligned_bytes(t) for t in tensors}
    spans = {i: span for i, span in lifetimes(steps).items() if i in sizes and i not in kept}
    if overlapping_pairs(spans) > MAX_OVERLAPS:
        spans = {}
    offsets, total = memory.plan([memory.Usage(i, sizes[i], *span) for i, span in spans.items()],
                                 "greedy_by_size")
    for t in tensors:
        if t.index not in offsets:
            offsets[t.index] = total
            total += sizes[t.index]
    return offsets, total, set(spans)
