"""Run a compiled Plan: GL buffers and programs, then per invoke: write inputs, dispatch, read outputs."""
import moderngl
import numpy as np

from .layout import bhwc, from_phwc4
from .shader import PARAMS_BINDING

ARENA_BINDING, CONSTS_BINDING, IO_BINDING = 0, 1, 2


class GpuPartition:
    """A Plan made real on a GlContext. `nodes` are the graph nodes it replaces. `binaries`
    (optional, one per plan source): (format, bytes) of a program binary to load instead of
    compiling that source, or None (serialization.py passes them on a warm start)."""

    def __init__(self, context, plan, nodes, binaries=None):
        self.context = context
        self.plan = plan
        self.nodes = nodes
        with context.current() as ctx:
            element = 8 if plan.storage_half else 16
            self.arena = ctx.buffer(reserve=plan.arena_elements * element)
            self.arena.clear()  # padded channels must read as zero before anything writes them
            consts = plan.constants.astype(np.float16) if plan.storage_half else plan.constants
            self.consts = ctx.buffer(np.ascontiguousarray(consts).tobytes())
            self.io = ctx.buffer(reserve=plan.io_bytes)
            self.params = ctx.buffer(plan.params)
            binaries = binaries or [None] * len(plan.sources)
            programs = [context.program(source, binary) for source, binary in zip(plan.sources, binaries)]
            self.steps = [(programs[i].run, offset, size, groups, barrier)
                          for i, offset, size, groups, barrier in plan.steps]
            context.check_error("creating the partition's buffers and programs")

    def run(self, storage, capture=None):
        """Invoke: inputs from storage[tensor index] (float32 arrays), outputs written back
        into storage in place. With a `capture` dict, every tensor a dispatch writes is read
        back right after that dispatch (before its memory is reused) into capture[index] as
        a BHWC float32 array: slow, for the parity report."""
        bind_params = self.params.bind_to_uniform_block
        with self.context.current() as ctx:
            self.arena.bind_to_storage_buffer(ARENA_BINDING)
            self.consts.bind_to_storage_buffer(CONSTS_BINDING)
            self.io.bind_to_storage_buffer(IO_BINDING)
            for slot in self.plan.inputs:
                self.io.write(np.ascontiguousarray(storage[slot.tensor_index], np.float32), slot.offset)
            # Shader writes of the previous invoke must land before this one reads the arena.
            ctx.memory_barrier(moderngl.SHADER_STORAGE_BARRIER_BIT)
            for k, (run, offset, size, groups, barrier) in enumerate(self.steps):
                if barrier:
                    ctx.memory_barrier(moderngl.SHADER_STORAGE_BARRIER_BIT)
                bind_params(PARAMS_BINDING, offset, size)
                run(*groups)
                if capture is not None:
                    self._capture(ctx, self.plan.writes[k], capture)
            ctx.memory_barrier(moderngl.BUFFER_UPDATE_BARRIER_BIT)
            for slot in self.plan.outputs:
                target = storage[slot.tensor_index]
                if target.flags.c_contiguous and target.dtype == np.float32:
                    self.io.read_into(target, slot.nbytes, slot.offset)
                else:
                    data = np.frombuffer(self.io.read(slot.nbytes, slot.offset), np.float32)
                    np.copyto(target, data.reshape(target.shape), casting="unsafe")

    def _capture(self, ctx, written, capture):
        ctx.memory_barrier(moderngl.BUFFER_UPDATE_BARRIER_BIT)
        half = self.plan.storage_half
        for index, offset, shape in written:
            elements = bhwc(shape).elements
            element_bytes = 8 if half else 16
            raw = self.arena.read(elements * element_bytes, offset * element_bytes)
            values = np.frombuffer(raw, np.float16 if half else np.float32).astype(np.float32)
            capture[index] = from_phwc4(values, shape)

    def release(self):
        """Free the partition's buffers (idempotent; its programs stay cached in the context)."""
        if not self.steps or self.context.ctx is None:
            self.steps = []
            return
        with self.context.current():
            for buffer in (self.arena, self.consts, self.io, self.params):
                buffer.release()
        self.steps = []
