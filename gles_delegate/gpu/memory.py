"""Memory planning: give every arena tensor an offset so tensors alive at the same time never
overlap, using as little memory as possible.

Each strategy orders the tensors and places each at the lowest offset that does not overlap a
tensor already placed whose lifetime intersects its own (first fit). Lifetimes are inclusive
ranges of dispatch indices.
"""
from dataclasses import dataclass

STRATEGIES = ("naive", "greedy_in_order", "greedy_by_size", "greedy_by_breadth", "best")


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
}


def plan(usages, strategy="best"):
    """({key: offset}, total size) for the usages under a strategy (see STRATEGIES)."""
    usages = list(usages)
    if strategy == "naive":
        return _naive(usages)
    if strategy == "best":
        return min((plan(usages, s) for s in _ORDERS), key=lambda result: result[1])
    if strategy not in _ORDERS:
        raise ValueError(f"unknown memory strategy {strategy!r}; expected one of {STRATEGIES}")
    return _first_fit(_ORDERS[strategy](usages))
