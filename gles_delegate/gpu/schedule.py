"""Dispatch order: independent dispatches side by side, so that fewer barriers separate them.

A barrier (glMemoryBarrier) goes before a dispatch that reads or overwrites what a dispatch since
the last barrier wrote (or overwrites what one read): on a GPU it waits for all of them to
finish, 3-5 us on NVIDIA's driver for even one workgroup (docs/performance.md, `gles-profile
--floor`), so a chain of small dispatches costs its barriers more than its work. Graphs list their
nodes in a topological order that interleaves independent branches (an LSTM cell's four gates and
the products of some of them), where each dispatch that needs its predecessor's output starts a
new barrier phase. This pass reorders the dispatch list greedily into phases: each phase takes,
in list order, the dispatches within a lookahead window that conflict with nothing in the phase
and with no earlier dispatch still unplaced. Dependencies are those of storage, as the arena will
lay it out: a dispatch conflicts with another when one writes a storage group (a tensor with its
aliases and views, KernelEnv.aliases / views) the other reads or writes. The arena is then planned
on the new order (its lifetimes follow it), and the barriers are placed on it as before
(compiler._barriers), so the order changes where barriers go, never whether a dependency has one.
"""
from . import memory

WINDOW = 16  # the most places a dispatch moves ahead


def storage_groups(dispatches, aliases, views):
    """{id(tensor): group key} of every tensor the dispatches touch, tensors sharing storage
    (an alias, a view of a whole) in one group; None when no two share it (each its own group)."""
    if not aliases and not views:
        return None
    storage = memory.Storage(dispatches)
    memory.join_shared(storage, [(source, tensor, 0) for tensor, source in aliases] +
                       [(whole, tensor, offset) for tensor, whole, offset in views])
    return {key: storage.root(key) for key in storage.parent}


def phase_order(dispatches, group_of, window=WINDOW):
    """(indices of `dispatches` in phase order, the number of dispatches of each phase);
    group_of: storage_groups' mapping.

    Each dispatch gets the earliest phase after those of the dispatches it conflicts with (it
    reads a group an earlier one writes, or writes a group an earlier one reads or writes),
    and no earlier than the phases of the dispatches `window` or more places before it, so that
    none moves ahead of them (each place it moves lengthens the lives of tensors). The
    order is by phase, then by the original order: O(n) and a sort."""
    phases, highest = [], []  # highest[j]: the latest phase of dispatches 0 .. j
    written = {}  # group -> phase of its last writer
    read = {}     # group -> latest phase that read it since that write
    for j, d in enumerate(dispatches):
        if group_of is None:
            reads, writes = [id(t) for t in d.reads], [id(t) for t in d.writes]
        else:
            reads, writes = [group_of[id(t)] for t in d.reads], [group_of[id(t)] for t in d.writes]
        phase = highest[j - window] if j >= window else 0
        for g in reads:
            phase = max(phase, written.get(g, -1) + 1)
        for g in writes:
            phase = max(phase, written.get(g, -1) + 1, read.get(g, -1) + 1)
        phases.append(phase)
        highest.append(max(phase, highest[-1]) if highest else phase)
        for g in reads:
            if read.get(g, -1) < phase:
                read[g] = phase
        for g in writes:
            written[g], read[g] = phase, -1
    order = sorted(range(len(dispatches)), key=phases.__getitem__)
    sizes = [0] * (max(phases, default=-1) + 1)
    for phase in phases:
        sizes[phase] += 1
    return order, sizes


def phase_bounds(sizes):
    """(first, last) position of each position's phase, for phases of `sizes` in order."""
    bounds, start = [], 0
    for size in sizes:
        bounds += [(start, start + size - 1)] * size
        start += size
    return bounds
