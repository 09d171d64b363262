"""What a GPU kernel module produces (Dispatch) and what it may ask of the compiler (KernelEnv).

A kernel module exposes plain dicts, like the reference ops:
  SUPPORT = {"OP": fn(node) -> None | reason}   can this kernel run this exact node?
  BUILD   = {"OP": fn(node, env) -> [Dispatch]}  the dispatches that compute it
Params may hold ArenaRef / ConstRef placeholders; the compiler replaces them with element
offsets once memory is planned and constants are packed.

The float view: the GPU holds every tensor as floats. A bool tensor holds 0.0 / 1.0, an int32
tensor x holds float32(x), the nearest float (what CAST int32 -> float32 gives), which is x
itself for |x| <= 2^24 (2^11 in half storage); the partition's upload converts a bool / int32
input so, its download converts back (bool: nonzero; int32: saturating). A kernel takes bool /
int32 tensors only when its op is in its module's FLOAT_VIEW, and then only where the float view
gives TFLite's answer for every value (see exact_int_reason).
"""
from dataclasses import dataclass, field

import numpy as np

from ...errors import GpuError
from ...ops.common import fused_activation
from ..phwc4 import bhwc

VIEW_DTYPES = (np.dtype(np.bool_), np.dtype(np.int32))  # held as floats (the float view)
EXACT_INT = {False: 1 << 24, True: 1 << 11}  # |integers| a float / a half holds exactly, by storage_half


class KernelLimitError(GpuError):
    """A kernel cannot run its node in this plan's precision (an index past what half storage
    holds exactly): the compiler reports it as a PlanLimitError naming the node, and the delegate
    moves the node to the CPU."""


def exact_int_reason(count, what, storage_half=False):
    """Why indices in [0, count) (an ARG_MAX result, GATHER's indices into an axis of `count`)
    are not exact in the float view of this storage, or None."""
    limit = EXACT_INT[storage_half]
    if count <= limit:
        return None
    return (f"{what} reach {count - 1}, past {limit}, the largest integer "
            f"{'half' if storage_half else 'float32'} storage holds exactly")


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
    io_store: the partition output it stores straight into the I/O buffer (OUT_IO in
        common.glsl; compiler.fuse_output_stores sets it), or None.
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
    io_store: object = None


class KernelEnv:
    """Services the compiler offers kernels while they build their dispatches."""

    def __init__(self, precision, limits):
        self.precision = precision
        self.limits = limits
        self.constants = []
        self.aliases = []  # (tensor, tensor whose storage it shares): see alias()
        self.node = None  # the node whose dispatches are being built (the compiler sets it)
        self.constant_nodes = []  # per constant: the node that registered it (precision 'auto' promotes by node)
        self.status_base = 0  # the float index in the I/O buffer of the first status word (the compiler sets it)
        self.status_errors = []  # per status word: the error its kernel reports there (status_word)

    @property
    def storage_half(self):
        return self.precision in ("fp16", "fp16_fp32acc", "auto")

    def require_exact_indices(self, node, count, what):
        """KernelLimitError naming `node` unless indices in [0, count) are exact in this
        precision's storage (a node whose SUPPORT checked float32 storage already)."""
        reason = exact_int_reason(count, what, self.storage_half)
        if reason:
            raise KernelLimitError(f"{node.label}: {reason}")

    def status_word(self, message):
        """The float index, in the I/O buffer, of a status word of its own: the runtime zeroes it
        before each invoke and, where a kernel wrote it nonzero, fails the invoke with a ModelError
        saying `message` (what TFLite fails the invoke on, which a shader cannot raise)."""
        self.status_errors.append(message)
        return self.status_base + len(self.status_errors) - 1

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
