"""Workgroup choice: a heuristic from the grid and the device limits."""


def _pow2_at_least(n):
    p = 1
    while p < n:
        p *= 2
    return p


def choose_workgroup(grid, limits, target=128):
    """(x, y, z) local size for a dispatch of `grid` invocations: fill x, then y, then z, each
    at most the next power of two above the grid's extent, `target` invocations in all."""
    max_size = limits.get("max_workgroup_size", (128, 128, 64))
    budget = min(target, limits.get("max_workgroup_invocations", 128))
    x = min(_pow2_at_least(grid[0]), 16, max_size[0], budget)
    y = min(_pow2_at_least(grid[1]), max(budget // x, 1), max_size[1])
    z = min(_pow2_at_least(grid[2]), max(budget // (x * y), 1), max_size[2])
    return x, y, z


def group_counts(grid, workgroup):
    """Number of workgroups per axis covering `grid`."""
    return tuple(-(-g // w) for g, w in zip(grid, workgroup))
