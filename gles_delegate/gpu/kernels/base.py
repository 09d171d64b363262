"""What a GPU kernel module produces (Dispatch) and what it may ask of the compiler (KernelEnv).

A kernel module exposes plain dicts, like the reference ops:
  SUPPORT = {"OP": fn(node) -> None | reason}   can this kernel run this exact node?
  BUILD   = {"OP": fn(node, env) -> [Dispatch]}  the dispatches that compute it
Params may hold ArenaRef / ConstRef placeholders; the compiler replaces them with element
offsets once memory is planned and constants are packed.

The float view and the int view: the GPU holds every tensor in float storage. A bool tensor holds
0.0 / 1.0 (exact in every precision); an int32 tensor holds its 32 bits (intBitsToFloat: the int
view), so every int32 value is exact, and kernels that compute on it read it back with
floatBitsToInt. Bits are only moved (loads, stores, selects), never computed on as floats, and
an int32 tensor always lives in a 32-bit buffer: in half precisions it is kept in the float
buffer (gpu/storage.py), and a dispatch touching one runs its math in highp (gpu/compiler.py),
since mediump may be fp16 (NVIDIA's is). The partition's upload copies a bool input as 0.0 /
1.0 and an int32 one bit for bit (io_values); the download converts back (store_output). A kernel
takes bool / int32 tensors only when its op is in its module's FLOAT_VIEW, and its SUPPORT then
says which of its variants read them as what they are (a float kernel must refuse a runtime
int32 operand it would compute on: epilogue.operand_reason).
"""
from dataclasses import dataclass, field

import numpy as np

from ...errors import GpuError
from ...ops.common import fused_activation
from ..complex_view import as_floats
from ..phwc4 import bhwc, to_phwc4

VIEW_DTYPES = (np.dtype(np.bool_), np.dtype(np.int32))  # held in float storage (the float and int views)
INT32, INT64 = np.dtype(np.int32), np.dtype(np.int64)
MAX_LANE_READS = 2  # lane views one dispatch may read (KernelEnv.view; common.glsl's LANE_READS)


class KernelLimitError(GpuError):
    """A kernel cannot run its node in this plan's precision or on this device: the compiler
    reports it as a PlanLimitError naming the node, and the delegate moves the node to the CPU."""


def stored_values(data):
    """A tensor's values as the GPU stores them, for packing as a constant: int32 as they are
    (KernelEnv.constant keeps their bits), anything else as float32 (bool: 0.0 / 1.0)."""
    data = np.asarray(data)
    return data if data.dtype == INT32 else data.astype(np.float32)


def io_values(array):
    """An input's values as the I/O buffer holds them (float32 words): an int32 array's bits, a
    complex64 array's pairs (gpu/complex_view.py; both views, no copy), an int64 array's as
    int32's (the index view's inputs, which hold int32 values: gpu/index_view.py), anything else
    as a float32 array or view (bool: 0.0 / 1.0)."""
    array = np.asarray(array)
    if array.dtype == INT64:
        array = array.astype(INT32)
    return array.view(np.float32) if array.dtype == INT32 else as_floats(array)


@dataclass(frozen=True)
class ArenaRef:
    """The element offset of a tensor in the arena (resolved after memory planning)."""
    tensor: object


@dataclass(frozen=True)
class ConstRef:
    """The element offset of a packed constant in the constants buffer."""
    index: int


@dataclass(eq=False)
class Scratch:
    """An arena tensor of a node's own (not in the graph): negative index, never a model tensor."""
    index: int
    shape: tuple
    name: str = "scratch"
    dtype: np.dtype = np.dtype(np.float32)


def scratch(node, k, shape):
    """Scratch tensor k (< 4) of `node`, of `shape`, in the arena."""
    return Scratch(-(4 * node.index + k + 1), tuple(shape), f"{node.op.lower()} scratch")


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
        common.glsl; compiler.fuse_output_stores sets it), or None; io_kept: into its arena
        storage too, where dispatches of the partition read it.
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
    io_kept: bool = False


class KernelEnv:
    """Services the compiler offers kernels while they build their dispatches."""

    def __init__(self, precision, limits):
        self.precision = precision
        self.limits = limits
        self.constants = []
        self.int_constants = set()  # indices of constants holding int32 bits: kept in 32-bit storage
        self.aliases = []  # (tensor, tensor whose storage it shares): see alias()
        self.views = []  # (tensor, tensor whose storage holds it, vec4 offset in it, node): see view()
        self.lanes = {}  # id(tensor) -> (tensor, phwc4.Lanes) of the views that are lane views: see view()
        self.node = None  # the node whose dispatches are being built (the compiler sets it)
        self.constant_nodes = []  # per constant: the node that registered it (precision 'auto' promotes by node)
        self.status_base = 0  # the float index in the I/O buffer of the first status word (the compiler sets it)
        self.status_errors = []  # per status word: the error its kernel reports there (status_word)
        self.overflow_word = None  # half storage: the float index in the I/O buffer of Plan.overflow_offset's word
        self.persistent = {}  # id(tensor) -> (tensor, variable key): see persist()
        self.io_loads = {}  # Plan.io_loads (the compiler sets it: gpu/io_loads.py)
        self._packed = {}  # see packed()

    @property
    def storage_half(self):
        return self.precision in ("fp16", "fp16_fp32acc", "auto")

    def status_word(self, message):
        """The float index, in the I/O buffer, of a status word of its own: the runtime zeroes it
        before each invoke and, where a kernel wrote it nonzero, fails the invoke with a ModelError
        saying `message` (what TFLite fails the invoke on, which a shader cannot raise)."""
        self.status_errors.append(message)
        return self.status_base + len(self.status_errors) - 1

    def shape4(self, tensor):
        return bhwc(tensor.shape)

    def constant(self, vec4_rows):
        """Register an array of shape [..., 4] as a constant; returns its ConstRef. A float32
        array is packed in the plan's storage type; an int32 one keeps its bits (the int view,
        in 32-bit storage whatever the precision: storage.lay_out)."""
        rows = np.asarray(vec4_rows)
        if rows.dtype == INT32:
            self.int_constants.add(len(self.constants))
            rows = np.ascontiguousarray(rows).view(np.float32)
        rows = np.ascontiguousarray(rows, np.float32).reshape(-1, 4)
        self.constants.append(rows)
        self.constant_nodes.append(self.node)
        return ConstRef(len(self.constants) - 1)

    def packed(self, tensor, view):
        """The ConstRef of constant `tensor`'s values broadcast to `view` (a Shape4), as PHWC4:
        packed once, then shared by every dispatch that reads the tensor in that view (a chain
        of N ADDs of one constant read it N times). In the half precisions, per node: storage.py
        stores and reports those constants by the node that registered them."""
        key = (id(tensor), view, id(self.node) if self.storage_half else None)
        found = self._packed.get(key)
        if found is None:
            data = stored_values(tensor.data).reshape(view.b, view.h, view.w, view.c)
            found = self._packed[key] = (tensor, self.constant(to_phwc4(data)))  # the tensor kept: its id stays its own
        return found[1]

    def source(self, tensor):
        """The offset a kernel reads `tensor` at: its arena slot, or its constant's PHWC4 copy
        (packed() in its own shape), for kernels that read either (flagged by a *_CONST define)."""
        return self.arena(tensor) if not tensor.is_const else self.packed(tensor, bhwc(tensor.shape))

    def alias(self, tensor, source):
        """Let `tensor` share `source`'s arena storage (same offset, joint lifetime) instead of
        being computed: a kernel calls it for a node that only relabels an identical PHWC4
        layout (a free reshape) and returns no dispatch."""
        self.aliases.append((tensor, source))

    def view(self, tensor, whole, offset, lanes=None):
        """Let `tensor` be the block of `whole`'s arena storage that starts `offset` vec4
        elements in (joint lifetime) instead of being copied: a concatenation's input its
        producer writes in place, a slice its readers read in place (rules concat_in_place,
        slice_views: phwc4.block_offset found the block). With `lanes` (a phwc4.Lanes: rule
        lane_views) its channels start `lanes.shift` lanes into that block: the dispatches
        reading or writing it realign its vec4s (compiler.lane_accesses)."""
        self.views.append((tensor, whole, offset, self.node))
        if lanes is not None:
            self.lanes[id(tensor)] = (tensor, lanes)

    def persist(self, tensor, key):
        """Keep `tensor`, the storage of resource variable `key` ((container, shared_name)), in
        arena storage of its own for the partition's life: its value outlives the invoke
        (memory.plan_arena's `persistent`; gpu/variables.py)."""
        self.persistent[id(tensor)] = (tensor, key)

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
