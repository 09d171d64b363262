"""Workgroup choice: a heuristic from the grid and the device limits, and the candidates a tuner
times (workgroup_tuner.py, which owns the GL timing; this module is pure, so kernel builders and
the compiler import no GL).

The heuristic fills x (the contiguous axis of PHWC4: neighbouring invocations touch neighbouring
vec4s), then y, then z with powers of two, each as large as the remaining budget allows while the
padding of the grid along that axis wastes at most a quarter of the invocations. Kernels that
need a particular workgroup (shared memory across it) set Dispatch.workgroup; any request is
clamped to the device limits.
"""
import functools

TARGET_INVOCATIONS = 128   # per workgroup: a multiple of every warp / wavefront width in use
NARROW_X = 16              # x extent when y or z has work too, so a workgroup covers a 2-D tile
MAX_WASTE = 0.25           # padding share an axis may add before a smaller extent is preferred
# Shapes tried when tuning, besides the heuristic's (filtered by the limits and the grid).
CANDIDATES = ((8, 8, 1), (16, 8, 1), (32, 4, 1), (64, 1, 1), (128, 1, 1), (16, 4, 1), (32, 2, 1),
              (8, 4, 2), (4, 4, 4), (16, 16, 1), (8, 8, 4), (32, 1, 1))
DEFAULT_LIMITS = {"max_workgroup_size": (128, 128, 64), "max_workgroup_invocations": 128}


def _pow2_at_least(n):
    p = 1
    while p < n:
        p *= 2
    return p


def _waste(extent, size):
    padded = -(-extent // size) * size
    return (padded - extent) / padded


@functools.lru_cache(maxsize=4096)
def _axis(extent, cap):
    """The largest power of two <= cap (and no larger than needed to cover `extent`) whose
    padding wastes at most MAX_WASTE; else the one wasting least."""
    options = [1 << k for k in range(16) if (1 << k) <= max(cap, 1) and (1 << k) <= _pow2_at_least(extent)]
    good = [p for p in options if _waste(extent, p) <= MAX_WASTE]
    return max(good) if good else min(options, key=lambda p: (_waste(extent, p), -p))


def _limits(limits):
    return (tuple(limits.get("max_workgroup_size", DEFAULT_LIMITS["max_workgroup_size"])),
            int(limits.get("max_workgroup_invocations", DEFAULT_LIMITS["max_workgroup_invocations"])))


def choose_workgroup(grid, limits, target=TARGET_INVOCATIONS):
    """(x, y, z) local size for a dispatch of `grid` invocations (see the module docstring)."""
    max_size, max_invocations = _limits(limits)
    budget = max(1, min(target, max_invocations))
    x = _axis(grid[0], min(budget if grid[1] == grid[2] == 1 else NARROW_X, max_size[0]))
    y = _axis(grid[1], min(budget // x, max_size[1]))
    z = _axis(grid[2], min(budget // (x * y), max_size[2]))
    return x, y, z


def clamp_workgroup(workgroup, limits):
    """A kernel's requested workgroup within the device limits: each axis at most its maximum,
    then z, y and x halved in turn until the invocations fit."""
    max_size, max_invocations = _limits(limits)
    size = [max(1, min(int(w), m)) for w, m in zip(workgroup, max_size)]
    axis = 2
    while size[0] * size[1] * size[2] > max_invocations:
        if size[axis] > 1:
            size[axis] = max(1, size[axis] // 2)
        axis = (axis - 1) % 3
    return tuple(size)


def group_counts(grid, workgroup):
    """Number of workgroups per axis covering `grid`."""
    return tuple(-(-g // w) for g, w in zip(grid, workgroup))


def candidates(grid, limits):
    """Workgroups worth timing for `grid`: the heuristic's first, then CANDIDATES that fit the
    limits and do not leave a whole axis of a workgroup idle."""
    max_size, max_invocations = _limits(limits)
    out = [choose_workgroup(grid, limits)]
    for wg in CANDIDATES:
        fits = all(w <= m for w, m in zip(wg, max_size)) and wg[0] * wg[1] * wg[2] <= max_invocations
        useful = all(w <= _pow2_at_least(g) for w, g in zip(wg, grid))
        if fits and useful and wg not in out:
            out.append(wg)
    return out
