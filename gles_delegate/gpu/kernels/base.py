"""What a GPU kernel module produces (Dispatch) and what it may ask of the compiler (KernelEnv).

A kernel module exposes plain dicts, like the reference ops:
  SUPPORT = {"OP": fn(node) -> None | reason}   can this kernel run this exact node?
  BUILD   = {"OP": fn(node, env) -> [Dispatch]}  the dispatches that compute it
Params may hold ArenaRef / ConstRef placeholders; the compiler replaces them with element
offsets once memory is planned and constants are packed.
"""
from dataclasses import dataclass, field

import numpy as np

from ...ops.common import fused_activation
from ..phwc4 import bhwc


@dataclass(frozen=True)
class ArenaRef:
    """The element offset of a tensor in the arena (resolved after memory planning)."""
    tensor: object


@dataclass(frozen=True)
class ConstRef:
    """The element offset of a packed constant in the constants buffer."""
    index: int


@dataclass
class Dispatch:
    """One compute dispatch: a template, its specialization and the invocations it runs.

    grid: invocations (x, y, z); the compiler picks the workgroup and the group counts unless
        `workgroup` is set (a kernel that shares memory across a workgroup needs its own).
    reads / writes: arena tensors it reads / writes (for barriers and the memory plan).
    box: the part of its (one) written tensor it writes, as PHWC4 index ranges
        ((b0, b1), (s0, s1), (h0, h1), (w0, w1)), end exclusive; None: all of it. Dispatches
        writing disjoint boxes of one tensor (a concatenation's) need no barrier between them.
    inplace: tensors it reads whose storage the written tensor may take when they are not read
        after this dispatch: it reads each of their elements, at the very index it then writes,
        before writing it, and no other invocation reads that element (elementwise kernels).
    node: the graph node it computes (compiler.build_dispatches sets it; None for the input and
        output conversions).
    """
    template: str
    grid: tuple
    defines: dict = field(default_factory=dict)
    params: dict = field(default_factory=dict)
    reads: tuple = ()
    writes: tuple = ()
    label: str = ""
    workgroup: tuple | None = None
    box: tuple | None = None
    inplace: tuple = ()
    node: object = None


class KernelEnv:
    """Services the compiler offers kernels while they build their dispatches."""

    def __init__(self, precision, limits):
        self.precision = precision
        self.limits = limits
        self.constants = []
        self.aliases = []  # (tensor, tensor whose storage it shares): see alias()
        self.node = None  # the node whose dispatches are being built (the compiler sets it)
        self.constant_nodes = []  # per constant: the node that registered it (precision 'auto' promotes by node)

    @property
    def storage_half(self):
        return self.precision in ("fp16", "fp16_fp32acc", "auto")

    def shape4(self, tensor):
        return bhwc(tensor.shape)

    def constant(self, vec4_rows):
        """Register a float32 array of shape [..., 4] as a constant; returns its ConstRef."""
        rows = np.ascontiguousarray(vec4_rows, np.float32).reshape(-1, 4)
        self.constants.append(rows)
        self.constant_nodes.append(self.node)
        return ConstRef(len(self.constants) - 1)

    def alias(self, tensor, source):
        """Let `tensor` share `source`'s arena storage (same offset, joint lifetime) instead of
        being computed: a kernel calls it for a node that only relabels an identical PHWC4
        layout (a free reshape) and returns no dispatch."""
        self.aliases.append((tensor, source))

    @staticmethod
    def arena(tensor):
        return ArenaRef(tensor)

    @staticmethod
    def activation(node):
        return fused_activation(node)

    @staticmethod
    def output_stage(node):
        """The defines of TFLite's float output stage (common.glsl's activate()) for a node whose
        op ends in ActivationFunctionWithMinMax: its fused activation, then the clamp of the
        result to the finite floats."""
        return {"ACTIVATION": fused_activation(node), "CLAMP_FINITE": 1}
