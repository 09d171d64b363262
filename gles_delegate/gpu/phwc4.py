"""PHWC4: how a tensor lives on the GPU.

A tensor of rank <= 4 is viewed as BHWC and stored as B x S x H x W vec4 elements, where
S = ceil(C / 4) channel slices; element (b, h, w, s) is at ((b * S + s) * H + h) * W + w and
holds channels 4s..4s+3. Channels past C in the last slice are zero, and every kernel keeps
them zero (a later reduction, concatenation or matmul reads them).
"""
from dataclasses import dataclass

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


# The BHWC axes (0 b, 1 h, 2 w, 3 c) that the dims of a tensor of each rank occupy (see bhwc).
BHWC_AXES = {0: (), 1: (3,), 2: (0, 3), 3: (1, 2, 3), 4: (0, 1, 2, 3)}


def bhwc(shape):
    """The BHWC view of a shape of rank 0..4: [C] -> 1x1x1xC, [N, C] -> Nx1x1xC,
    [H, W, C] -> 1xHxWxC. Raises ValueError for rank > 4."""
    shape = tuple(int(d) for d in shape)
    if len(shape) > 4:
        raise ValueError(f"rank {len(shape)} tensors have no PHWC4 layout")
    if len(shape) == 2:
        return Shape4(shape[0], 1, 1, shape[1])
    padded = (1,) * (4 - len(shape)) + shape
    return Shape4(*padded)


def to_phwc4(array):
    """BHWC (any rank <= 4) numpy array -> float32 PHWC4 array of shape [B, S, H, W, 4]."""
    s4 = bhwc(array.shape)
    x = np.asarray(array, np.float32).reshape(s4.b, s4.h, s4.w, s4.c)
    padded = np.zeros((s4.b, s4.h, s4.w, s4.slices * 4), np.float32)
    padded[..., :s4.c] = x
    return padded.reshape(s4.b, s4.h, s4.w, s4.slices, 4).transpose(0, 3, 1, 2, 4).copy()


def from_phwc4(phwc4, shape):
    """Inverse of to_phwc4: [B, S, H, W, 4] (or flat) -> array of `shape`."""
    s4 = bhwc(shape)
    x = np.asarray(phwc4).reshape(s4.b, s4.slices, s4.h, s4.w, 4).transpose(0, 2, 3, 1, 4)
    return x.reshape(s4.b, s4.h, s4.w, s4.slices * 4)[..., :s4.c].reshape(shape)
