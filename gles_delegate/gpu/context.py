"""A headless GL context with compute shaders, usable from any thread.

The context is an OpenGL ES 3.1+ context (gl_api 'gles', what the boards users deploy to have)
or a desktop OpenGL 4.3+ core context (gl_api 'gl'); 'auto' tries ES first. gpu/egl.py creates it
through EGL (device platform, then Mesa's surfaceless platform, then the default display).
moderngl is attached with a loader of our own: its function table holds EGL's proc addresses,
which do not depend on the context, so every moderngl call goes to the context current on the
calling thread, which is ours inside current(). One moderngl context serves every EGL context of
a display and API in the process (see _moderngl_context: making one per EGL context leaked).

EGL makes a context current on one thread at a time. Every piece of GL work here runs inside
`with context.current():`, which takes the context's lock, makes it current on the calling
thread and, on exit, restores whatever was current there before (usually nothing), so
interpreters on several threads can share one context without any of them owning a thread.
An enter/exit pair costs about 3.5 us on Mesa llvmpipe for ES (2.5 us of it the two
eglMakeCurrent calls; desktop GL's context also rebinds the thread's EGL API), 8.5 us on an H200.

Invokes do not pay that (KEEP_CURRENT): current(keep_state=True) on a thread with no context
current runs on an EGL context of that thread's own, in the share group of the main one (buffers,
programs and syncs are shared), and leaves it current there, so the thread's next invoke makes no
EGL call at all. The thread's first invoke starts making that context on a thread of its own
(_Spare) and shares the main context until it is made (prepare_thread_context() makes it ahead). The lock still serializes all GL work. Work one
context issued is visible to another once it completed and the other re-attaches the objects
(GLES 3.1 appendix D): an invoke ends waiting on its fence, every other exit of the main context
leaves a fence (the handoff) that the next context to run waits for, and a context that was not
the last to run forgets its bindings. At most MAX_KEPT_CONTEXTS threads get one. EGL never frees
a context left current on a thread that ended, so a thread releases its own as it ends (_ThreadEnd:
CPython drops a thread's thread-local values on that thread); the contexts of ended threads are
destroyed when the next one is made, the rest when the GlContext is released.

GL state the runtime leaves behind between invokes (GlContext.state_owner, left_bound, kept per
EGL context): a GpuPartition's run enters with current(keep_state=True) and leaves its
storage-buffer bindings, its last program and its copy-buffer bindings in place, so that its next
invoke can skip binding them again. Every plain current() forgets that state (whatever runs inside
may change any binding) and, entered on a free context, first unbinds the program and copy
buffers left bound, so moderngl, the tools and the tests never find a program of ours bound.

The default gl_api comes from the environment variable GLES_DELEGATE_GL_API ('auto', 'gles' or
'gl'; unset: 'auto'): it lets a whole test suite or application run under one API unchanged.
"""
import contextlib
import logging
import os
import threading
import weakref

import moderngl

from ..errors import GpuError
from . import egl
from .gl import (GL_COPY_READ_BUFFER, GL_COPY_WRITE_BUFFER, GL_SYNC_GPU_COMMANDS_COMPLETE, GlFunctions, PendingProgram,
                 Program, wait_sync)
from .upload import StagingRing

# Invokes run on a context kept current on their thread (module docstring); False: every invoke
# makes the shared context current and releases it, as plain current() does.
KEEP_CURRENT = True
MAX_KEPT_CONTEXTS = 8
# Driver threads compiling programs at once (start_programs): one per CPU core. With them the
# H200's cold starts took 1.26-2.08x less time (docs/performance.md, round 9: gles-bench-init A/B).
COMPILER_THREADS = os.cpu_count() or 1
log = logging.getLogger("gles_delegate")

GL_APIS = ("auto", "gles", "gl")
GL_API_ENV = "GLES_DELEGATE_GL_API"
_API_ORDER = {"auto": ("gles", "gl"), "gles": ("gles",), "gl": ("gl",)}
_API_NAMES = {"auto": "OpenGL ES 3.1 or OpenGL 4.3 core", "gles": "OpenGL ES 3.1", "gl": "OpenGL 4.3 core"}

# GL enums of the limits we read (all valid in OpenGL ES 3.1 and OpenGL 4.3 core).
GL_EXTENSIONS, GL_NUM_EXTENSIONS = 0x1F03, 0x821D
_LIMITS_INT = {
    "max_workgroup_invocations": 0x90EB,     # GL_MAX_COMPUTE_WORK_GROUP_INVOCATIONS
    "max_compute_ssbos": 0x90DB,             # GL_MAX_COMPUTE_SHADER_STORAGE_BLOCKS
    "ubo_offset_alignment": 0x8A34,          # GL_UNIFORM_BUFFER_OFFSET_ALIGNMENT
    "ssbo_offset_alignment": 0x90DF,         # GL_SHADER_STORAGE_BUFFER_OFFSET_ALIGNMENT
    "max_shared_memory_bytes": 0x8262,       # GL_MAX_COMPUTE_SHARED_MEMORY_SIZE
}
_LIMITS_INT64 = {
    "max_ssbo_bytes": 0x90DE,                # GL_MAX_SHADER_STORAGE_BLOCK_SIZE
    "max_ubo_bytes": 0x8A30,                 # GL_MAX_UNIFORM_BLOCK_SIZE
}
_LIMITS_INDEXED = {
    "max_workgroup_size": 0x91BF,            # GL_MAX_COMPUTE_WORK_GROUP_SIZE
    "max_workgroup_count": 0x91BE,           # GL_MAX_COMPUTE_WORK_GROUP_COUNT
}
# What OpenGL ES 3.1 guarantees of each limit (its tables of implementation-dependent values:
# the least maximum, the largest alignment): a plan within these runs on any GLES 3.1 GPU.
# Boards come near them (128 to 384 invocations, 16 to 32 KiB of shared memory); desktop GPUs
# and llvmpipe give far more, so tests and gles-fuzz-graphs --minimum-limits set these in
# `GlContext.limits` to see what such a board would be given.
ES31_MINIMUM_LIMITS = {
    "max_workgroup_invocations": 128, "max_workgroup_size": (128, 128, 64),
    "max_workgroup_count": (65535, 65535, 65535), "max_shared_memory_bytes": 16384,
    "max_compute_ssbos": 4, "max_ssbo_bytes": 1 << 27, "max_ubo_bytes": 16384,
    "ubo_offset_alignment": 256, "ssbo_offset_alignment": 256,
}
_GLSL_ES_ON_DESKTOP = "GL_ARB_ES3_1_compatibility"  # `#version 310 es` on desktop GL < 4.5
# A fork() child has a copy of the parent's context but not the driver threads that run its
# work (Mesa's llvmpipe), so its first dispatch would wait forever: refuse it up front.
FORKED_CONTEXT = ("this GL context belongs to process {pid}: it was made before os.fork(), and a GL "
                  "context does not survive fork (its driver threads stay in the parent; a dispatch "
                  "here would wait forever). Make a new GpuDelegate (and allocate the interpreter "
                  "with it) in process {here}")


def default_gl_api():
    """The gl_api used when none is given: $GLES_DELEGATE_GL_API, else 'auto'."""
    value = os.environ.get(GL_API_ENV, "").strip().lower()
    if not value:
        return "auto"
    if value not in GL_APIS:
        raise ValueError(f"environment variable {GL_API_ENV} must be one of {list(GL_APIS)}, "
                         f"got {os.environ[GL_API_ENV]!r}")
    return value


def _check_request(device_index, gl_api):
    if gl_api not in GL_APIS:
        raise ValueError(f"gl_api must be one of {list(GL_APIS)}, got {gl_api!r}")
    if device_index is not None and (isinstance(device_index, bool) or not isinstance(device_index, int)
                                     or device_index < 0):
        raise ValueError(f"device_index must be an int >= 0 or None, got {device_index!r}")


class GlContext:
    """An EGL context with compute shaders plus what we need to know about the device.

    Attributes: renderer, version, vendor, glsl_version (GL strings), limits (dict of GL limits),
    extensions (frozenset of GL extension names), gl_api ('gles' | 'gl', what was created),
    egl_platform ('device' | 'surfaceless' | 'default'), device_index (EGL device, or None off
    the device platform), ctx (the moderngl.Context; use it inside current()), gl (gpu/gl.py
    GlFunctions: the program calls we make ourselves), binary_formats
    (GL_NUM_PROGRAM_BINARY_FORMATS: 0 where program binaries cannot be saved), compiler_threads
    (how many programs the driver compiles at once after start_programs: 1 without
    KHR_parallel_shader_compile).
    """

    def __init__(self, device_index=None, gl_api=None, platforms=egl.PLATFORMS, use_pbuffer=None):
        """platforms / use_pbuffer restrict how EGL is used (tests of each fallback path)."""
        gl_api = default_gl_api() if gl_api is None else gl_api
        _check_request(device_index, gl_api)
        self.requested_gl_api = gl_api
        self.ctx = None
        self.pid = os.getpid()  # the process that may use the context (see FORKED_CONTEXT)
        self._lock = threading.RLock()
        self._depth = 0
        self._token = None
        self._programs = {}
        self._staging = None  # upload.StagingRing once made; False where the driver refused it
        self._plain, self._keeping = _Current(self, False), _Current(self, True)
        self.egl, strings = _create_egl_context(device_index, gl_api, platforms, use_pbuffer)
        # Per EGL context, what the runtime left bound (module docstring); _active: the context
        # that ran last; _kept: the invoking threads' own contexts; _handoff: (fence, _Binding
        # that left it) of work other contexts must wait for.
        self._main = self._active = _Binding(self.egl, None)
        self._kept, self._thread = [], threading.local()
        self._handoff = None
        self._spare = None  # the next invoking thread's context, made off its path (_Spare)
        self.gl_api = self.egl.api
        self.egl_platform = self.egl.display.platform
        self.device_index = self.egl.display.device_index
        self.renderer, self.version = strings["renderer"], strings["version"]
        self.vendor, self.glsl_version = strings["vendor"], strings["glsl"]
        token = self.egl.enter()
        try:
            self.ctx = _moderngl_context(self.egl, self.version, self.renderer)
            self.gl = GlFunctions(self.egl.proc_address)
            self.gl.clear_errors()  # whatever attaching left behind (desktop-only queries)
            self.extensions = _extensions(self.gl)
            self.limits = _limits(self.gl)
            self.gl.clear_errors()
            self.binary_formats = self.gl.binary_formats()
            parallel = self.gl.compiler_threads(self.extensions, COMPILER_THREADS)
            self.compiler_threads = COMPILER_THREADS if parallel else 1  # driver threads compiling programs
            self.persistent_mapping = self._load_buffer_storage()
            if self.gl_api == "gl" and _desktop_version(self.version) < (4, 5) \
                    and _GLSL_ES_ON_DESKTOP not in self.extensions:
                raise GpuError(f"{self.version} ({self.renderer}) cannot compile GLSL ES 3.10 shaders "
                               f"(needs OpenGL 4.5 or {_GLSL_ES_ON_DESKTOP}); use gl_api='gles'")
        except BaseException:
            self.ctx = None
            self.egl.exit(token)
            self.egl.destroy()
            raise
        self.egl.exit(token)

    def _load_buffer_storage(self):
        """Whether buffers can be mapped persistently (glBufferStorage: GL 4.4, or GLES with
        EXT_buffer_storage), which lets inputs and outputs move by memcpy."""
        if self.gl_api == "gl":
            available = _desktop_version(self.version) >= (4, 4) or "GL_ARB_buffer_storage" in self.extensions
            name = "glBufferStorage"
        else:
            available, name = "GL_EXT_buffer_storage" in self.extensions, "glBufferStorageEXT"
        return available and self.gl.load_buffer_storage(name)

    def current(self, keep_state=False):
        """Context manager: the context is current on this thread (re-entrant); yields the
        moderngl.Context. keep_state (the runtime's invoke only): leave state_owner as it is, for
        code that changes no GL binding but its own and keeps state_owner true itself."""
        return self._keeping if keep_state else self._plain

    @property
    def state_owner(self):
        """The GpuPartition whose storage buffers are bound on the EGL context that ran last
        (and which ran last, to its end), or None (also once it is gone)."""
        owner = self._active.owner
        return None if owner is None else owner()

    @state_owner.setter
    def state_owner(self, partition):
        self._active.owner = None if partition is None else weakref.ref(partition)

    @property
    def left_bound(self):
        """A run left a program and copy buffers bound on the EGL context that ran last."""
        return self._active.left_bound

    @left_bound.setter
    def left_bound(self, value):
        self._active.left_bound = value

    def prepare_thread_context(self):
        """Make the EGL context the next thread to invoke will keep (KEEP_CURRENT), now, and wait
        for it, so that thread's first invoke already runs on it (otherwise its first invokes
        share the main context while it is made in the background). For applications that start
        a worker thread, and for tests and benchmarks."""
        with self._lock:
            if self._spare is None or self._spare.taken:
                self._spare = _Spare(self.egl)
            spare = self._spare
        spare.wait()

    @property
    def kept_contexts(self):
        """How many threads have an invoke context of their own (KEEP_CURRENT)."""
        return len(self._kept)

    def _enter(self, keep_state):
        """Make an EGL context current for the outermost current() (the lock held)."""
        binding = self._kept_binding() if keep_state and KEEP_CURRENT else self._main
        try:
            token = binding.egl.enter()
        except GpuError:
            if binding is self._main:
                raise
            self._thread.refused = True  # this thread's own context would not go current: share the main one
            binding, token = self._main, self._main.egl.enter()
        self._token = (binding, token)
        if binding is not self._active:
            handoff = self._handoff
            if handoff is not None and handoff[1] is not binding:
                self._handoff = None
                try:
                    wait_sync(self.gl, handoff[0])
                finally:
                    self.gl.delete_sync_fast(handoff[0])
            binding.owner = None  # re-attach what another context may have changed
            self._active = binding

    def _exit(self, failed):
        binding, token = self._token
        self._token = None
        if binding is self._main:
            if self._kept:
                self._leave_handoff(binding)
            binding.egl.exit(token)
        else:
            if failed:  # an invoke that did not reach its fence
                self._leave_handoff(binding)
            binding.egl.exit(token, keep=True)

    def _leave_handoff(self, binding):
        gl = self.gl
        if self._handoff is not None:
            gl.delete_sync_fast(self._handoff[0])
        self._handoff = (gl.fence_sync_fast(GL_SYNC_GPU_COMMANDS_COMPLETE, 0), binding)
        gl.flush()

    def _kept_binding(self):
        """This thread's own invoke context, made on first use; the main one's binding when it
        cannot have one."""
        binding = getattr(self._thread, "binding", None)
        if binding is not None:
            return binding
        if getattr(self._thread, "refused", False):
            return self._main
        self._prune_kept()
        if len(self._kept) >= MAX_KEPT_CONTEXTS:
            return self._main
        if self._spare is None or self._spare.taken:
            # Made on a thread of its own (on an H200, making one during start-up slowed the
            # allocation beside it): meanwhile this thread's invokes share the main context.
            self._spare = _Spare(self.egl)
            return self._main
        made = self._spare.take()
        if made is None:  # still being made
            return self._main
        if isinstance(made, GpuError):
            log.info("no EGL context of its own for thread %s (%s): its invokes share the main one",
                     threading.current_thread().name, made)
            self._thread.refused = True
            return self._main
        token = self.egl.enter()  # what the main context did so far must complete before `made` runs
        try:
            self._leave_handoff(self._main)
        finally:
            self.egl.exit(token)
        binding = self._thread.binding = _Binding(made, threading.current_thread())
        self._thread.end = _ThreadEnd(made)
        self._kept.append(binding)
        return binding

    def _prune_kept(self):
        """Destroy the kept contexts of threads that ended."""
        for binding in [b for b in self._kept if not b.thread.is_alive()]:
            self._kept.remove(binding)
            if self._active is binding:
                self._active = self._main
                self._main.owner = None  # it may have changed what the main context still binds
            binding.egl.destroy()

    @property
    def forked(self):
        """True in a fork() child of the process that made the context: it cannot be used here."""
        return os.getpid() != self.pid

    def check_process(self):
        """GpuError (FORKED_CONTEXT) in a fork() child of the process that made the context."""
        if self.forked:
            raise GpuError(FORKED_CONTEXT.format(pid=self.pid, here=os.getpid()))

    def check_error(self, where):
        """Raise GpuError if GL has a pending error (call inside current())."""
        error = self.ctx.error
        if error != "GL_NO_ERROR":
            raise GpuError(f"GL error {error} after {where}")

    def clear_errors(self):
        """Drop every pending GL error (call inside current())."""
        self.gl.clear_errors()

    def program(self, source, binary=None):
        """The compute Program (gpu/gl.py) for `source`, made once per context (dedupe by text):
        compiled, or loaded from `binary` = (format, bytes) of an earlier glGetProgramBinary,
        falling back to compiling `source` when the driver refuses the binary (the Program's
        `refused` says why). Raises GpuError with the driver's log when `source` does not
        compile. Call inside current()."""
        program = self._programs.get(source)
        if isinstance(program, PendingProgram):
            del self._programs[source]  # kept only when it compiled
            program = self._programs[source] = program.finish()
        elif program is None:
            if binary is not None:
                program, refused = Program.load(self.gl, binary[0], binary[1], source, self.renderer)
                program.refused = refused
            else:
                program = Program.compile(self.gl, source, retrievable=self.binary_formats > 0,
                                          renderer=self.renderer)
            self._programs[source] = program
        return program

    def start_programs(self, sources):
        """Start compiling those of `sources` (GLSL texts) that have no program yet, all before
        any is waited for: a driver with parallel compiling (`compiler_threads`) compiles them at
        once, and program() of each finishes it (raising its compile error there). Call inside
        current()."""
        new = list(dict.fromkeys(s for s in sources if s not in self._programs))
        try:
            started = Program.start(self.gl, new, retrievable=self.binary_formats > 0, renderer=self.renderer)
        except GpuError:  # no GL objects left: program() tries each alone and says which failed
            self.gl.clear_errors()
            return
        self._programs.update(zip(new, started))

    def forget_program(self, source):
        """Release the program of `source` (one that must not run: serialization rejected it).
        Call inside current()."""
        program = self._programs.pop(source, None)
        if program is not None:
            program.release()

    def staging_ring(self):
        """The context's upload.StagingRing, made on first use; None without glBufferStorage or
        where the driver refused it (then uploads go through glBufferData). Call inside current()."""
        if self._staging is None:
            self._staging = self.persistent_mapping and StagingRing.create(self.gl) or False
        return self._staging or None

    @property
    def program_count(self):
        return len(self._programs)

    def release(self):
        """Free every GL object of this context and the context itself (idempotent). In a fork()
        child only the references go: the GL objects are the parent's, and the lock may have been
        held by a parent thread when the process forked."""
        if self.forked:
            self._programs, self.ctx, self._kept, self._staging = {}, None, [], None
            return
        with self._lock:
            if self.ctx is None:
                return
            spare = self._spare.take(wait=True) if self._spare is not None else None
            if isinstance(spare, egl.Context):
                spare.destroy()
            for binding in self._kept:
                binding.egl.destroy()  # unbound here if current on this thread; elsewhere EGL defers it
            self._kept, self._handoff = [], None  # a pending fence goes with the contexts
            self._active = self._main
            token = self.egl.enter()
            self.state_owner = None  # no reference to a partition outlives the context
            try:
                staging, self._staging = self._staging, None
                if staging:
                    staging.release()
                programs, self._programs = self._programs, {}
                for program in programs.values():
                    program.release()
            finally:
                self.ctx = None
                self.egl.exit(token)
                self.egl.destroy()

    def describe(self):
        """{renderer, version, vendor, glsl_version, gl_api, egl_platform, device_index} plus the
        device limits (GlContext.limits: byte sizes, counts)."""
        return {"renderer": self.renderer, "version": self.version, "vendor": self.vendor,
                "glsl_version": self.glsl_version, "gl_api": self.gl_api,
                "egl_platform": self.egl_platform, "device_index": self.device_index, **self.limits}


def _desktop_version(version):
    """(major, minor) of a desktop GL_VERSION string ('4.6.0 NVIDIA 550.54')."""
    try:
        major, minor = version.split()[0].split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return (0, 0)


def _create_egl_context(device_index, gl_api, platforms=egl.PLATFORMS, use_pbuffer=None):
    """egl.create_context with errors that say what was asked and what this machine has."""
    asked = f"gl_api={gl_api!r}" + (f", device_index {device_index}" if device_index is not None else "")
    if device_index is not None:
        devices = egl.enumerate_devices()
        if devices is None:
            raise GpuError(f"device_index {device_index} requested, but this EGL cannot enumerate devices "
                           "(no EGL_EXT_device_enumeration / EGL_EXT_platform_device); leave device_index "
                           f"unset to use another display. Found: {egl.describe_found(egl.probe()) or 'nothing'}")
        if device_index >= len(devices):
            found = [entry for entry in egl.probe() if entry["platform"] == "device"]
            raise GpuError(f"device_index {device_index} requested, {len(devices)} EGL device"
                           f"{'' if len(devices) == 1 else 's'} found: {egl.describe_found(found) or 'none'}")
    try:
        return egl.create_context(device_index, _API_ORDER[gl_api], use_pbuffer, platforms)
    except GpuError as exc:
        if str(exc).startswith("no EGL/OpenGL driver"):
            raise
        tried = str(exc)
    try:
        found = egl.describe_found(egl.probe())
    except GpuError:
        found = ""
    raise GpuError(f"no {_API_NAMES[gl_api]} context could be created ({asked}). Tried: {tried}. "
                   f"Found: {found or 'no usable EGL display'}") from None


_moderngl_contexts = {}  # (EGL display handle, api) -> moderngl.Context, for the life of the process
_moderngl_lock = threading.Lock()


def _moderngl_context(context, version, renderer):
    """The moderngl.Context for EGL context `context` (current on this thread): one per display
    and API per process, made on first use and never released. moderngl 5.x keeps a reference
    to every string of its extension set (about 150 on Mesa) and our loader hands it the
    process's proc addresses, so one moderngl context per EGL context leaked 11 KiB each time;
    moderngl holds no GL object of its own for a standalone context, so sharing it is safe."""
    key = (context.display.handle, context.api)
    with _moderngl_lock:
        ctx = _moderngl_contexts.get(key)
        if ctx is None:
            try:
                ctx = moderngl.create_context(standalone=True, require=310 if context.api == "gles" else 430,
                                              context=_Loader(context))
            except Exception as exc:  # moderngl raises plain Exception / moderngl.Error
                raise GpuError(f"moderngl could not attach to the {version} context ({renderer}): {exc}") from None
            _moderngl_contexts[key] = ctx
        return ctx


class _Loader:
    """What moderngl calls a context 'loader': GL entry points (the process's, see
    egl.Context.proc_address) plus enter/exit/release. Nothing here uses moderngl's own
    `with ctx:` or release(), so those do nothing: GlContext.current() makes our context current."""

    def __init__(self, context):
        self.proc_address = context.proc_address

    def load_opengl_function(self, name):
        return self.proc_address(name)

    load = load_opengl_function

    def __enter__(self):
        pass

    def __exit__(self, *exc):
        pass

    def release(self):
        pass


def _limits(gl):
    """The device limits we use, asked through glGet* ourselves: moderngl's Context.info asks
    desktop-only enums (GL_INVALID_ENUM on ES) and leaves out the compute limits below GL 4.3."""
    out = {key: gl.integer64(enum) for key, enum in _LIMITS_INT64.items()}
    out.update({key: gl.integer(enum) for key, enum in _LIMITS_INT.items()})
    out.update({key: tuple(gl.integer_indexed(enum, axis) for axis in range(3))
                for key, enum in _LIMITS_INDEXED.items()})
    return out


def _extensions(gl):
    """The context's GL extension names (frozenset)."""
    names = (gl.get_stringi(GL_EXTENSIONS, i) for i in range(gl.integer(GL_NUM_EXTENSIONS)))
    return frozenset(name.decode(errors="replace") for name in names if name)


_shared = {}  # (gl_api asked, device_index) -> [GlContext, reference count]
_shared_lock = threading.Lock()


def acquire_shared(device_index=None, gl_api=None):
    """The process-wide context for a device and gl_api, created on first use and reference
    counted, so every delegate on that device shares its programs (compiled once per process).
    gl_api None means default_gl_api()."""
    gl_api = default_gl_api() if gl_api is None else gl_api
    _check_request(device_index, gl_api)
    key = (gl_api, device_index)
    with _shared_lock:
        entry = _shared.get(key)
        if entry is None or entry[0].ctx is None or entry[0].forked:
            entry = [GlContext(device_index, gl_api), 0]
            _shared[key] = entry
        entry[1] += 1
        return entry[0]


@contextlib.contextmanager
def limited_to(limits, device_index=None, gl_api=None, persistent_mapping=None):
    """Context manager: the shared context of (device_index, gl_api), held meanwhile, its
    `limits` overridden by `limits` (a dict of the keys GlContext.limits has, as
    ES31_MINIMUM_LIMITS) and, unless None, its `persistent_mapping` by that (False: as without
    EXT_buffer_storage, which OpenGL ES 3.1 lacks: I/O through copies), restored after. Every
    delegate made on that device meanwhile plans for such a device: whether a model compiles,
    and runs the same, on a smaller GPU than this. Yields the context."""
    _check_limits(limits)
    context = acquire_shared(device_index, gl_api)
    saved = dict(context.limits), context.persistent_mapping
    context.limits.update(limits)
    if persistent_mapping is not None:
        context.persistent_mapping = persistent_mapping and saved[1]
    try:
        yield context
    finally:
        context.limits.clear()
        context.limits.update(saved[0])
        context.persistent_mapping = saved[1]
        release_shared(context)


def _check_limits(limits):
    """ValueError / TypeError naming the entry of `limits` that is no limit GlContext reads, or
    not a positive int (a 3-tuple of them for a per-axis limit): a misspelt name would change
    nothing."""
    if not isinstance(limits, dict):
        raise TypeError(f"limits must be a dict of limit names to values, not {type(limits).__name__}")
    known = {*_LIMITS_INT, *_LIMITS_INT64, *_LIMITS_INDEXED}
    for name, value in limits.items():
        if name not in known:
            raise ValueError(f"limits: {name!r} is not a limit of the context; known: {sorted(known)}")
        values = value if name in _LIMITS_INDEXED else (value,)
        if not (isinstance(values, tuple) and len(values) == (3 if name in _LIMITS_INDEXED else 1)
                and all(type(v) is int and v > 0 for v in values)):
            raise ValueError(f"limits[{name!r}] must be " + ("a tuple of 3 positive ints" if name in _LIMITS_INDEXED
                                                            else "a positive int") + f", not {value!r}")


def hold_shared(context):
    """One more reference to the shared `context` (release_shared drops it): what outlives the
    delegate that acquired it (a mapping LiteRT's views still read, gpu/runtime.MappedIo)."""
    with _shared_lock:
        for entry in _shared.values():
            if entry[0] is context:
                entry[1] += 1
                return


def release_shared(context):
    """Drop one reference to a shared context; the last one releases it."""
    with _shared_lock:
        for key, entry in list(_shared.items()):
            if entry[0] is context:
                entry[1] -= 1
                if entry[1] == 0:
                    del _shared[key]
                    context.release()
                return


def devices():
    """Every EGL display the delegate could use, probed (see egl.probe()); [] without EGL."""
    try:
        return egl.probe()
    except GpuError:
        return []


class _Current:
    """GlContext.current()'s context manager (one of each kind per context: it holds no state
    of its own, the context counts the depth). It refers to its context weakly: the context
    holds it, and a cycle would keep a dropped context for the cyclic collector."""

    def __init__(self, context, keep_state):
        self.context = weakref.ref(context)
        self.keep_state = keep_state

    def __enter__(self):
        context = self.context()
        if context is None:
            raise GpuError("the GL context was released (delegate closed)")
        context.check_process()  # before the lock, which a parent thread may have held at fork()
        context._lock.acquire()
        if context.ctx is None:
            context._lock.release()
            raise GpuError("the GL context was released (delegate closed)")
        if context._depth == 0:
            try:
                context._enter(self.keep_state)
            except BaseException:
                context._lock.release()
                raise
        context._depth += 1
        if not self.keep_state:
            context.state_owner = None
            if context.left_bound and context._depth == 1:  # not inside a run, which relies on its program
                context.left_bound = False
                _unbind_left(context.gl)
        return context.ctx

    def __exit__(self, exc_type, *exc):
        context = self.context()  # alive: whoever entered holds it to the end of the block
        context._depth -= 1
        try:
            if context._depth == 0 and context._token is not None:
                context._exit(exc_type is not None)
        finally:
            context._lock.release()
        return False


class _Spare:
    """An EGL context in the share group of `main`, made on a thread of its own (a context is
    bound to no thread until made current), so the invoke that asked for it does not wait for
    the driver to make it."""

    def __init__(self, main):
        self._made, self.taken = None, False
        # Not a daemon: a process that ends right after its first invoke waits the few ms for it
        # rather than tearing the driver down under a running eglCreateContext.
        self._thread = threading.Thread(target=self._make, args=(main,), name="gles_delegate spare context")
        self._thread.start()

    def _make(self, main):
        try:
            self._made = egl.Context(main.display, main.api, share=main)
        except Exception as exc:  # noqa: BLE001 (a thread's exception would go nowhere: the taker reports it)
            self._made = exc if isinstance(exc, GpuError) else GpuError(f"{type(exc).__name__}: {exc}")

    def wait(self):
        self._thread.join()

    def take(self, wait=False):
        """The context (once), the GpuError that stopped it, or None while it is being made
        (with `wait`: once it is made)."""
        if wait:
            self.wait()
        elif self._thread.is_alive() or self.taken:
            return None
        made, self._made, self.taken = self._made, None, True
        return made


class _ThreadEnd:
    """Kept in a thread's slot of GlContext._thread. When the thread ends, CPython drops that slot
    on the ending thread itself, and this releases the thread's kept context there: EGL never
    frees a context left current on a thread that ended, nor the buffers it still binds."""

    def __init__(self, egl_context):
        self.egl_context, self.owner = egl_context, threading.get_ident()

    def __del__(self):
        if threading.get_ident() != self.owner:  # dropped elsewhere (the GlContext went away first)
            return
        try:
            self.egl_context.release_current()
        except Exception:  # noqa: BLE001 (a thread's teardown, or the process's: nothing to report to)
            pass


class _Binding:
    """An EGL context of a GlContext and what the runtime left bound on it: `owner`, a weak
    reference to the GpuPartition whose storage buffers are bound, or None; `left_bound`, a
    program and copy buffers; `thread`: the thread it is kept current on (None: the main
    context). The owner is weak: the partition holds the context, which holds its bindings (a
    thread's kept one in a thread-local), and a strong reference made a cycle that kept a
    dropped interpreter's last partition run, with its nodes, for the cyclic collector."""
    __slots__ = ("egl", "thread", "owner", "left_bound")

    def __init__(self, egl_context, thread):
        self.egl, self.thread, self.owner, self.left_bound = egl_context, thread, None, False


def _unbind_left(gl):
    """Unbind what a run leaves bound between invokes (module docstring): its last program and
    the copy-buffer targets of its I/O copies."""
    gl.use_program_fast(0)
    gl.bind_buffer(GL_COPY_READ_BUFFER, 0)
    gl.bind_buffer(GL_COPY_WRITE_BUFFER, 0)
