"""Resource variables held in a GPU partition's memory between invokes: run time.

GpuVariables is a GpuPartition's part of the interpreter's holder protocol (variable_store.py):
before a run it uploads the variables it reads whose copy is stale (the CPU wrote them, or
another partition assigned them), after a run it holds the latest value of those it assigned;
the CPU side downloads them from it when it reads them, and it hands them to the CPU when it
goes away. Where they live and which it reads or assigns: Plan.variables (gpu/variables.py).

Conversions at that boundary (Codec): an 8-bit variable's integers become their real values on
upload and are quantized back (to the same integers: its values are on its grid) on download.
"""
import weakref

import numpy as np

from .. import partition as partitioning
from .. import quant
from ..errors import ModelError
from ..ops.checks import node_error
from ..ops.variables import ref_of
from . import gl as G
from .variables import ACCESS_OPS, F32

class Codec:
    """Values of a variable between the model's dtype (the CPU's copy) and the float view (the
    GPU's): `like` is a model tensor of the variable (a READ_VARIABLE output, an assigned value)."""

    def __init__(self, like):
        self.like, self.dtype = like, np.dtype(like.dtype)

    def to_gpu(self, value):
        return np.asarray(value, F32) if self.dtype == F32 else quant.dequantize_integers(value, self.like)

    def to_cpu(self, values):
        if self.dtype == F32:
            return np.array(values, F32)
        return quant.quantize_to_integers(values, self.like, *quant.integer_range(self.like)).astype(self.dtype)


class GpuVariables:
    """A GpuPartition's resource variables (GpuPartition.variables): the holder of its slots in
    the interpreter's VariableStore (variable_store.py), and the handles it writes."""

    def __init__(self, partition, graph):
        # Weak: the partition holds this (GpuPartition.variables); a strong reference back made
        # the two a cycle, which kept a dropped interpreter's partition for the cyclic collector.
        self._partition = weakref.ref(partition)
        uses = {}  # (container, shared_name) -> its first node in the partition (errors name it)
        for node in partition.nodes:
            if node.op in ACCESS_OPS and ref_of(node) is not None:
                uses.setdefault(ref_of(node).key, node)
        runtime = next(n.runtime for n in partition.nodes if n.runtime is not None)
        self.store = runtime.variables
        self.slots = {}  # resource id -> (VariableSlot, Codec, the node named in errors)
        for slot in partition.plan.variables:
            node = uses[(slot.container, slot.shared_name)]
            like = node.outputs[0] if node.op == "READ_VARIABLE" else node.inputs[1]
            self.slots[runtime.resource_id(slot.container, slot.shared_name)] = (slot, Codec(like), node)
        read_outside = {id(t) for t in partitioning.boundary(graph, partition.nodes).outputs}
        # {tensor index: resource id} of the VAR_HANDLE outputs read outside the partition.
        self.handles = {n.outputs[0].index: runtime.resource_id(n.options.get("container", ""),
                                                                n.options.get("shared_name", ""))
                        for n in partition.nodes if n.op == "VAR_HANDLE" and id(n.outputs[0]) in read_outside}

    def run(self, run, storage, capture):
        """run(storage, capture) (the partition's run) between the uploads it needs and the
        holder's bookkeeping of what it assigned."""
        self._upload_stale()
        try:
            run(storage, capture)
        except BaseException:
            for rid, (slot, _, _) in self.slots.items():
                if slot.writes:
                    self.store.forget(rid, self)
            raise
        for rid, (slot, _, _) in self.slots.items():
            if slot.writes:
                self.store.assigned(rid, self)
        for index, rid in self.handles.items():
            storage[index][...] = rid

    @property
    def partition(self):
        """The GpuPartition holding these variables, or None once it is gone."""
        return self._partition()

    def _upload_stale(self):
        """Upload the latest value of each variable the partition reads before assigning it,
        where its copy is not current: a ModelError naming the reader when nothing assigned it
        yet (as the CPU's READ_VARIABLE), or when it holds another shape or dtype than the plan
        fixed (something assigned it during this invoke)."""
        for rid, (slot, codec, node) in self.slots.items():
            if not slot.reads or self.store.is_current(rid, self):
                continue
            value = self.store.read(rid)
            if value is None:
                raise node_error(node, f"reads resource variable {rid}, which nothing has assigned yet")
            if tuple(value.shape) != slot.shape or value.dtype != codec.dtype:
                raise node_error(node, f"{ref_of(node).label} holds a {value.dtype} value of shape "
                                       f"{list(value.shape)}, assigned during this invoke; the GPU partition holds "
                                       f"it as {codec.dtype} {list(slot.shape)} (the next invoke plans again)")
            with self.partition.context.current():
                self.partition.write_tensor(slot.offset, codec.to_gpu(value))
            self.store.uploaded(rid, self)

    # -- the holder protocol (variable_store.VariableStore) ------------------------------------
    def download(self, rid):
        """The partition's value of variable `rid`, in the model's dtype."""
        slot, codec, _ = self.slots[rid]
        partition = self.partition
        if partition is None or partition.released or partition.context.ctx is None or partition.context.forked:
            raise ModelError(f"resource variable {slot.shared_name!r} was held by a GPU partition that is gone")
        context = partition.context
        with context.current():
            context.gl.memory_barrier_fast(G.GL_BUFFER_UPDATE_BARRIER_BIT)  # shader writes, then a read
            return codec.to_cpu(partition.read_tensor(slot.offset, slot.shape))

    def describe(self, rid):
        slot, codec, _ = self.slots[rid]
        return slot.shape, codec.dtype

    def release(self):
        """The partition goes: the values only it holds move to the CPU (while its buffers exist)."""
        context = self.partition.context
        if context.ctx is None or context.forked:  # nothing to read them from: the CPU's copy stays
            for rid in self.slots:
                self.store.forget(rid, self)
            return
        self.store.release(self, list(self.slots))


def attach(partitions, graph):
    """Give each GpuPartition of `graph` that holds variables or writes handles its GpuVariables."""
    for partition in partitions:
        if partition.plan.variables or any(n.op == "VAR_HANDLE" for n in partition.nodes):
            partition.variables = GpuVariables(partition, graph)
