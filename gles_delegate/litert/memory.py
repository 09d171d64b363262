"""LiteRT's tensor memory as one delegate kernel reads and writes it, and the outputs the kernel
lends LiteRT instead of copying them.

Views: per invoke, the kernel's steps run on numpy views over TfLiteTensor.data of the tensors
it reads and writes, rebuilt only where LiteRT moved a tensor.

Lending (issue 41 item 3): a float32 output that a GPU partition leaves in its persistently mapped
I/O buffer (gpu/runtime.MappedIo) was copied into LiteRT's arena, then again by LiteRT's
get_tensor(); our Interpreter copies it once (its storage's defer_output). So the kernel takes the
same deferral: the TfLiteTensor is pointed at the mapped output itself, as
Interpreter::SetCustomAllocationForTensor does (subgraph.cc): allocation_type kTfLiteCustom, data
the mapping (64-byte aligned, kDefaultTensorAlignment, which that function checks). TFLite neither
places such memory (ArenaPlanner places kTfLiteArenaRw / kTfLiteArenaRwPersistent tensors only,
arena_planner.cc CalculateAllocations), nor frees it (TfLiteTensorDataFree frees kTfLiteDynamic /
kTfLitePersistentRo only, common.cc), nor moves it on a resize (ResizeTensorImpl sets its bytes
and dims; TfLiteTensorResizeMaybeCopy reallocates kTfLiteDynamic / kTfLitePersistentRo only). So
the memory must hold `bytes` and stay valid as long as LiteRT may read it:

- before the mapping goes (its partition released by a re-plan or GpuDelegate.close(), or a
  fork(), whose child may not inherit it), MappedIo.settle_deferred calls settle(owner): each
  output lent from it is copied into memory of the kernel's own, where LiteRT then points; the
  next invoke lends the mapping again. A tensor() view LiteRT made before stays over the
  mapping: while one lives (views_alive) the mapping is kept until give_back();
- after the kernel's prepare resized its outputs, fit_lent() gives an output whose size changed
  memory of the kernel's own of the new size (zeros: an arena tensor holds nothing defined there
  either before the next invoke);
- when LiteRT frees the kernel (the interpreter is destroyed, or LiteRT undoes its delegates to
  run the nodes on its own kernels), give_back() returns each output as LiteRT planned it:
  kTfLiteArenaRw without data, which the AllocateTensors that must follow places (an undo
  leaves the subgraph uninvokable until then).

Only the outputs of a subgraph no operator calls are lent: LiteRT's IF / WHILE may point their
own tensors at a called subgraph's memory (control_flow_common.h's shallow copy), which settle
could not re-point. A LiteRT node that reads a lent output reads it through the pointer, set
before the kernel's invoke returns.
"""
import ctypes

import numpy as np

from ..raw_memory import array_at
from . import abi

ALIGNMENT = 64  # kDefaultTensorAlignment (tflite/util.h): what SetCustomAllocationForTensor requires
# Option fields that name a subgraph to run: IF's then/else_subgraph_index, WHILE's cond/body,
# CALL_ONCE's init, StableHLO's body / decomposition ..._subgraph_index, CALL's `subgraph`.
_CALLS = ("subgraph_index", "subgraph")


def lendable_outputs(model):
    """{subgraph index: the tensor indices its kernels may lend LiteRT} of `model`: a subgraph's
    outputs, none for a subgraph an operator of the model calls (module docstring)."""
    called = {value for sg in model.subgraphs for op in sg.operators for key, value in (op.options or {}).items()
              if key.endswith(_CALLS) and isinstance(value, int) and not isinstance(value, bool)}
    return {index: set() if index in called else set(sg.outputs) for index, sg in enumerate(model.subgraphs)}


class TensorMemory(dict):
    """{tensor index: array} a kernel's steps run on: views over LiteRT's memory of the tensors
    it passes in and out (`tensors`, {index: graph Tensor}), arrays of its own for the rest
    (`private`), and the outputs lent to LiteRT (`lendable`: the indices it may lend). GPU
    partitions store into it (gpu/runtime.MappedIo.read_outputs), which offers it their mapped
    outputs through defer_output."""

    def __init__(self, lendable, views_alive=lambda: False):
        super().__init__()
        self.lendable = set(lendable)
        self.views_alive = views_alive  # () -> whether numpy views over LiteRT's tensors live
        self.kept = []  # MappedIo whose partitions are gone, kept mapped for those views (settle)
        self.tensors = {}
        self.lent = {}  # tensor index -> (the lent array, the MappedIo it maps, or None: our own memory)
        # The address of the TfLiteContext of the last invoke (the subgraph's, which stays where it
        # is for the interpreter's life): an output is lent during an invoke, so is known there.
        self._context = None
        self._base, self._cells, self._addresses = None, [], {}

    def bind(self, tensors, private):
        """Hold views of `tensors` (rebuilt at the next refresh) and the arrays `private`; lent
        outputs stay lent (a re-plan keeps them, fit_lent sizes them)."""
        self.tensors = dict(tensors)
        self.clear()
        self.update(private)
        self.update({index: array for index, (array, _) in self.lent.items()})
        self._base, self._cells = None, []
        self._addresses = {index: array.ctypes.data if array.size else None for index, (array, _) in self.lent.items()}

    def refresh(self, context):
        """This dict, its views over LiteRT's memory current (context: the TfLiteContext, during
        invoke): per invoke only each tensor's data pointer is read (through cells made once)
        and compared with its view's."""
        self._context = ctypes.addressof(context)
        base = ctypes.c_void_p.from_address(self._context + abi.TENSORS_OFFSET).value
        if base != self._base:
            self._base = base
            self._cells = [(index, ctypes.c_void_p.from_address(base + index * abi.TENSOR_SIZE + abi.DATA_OFFSET))
                           for index in self.tensors]
        addresses = self._addresses
        for index, cell in self._cells:
            address = cell.value
            if address != addresses.get(index) or index not in self:
                held = ctypes.c_size_t.from_address(base + index * abi.TENSOR_SIZE + abi.BYTES_OFFSET).value
                self[index] = view(address, index, self.tensors[index], held)
                addresses[index] = address
        return self

    # -- the deferral protocol of gpu/runtime.MappedIo ----------------------------------------
    def defer_output(self, index, source, owner):
        """Lend LiteRT `source` (float32, a view of `owner`'s mapping) as tensor `index`'s memory
        instead of copying it there; False (copy it) where the tensor may not be lent (module
        docstring), is not float32 of source's shape, the address is not 64-byte aligned, or
        LiteRT holds it otherwise than in its arena or lent by us."""
        entry = self.lent.get(index)
        if entry is not None and entry[0] is source:
            return True
        tensor = self.tensors.get(index)
        if index not in self.lendable or tensor is None or source.dtype != np.float32 or not source.size \
                or np.dtype(tensor.dtype) != np.float32 or source.shape != tuple(tensor.shape) \
                or source.ctypes.data % ALIGNMENT:
            return False
        fields = self.litert_tensor(index)
        held_as = abi.CUSTOM if entry is not None else abi.ARENA_RW
        if fields.allocation_type != held_as or fields.bytes != source.nbytes:
            return False
        self._point(index, source, owner)
        return True

    def settle(self, owner=None):
        """Copy the outputs lent from `owner`'s mapping (from any mapping with owner None) into
        memory of our own, and point LiteRT there: the mapping is about to go. True when it must
        stay (keep() takes it): a tensor() view LiteRT made of a lent output is over the mapping
        itself, and LiteRT refuses invoke and allocate_tensors while one lives, but not
        GpuDelegate.close(), after which reading the view read unmapped memory (SIGSEGV)."""
        moved = False
        for index, (array, lender) in list(self.lent.items()):
            if lender is not None and (owner is None or lender is owner):
                copy = aligned_empty(array.shape, array.dtype)
                np.copyto(copy, array)
                self._point(index, copy, None)
                moved = True
        return moved and self.views_alive()

    def keep(self, io):
        """Hold the mapping of released `io` (gpu/runtime.MappedIo) until give_back()."""
        self.kept.append(io)

    def fit_lent(self):
        """After a prepare resized outputs: each lent output whose LiteRT size now differs from
        the lent array's gets zeroed memory of our own of its new shape."""
        for index, (array, _) in list(self.lent.items()):
            fields = self.litert_tensor(index)
            if fields.bytes != array.nbytes:
                zeros = aligned_empty(tuple(abi.int_array(fields.dims)), array.dtype)
                zeros.fill(0)
                self._point(index, zeros, None)

    def give_back(self):
        """Return every lent output to LiteRT's arena (kTfLiteArenaRw, no data yet): LiteRT is
        freeing the kernel."""
        for index in list(self.lent):
            fields = self.litert_tensor(index)
            fields.data, fields.allocation_type = None, abi.ARENA_RW
            self.pop(index, None)
            self._addresses.pop(index, None)
        self.lent = {}
        # The interpreter's wrapper, which every view holds (their base), is going: none is left.
        kept, self.kept = self.kept, []
        for io in kept:
            io.free_kept()

    def litert_tensor(self, index):
        """LiteRT's TfLiteTensor of tensor `index`, where its context now holds it."""
        base = ctypes.c_void_p.from_address(self._context + abi.TENSORS_OFFSET).value
        return abi.TfLiteTensor.from_address(base + index * abi.TENSOR_SIZE)

    def _point(self, index, array, owner):
        """Point LiteRT's tensor `index` at `array` (kTfLiteCustom) and run the steps on it; at
        no memory where it is empty (LiteRT's get_tensor refuses 0 bytes at an address)."""
        address = array.ctypes.data if array.size else None
        fields = self.litert_tensor(index)
        fields.data, fields.allocation_type = address, abi.CUSTOM
        self.lent[index] = (array, owner)
        self[index] = array
        self._addresses[index] = address


def view(address, index, tensor, held):
    """A numpy array over LiteRT's memory of tensor `index` (a graph Tensor) at `address`
    (`held` bytes); zeros for an empty tensor (a batch resized to 0: LiteRT gives it no memory)."""
    if tensor.size == 0:
        return np.zeros(tensor.shape, tensor.dtype)
    if not address:
        raise RuntimeError(f"tensor {index} ({tensor.name!r}) has no memory (allocate_tensors() first)")
    check_bytes(index, tensor, held)
    dtype = np.dtype(tensor.dtype)
    return array_at(address, tuple(tensor.shape), dtype)


def check_bytes(index, tensor, held):
    """A RuntimeError naming tensor `index` (a graph Tensor) unless LiteRT's `held` bytes are its size."""
    nbytes = tensor.size * np.dtype(tensor.dtype).itemsize
    if held != nbytes:
        raise RuntimeError(f"tensor {index} ({tensor.name!r}): LiteRT holds {held} bytes, the GPU plan expects "
                           f"{nbytes} ({list(tensor.shape)} {np.dtype(tensor.dtype).name})")


def aligned_empty(shape, dtype):
    """An uninitialised array of `shape` and `dtype` starting on an ALIGNMENT-byte boundary."""
    nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    raw = np.empty(nbytes + ALIGNMENT, np.uint8)
    start = -raw.ctypes.data % ALIGNMENT
    return raw[start:start + nbytes].view(dtype).reshape(shape)
