"""Run a compiled Plan: GL buffers and programs, then per invoke: write inputs, dispatch, read outputs.

The invoke loop calls GL directly (gpu/gl.py's untyped entry points, about 0.4 us a call)
rather than through moderngl's objects: per dispatch one uniform-range bind, one dispatch, a
glUseProgram only when the program changes, and a barrier only where the plan asks for one.
Inputs and outputs move by memcpy through a persistently mapped buffer where the context has
glBufferStorage, else through glBufferSubData and glMapBufferRange.
"""
import ctypes
import time

import numpy as np

from .. import quant
from ..errors import GpuError
from . import gl as G
from .layout import bhwc, from_phwc4
from .shader import PARAMS_BINDING

ARENA_BINDING, CONSTS_BINDING, IO_BINDING = 0, 1, 2
SYNC_TIMEOUT_S = 60.0  # a GPU that has not finished one invoke by then is hung


class GpuPartition:
    """A Plan made real on a GlContext. `nodes` are the graph nodes it replaces. `binaries`
    (optional, one per plan source): (format, bytes) of a program binary to load instead of
    compiling that source, or None (serialization.py passes them on a warm start). `view`: the
    quant.FloatView the plan was compiled from, when the partition runs a quantized model (it
    maps captured float values back to the model's integers)."""

    def __init__(self, context, plan, nodes, binaries=None, view=None):
        self.context = context
        self.plan = plan
        self.nodes = nodes
        self.view = view
        self.steps = []
        with context.current() as ctx:
            element = 8 if plan.storage_half else 16
            self.arena = ctx.buffer(reserve=plan.arena_elements * element)
            self.arena.clear()  # padded channels must read as zero before anything writes them
            consts = plan.constants.astype(np.float16) if plan.storage_half else plan.constants
            self.consts = ctx.buffer(np.ascontiguousarray(consts))
            self.params = ctx.buffer(plan.params)
            self.io = (MappedIo if context.persistent_mapping else CopiedIo)(context, plan)
            binaries = binaries or [None] * len(plan.sources)
            programs = [context.program(source, binary) for source, binary in zip(plan.sources, binaries)]
            # Range arguments are GLintptr / GLsizeiptr: pre-built c_ssize_t for the untyped calls.
            self.steps = [(programs[i].handle, ctypes.c_ssize_t(offset), ctypes.c_ssize_t(size),
                           tuple(int(g) for g in groups), barrier)
                          for i, offset, size, groups, barrier in plan.steps]
            context.check_error("creating the partition's buffers and programs")

    def run(self, storage, capture=None):
        """Invoke: inputs from storage[tensor index], outputs written back into storage in
        place (cast to the storage's dtype). With a `capture` dict, every tensor a dispatch
        writes is read back right after that dispatch (before its memory is reused) into
        capture[index] as a BHWC float32 array: slow, for the parity report."""
        if not self.steps:
            raise GpuError("this GPU partition was released (its delegate or interpreter was closed)")
        gl = self.context.gl
        bind_base, bind_range = gl.bind_buffer_base_fast, gl.bind_buffer_range_fast
        use, dispatch, barrier_bits = gl.use_program_fast, gl.dispatch_compute_fast, gl.memory_barrier_fast
        params = self.params.glo
        with self.context.current() as ctx:
            bind_base(G.GL_SHADER_STORAGE_BUFFER, ARENA_BINDING, self.arena.glo)
            bind_base(G.GL_SHADER_STORAGE_BUFFER, CONSTS_BINDING, self.consts.glo)
            bind_base(G.GL_SHADER_STORAGE_BUFFER, IO_BINDING, self.io.handle)
            self.io.write_inputs(storage)
            # Shader writes of the previous invoke must land before this one reads the arena.
            barrier_bits(G.GL_SHADER_STORAGE_BARRIER_BIT)
            current = 0
            for k, (program, offset, size, groups, barrier) in enumerate(self.steps):
                if barrier:
                    barrier_bits(G.GL_SHADER_STORAGE_BARRIER_BIT)
                bind_range(G.GL_UNIFORM_BUFFER, PARAMS_BINDING, params, offset, size)
                if program != current:
                    use(program)
                    current = program
                dispatch(*groups)
                if capture is not None:
                    self._capture(ctx, self.plan.writes[k], capture)
            use(0)  # leave no program of ours bound for moderngl or other users of the context
            self.io.read_outputs(storage)

    def _capture(self, ctx, written, capture):
        """Read back what one dispatch wrote into the model tensors of `capture` (tensors that
        the compiler or the float view made up have no entry there and are skipped)."""
        self.context.gl.memory_barrier_fast(G.GL_BUFFER_UPDATE_BARRIER_BIT)
        half = self.plan.storage_half
        for index, offset, shape in written:
            if index not in capture:
                continue
            elements = bhwc(shape).elements
            element_bytes = 8 if half else 16
            raw = self.arena.read(elements * element_bytes, offset * element_bytes)
            values = from_phwc4(np.frombuffer(raw, np.float16 if half else np.float32).astype(np.float32), shape)
            if self.view is not None:
                values = quant.model_value(self.view, index, values)
            target = capture[index]
            if target.shape == values.shape and target.flags.writeable:
                np.copyto(target, values, casting="unsafe")
            else:
                capture[index] = values

    def release(self):
        """Free the partition's buffers (idempotent; its programs stay cached in the context)."""
        if not self.steps or self.context.ctx is None:
            self.steps = []
            return
        with self.context.current():
            for buffer in (self.arena, self.consts, self.params):
                buffer.release()
            self.io.release()
        self.steps = []


class MappedIo:
    """The I/O buffer, persistently and coherently mapped: inputs are copied (and converted to
    float32) straight into it, outputs straight out of it after a fence."""

    FLAGS = G.GL_MAP_READ_BIT | G.GL_MAP_WRITE_BIT | G.GL_MAP_PERSISTENT_BIT | G.GL_MAP_COHERENT_BIT

    def __init__(self, context, plan):
        gl = self.gl = context.gl
        handle = ctypes.c_uint(0)
        gl.gen_buffers(1, ctypes.byref(handle))
        self.handle = handle.value
        gl.bind_buffer(G.GL_COPY_WRITE_BUFFER, self.handle)
        gl.buffer_storage(G.GL_COPY_WRITE_BUFFER, plan.io_bytes, None, self.FLAGS)
        address = gl.map_buffer_range(G.GL_COPY_WRITE_BUFFER, 0, plan.io_bytes, self.FLAGS)
        gl.bind_buffer(G.GL_COPY_WRITE_BUFFER, 0)
        if not address:
            raise GpuError(f"mapping the I/O buffer failed (GL error {gl.get_error():#x})")
        memory = (ctypes.c_float * (plan.io_bytes // 4)).from_address(address)
        floats = np.ctypeslib.as_array(memory)
        self.inputs = [(slot.tensor_index, floats[slot.offset // 4:(slot.offset + slot.nbytes) // 4]
                        .reshape(slot.shape)) for slot in plan.inputs]
        self.outputs = [(slot.tensor_index, floats[slot.offset // 4:(slot.offset + slot.nbytes) // 4]
                         .reshape(slot.shape)) for slot in plan.outputs]

    def write_inputs(self, storage):
        for index, view in self.inputs:
            np.copyto(view, storage[index], casting="unsafe")

    def read_outputs(self, storage):
        gl = self.gl
        gl.memory_barrier_fast(G.GL_CLIENT_MAPPED_BUFFER_BARRIER_BIT)
        sync = gl.fence_sync(G.GL_SYNC_GPU_COMMANDS_COMPLETE, 0)
        try:
            _wait(gl, sync)
        finally:
            gl.delete_sync(sync)
        for index, view in self.outputs:
            np.copyto(storage[index], view, casting="unsafe")

    def release(self):
        gl, handle = self.gl, ctypes.c_uint(self.handle)
        gl.bind_buffer(G.GL_COPY_WRITE_BUFFER, self.handle)
        gl.unmap_buffer(G.GL_COPY_WRITE_BUFFER)
        gl.bind_buffer(G.GL_COPY_WRITE_BUFFER, 0)
        gl.delete_buffers(1, ctypes.byref(handle))
        self.inputs = self.outputs = []


def _wait(gl, sync):
    """Block until the fence signals; GpuError if the GPU does not finish in SYNC_TIMEOUT_S."""
    deadline = time.monotonic() + SYNC_TIMEOUT_S
    flags = G.GL_SYNC_FLUSH_COMMANDS_BIT
    while True:
        status = gl.client_wait_sync(sync, flags, 100_000_000)  # 0.1 s slices
        if status in (G.GL_ALREADY_SIGNALED, G.GL_CONDITION_SATISFIED):
            return
        if status == G.GL_WAIT_FAILED or time.monotonic() > deadline:
            raise GpuError(f"the GPU did not finish the invoke (glClientWaitSync status {status:#x})")
        flags = 0


class CopiedIo:
    """The I/O buffer through glBufferSubData and glMapBufferRange (moderngl's write / read),
    where the context cannot map buffers persistently."""

    def __init__(self, context, plan):
        self.plan = plan
        self.buffer = context.ctx.buffer(reserve=plan.io_bytes)
        self.handle = self.buffer.glo
        self.barrier = context.gl.memory_barrier_fast

    def write_inputs(self, storage):
        for slot in self.plan.inputs:
            self.buffer.write(np.ascontiguousarray(storage[slot.tensor_index], np.float32), slot.offset)

    def read_outputs(self, storage):
        self.barrier(G.GL_BUFFER_UPDATE_BARRIER_BIT)
        for slot in self.plan.outputs:
            target = storage[slot.tensor_index]
            if target.flags.c_contiguous and target.dtype == np.float32:
                self.buffer.read_into(target, slot.nbytes, slot.offset)
            else:
                data = np.frombuffer(self.buffer.read(slot.nbytes, slot.offset), np.float32)
                np.copyto(target, data.reshape(target.shape), casting="unsafe")

    def release(self):
        self.buffer.release()
