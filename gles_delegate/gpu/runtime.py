"""Run a compiled Plan: GL buffers and programs, then per invoke: write inputs, dispatch, read outputs.

The invoke loop calls GL directly (gpu/gl.py's untyped entry points, about 0.1-0.2 us a call
on llvmpipe) rather than through moderngl's objects: per dispatch one uniform-range bind, one
dispatch, a glUseProgram only when the program changes, and a barrier only where the plan asks
for one. Per invoke: the storage-buffer bindings only when another partition, or anything run in
a plain GlContext.current(), ran on the context since this partition's last invoke
(GlContext.state_owner), one barrier and one fence at the end. Inputs and outputs move by memcpy
through a persistently mapped buffer where the context has glBufferStorage, else through
glBufferSubData and glMapBufferRange.
"""
import ctypes
import logging
import os
import weakref

import numpy as np

from .. import quant
from ..errors import GpuError, ModelError, StateError
from ..raw_memory import array_at
from . import gl as G, half_overflow
from .context import hold_shared, release_shared
from .complex_view import as_complex, as_floats
from .kernels.base import io_values
from .phwc4 import bhwc, from_phwc4, to_phwc4
from .shader import PARAMS_BINDING
from .storage import FLOAT_BASE
from .upload import STAGED_MIN_BYTES

ARENA_BINDING, CONSTS_BINDING, IO_BINDING, FLOAT_BINDING = 0, 1, 2, 3
# The barrier every run ends with (with its I/O's own bits), before the fence: the shader writes
# of this invoke are visible to the next one's dispatches, which therefore need no barrier first.
END_BARRIER = G.GL_SHADER_STORAGE_BARRIER_BIT
# One glFlush after the first FLUSH_FIRST dispatches (0: none): a driver may hold the commands
# until the fence at the end, and the GPU would then start only once the CPU issued them all.
# On an H200 it made the small models faster (docs/performance.md: `gles-profile --set`). After 8
# instead was 1.4-6.4 % faster in one H100 lease and 0.7-2.7 % slower in another, both with
# `gles-profile --paired` (round 27): a host's trait, not a better value.
FLUSH_FIRST = 4
# Then one glFlush every FLUSH_EVERY dispatches (0: none): on a long plan the GPU may otherwise
# idle while the CPU issues the rest (gles-profile reports a CPU issue loop as long as the GPU
# time on MobileNet v1). `gles-profile --set gpu.runtime.FLUSH_EVERY=8` measures it.
FLUSH_EVERY = 0
# A partition whose inputs and outputs together are at most this many bytes lets its kernels
# read and write the persistently mapped host buffer itself (MappedIo): no copy into and out of
# device memory, two GPU operations fewer per invoke, which is most of a small model's latency.
# Larger I/O goes through device memory, where a kernel writing host memory over PCIe is slow
# (class MappedIo). `gles-profile --set gpu.runtime.DIRECT_IO_MAX_BYTES=0` measures without.
# Up to 2 MiB (outputs up to 512 KiB) was 2.5-5 % faster on 0.2-1 MB of I/O in one H100 lease and
# 3.7-3.9 % slower in the next (`gles-profile --paired`, round 27): PCIe reads depend on the host.
DIRECT_IO_MAX_BYTES = 64 * 1024
# Zeroed buffers (the arena) are filled on the GPU from a block of this many zeros (fill_zeros).
ZERO_SEED_BYTES = 64 * 1024
log = logging.getLogger("gles_delegate")
GL_ERRORS = {0x0500: "GL_INVALID_ENUM", 0x0501: "GL_INVALID_VALUE", 0x0502: "GL_INVALID_OPERATION",
             0x0505: "GL_OUT_OF_MEMORY", 0x0506: "GL_INVALID_FRAMEBUFFER_OPERATION", 0: "no GL error"}


def out_of_memory(context, plan, what, nbytes, cause):
    """The GpuError of a buffer the driver would not create: which buffer, how many bytes, what
    the partition needs in all and the device's limits."""
    sizes = plan.buffer_bytes()
    limits = context.limits
    return GpuError(f"the GPU could not allocate the partition's {what} buffer of {nbytes:,} bytes on "
                    f"{context.renderer} ({cause}); the partition needs {sum(sizes.values()):,} bytes in all ("
                    + ", ".join(f"{k} {v:,}" for k, v in sizes.items()) + "); the device's limits: largest "
                    f"shader storage block {limits.get('max_ssbo_bytes', 0):,} bytes, largest uniform block "
                    f"{limits.get('max_ubo_bytes', 0):,} bytes. Use less memory (precision='fp16' halves the "
                    "arena and constants; a smaller input shape) or run the model without the GpuDelegate")


def create_buffer(context, ctx, plan, what, nbytes, data=None, zeroed=False):
    """A moderngl buffer of `nbytes` (holding `data` when given, zeros when `zeroed`); GpuError
    saying which buffer and how large when the driver refuses it (moderngl raising, or
    GL_OUT_OF_MEMORY pending). Data of upload.STAGED_MIN_BYTES or more goes through the
    context's staging ring where it has one (gpu/upload.py: why)."""
    ring = context.staging_ring() if data is not None and nbytes >= STAGED_MIN_BYTES else None
    try:
        buffer = ctx.buffer(data) if data is not None and ring is None else ctx.buffer(reserve=nbytes)
    except Exception as exc:  # moderngl.Error, MemoryError: the driver or the host refused it
        raise out_of_memory(context, plan, what, nbytes, f"{type(exc).__name__}: {exc}") from None
    _refuse_on_error(context, ctx, plan, what, nbytes, buffer)
    if ring is not None:
        try:
            ring.upload(buffer.glo, data)
        except BaseException:  # a fence that never signals: no buffer outlives the failed partition
            buffer.release()
            raise
    if zeroed:  # only into a buffer the driver made
        fill_zeros(context.gl, buffer.glo, nbytes)
        _refuse_on_error(context, ctx, plan, what, nbytes, buffer)
    return buffer


def _refuse_on_error(context, ctx, plan, what, nbytes, buffer):
    """Release `buffer` and raise out_of_memory when a GL error is pending."""
    error = ctx.error
    if error != "GL_NO_ERROR":
        buffer.release()
        context.clear_errors()
        raise out_of_memory(context, plan, what, nbytes, error)


def fill_zeros(gl, handle, nbytes):
    """Zero the first `nbytes` of buffer `handle` on the GPU: one upload of at most
    ZERO_SEED_BYTES of zeros, then copies that double the zeroed prefix (GLES has no
    glClearBufferData). Uploading all `nbytes` of zeros instead costs a driver staging copy of
    them; this way the 6.3 MB arena of pose_landmark_full took 0.6 ms on an H200
    (`gles-bench-init --phases`, docs/performance.md, round 8). Leaves nothing bound to the copy
    targets."""
    seed = min(nbytes, ZERO_SEED_BYTES)
    gl.bind_buffer(G.GL_COPY_WRITE_BUFFER, handle)
    gl.buffer_sub_data(G.GL_COPY_WRITE_BUFFER, 0, seed, bytes(seed))
    gl.bind_buffer(G.GL_COPY_READ_BUFFER, handle)
    done = seed
    while done < nbytes:  # source [0, count) and target [done, done + count) never overlap
        count = min(done, nbytes - done)
        gl.copy_buffer_sub_data(G.GL_COPY_READ_BUFFER, G.GL_COPY_WRITE_BUFFER, 0, done, count)
        done += count
    gl.bind_buffer(G.GL_COPY_READ_BUFFER, 0)
    gl.bind_buffer(G.GL_COPY_WRITE_BUFFER, 0)


class GpuPartition:
    """A Plan made real on a GlContext. `nodes` are the graph nodes it replaces. `binaries`
    (optional, one per plan source): (format, bytes) of a program binary to load instead of
    compiling that source, or None (gpu/serialization/ passes them on a warm start). `view`: the
    quant.FloatView the plan was compiled from, when the partition runs a quantized model (it
    maps captured float values back to the model's integers). `fused_away`: the indices of the
    model tensors of `nodes` that no dispatch computes (a rewrite fused them away)."""

    def __init__(self, context, plan, nodes, binaries=None, view=None, fused_away=frozenset()):
        self.context = context
        self.plan = plan
        self.nodes = nodes
        self.view = view
        self.fused_away = set(fused_away)
        self.inputs = frozenset(slot.tensor_index for slot in plan.inputs)  # model tensor indices
        self.steps = []
        self.released = False  # release() ran: a plan with no dispatch is not a released partition
        self.arena = self.consts = self.params = self.io = self.floats = None
        # GpuDelegateOptions.debug_nonfinite: a dict whose 'first_nonfinite' the checked run
        # fills (the delegate's summary reads it), else None.
        self.nonfinite = None
        # The delegate's half_overflow.new_record() that invokes whose half storage overflowed
        # count in (GpuDelegate.summary()['half_overflow']), else None: not looked at (calibration's runs).
        self.overflow = None
        # Precision 'auto': a callable making the float32 twin that computes again an invoke
        # whose overflow reached the outputs (half_overflow.note), then the twin once made.
        self.float_twin = self.twin = None
        self.variables = None  # the resource variables it holds (gpu/variable_sync.GpuVariables), or None
        with context.current() as ctx:
            context.check_error("earlier GL work (before creating a partition's buffers)")
            try:
                sizes = plan.buffer_bytes()
                # Padded channels must read as zero before anything writes them: zeroed on the
                # GPU (fill_zeros). moderngl's clear() maps the buffer and memsets it, which on
                # the H200 made the first invoke 6 ms slower (a scratch A/B of warm starts).
                self.arena = create_buffer(context, ctx, plan, "arena", sizes["arena"], zeroed=True)
                self.consts = create_buffer(context, ctx, plan, "constants", sizes["constants"],
                                            np.ascontiguousarray(plan.constants))
                self.params = create_buffer(context, ctx, plan, "params", sizes["params"], plan.params)
                if plan.float_elements:  # precision 'auto': the promoted weights, then the promoted tensors
                    floats = np.zeros((plan.float_elements, 4), np.float32)
                    floats[:len(plan.float_constants)] = plan.float_constants
                    self.floats = create_buffer(context, ctx, plan, "float", sizes["float"], floats)
                self.io = (MappedIo if context.persistent_mapping else CopiedIo)(context, plan)
                # Programs last: on a warm start the entry's MAC runs beside the uploads
                # above, and iterating `binaries` waits for it (serialization.cache._CheckedBinaries).
                binaries = list(binaries) if binaries else [None] * len(plan.sources)
                # Sources without a binary (a driver that gives none) compile at once, as a cold start's do.
                context.start_programs([s for s, binary in zip(plan.sources, binaries) if binary is None])
                programs = [context.program(source, binary) for source, binary in zip(plan.sources, binaries)]
                # Range arguments are GLintptr / GLsizeiptr: pre-built c_ssize_t for the untyped calls.
                self.steps = [(programs[i].handle, ctypes.c_ssize_t(offset), ctypes.c_ssize_t(size),
                               tuple(int(g) for g in groups), barrier)
                              for i, offset, size, groups, barrier in plan.steps]
                self.flush_points = flush_points(len(self.steps))
                self.segments = _segments(self.steps, self.flush_points)
                context.check_error("creating the partition's buffers and programs")
            except BaseException:
                self.steps = []
                self._release_buffers()
                context.clear_errors()
                raise

    def run(self, storage, capture=None):
        """Invoke: inputs from storage[tensor index], outputs written back into storage in
        place (cast to the storage's dtype). With a `capture` dict, every tensor a dispatch
        writes is read back right after that dispatch (before its memory is reused) into
        capture[index] as a BHWC float32 array: slow, for the parity report. StateError (a
        ValueError and a RuntimeError, as LiteRT's) once the partition was released (release(), or
        its delegate's close())."""
        if self.released:
            raise StateError("this GPU partition was released: the delegate that compiled it was closed, or "
                             "its interpreter re-planned; call allocate_tensors() again (with an open delegate)")
        if self.variables is not None:  # uploads the variables it reads and lacks, then holds those it assigns
            return self.variables.run(self._run, storage, capture)
        return self._run(storage, capture)

    def _run(self, storage, capture=None):
        if self.nonfinite is not None:
            return self._run_checked(storage, capture)
        context = self.context
        with context.current(keep_state=True):
            try:
                self._begin(storage)
                if capture is None:
                    self._dispatch()
                else:
                    self._capture_io_loads(storage, capture)
                    self._dispatch_capturing(capture)
                self.io.read_outputs(storage)  # ends with END_BARRIER
                if capture is not None:
                    self._capture_io_stores(storage, capture)
            except BaseException:
                context.state_owner = None  # the next run binds, and barriers, again
                raise
        self._note_overflow(storage, capture)

    def _note_overflow(self, storage, capture):
        """After a run: where its half storage overflowed, half_overflow.note (the delegate's
        record; none for calibration's partitions)."""
        if self.overflow is not None and self.io.overflowed():
            half_overflow.note(self, storage, input_reader(storage), self.overflow, capture)

    def _begin(self, storage):
        """Bind the partition's storage buffers unless they still are, and upload its inputs
        (inside current())."""
        context = self.context
        if context.state_owner is not self:
            gl = context.gl
            gl.bind_buffer_base_fast(G.GL_SHADER_STORAGE_BUFFER, ARENA_BINDING, self.arena.glo)
            gl.bind_buffer_base_fast(G.GL_SHADER_STORAGE_BUFFER, CONSTS_BINDING, self.consts.glo)
            gl.bind_buffer_base_fast(G.GL_SHADER_STORAGE_BUFFER, IO_BINDING, self.io.handle)
            if self.floats is not None:  # precision 'auto': the promoted tensors and weights
                gl.bind_buffer_base_fast(G.GL_SHADER_STORAGE_BUFFER, FLOAT_BINDING, self.floats.glo)
            # Shader writes of whatever ran before must land before this invoke reads the arena
            # (after a run of this partition that ended normally, its END_BARRIER did that).
            gl.memory_barrier_fast(G.GL_SHADER_STORAGE_BARRIER_BIT)
            context.state_owner = self
        context.left_bound = True  # the dispatches leave a program bound, the I/O copies their buffers
        self.io.write_inputs(storage)

    def _dispatch(self):
        """Issue every dispatch (self.segments, a glFlush between them)."""
        gl = self.context.gl
        bind_range, use, dispatch = gl.bind_buffer_range_fast, gl.use_program_fast, gl.dispatch_compute_fast
        barrier_bits, params, flush = gl.memory_barrier_fast, self.params.glo, gl.flush
        ssbo_bit, ubo, binding = G.GL_SHADER_STORAGE_BARRIER_BIT, G.GL_UNIFORM_BUFFER, PARAMS_BINDING
        for steps, then_flush in self.segments:
            for barrier, offset, size, program, x, y, z in steps:
                if barrier:
                    barrier_bits(ssbo_bit)
                if size:  # a c_ssize_t, 0 where the program has its params baked in (compiler._params_blocks)
                    bind_range(ubo, binding, params, offset, size)
                if program:
                    use(program)
                dispatch(x, y, z)
            if then_flush:
                flush()

    def _dispatch_capturing(self, capture):
        """Issue every dispatch, reading back what each one writes into `capture` (see run)."""
        gl = self.context.gl
        current = 0
        for k, (program, offset, size, groups, barrier) in enumerate(self.steps):
            if barrier:
                gl.memory_barrier_fast(G.GL_SHADER_STORAGE_BARRIER_BIT)
            self.bind_params(offset, size)
            if program != current:
                gl.use_program_fast(program)
                current = program
            gl.dispatch_compute_fast(*groups)
            if k in self.flush_points:
                gl.flush()
            self._capture(self.plan.writes[k], capture)

    def bind_params(self, offset, size):
        """Bind a step's params block (c_ssize_t offset and size); a step whose program has its
        params baked in has none (size 0)."""
        if size:
            self.context.gl.bind_buffer_range_fast(G.GL_UNIFORM_BUFFER, PARAMS_BINDING, self.params.glo, offset, size)

    def _capture(self, written, capture):
        """Read back what one dispatch wrote into the model tensors of `capture` (tensors that
        the compiler or the float view made up have no entry there and are skipped; outputs
        stored straight into the I/O buffer are taken from the outputs after the run; a
        partition input, which convert_in writes as its storage holds it, rounded to half in
        half storage, keeps the value it was given, as in LiteRT)."""
        self.context.gl.memory_barrier_fast(G.GL_BUFFER_UPDATE_BARRIER_BIT)
        for index, offset, shape in written:
            if index in capture and index not in self.plan.io_stores and index not in self.inputs:
                self._store_capture(capture, index, self.read_written(index, offset, shape))

    def _buffer_at(self, offset):
        """(buffer, element bytes, element dtype, byte offset) of the tensor at `offset` (elements;
        FLOAT_BASE + k: element k of the float buffer)."""
        if offset >= FLOAT_BASE:
            return self.floats, 16, np.float32, (offset - FLOAT_BASE) * 16
        dtype = np.float16 if self.plan.storage_half else np.float32
        return self.arena, self.plan.element_bytes, dtype, offset * self.plan.element_bytes

    def read_tensor(self, offset, shape):
        """The arena tensor at `offset` (elements; FLOAT_BASE + k: element k of the float buffer)
        of `shape`, as BHWC float32 (inside current(), after a GL_BUFFER_UPDATE barrier)."""
        buffer, element_bytes, dtype, start = self._buffer_at(offset)
        raw = buffer.read(bhwc(shape).elements * element_bytes, start)
        return from_phwc4(np.frombuffer(raw, dtype).astype(np.float32), shape)

    def read_written(self, index, offset, shape):
        """read_tensor of model tensor `index` as Plan.writes lists it: a lane view
        (Plan.lane_shifts) lies in its whole's vec4s from its offset on, `shift` lanes in."""
        shift = self.plan.lane_shifts.get(index)
        if shift is None:
            return self.read_tensor(offset, shape)
        s4 = bhwc(shape)
        whole_lanes = self.read_tensor(offset, (1, s4.h, s4.w, 4 * s4.slices))
        return np.ascontiguousarray(whole_lanes[..., shift:shift + s4.c]).reshape(shape)

    def write_tensor(self, offset, values):
        """Store BHWC `values` as the arena tensor at `offset` (as read_tensor), in its storage
        type (inside current(); the dispatches issued after it read them)."""
        buffer, _, dtype, start = self._buffer_at(offset)
        buffer.write(to_phwc4(values).astype(dtype).tobytes(), start)

    def _capture_io_loads(self, storage, capture):
        """The tensors whose one reader loads them from the I/O buffer (Plan.io_loads: a partition
        input or its permutation), never in the arena, into `capture`, from the inputs."""
        value = input_reader(storage)
        for index, (offset, strides, shape) in self.plan.io_loads.items():
            if index in capture:
                slot = next(s for s in self.plan.inputs if s.offset // 4 <= offset < (s.offset + s.nbytes) // 4)
                floats = np.ascontiguousarray(io_values(value(slot.tensor_index)), np.float32).reshape(-1)
                self._store_capture(capture, index, strided_value(floats, offset - slot.offset // 4, strides, shape))

    def _capture_io_stores(self, storage, capture):
        """The outputs the kernels stored straight into the I/O buffer, as run() left them in
        `storage` (model values: no float view to map back), into `capture`."""
        for index in self.plan.io_stores:
            if index in capture and capture[index] is not storage[index]:
                capture[index] = np.array(storage[index], copy=True)

    def _store_capture(self, capture, index, values):
        if self.view is not None:
            values = quant.model_value(self.view, index, values)
        target = capture[index]
        if target.dtype == np.complex64:  # the pairs of its complex view (gpu/complex_view.py)
            values = as_complex(values)
        if target.shape == values.shape and target.flags.writeable:
            store_output(target, values)
        else:
            capture[index] = values

    # -- GpuDelegateOptions.debug_nonfinite ----------------------------------------------------
    def _run_checked(self, storage, capture=None):
        """run() dispatch by dispatch, reading back every tensor each dispatch writes and checking
        it for NaN / Inf; the first non-finite value (a partition input, or the first dispatch
        that writes one) is reported once: a warning on the 'gles_delegate' logger and
        self.nonfinite['first_nonfinite'] (GpuDelegate.summary()). Slow: for debugging."""
        found, stored = None, {}
        # int32 tensors hold their bits (kernels/base.py): no value of theirs is a NaN.
        ints = {t.index for node in self.nodes for t in node.inputs + node.outputs
                if t is not None and t.dtype == np.int32}
        for slot in self.plan.inputs:
            value = storage[slot.tensor_index]
            if found is None and not _all_finite(value):
                found = self._nonfinite_report(None, slot.tensor_index, np.asarray(as_floats(value), np.float32))
        gl = self.context.gl
        with self.context.current():
            try:
                self._begin(storage)
                if capture is not None:
                    self._capture_io_loads(storage, capture)
                for k, (program, offset, size, groups, _) in enumerate(self.steps):
                    gl.memory_barrier_fast(G.GL_SHADER_STORAGE_BARRIER_BIT)
                    self.bind_params(offset, size)
                    gl.use_program_fast(program)
                    gl.dispatch_compute_fast(*groups)
                    gl.memory_barrier_fast(G.GL_BUFFER_UPDATE_BARRIER_BIT)
                    for index, arena_offset, shape in self.plan.writes[k]:
                        if index in self.plan.io_stores:
                            stored.setdefault(index, k)  # in the I/O buffer: checked once read out
                            continue
                        values = self.read_written(index, arena_offset, shape)
                        if found is None and index not in ints and not np.isfinite(values).all():
                            found = self._nonfinite_report(k, index, values)
                        if capture is not None and index in capture and index not in self.inputs:
                            self._store_capture(capture, index, values)
                self.io.read_outputs(storage)
            finally:
                self.context.state_owner = None  # the checked path leaves no state to the fast one
        if capture is not None:
            self._capture_io_stores(storage, capture)
        for index, k in sorted(stored.items(), key=lambda item: item[1]):
            # Nothing in the partition reads these outputs, so one written earlier than the
            # dispatch `found` names is the first non-finite value.
            values = np.asarray(as_floats(storage[index]), np.float32)
            earlier = found is None or (found["step"] is not None and k < found["step"])
            if earlier and not np.isfinite(values).all():
                found = self._nonfinite_report(k, index, values)
        self._note_overflow(storage, capture)
        if found is not None and self.nonfinite.get("first_nonfinite") is None:
            self.nonfinite["first_nonfinite"] = found
            where = f"GPU dispatch {found['dispatch']!r} (step {found['step']})" if found["step"] is not None \
                else "an input of the GPU partition (computed on the CPU, or a model input)"
            log.warning("debug_nonfinite: first non-finite value (%d NaN, %d Inf; first at element %s) in "
                        "tensor %d (%s) produced by %s, in %s", found["nan"], found["inf"], str(found["element"]),
                        found["index"], repr(found["tensor"]), found["node"] or "no GPU node", where)

    def _nonfinite_report(self, step, index, values):
        """What GpuDelegate.summary()['first_nonfinite'] holds: the model node whose output
        the tensor is (the dispatch's label for a tensor the compiler made up), the tensor's name
        and index, the dispatch and step that wrote it (None for a partition input), the counts
        of NaN and Inf and the index of the first non-finite element."""
        producers, names = {}, {}
        for node in self.nodes:
            for t in node.inputs + node.outputs:
                if t is not None:
                    names[t.index] = t.name
            for t in node.outputs:
                producers[t.index] = node.label
        bad = ~np.isfinite(values)
        element = tuple(int(i) for i in np.argwhere(bad)[0]) if bad.any() else ()
        node = None if step is None else producers.get(index, self.plan.labels[step])
        return {"node": node, "tensor": names.get(index), "index": int(index),
                "dispatch": None if step is None else self.plan.labels[step], "step": step,
                "nan": int(np.isnan(values).sum()), "inf": int(np.isinf(values).sum()), "element": element}

    def release(self):
        """Free the partition's buffers (idempotent; its programs stay cached in the context). In a
        fork() child the buffers are the parent's: only the references go."""
        if self.released:
            return
        if self.variables is not None:  # the values only it holds go to the CPU, while its buffers exist
            self.variables.release()
        if self.twin is not None:
            self.twin.release()
        self.float_twin = None
        self.released = True
        if self.context.ctx is None or self.context.forked:
            self.steps = []
            return
        with self.context.current():
            self._release_buffers()
        self.steps = []

    def _release_buffers(self):
        """Free whichever of the buffers exist (inside current())."""
        for buffer in (self.arena, self.consts, self.params, self.io, self.floats):
            if buffer is not None:
                buffer.release()
        self.arena = self.consts = self.params = self.io = self.floats = None


def store_output(target, values):
    """Write an output as the GPU stores it (float32 words, gpu/kernels/base.py) into the
    tensor's storage `target`: float32 as it is, bool as nonzero, int32 from its bits, int64 from
    the bits of the int32 the GPU holds it in (gpu/index_view.py), complex64 from its pairs
    (gpu/complex_view.py)."""
    if target.dtype in (np.int32, np.int64):
        values = np.asarray(values, np.float32).view(np.int32)
    np.copyto(as_floats(target), as_floats(values), casting="unsafe")


def _words(plan):
    """The byte range (start, end) of the overflow word and the status words, which lie together
    between the inputs and the outputs of the I/O buffer, or None without any."""
    overflow, errors = plan.overflow_offset >= 0, bool(plan.status_errors)
    if not (overflow or errors):
        return None
    start = plan.overflow_offset if overflow else plan.status_offset
    return start, plan.status_offset + 4 * len(plan.status_errors) if errors else plan.overflow_offset + 4


def check_status(words, errors):
    """The ModelError of the first status word a kernel set (nonzero), saying errors[k]; the
    invoke's outputs are then not stored."""
    if words.any():
        raise ModelError(errors[int(np.flatnonzero(words)[0])])


def flush_points(count):
    """The steps (of `count`) after which run() calls glFlush: step FLUSH_FIRST - 1, then every
    FLUSH_EVERY steps; never the last one (the fence flushes)."""
    if FLUSH_FIRST <= 0:
        return frozenset()
    points = range(FLUSH_FIRST - 1, count - 1, FLUSH_EVERY) if FLUSH_EVERY > 0 else [FLUSH_FIRST - 1]
    return frozenset(k for k in points if k < count - 1)


def _segments(steps, flush_points):
    """The steps as run() issues them: [(steps, then_flush)], a segment ending with each step of
    `flush_points`, each step (barrier, params offset, params size, program to use or 0 when the
    previous step's is still bound, group counts x, y, z)."""
    issued, previous = [], 0
    for program, offset, size, (x, y, z), barrier in steps:
        issued.append((barrier, offset, size, program if program != previous else 0, x, y, z))
        previous = program
    segments, start = [], 0
    for k in sorted(flush_points):
        segments.append((issued[start:k + 1], True))
        start = k + 1
    return segments + [(issued[start:], False)]


def _all_finite(value):
    value = np.asarray(value)
    return not np.issubdtype(value.dtype, np.inexact) or bool(np.isfinite(value).all())


# MappedIo objects whose outputs some storage still reads from the mapping. A fork()ed child may
# not inherit a driver's mapping (NVIDIA's), so they are copied in before every fork.
_DEFERRING = weakref.WeakSet()


def strided_value(floats, offset, strides, shape):
    """A copy of the tensor of `shape` that lies in the 1-D float32 array `floats` (an input's
    I/O words) from element `offset` on, `strides` the element steps of bhwc(shape)'s w, h, c
    and b (Plan.io_loads; serialization.validate checks that it lies inside the input)."""
    s4 = bhwc(shape)
    dims = (s4.b, s4.h, s4.w, s4.c)
    w, h, c, b = strides
    view = np.lib.stride_tricks.as_strided(floats[offset:], dims, tuple(4 * s for s in (b, h, w, c)), writeable=False)
    return np.array(view, np.float32).reshape(shape)


def input_reader(storage):
    """index -> an input's value to upload: where `storage` defers outputs (the Interpreter's
    _Storage.current), the producer's memory itself (another partition's mapping, a LiteRT
    sub-model's output buffer), saving the copy into the storage first."""
    return getattr(storage, "current", storage.__getitem__)


def _settle_before_fork():
    for io in list(_DEFERRING):
        io.settle_deferred()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_settle_before_fork)


class MappedIo:
    """Inputs and outputs through a persistently, coherently mapped staging buffer: inputs are
    copied (and converted to float32) straight into it, outputs out of it after a fence (or left
    there for the Interpreter's storage to copy when asked: defer_output).
    The kernels read and write a device-local buffer; glCopyBufferSubData moves the inputs in and
    the outputs out in one DMA copy each (measured on an H200: a convert_out kernel writing a
    257x257x21 output straight into host-mapped memory took 1.7 ms, scattered over PCIe). I/O of
    at most DIRECT_IO_MAX_BYTES is `direct`: the kernels use the mapped buffer itself."""

    FLAGS = G.GL_MAP_READ_BIT | G.GL_MAP_WRITE_BIT | G.GL_MAP_PERSISTENT_BIT | G.GL_MAP_COHERENT_BIT

    def __init__(self, context, plan):
        gl = self.gl = context.gl
        self.context = context
        self.direct = plan.io_bytes <= DIRECT_IO_MAX_BYTES
        self.device = None if self.direct else create_buffer(context, context.ctx, plan, "I/O", plan.io_bytes)
        self.staging, address, error = G.mapped_buffer(gl, plan.io_bytes, self.FLAGS)
        if not address:  # free what was made (mapped_buffer did its own), say what failed
            if self.device is not None:
                self.device.release()
            raise out_of_memory(context, plan, "I/O staging", plan.io_bytes,
                                f"glBufferStorage / glMapBufferRange: {GL_ERRORS.get(error, hex(error))}")
        self.handle = self.staging if self.direct else self.device.glo
        floats = array_at(address, (plan.io_bytes // 4,), np.float32)

        def views(slots):
            return [(slot.tensor_index, floats[slot.offset // 4:(slot.offset + slot.nbytes) // 4].reshape(slot.shape))
                    for slot in slots]
        self.inputs, self.outputs = views(plan.inputs), views(plan.outputs)
        # None without status words: no per-invoke work for them then.
        self.status = floats[plan.status_offset // 4:][:len(plan.status_errors)] if plan.status_errors else None
        self.status_errors = plan.status_errors
        self.overflow = floats[plan.overflow_offset // 4:][:1] if plan.overflow_offset >= 0 else None
        # id -> weakref of the storages holding outputs of this mapping not yet copied (dicts: unhashable)
        self.deferred_to = {}
        # The inputs come first in the I/O buffer, then the overflow and status words, then the
        # outputs (compiler.build_dispatches): the copy in and the copy out each take the words.
        words = _words(plan)
        self.in_bytes = max([s.offset + s.nbytes for s in plan.inputs] + [words[1] if words else 0])
        self.out_start = min([s.offset for s in plan.outputs] + [words[0] if words else plan.io_bytes])
        self.out_bytes = plan.io_bytes - self.out_start

    def _copy(self, source, target, offset, size):
        """Copy on the GPU; the two buffers stay bound to the copy targets (GlContext.left_bound:
        the next plain current() unbinds them)."""
        gl = self.gl
        gl.bind_buffer(G.GL_COPY_READ_BUFFER, source)
        gl.bind_buffer(G.GL_COPY_WRITE_BUFFER, target)
        gl.copy_buffer_sub_data(G.GL_COPY_READ_BUFFER, G.GL_COPY_WRITE_BUFFER, offset, offset, size)

    def write_inputs(self, storage):
        # A coherent mapping: these writes are visible to every GL command issued after them.
        value = input_reader(storage)
        for index, view in self.inputs:
            np.copyto(view, io_values(value(index)), casting="unsafe")
        if self.status is not None:
            self.status[:] = 0
        if self.overflow is not None:
            self.overflow[0] = 0
        if self.in_bytes and not self.direct:
            self._copy(self.staging, self.handle, 0, self.in_bytes)

    def read_outputs(self, storage):
        gl = self.gl
        if self.direct:  # shader writes to a mapped buffer reach the client after this and the fence
            gl.memory_barrier_fast(END_BARRIER | G.GL_CLIENT_MAPPED_BUFFER_BARRIER_BIT)
        else:  # shader writes before the copy reads
            gl.memory_barrier_fast(END_BARRIER | G.GL_BUFFER_UPDATE_BARRIER_BIT)
            if self.out_bytes:
                self._copy(self.handle, self.staging, self.out_start, self.out_bytes)
        sync = gl.fence_sync_fast(G.GL_SYNC_GPU_COMMANDS_COMPLETE, 0)
        try:
            G.wait_sync(gl, sync)
        finally:
            gl.delete_sync_fast(sync)
        if self.status is not None:
            check_status(self.status, self.status_errors)
        # The Interpreter's storage takes a float32 output as the mapped view itself and copies
        # it once, where get_tensor() asks (defer_output): a 5.5 MB output was copied twice per
        # end-to-end run, 0.4 ms each on the H200 machine (docs/performance.md, round 12).
        # Not where kernels set status words: an invoke they fail leaves the outputs of the last
        # good one (check_status raises before the copy), and a deferred output would be the
        # mapping the failed invoke has written.
        defer = getattr(storage, "defer_output", None) if self.status is None else None
        deferred = False
        for index, view in self.outputs:
            if defer is not None and defer(index, view, self):
                deferred = True
            else:
                store_output(storage[index], view)
        if deferred:
            self._remember(storage)

    def overflowed(self):
        """Whether the last invoke's half storage rounded a finite value to inf (after read_outputs)."""
        return self.overflow is not None and bool(self.overflow[0])

    def _remember(self, storage):
        """Keep a weak reference to `storage`, which holds outputs of this mapping not yet copied
        (a dead one's id may have been reused: replace it)."""
        ref = self.deferred_to.get(id(storage))
        if ref is None or ref() is not storage:
            self.deferred_to[id(storage)] = weakref.ref(storage)
        _DEFERRING.add(self)

    def settle_deferred(self):
        """Copy the outputs storages still read from this mapping into them; returns the storages
        that still need the mapping itself (settle() true: numpy views of LiteRT's over it live)."""
        refs, self.deferred_to = list(self.deferred_to.values()), {}
        _DEFERRING.discard(self)
        keepers = []
        for ref in refs:
            storage = ref()
            if storage is not None and storage.settle(owner=self):
                keepers.append(storage)
        return keepers

    def release(self):
        keepers = self.settle_deferred()  # before the mapping goes
        if self.device is not None:
            self.device.release()
        self.inputs = self.outputs = []
        if keepers:  # the mapping outlives the partition: freed by the storage (free_kept)
            hold_shared(self.context)
            keepers[0].keep(self)
        else:
            self._unmap()

    def _unmap(self):
        """Unmap and delete the staging buffer (inside current())."""
        gl, staging = self.gl, ctypes.c_uint(self.staging)
        gl.bind_buffer(G.GL_COPY_WRITE_BUFFER, self.staging)
        gl.unmap_buffer(G.GL_COPY_WRITE_BUFFER)
        gl.bind_buffer(G.GL_COPY_WRITE_BUFFER, 0)
        gl.delete_buffers(1, ctypes.byref(staging))

    def free_kept(self):
        """Free the mapping a storage kept past release() (no numpy view can read it any more),
        then the hold on the context it took."""
        context = self.context
        if context.ctx is not None and not context.forked:
            with context.current():
                self._unmap()
        release_shared(context)


class CopiedIo:
    """The I/O buffer through glBufferSubData and glMapBufferRange (moderngl's write / read),
    where the context cannot map buffers persistently."""

    def __init__(self, context, plan):
        self.plan = plan
        self.buffer = create_buffer(context, context.ctx, plan, "I/O", plan.io_bytes)
        self.handle = self.buffer.glo
        self.barrier = context.gl.memory_barrier_fast
        self.overflow = False  # see MappedIo.overflowed
        self.words = _words(plan)

    def write_inputs(self, storage):
        value = input_reader(storage)
        for slot in self.plan.inputs:
            self.buffer.write(np.ascontiguousarray(io_values(value(slot.tensor_index)), np.float32), slot.offset)
        if self.words is not None:  # the overflow and status words: one write
            start, end = self.words
            self.buffer.write(bytes(end - start), start)

    def read_outputs(self, storage):
        self.barrier(END_BARRIER | G.GL_BUFFER_UPDATE_BARRIER_BIT)
        if self.words is not None:  # the overflow and status words: one read
            start, end = self.words
            words = np.frombuffer(self.buffer.read(end - start, start), np.float32)
            plan = self.plan
            self.overflow = plan.overflow_offset >= 0 and bool(words[(plan.overflow_offset - start) // 4])
            if plan.status_errors:
                first = (plan.status_offset - start) // 4
                check_status(words[first:first + len(plan.status_errors)], plan.status_errors)
        for slot in self.plan.outputs:
            target = storage[slot.tensor_index]
            if target.flags.c_contiguous and target.dtype == np.float32:
                self.buffer.read_into(target, slot.nbytes, slot.offset)
            else:
                data = np.frombuffer(self.buffer.read(slot.nbytes, slot.offset), np.float32)
                store_output(target, data.reshape(slot.shape))

    def overflowed(self):
        return self.overflow

    def release(self):
        self.buffer.release()
