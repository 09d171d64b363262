"""Memory planning: give every arena tensor of a partition an offset (vec4 elements) so tensors
alive at the same time never overlap, using as little memory as possible.

The plan reads what kernels state on their dispatches (kernels/base.py): the arena tensors each
Dispatch reads and writes (a tensor's lifetime: the inclusive range of dispatch indices touching
it), the free reshapes KernelEnv.alias records (the same storage under another shape for the
joint lifetime), the views KernelEnv.view records (a tensor that is a contiguous block of
another's storage, at an offset: a concatenation's input written in its place, a slice read in
place) and Dispatch.inplace (an elementwise output may take the storage of an input that dies at
that dispatch). plan_arena joins tensors that share storage into one usage, each at its offset
in it, then places the usages. Each strategy orders them and places each at the lowest offset that does not
overlap a usage already placed whose lifetime intersects its own (first fit). "best" takes the
smallest of the orders, then searches nearby orders while that lowers the plan (see _improve).
Plans follow dispatch order only: the same dispatch list always gets the same plan.
"""
import random
from dataclasses import dataclass

from .phwc4 import bhwc

STRATEGIES = ("naive", "greedy_in_order", "greedy_by_size", "greedy_by_breadth", "greedy_by_lifetime", "best")
SEARCH_BUDGET = 2000  # first-fit runs "best" may spend searching above the lower bound
RESTART_BUDGET = 50   # of which one restart's local search may spend
# Usages placed in all by those runs: a partition of more than SEARCH_WORK / SEARCH_BUDGET (500)
# usages gets fewer runs (2,000 runs over 4,000 usages took 23 s; 100,000 would take minutes).
SEARCH_WORK = 1_000_000


@dataclass(frozen=True)
class Usage:
    """A storage group's size (vec4 elements) and lifetime (first and last dispatch index,
    inclusive); key names it in a plan's offsets."""
    key: object
    size: int
    first: int
    last: int


def lower_bound(usages):
    """The largest total size (elements) of usages alive at any one dispatch: no plan can use less."""
    return max(_breadths(usages)[1], default=0)


def _breadths(usages):
    """(steps, totals): the dispatch indices where a usage begins or ends, ascending, and the
    total size of the usages alive at each. One sweep, O(n log n) (a sum over every usage per
    step was quadratic: 9 s of the breadth order and lower bound for 2,000 graph outputs)."""
    steps = sorted({u.first for u in usages} | {u.last for u in usages})
    rank = {s: k for k, s in enumerate(steps)}
    change = [0] * (len(steps) + 1)
    for u in usages:
        change[rank[u.first]] += u.size
        change[rank[u.last] + 1] -= u.size
    totals, alive = [], 0
    for delta in change[:-1]:
        alive += delta
        totals.append(alive)
    return steps, totals


def _overlapping(usages):
    """{key: [(key, size) of every other usage whose lifetime intersects its own]}: fixed for a
    set of usages, so the searches' many first-fit runs look only at these, not at every usage
    placed before (most lifetimes are short: a few neighbours each instead of hundreds)."""
    by_first = sorted(usages, key=lambda u: u.first)
    out = {u.key: [] for u in usages}
    for i, usage in enumerate(by_first):
        # By index: a slice of the rest per usage copied O(n) each (quadratic: 15 s for 60,000).
        for j in range(i + 1, len(by_first)):
            other = by_first[j]
            if other.first > usage.last:
                break
            out[usage.key].append((other.key, other.size))
            out[other.key].append((usage.key, usage.size))
    return out


def _first_fit(ordered, overlapping=None):
    """({key: offset}, total): each usage in turn at the lowest offset where it overlaps no
    usage placed before it whose lifetime intersects its own. `overlapping`: _overlapping of
    the same usages (made here when not given)."""
    overlapping = _overlapping(ordered) if overlapping is None else overlapping
    offsets, total = {}, 0
    for usage in ordered:
        conflicts = sorted((offsets[key], offsets[key] + size) for key, size in overlapping[usage.key]
                           if key in offsets)
        offset = 0
        for start, end in conflicts:
            if offset + usage.size <= start:
                break
            offset = max(offset, end)
        offsets[usage.key] = offset
        total = max(total, offset + usage.size)
    return offsets, total


def _naive(usages):
    offsets, total = {}, 0
    for usage in usages:
        offsets[usage.key] = total
        total += usage.size
    return offsets, total


def _breadth_order(usages):
    """Tensors of the widest dispatch (most memory alive) first, larger before smaller."""
    steps, totals = _breadths(usages)
    rank = {s: k for k, s in enumerate(steps)}
    widest = _RangeMax(totals)
    return sorted(usages, key=lambda u: (-widest(rank[u.first], rank[u.last]), -u.size, u.first))


class _RangeMax:
    """max(values[i..j]) in O(1) per query after O(n log n) setup (a sparse table)."""

    def __init__(self, values):
        self.levels = [list(values)]
        width = 1
        while 2 * width <= len(values):
            below = self.levels[-1]
            self.levels.append([max(below[i], below[i + width]) for i in range(len(below) - width)])
            width *= 2

    def __call__(self, i, j):
        level = (j - i + 1).bit_length() - 1
        row = self.levels[level]
        return max(row[i], row[j - (1 << level) + 1])


_ORDERS = {
    "greedy_in_order": lambda us: sorted(us, key=lambda u: (u.first, -u.size)),
    "greedy_by_size": lambda us: sorted(us, key=lambda u: (-u.size, u.first)),
    "greedy_by_breadth": _breadth_order,
    # Long-lived tensors first, at the bottom: they then never sit between two peaks.
    "greedy_by_lifetime": lambda us: sorted(us, key=lambda u: (u.first - u.last, -u.size, u.first)),
}


def plan(usages, strategy="best", bound=None):
    """({key: offset}, total size) for the usages under a strategy (see STRATEGIES). bound:
    lower_bound(usages), where the caller has it."""
    usages = list(usages)
    if strategy == "naive":
        return _naive(usages)
    if strategy == "best":
        return _best(usages, lower_bound(usages) if bound is None else bound)
    if strategy not in _ORDERS:
        raise ValueError(f"unknown memory strategy {strategy!r}; expected one of {STRATEGIES}")
    return _first_fit(_ORDERS[strategy](usages))


def _best(usages, bound):
    """The smallest first-fit plan over the orders, improved by local search; while it stays
    above `bound` (lower_bound of the usages), restarts from seeded random orders that weigh size
    and lifetime (deterministic: the same usages always get the same plan)."""
    overlapping = _overlapping(usages)
    orders, results = [], []
    for order in _ORDERS.values():  # the first order to reach the bound wins: no later one can beat it
        orders.append(order(usages))
        results.append(_first_fit(orders[-1], overlapping))
        if results[-1][1] <= bound:
            break
    k = min(range(len(orders)), key=lambda i: results[i][1])
    budget = max(1, min(SEARCH_BUDGET, SEARCH_WORK // max(len(usages), 1)))
    best = _improve(orders[k], results[k], bound, overlapping, budget)
    rng = random.Random(0)
    for _ in range(budget // RESTART_BUDGET):
        if best[1] <= bound:
            break
        weight = {u.key: u.size * rng.uniform(0.5, 1.5) * (u.last - u.first + 1) ** rng.random() for u in usages}
        order = sorted(usages, key=lambda u: -weight[u.key])
        result = _improve(order, _first_fit(order, overlapping), bound, overlapping, RESTART_BUDGET)
        if result[1] < best[1]:
            best = result
    return best


def _improve(order, result, bound, overlapping, budget=SEARCH_BUDGET):
    """Local search from a first-fit order: a tensor whose block reaches the top of the plan is
    tried ahead of each tensor placed before it; a move that lowers the top is kept and the
    search restarts from it. Stops at the lower bound, when no move helps, or after `budget`
    first-fit runs."""
    offsets, total = result
    while total > bound and budget > 0:
        moved = None
        for usage in [u for u in order if offsets[u.key] + u.size == total]:
            position = order.index(usage)
            for k in range(position):
                trial = order[:k] + [usage] + order[k:position] + order[position + 1:]
                budget -= 1
                trial_result = _first_fit(trial, overlapping)
                if trial_result[1] < total or budget <= 0:
                    moved = trial, trial_result
                    break
            if moved:
                break
        if moved is None or moved[1][1] >= total:
            break
        order, (offsets, total) = moved[0], moved[1]
    return offsets, total


# -- a partition's arena: storage shared by tensors, then placement -------------------------------
@dataclass(frozen=True)
class ArenaPlan:
    """Where a partition's arena tensors live; every size in vec4 elements.

    offsets: {id(tensor): offset} of every tensor a dispatch touches or an alias names.
    elements: the arena's size (0 for no tensor).
    lower_bound: the largest total size of storage alive at one dispatch: no plan can use less.
    naive: one buffer per storage group of aliases (before in-place joins), no reuse.
    """
    offsets: dict
    elements: int
    lower_bound: int
    naive: int


def plan_arena(dispatches, strategy="best", aliases=(), persistent=(), views=(), phases=None):
    """The ArenaPlan of a dispatch list (their reads, writes and inplace), the (tensor, source)
    pairs of KernelEnv.aliases and the (tensor, whole, offset) triples of KernelEnv.views, under
    a strategy (see STRATEGIES). `persistent` tensors (resource variables: KernelEnv.persist)
    keep storage no other tensor ever shares. phases: (first, last) dispatch index of the barrier
    phase of each dispatch (schedule.phase_order), or None: storage touched in one phase is
    shared with nothing else touched in it, so that reusing it needs no barrier of its own."""
    storage = Storage(dispatches)
    join_shared(storage, [(source, tensor, 0) for tensor, source in aliases] +
                [(whole, tensor, offset) for tensor, whole, offset in views])
    _pin(storage, persistent, len(dispatches))
    naive = sum(storage.size[root] for root in storage.roots())
    _join_inplace(storage, dispatches)
    if phases is not None:
        _widen_to_phases(storage, phases)
    usages = storage.usages()
    bound = lower_bound(usages)
    offsets, total = plan(usages, strategy, bound)
    return ArenaPlan({key: offsets[storage.root(key)] + storage.offset(key) for key in storage.parent}, total,
                     bound, naive)


def alias_groups(aliases, views=()):
    """{id(tensor): [tensors sharing its storage]}: the (tensor, source) pairs of
    KernelEnv.aliases (the same storage under another shape) and, when given, the (tensor,
    whole, offset) triples of KernelEnv.views (a block of it), so a capture of what a dispatch
    wrote names every shape of it and a tensor's precision is its whole storage's."""
    groups = {}
    for tensor, source in list(aliases) + [(tensor, whole) for tensor, whole, _ in views]:
        members = groups.get(id(source), [source]) + groups.get(id(tensor), [tensor])
        for t in members:
            groups[id(t)] = members
    return groups


class Storage:
    """Tensors grouped by shared storage (union-find over id(tensor)), each at an offset (vec4
    elements) from its group's start, with each group's size (vec4 elements, from its start)
    and lifetime (first and last dispatch index). The dicts keep the order in which tensors were
    met (dispatch order), which usages() follows. `viewed`: the groups holding a view (a tensor
    at a nonzero offset, or one whose storage holds another's)."""

    def __init__(self, dispatches):
        self.parent, self.delta, self.size, self.first, self.last = {}, {}, {}, {}, {}
        self.viewed = set()
        for i, d in enumerate(dispatches):
            for tensor in d.writes + d.reads:
                key = id(tensor)
                if key not in self.parent:
                    self.parent[key], self.delta[key] = key, 0
                    self.size[key] = bhwc(tensor.shape).elements
                    self.first[key] = i
                self.last[key] = i

    def root(self, key):
        parent = self.parent[key]
        if parent == key or self.parent[parent] == parent:  # a root, or its child: most keys (no path to compress)
            return parent
        path = []
        while self.parent[key] != key:
            path.append(key)
            key = self.parent[key]
        for k in reversed(path[:-1]):  # path compression, each delta made relative to the root
            self.delta[k] += self.delta[self.parent[k]]
            self.parent[k] = key
        return key

    def offset(self, key):
        """The offset of `key` from its group's start (vec4 elements)."""
        root = self.root(key)
        return 0 if key == root else self.delta[key]

    def join(self, a, b, offset=0):
        """One group for a and b, with b `offset` elements past a (a may then start past the
        group's start: the group starts at whichever is first)."""
        ra, rb = self.root(a), self.root(b)
        gap = self.offset(a) + offset - self.offset(b)  # where b's group starts within a's
        if ra == rb:
            if gap:
                raise ValueError(f"tensors placed at two offsets of one storage ({gap} elements apart)")
            return
        if gap < 0:
            ra, rb, gap = rb, ra, -gap
        if offset or gap or ra in self.viewed or rb in self.viewed or self.size[ra] != self.size[rb]:
            self.viewed.add(ra)
        self.parent[rb], self.delta[rb] = ra, gap
        self.size[ra] = max(self.size[ra], gap + self.size[rb])
        self.first[ra] = min(self.first[ra], self.first[rb])
        self.last[ra] = max(self.last[ra], self.last[rb])

    def add(self, tensor, like):
        """Register a tensor no dispatch touches (an alias of an alias) under `like`'s
        (size, first, last)."""
        key = id(tensor)
        self.parent[key], self.delta[key] = key, 0
        self.size[key], self.first[key], self.last[key] = like

    def roots(self):
        """The root of every group, in the order of its first tensor met."""
        return dict.fromkeys(map(self.root, self.parent))

    def usages(self):
        """One Usage per group, in the order of its first tensor met. Not by key: an id is a
        memory address, and planning in address order made the plan differ run to run."""
        return [Usage(r, self.size[r], self.first[r], self.last[r]) for r in self.roots()]


def join_shared(storage, pairs):
    """Join each (whole, tensor, offset): `tensor`'s storage is `offset` elements into
    `whole`'s for their joint life (a free reshape: offset 0). A tensor no dispatch touches (a
    reshape of a reshape, a concatenation no dispatch writes) joins its partner's group with
    its own size."""
    pending = list(pairs)
    while pending:
        left = []
        for whole, tensor, offset in pending:
            known = [t for t in (whole, tensor) if id(t) in storage.parent]
            if not known:
                left.append((whole, tensor, offset))
                continue
            for t in (whole, tensor):
                if id(t) not in storage.parent:
                    r = storage.root(id(known[0]))
                    storage.add(t, (bhwc(t.shape).elements, storage.first[r], storage.last[r]))
            storage.join(id(whole), id(tensor), offset)
        if len(left) == len(pending):
            break  # aliases of tensors no dispatch uses at all
        pending = left


def _widen_to_phases(storage, phases):
    """Each group's lifetime from the start of the phase of its first dispatch to the end of the
    phase of its last (phases: (first, last) dispatch index of each dispatch's phase)."""
    for root in storage.roots():
        storage.first[root] = phases[storage.first[root]][0]
        storage.last[root] = phases[min(storage.last[root], len(phases) - 1)][1]


def _pin(storage, tensors, end):
    """The storage of `tensors` lives from the first dispatch to past the last one (`end`): no
    lifetime ends before it, so nothing is placed over it, and no in-place output takes it."""
    for tensor in tensors:
        if id(tensor) in storage.parent:
            root = storage.root(id(tensor))
            storage.first[root], storage.last[root] = 0, end


def _join_inplace(storage, dispatches):
    """An output takes the storage of an input it may overwrite (Dispatch.inplace) when that
    input's storage is read for the last time by this dispatch, the output is born here and it
    is no larger, and neither storage holds views."""
    for i, d in enumerate(dispatches):
        if len(d.writes) != 1:
            continue
        out = storage.root(id(d.writes[0]))
        if storage.first[out] != i:
            continue
        if out in storage.viewed:
            continue
        for tensor in d.inplace:
            source = storage.root(id(tensor))
            # Not into a group of views: another invocation may still read the source at
            # another offset of that storage (an ADD of two slices of one tensor).
            if source != out and source not in storage.viewed and storage.last[source] == i \
                    and storage.size[out] <= storage.size[source]:
                storage.join(source, out)
                break
