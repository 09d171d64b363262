"""A headless GL context with compute shaders, usable from any thread.

EGL makes a context current on one thread at a time. Every piece of GL work here runs inside
`with context.current():`, which takes the context's lock, makes it current on the calling
thread, and releases it on exit (about 2 us on Mesa), so interpreters on several threads can
share one context without any of them owning a thread.
"""
import threading

import moderngl

from ..errors import GpuError

_MISSING_EGL = ("no EGL/OpenGL driver could be loaded ({error}). On Debian install "
                "libegl1 libegl-mesa0 libgl1-mesa-dri libgles2 (Mesa, gives llvmpipe without a GPU); "
                "with an NVIDIA GPU, its driver's EGL vendor library must be installed.")
_NO_COMPUTE = ("the GL context has no compute shaders: {version} ({renderer}); "
               "the delegate needs OpenGL ES 3.1 or OpenGL 4.3")


class GlContext:
    """A standalone EGL context plus what we need to know about the device.

    Attributes: renderer, version, vendor (GL strings), limits (dict of GL limits),
    gl_api ('gl' for a desktop core context).
    """

    def __init__(self, device_index=None):
        try:
            kwargs = {} if device_index is None else {"device_index": int(device_index)}
            self.ctx = moderngl.create_context(standalone=True, backend="egl", require=430, **kwargs)
        except Exception as exc:  # moderngl raises plain Exception for every EGL failure
            raise GpuError(_MISSING_EGL.format(error=exc)) from None
        info = self.ctx.info
        self.renderer = info.get("GL_RENDERER", "?")
        self.version = info.get("GL_VERSION", "?")
        self.vendor = info.get("GL_VENDOR", "?")
        self.gl_api = "gl"
        self.limits = {
            "max_ssbo_bytes": info.get("GL_MAX_SHADER_STORAGE_BLOCK_SIZE", 1 << 27),
            "max_workgroup_invocations": info.get("GL_MAX_COMPUTE_WORK_GROUP_INVOCATIONS", 128),
            "max_workgroup_size": tuple(info.get("GL_MAX_COMPUTE_WORK_GROUP_SIZE", (128, 128, 64))),
            "max_workgroup_count": tuple(info.get("GL_MAX_COMPUTE_WORK_GROUP_COUNT", (65535,) * 3)),
            "max_compute_ssbos": info.get("GL_MAX_COMPUTE_SHADER_STORAGE_BLOCKS", 4),
            "ubo_offset_alignment": info.get("GL_UNIFORM_BUFFER_OFFSET_ALIGNMENT", 256),
            "max_ubo_bytes": info.get("GL_MAX_UNIFORM_BLOCK_SIZE", 16384),
        }
        if self.ctx.version_code < 430:
            self.release()
            raise GpuError(_NO_COMPUTE.format(version=self.version, renderer=self.renderer))
        self._lock = threading.RLock()
        self._depth = 0
        self._programs = {}
        self.ctx.__exit__(None, None, None)  # created current on this thread; let any thread take it

    def current(self):
        """Context manager: the context is current on this thread (re-entrant)."""
        return _Current(self)

    def check_error(self, where):
        """Raise GpuError if GL has a pending error (call inside current())."""
        error = self.ctx.error
        if error != "GL_NO_ERROR":
            raise GpuError(f"GL error {error} after {where}")

    def program(self, source):
        """A compiled compute program for `source`, compiled once per context (dedupe by text).
        Raises GpuError with the driver's log when it does not compile."""
        program = self._programs.get(source)
        if program is None:
            try:
                program = self.ctx.compute_shader(source)
            except Exception as exc:  # moderngl.Error carries the driver's compile/link log
                raise GpuError(f"compute shader failed to compile on {self.renderer}:\n{exc}") from None
            self._programs[source] = program
        return program

    @property
    def program_count(self):
        return len(self._programs)

    def release(self):
        """Free every GL object of this context and the context itself."""
        ctx, self.ctx = getattr(self, "ctx", None), None
        if ctx is not None:
            self._programs = {}
            ctx.release()

    def describe(self):
        return {"renderer": self.renderer, "version": self.version, "vendor": self.vendor,
                "gl_api": self.gl_api, **self.limits}


_shared = {}
_shared_lock = threading.Lock()


def acquire_shared(device_index=None):
    """The process-wide context for a device, created on first use and reference counted, so
    every delegate on that device shares its programs (compiled once per process)."""
    with _shared_lock:
        entry = _shared.get(device_index)
        if entry is None or entry[0].ctx is None:
            entry = [GlContext(device_index), 0]
            _shared[device_index] = entry
        entry[1] += 1
        return entry[0]


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


class _Current:
    def __init__(self, context):
        self.context = context

    def __enter__(self):
        context = self.context
        context._lock.acquire()
        if context.ctx is None:
            context._lock.release()
            raise GpuError("the GL context was released (delegate closed)")
        if context._depth == 0:
            context.ctx.__enter__()
        context._depth += 1
        return context.ctx

    def __exit__(self, *exc):
        context = self.context
        context._depth -= 1
        if context._depth == 0 and context.ctx is not None:
            context.ctx.__exit__(None, None, None)
        context._lock.release()
        return False
