"""Memory planning: give every arena tensor an offset so tensors alive at the same time never
overlap, using as little memory as possible.

Each strategy orders the tensors and places each at the lowest offset that does not overlap a
tensor already placed whose lifetime intersects its own (first fit). Lifetimes are inclusive
ranges of dispatch indices. "best" takes the smallest of the orders, then searches nearby
orders while that lowers the plan (see _improve). The compiler merges tensors that share storage
(free reshapes, in-place elementwise outputs) into one usage before planning.
"""
import random
from dataclasses import dataclass

STRATEGIES = ("naive", "greedy_in_order", "greedy_by_size", "greedy_by_breadth", "greedy_by_lifetime", "best")
SEARCH_BUDGET = 2000  # first-fit runs "best" may spend searching above the lower bound
RESTART_BUDGET = 50   # of which one restart's local search may spend


@dataclass(frozen=True)
class Usage:
    """A tensor's size (elements) and lifetime (first and last dispatch index, inclusive)."""
    key: object
    size: int
    first: int
    last: int


def lower_bound(usages):
    """The largest total size of tensors alive at any one dispatch: no plan can use less."""
    steps = {u.first for u in usages} | {u.last for u in usages}
    return max((sum(u.size for u in usages if u.first <= s <= u.last) for s in steps), default=0)


def _first_fit(ordered):
    placed = []  # (offset, usage)
    offsets = {}
    for usage in ordered:
        conflicts = sorted((off, off + other.size) for off, other in placed
                           if other.first <= usage.last and usage.first <= other.last)
        offset = 0
        for start, end in conflicts:
            if offset + usage.size <= start:
                break
            offset = max(offset, end)
        placed.append((offset, usage))
        offsets[usage.key] = offset
    total = max((off + u.size for off, u in placed), default=0)
    return offsets, total


def _naive(usages):
    offsets, total = {}, 0
    for usage in usages:
        offsets[usage.key] = total
        total += usage.size
    return offsets, total


def _breadth_order(usages):
    """Tensors of the widest dispatch (most memory alive) first, larger before smaller."""
    steps = sorted({u.first for u in usages} | {u.last for u in usages})
    breadth = {s: sum(u.size for u in usages if u.first <= s <= u.last) for s in steps}
    widest = {u.key: max(breadth[s] for s in steps if u.first <= s <= u.last) for u in usages}
    return sorted(usages, key=lambda u: (-widest[u.key], -u.size, u.first))


_ORDERS = {
    "greedy_in_order": lambda us: sorted(us, key=lambda u: (u.first, -u.size)),
    "greedy_by_size": lambda us: sorted(us, key=lambda u: (-u.size, u.first)),
    "greedy_by_breadth": _breadth_order,
    # Long-lived tensors first, at the bottom: they then never sit between two peaks.
    "greedy_by_lifetime": lambda us: sorted(us, key=lambda u: (u.first - u.last, -u.size, u.first)),
}


def plan(usages, strategy="best"):
    """({key: offset}, total size) for the usages under a strategy (see STRATEGIES)."""
    usages = list(usages)
    if strategy == "naive":
        return _naive(usages)
    if strategy == "best":
        return _best(usages)
    if strategy not in _ORDERS:
        raise ValueError(f"unknown memory strategy {strategy!r}; expected one of {STRATEGIES}")
    return _first_fit(_ORDERS[strategy](usages))


def _best(usages):
    """The smallest first-fit plan over the orders, improved by local search; while it stays
    above the lower bound, restarts from seeded random orders that weigh size and lifetime
    (deterministic: the same usages always get the same plan)."""
    bound = lower_bound(usages)
    orders = [order(usages) for order in _ORDERS.values()]
    results = [_first_fit(order) for order in orders]
    k = min(range(len(orders)), key=lambda i: results[i][1])
    best = _improve(orders[k], results[k], bound)
    rng = random.Random(0)
    for _ in range(SEARCH_BUDGET // RESTART_BUDGET):
        if best[1] <= bound:
            break
        weight = {u.key: u.size * rng.uniform(0.5, 1.5) * (u.last - u.first + 1) ** rng.random() for u in usages}
        order = sorted(usages, key=lambda u: -weight[u.key])
        result = _improve(order, _first_fit(order), bound, RESTART_BUDGET)
        if result[1] < best[1]:
            best = result
    return best


def _improve(order, result, bound, budget=SEARCH_BUDGET):
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
                trial_result = _first_fit(trial)
                if trial_result[1] < total or budget <= 0:
                    moved = trial, trial_result
                    break
            if moved:
                break
        if moved is None or moved[1][1] >= total:
            break
        order, (offsets, total) = moved[0], moved[1]
    return offsets, total
