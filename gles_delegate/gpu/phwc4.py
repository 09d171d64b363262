"""PHWC4: how a tensor lives on the GPU.

A tensor of rank <= MAX_RANK is viewed as BHWC (bhwc()) and stored as B x S x H x W vec4 elements,
where S = ceil(C / 4) channel slices; element (b, h, w, s) is at ((b * S + s) * H + h) * W + w and
holds channels 4s..4s+3. Channels past C in the last slice are zero, and every kernel keeps
them zero (a later reduction, concatenation or matmul reads them).

The view is a pure function of the shape, so the kernel writing a tensor and every kernel
reading it agree on its layout. A rank-5 or rank-6 tensor merges its leading dims into B (a
row-major reshape, like every view): its last three dims stay H, W and C, so an op over the last
axes (softmax, a matmul's rows) or elementwise keeps its meaning, and a kernel that needs one of
the merged dims on its own says so in its SUPPORT (merged_dim_reason).
"""
import functools
from dataclasses import dataclass
from math import prod

import numpy as np


@dataclass(frozen=True)
class Shape4:
    """A tensor shape seen as BHWC."""
    b: int
    h: int
    w: int
    c: int

    @property
    def slices(self):
        """Channel slices: ceil(C / 4) vec4s per pixel."""
        return (self.c + 3) // 4

    @property
    def elements(self):
        """Number of vec4 elements in PHWC4."""
        return self.b * self.slices * self.h * self.w

    def as_ivec4(self):
        """(w, h, slices, batch): the order kernels index with."""
        return (self.w, self.h, self.slices, self.b)


MAX_RANK = 6  # the highest rank with a BHWC view (layout_map.glsl splits an axis into 3 digits)
# The BHWC axes (0 b, 1 h, 2 w, 3 c) that the dims of a tensor of each rank occupy (see bhwc);
# ranks 5 and 6 put their leading 2 or 3 dims on B, the outer one first.
BHWC_AXES = {0: (), 1: (3,), 2: (0, 3), 3: (1, 2, 3), 4: (0, 1, 2, 3), 5: (0, 0, 1, 2, 3), 6: (0, 0, 0, 1, 2, 3)}


def bhwc(shape):
    """The BHWC view of a shape of rank 0..MAX_RANK: [C] -> 1x1x1xC, [N, C] -> Nx1x1xC,
    [H, W, C] -> 1xHxWxC, [N1, N2, H, W, C] -> (N1 * N2)xHxWxC (ranks 5, 6: the leading dims
    merged into B). Raises ValueError for a higher rank. Cached: the compiler asks it about
    15 times per node (a tenth of compiling a 20,000-node chain, uncached)."""
    return _bhwc(shape if type(shape) is tuple else tuple(shape))


@functools.lru_cache(maxsize=4096)
def _bhwc(shape):
    shape = tuple(int(d) for d in shape)
    if len(shape) > MAX_RANK:
        raise ValueError(f"rank {len(shape)} tensors have no PHWC4 layout (at most rank {MAX_RANK})")
    if len(shape) == 2:
        return Shape4(shape[0], 1, 1, shape[1])
    if len(shape) > 4:
        return Shape4(prod(shape[:-3]), *shape[-3:])
    padded = (1,) * (4 - len(shape)) + shape
    return Shape4(*padded)


def merged_dim_reason(shape, axis):
    """None when ranges along dim `axis` of `shape` are ranges of one BHWC axis of its view
    (a concatenation's or a gather's box): the dim has an axis of its own, or every dim merged
    outside it into B is 1. Else why not."""
    rank = len(shape)
    axes = BHWC_AXES[rank]
    outer = [d for k, d in enumerate(shape[:axis]) if axes[k] == axes[axis]]
    if prod(outer) == 1:
        return None
    return (f"dim {axis} of {list(shape)} is merged into the batch of its rank-{rank} view inside outer dims "
            f"{outer}: a range along it is no box of the view")


def dims_in_box(shape, axis, start, stop):
    """(origin, extent): the BHWC box of the view of `shape` that holds [start, stop) along dim
    `axis` and every index of the other dims, for a dim merged_dim_reason accepts."""
    axes = BHWC_AXES[len(shape)]
    dims = bhwc(shape)
    origin, extent = [0] * 4, [dims.b, dims.h, dims.w, dims.c]
    slot = axes[axis]
    inner = prod(d for k, d in enumerate(shape) if k > axis and axes[k] == slot)
    origin[slot], extent[slot] = start * inner, (stop - start) * inner
    return tuple(origin), tuple(extent)


def to_phwc4(array):
    """BHWC (any rank <= MAX_RANK) numpy array -> PHWC4 array of shape [B, S, H, W, 4]: float32,
    or int32 for an int32 array (the int view keeps its values)."""
    s4 = bhwc(array.shape)
    dtype = np.int32 if np.asarray(array).dtype == np.int32 else np.float32
    x = np.asarray(array, dtype).reshape(s4.b, s4.h, s4.w, s4.c)
    padded = np.zeros((s4.b, s4.h, s4.w, s4.slices * 4), dtype)
    padded[..., :s4.c] = x
    return padded.reshape(s4.b, s4.h, s4.w, s4.slices, 4).transpose(0, 3, 1, 2, 4).copy()


def from_phwc4(phwc4, shape):
    """Inverse of to_phwc4: [B, S, H, W, 4] (or flat) -> array of `shape`."""
    s4 = bhwc(shape)
    x = np.asarray(phwc4).reshape(s4.b, s4.slices, s4.h, s4.w, 4).transpose(0, 2, 3, 1, 4)
    return x.reshape(s4.b, s4.h, s4.w, s4.slices * 4)[..., :s4.c].reshape(shape)


def block_offset(whole_shape, index_map):
    """The vec4 element offset at which a tensor whose element i holds element index_map[i]
    (row-major) of a tensor of `whole_shape` lies in the whole's PHWC4 storage as one contiguous
    block, its own PHWC4 storage element for element (its padded channels on the whole's padded
    channels); None when it does not. Such a tensor can share the whole's storage (a view) at
    that offset: a channel slice starting at a multiple of 4 with batch 1, a range of the
    outermost dim of more than one element, ..."""
    index_map = np.asarray(index_map)
    if index_map.size == 0 or int(np.prod(whole_shape)) >= 2**31 - 1:
        return None
    # 1-based so that 0 marks a padded channel in either layout.
    whole = to_phwc4(np.arange(1, int(np.prod(whole_shape)) + 1, dtype=np.int32).reshape(whole_shape)).reshape(-1)
    part = to_phwc4((index_map.astype(np.int64) + 1).astype(np.int32)).reshape(-1)
    start = int(index_map.flat[0])
    position = np.flatnonzero(whole == start + 1)[0]  # where the part's first element lives
    if position % 4 or position + part.size > whole.size:
        return None
    return int(position // 4) if np.array_equal(whole[position:position + part.size], part) else None


@dataclass(frozen=True)
class Lanes:
    """How a lane view (lane_offset) lies in its whole: its channel c is the whole's channel
    4 * first slice + shift + c (shift 0..3); channels: how many it has (its lanes past them read
    as zero); limit: how many lanes from its first its writer stores, channels or, for the
    whole's last channels, up to the end of the whole's last slice (their zero padding)."""
    shift: int
    channels: int
    limit: int


def lane_offset(whole_shape, index_map):
    """(vec4 element offset, Lanes) of a tensor whose element i holds element index_map[i] of a
    tensor of `whole_shape`, when it is channels [c0, c0 + n) of a batch-1 whole (every pixel)
    that fit in its own ceil(n / 4) slices from the whole's slice c0 // 4 (c0 % 4 + n <= 4 *
    ceil(n / 4)): a lane view, whose readers realign each vec4 from the whole's storage and whose
    writer stores only its lanes (KernelEnv.view's `lanes`); None otherwise. The offset is that
    of the whole's slice c0 // 4, so the view's element range is where its values lie."""
    index_map = np.asarray(index_map)
    whole, part = bhwc(whole_shape), bhwc(index_map.shape)
    if index_map.size == 0 or whole.b != 1 or part.b != 1 or (part.h, part.w) != (whole.h, whole.w) \
            or whole.elements >= 2**31:
        return None
    first = int(index_map.flat[0]) % whole.c
    iota = np.arange(whole.h * whole.w * whole.c, dtype=np.int64).reshape(whole.h, whole.w, whole.c)
    if first + part.c > whole.c or not np.array_equal(index_map.reshape(part.h, part.w, part.c),
                                                      iota[..., first:first + part.c]):
        return None
    shift = first % 4
    if shift + part.c > 4 * part.slices:
        return None
    limit = 4 * whole.slices - first if first + part.c == whole.c else part.c
    return first // 4 * whole.h * whole.w, Lanes(shift, part.c, limit)
