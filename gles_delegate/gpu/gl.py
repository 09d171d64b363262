"""The GL program calls the delegate makes itself, through ctypes: compile, link, program
binaries (glGetProgramBinary / glProgramBinary, GLES 3.0 and GL 4.1 core; moderngl has no call
for them), use and dispatch, buffers and fences of the runtime, and the glGet* queries of the
device's limits and extensions (gpu/context.py).

Entry points come from the context's own proc-address loader (gpu/egl.py), the one moderngl is
attached to, so every call here goes to that context. Call everything inside
`GlContext.current()`.
"""
import ctypes
import time

from ..errors import GpuError

GL_NO_ERROR = 0
GL_FALSE, GL_TRUE = 0, 1
GL_COMPUTE_SHADER = 0x91B9
GL_COMPILE_STATUS = 0x8B81
GL_LINK_STATUS = 0x8B82
GL_INFO_LOG_LENGTH = 0x8B84
GL_PROGRAM_BINARY_RETRIEVABLE_HINT = 0x8257
GL_PROGRAM_BINARY_LENGTH = 0x8741
GL_NUM_PROGRAM_BINARY_FORMATS = 0x87FE
GL_PROGRAM_BINARY_FORMATS = 0x87FF
GL_UNIFORM_BUFFER = 0x8A11
GL_SHADER_STORAGE_BUFFER = 0x90D2
GL_UNIFORM_BLOCK, GL_SHADER_STORAGE_BLOCK = 0x92E2, 0x92E6
GL_ACTIVE_RESOURCES, GL_BUFFER_BINDING = 0x92F5, 0x9302
GL_COPY_READ_BUFFER, GL_COPY_WRITE_BUFFER = 0x8F36, 0x8F37
GL_SHADER_STORAGE_BARRIER_BIT = 0x2000
GL_BUFFER_UPDATE_BARRIER_BIT = 0x0200
GL_CLIENT_MAPPED_BUFFER_BARRIER_BIT = 0x4000
GL_MAP_READ_BIT, GL_MAP_WRITE_BIT, GL_MAP_PERSISTENT_BIT, GL_MAP_COHERENT_BIT = 0x1, 0x2, 0x40, 0x80
GL_SYNC_GPU_COMMANDS_COMPLETE = 0x9117
GL_SYNC_FLUSH_COMMANDS_BIT = 0x1
GL_ALREADY_SIGNALED, GL_TIMEOUT_EXPIRED, GL_CONDITION_SATISFIED, GL_WAIT_FAILED = 0x911A, 0x911B, 0x911C, 0x911D

SYNC_TIMEOUT_S = 60.0  # a GPU that has not finished one invoke by then is hung
_WAIT_SLICE_NS = ctypes.c_uint64(100_000_000)  # glClientWaitSync's timeout: 0.1 s slices
MAX_INFO_LOG = 1 << 20        # bytes of a compile / link log we read at most
MAX_PROGRAM_BINARY = 1 << 28  # bytes of a program binary we accept from the driver or a file

_u, _i, _vp = ctypes.c_uint, ctypes.c_int, ctypes.c_void_p
_P = ctypes.POINTER
_Name = ctypes.c_char * 64  # a block name; one type for the process (see _char_buffer)

# name: (restype, argtypes)
_FUNCTIONS = {
    "glGetError": (_u, ()),
    "glGetIntegerv": (None, (_u, _P(_i))),
    "glGetInteger64v": (None, (_u, _P(ctypes.c_int64))),
    "glGetIntegeri_v": (None, (_u, _u, _P(_i))),
    "glGetStringi": (ctypes.c_char_p, (_u, _u)),
    "glCreateShader": (_u, (_u,)),
    "glShaderSource": (None, (_u, _i, _P(ctypes.c_char_p), _P(_i))),
    "glCompileShader": (None, (_u,)),
    "glGetShaderiv": (None, (_u, _u, _P(_i))),
    "glGetShaderInfoLog": (None, (_u, _i, _P(_i), ctypes.c_char_p)),
    "glDeleteShader": (None, (_u,)),
    "glCreateProgram": (_u, ()),
    "glAttachShader": (None, (_u, _u)),
    "glDetachShader": (None, (_u, _u)),
    "glLinkProgram": (None, (_u,)),
    "glGetProgramiv": (None, (_u, _u, _P(_i))),
    "glGetProgramInfoLog": (None, (_u, _i, _P(_i), ctypes.c_char_p)),
    "glProgramParameteri": (None, (_u, _u, _i)),
    "glGetProgramBinary": (None, (_u, _i, _P(_i), _P(_u), _vp)),
    "glProgramBinary": (None, (_u, _u, _vp, _i)),
    "glUseProgram": (None, (_u,)),
    "glDispatchCompute": (None, (_u, _u, _u)),
    "glDeleteProgram": (None, (_u,)),
    "glGenBuffers": (None, (_i, _P(_u))),
    "glDeleteBuffers": (None, (_i, _P(_u))),
    "glBindBuffer": (None, (_u, _u)),
    "glMapBufferRange": (_vp, (_u, ctypes.c_ssize_t, ctypes.c_ssize_t, _u)),
    "glUnmapBuffer": (ctypes.c_ubyte, (_u,)),
    "glFenceSync": (_vp, (_u, _u)),
    "glClientWaitSync": (_u, (_vp, _u, ctypes.c_uint64)),
    "glDeleteSync": (None, (_vp,)),
    "glBufferSubData": (None, (_u, ctypes.c_ssize_t, ctypes.c_ssize_t, _vp)),
    "glCopyBufferSubData": (None, (_u, _u, ctypes.c_ssize_t, ctypes.c_ssize_t, ctypes.c_ssize_t)),
    "glFlush": (None, ()),
    "glGetProgramInterfaceiv": (None, (_u, _u, _u, _P(_i))),
    "glGetProgramResourceName": (None, (_u, _u, _u, _i, _P(_i), ctypes.c_char_p)),
    "glGetProgramResourceiv": (None, (_u, _u, _u, _i, _P(_u), _i, _P(_i), _P(_i))),
}


class _Untyped(ctypes._CFuncPtr):
    """A C function pointer without argtypes (what ctypes.CDLL makes): Python ints go straight
    to C ints, half the call cost of a typed CFUNCTYPE. Only for the per-dispatch calls, whose
    arguments (a program name, group counts) are small non-negative ints."""
    _flags_ = ctypes._FUNCFLAG_CDECL
    _restype_ = None


class Sync(ctypes.c_void_p):
    """A GLsync as the untyped glFenceSync returns it: ctypes hands back an instance of a
    c_void_p subclass as it is (a plain c_void_p restype would become a Python int, which an
    untyped call would pass on as a 32-bit int), so it goes straight to the untyped wait and delete."""


class _UntypedSync(ctypes._CFuncPtr):
    _flags_ = ctypes._FUNCFLAG_CDECL
    _restype_ = Sync


class _UntypedEnum(ctypes._CFuncPtr):
    _flags_ = ctypes._FUNCFLAG_CDECL
    _restype_ = ctypes.c_uint


class GlFunctions:
    """Typed GL entry points of one context, loaded through `proc_address(name) -> address`.
    Attributes are named as in GL without the prefix: create_shader, dispatch_compute, ...;
    use_program_fast / dispatch_compute_fast are the untyped ones Program.run calls."""

    def __init__(self, proc_address):
        for name, (restype, argtypes) in _FUNCTIONS.items():
            address = proc_address(name)
            if not address:
                raise GpuError(f"the GL driver has no {name}")
            setattr(self, _snake(name[2:]), ctypes.CFUNCTYPE(restype, *argtypes)(address))
        self.use_program_fast = _Untyped(proc_address("glUseProgram"))
        self.dispatch_compute_fast = _Untyped(proc_address("glDispatchCompute"))
        # Per-invoke calls. Their GLintptr / GLsizeiptr arguments are passed as c_ssize_t objects
        # (an untyped call would pass a Python int as a 32-bit C int).
        self.bind_buffer_base_fast = _Untyped(proc_address("glBindBufferBase"))
        self.bind_buffer_range_fast = _Untyped(proc_address("glBindBufferRange"))
        self.memory_barrier_fast = _Untyped(proc_address("glMemoryBarrier"))
        # The fence of every invoke (0.7 us for the three against 1.1 typed, on llvmpipe): the
        # wait's timeout is a c_uint64 object (a GLuint64).
        self.fence_sync_fast = _UntypedSync(proc_address("glFenceSync"))
        self.client_wait_sync_fast = _UntypedEnum(proc_address("glClientWaitSync"))
        self.delete_sync_fast = _Untyped(proc_address("glDeleteSync"))
        self._proc_address = proc_address
        self.buffer_storage = None

    def load_buffer_storage(self, name):
        """glBufferStorage (GL 4.4 core) or glBufferStorageEXT (GLES EXT_buffer_storage): call
        only where the context has it; eglGetProcAddress answers for any name."""
        address = self._proc_address(name)
        if address:
            self.buffer_storage = ctypes.CFUNCTYPE(None, _u, ctypes.c_ssize_t, _vp, _u)(address)
        return self.buffer_storage is not None

    def compiler_threads(self, extensions, count):
        """Let the driver compile programs on up to `count` threads of its own (GL_KHR_ or
        GL_ARB_parallel_shader_compile); False where it cannot. The extension leaves the
        default to the driver, and NVIDIA's did not always compile in parallel without it."""
        for extension, name in (("GL_KHR_parallel_shader_compile", "glMaxShaderCompilerThreadsKHR"),
                                ("GL_ARB_parallel_shader_compile", "glMaxShaderCompilerThreadsARB")):
            address = self._proc_address(name) if extension in extensions else None
            if address:
                ctypes.CFUNCTYPE(None, _u)(address)(count)
                ok = self.get_error() == GL_NO_ERROR
                self.clear_errors()
                return ok
        return False

    def integer(self, enum):
        """glGetIntegerv of a GL enum, as an int."""
        value = _i(0)
        self.get_integerv(enum, ctypes.byref(value))
        return value.value

    def integer64(self, enum):
        """glGetInteger64v of a GL enum (byte sizes beyond 2 GiB), as an int."""
        value = ctypes.c_int64(0)
        self.get_integer64v(enum, ctypes.byref(value))
        return value.value

    def integer_indexed(self, enum, index):
        """glGetIntegeri_v of a GL enum at `index` (an axis of a compute limit), as an int."""
        value = _i(0)
        self.get_integeri_v(enum, index, ctypes.byref(value))
        return value.value

    def program_integer(self, program, enum):
        value = _i(0)
        self.get_programiv(program, enum, ctypes.byref(value))
        return value.value

    def shader_integer(self, shader, enum):
        value = _i(0)
        self.get_shaderiv(shader, enum, ctypes.byref(value))
        return value.value

    def clear_errors(self):
        for _ in range(64):
            if self.get_error() == GL_NO_ERROR:
                break

    def binary_formats(self):
        """GL_NUM_PROGRAM_BINARY_FORMATS: 0 means program binaries cannot be saved here."""
        count = self.integer(GL_NUM_PROGRAM_BINARY_FORMATS)
        self.clear_errors()  # a GL without the query (none we support) leaves INVALID_ENUM
        return max(count, 0)

    def shader_log(self, shader):
        return self._log(self.get_shaderiv, self.get_shader_info_log, shader)

    def program_log(self, program):
        return self._log(self.get_programiv, self.get_program_info_log, program)

    @staticmethod
    def _log(get_iv, get_log, handle):
        length = _i(0)
        get_iv(handle, GL_INFO_LOG_LENGTH, ctypes.byref(length))
        size = min(max(length.value, 0), MAX_INFO_LOG)
        if size <= 1:
            return ""
        text, pointer = _char_buffer(size)
        written = _i(0)
        get_log(handle, size, ctypes.byref(written), pointer)
        return text[:max(0, min(written.value, size))].decode(errors="replace").strip()


def _char_buffer(size):
    """(a bytearray of `size` bytes, a pointer to its first byte for a char* or void* argument).
    Not ctypes.create_string_buffer: a `c_char * size` per size is a new ctypes type each time,
    a reference cycle once dropped (gles_delegate/raw_memory.py)."""
    data = bytearray(size)
    return data, ctypes.byref(ctypes.c_char.from_buffer(data))


def mapped_buffer(gl, nbytes, flags):
    """(buffer name, address, 0) of a new buffer of `nbytes` with immutable storage
    (glBufferStorage), mapped whole with `flags` (persistent mappings stay); (0, None, the GL
    error or 0) when the driver refuses the storage or the mapping: nothing is left allocated,
    bound or pending then. `gl`: the GlFunctions of a context current here, with buffer_storage."""
    handle = ctypes.c_uint(0)
    gl.gen_buffers(1, ctypes.byref(handle))
    gl.bind_buffer(GL_COPY_WRITE_BUFFER, handle.value)
    gl.buffer_storage(GL_COPY_WRITE_BUFFER, nbytes, None, flags)
    error = gl.get_error()
    address = None if error else gl.map_buffer_range(GL_COPY_WRITE_BUFFER, 0, nbytes, flags)
    error = error or (0 if address else gl.get_error())
    gl.bind_buffer(GL_COPY_WRITE_BUFFER, 0)
    if not address:
        gl.delete_buffers(1, ctypes.byref(handle))
        gl.clear_errors()
        return 0, None, error
    return handle.value, address, 0


def wait_sync(gl, sync):
    """Block until the fence `sync` (a Sync) signals, flushing the commands before it; GpuError
    if the GPU does not finish in SYNC_TIMEOUT_S. `gl`: the GlFunctions of a context current here."""
    wait, done = gl.client_wait_sync_fast, (GL_ALREADY_SIGNALED, GL_CONDITION_SATISFIED)
    status = wait(sync, GL_SYNC_FLUSH_COMMANDS_BIT, _WAIT_SLICE_NS)
    deadline = None
    while status not in done:
        deadline = deadline or time.monotonic() + SYNC_TIMEOUT_S
        if status == GL_WAIT_FAILED or time.monotonic() > deadline:
            raise GpuError(f"the GPU did not finish the invoke (glClientWaitSync status {status:#x})")
        status = wait(sync, 0, _WAIT_SLICE_NS)


def _snake(name):
    out = []
    for char in name:
        if char.isupper() and out:
            out.append("_")
        out.append(char.lower())
    return "".join(out)


class Program:
    """A linked compute program owned by one context.

    run(x, y, z): glUseProgram + glDispatchCompute (what moderngl's ComputeShader.run does).
    binary(): (format, bytes) from glGetProgramBinary, or None where the driver gives none.
    from_binary: True when the program came from a binary rather than a compile; refused: why
    a binary offered for it was refused (then it was compiled from source), else None.
    """

    __slots__ = ("gl", "handle", "source", "from_binary", "refused", "run")

    def __init__(self, gl, handle, source, from_binary=False):
        self.gl = gl
        self.handle = handle
        self.source = source
        self.from_binary = from_binary
        self.refused = None
        use, dispatch = gl.use_program_fast, gl.dispatch_compute_fast

        def run(group_x=1, group_y=1, group_z=1):
            use(handle)
            try:
                dispatch(group_x, group_y, group_z)
            except ctypes.ArgumentError:  # numpy integers: untyped ctypes takes Python ints only
                dispatch(int(group_x), int(group_y), int(group_z))
        self.run = run  # a closure: one Python call and two untyped ctypes calls per dispatch

    @classmethod
    def compile(cls, gl, source, retrievable=True, renderer="the GL driver"):
        """Compile and link `source` (GLSL compute shader). GpuError carries the driver's log."""
        return cls.start(gl, [source], retrievable, renderer)[0].finish()

    @classmethod
    def start(cls, gl, sources, retrievable=True, renderer="the GL driver"):
        """A PendingProgram per source: every shader's compile issued, then every link, without
        asking how either went (asking waits for the driver; so does a link issued right after
        its shader's compile, and detaching the shader from a program being linked), so that a
        driver with KHR_parallel_shader_compile compiles them all at once. GpuError when GL gives
        no shader or program object (nothing is left)."""
        shaders, programs = [], []
        try:
            for source in sources:
                shader = gl.create_shader(GL_COMPUTE_SHADER)
                if not shader:
                    raise GpuError(f"glCreateShader failed on {renderer} (GL error {gl.get_error():#x})")
                shaders.append(shader)
                text = source.encode()
                # byref of one value, not a `c_char_p * 1`: raw_memory.py says why
                gl.shader_source(shader, 1, ctypes.byref(ctypes.c_char_p(text)), ctypes.byref(_i(len(text))))
                gl.compile_shader(shader)
            for shader in shaders:
                program = gl.create_program()
                if not program:
                    raise GpuError(f"glCreateProgram failed on {renderer} (GL error {gl.get_error():#x})")
                programs.append(program)
                gl.attach_shader(program, shader)
                if retrievable:
                    gl.program_parameteri(program, GL_PROGRAM_BINARY_RETRIEVABLE_HINT, GL_TRUE)
                gl.link_program(program)  # of a shader that failed to compile: fails too; finish() says why
        except BaseException:
            for shader in shaders:
                gl.delete_shader(shader)
            for program in programs:
                gl.delete_program(program)
            raise
        return [PendingProgram(gl, *made, renderer) for made in zip(shaders, programs, sources)]

    @classmethod
    def load(cls, gl, binary_format, binary, source, renderer="the GL driver"):
        """A program from a binary that glGetProgramBinary gave earlier; when the driver rejects
        it (GL_LINK_STATUS false, or a GL error: other driver build, corrupt bytes), `source` is
        compiled instead. Returns (Program, None) or (Program, why the binary was refused)."""
        why = None
        if not isinstance(binary_format, int) or not 0 <= binary_format < 1 << 32:
            why = f"binary format {binary_format!r} is not a GLenum"
        elif not isinstance(binary, (bytes, bytearray, memoryview)) or not 0 < len(binary) <= MAX_PROGRAM_BINARY:
            why = "binary is empty or too large"
        else:
            program = gl.create_program()
            if program:
                data = bytes(binary)  # a c_void_p argument: the driver reads the bytes in place
                gl.program_binary(program, binary_format, data, len(data))
                error = gl.get_error()
                if error == GL_NO_ERROR and gl.program_integer(program, GL_LINK_STATUS) == GL_TRUE:
                    return cls(gl, program, source, from_binary=True), None
                why = f"GL error {error:#x}" if error != GL_NO_ERROR else \
                    f"link status false ({gl.program_log(program) or 'no log'})"
                gl.delete_program(program)
                gl.clear_errors()
            else:
                why = f"glCreateProgram failed (GL error {gl.get_error():#x})"
        return cls.compile(gl, source, renderer=renderer), why

    def binary(self):
        """(format, bytes) of the linked program, or None when the driver gives no binary."""
        gl = self.gl
        length = gl.program_integer(self.handle, GL_PROGRAM_BINARY_LENGTH)
        if not 0 < length <= MAX_PROGRAM_BINARY:
            gl.clear_errors()
            return None
        data, pointer = _char_buffer(length)
        written, binary_format = _i(0), _u(0)
        gl.get_program_binary(self.handle, length, ctypes.byref(written), ctypes.byref(binary_format), pointer)
        if gl.get_error() != GL_NO_ERROR or not 0 < written.value <= length:
            gl.clear_errors()
            return None
        return binary_format.value, bytes(data[:written.value])

    def interface(self):
        """{(kind, block name): binding} of the linked program's active blocks, kind 'uniform'
        or 'buffer' (what the runtime binds by number: a program whose blocks or bindings
        differ from its source's declarations is not the program of that source)."""
        gl, out = self.gl, {}
        for kind, interface in (("uniform", GL_UNIFORM_BLOCK), ("buffer", GL_SHADER_STORAGE_BLOCK)):
            count, name, binding = _i(0), _Name(), _i(0)
            gl.get_program_interfaceiv(self.handle, interface, GL_ACTIVE_RESOURCES, ctypes.byref(count))
            for index in range(min(count.value, 64)):
                gl.get_program_resource_name(self.handle, interface, index, 64, None, name)
                prop = _u(GL_BUFFER_BINDING)
                gl.get_program_resourceiv(self.handle, interface, index, 1, ctypes.byref(prop), 1, None,
                                          ctypes.byref(binding))
                out[kind, name.value.decode(errors="replace")] = binding.value
        return out

    def release(self):
        if self.handle:
            self.gl.delete_program(self.handle)
            self.handle = 0


class PendingProgram:
    """A compile Program.start began: finish() waits for it and gives the Program, or raises
    GpuError with the driver's log; release() drops it unfinished."""

    __slots__ = ("gl", "shader", "handle", "source", "renderer")

    def __init__(self, gl, shader, handle, source, renderer):
        self.gl, self.shader, self.handle, self.source, self.renderer = gl, shader, handle, source, renderer

    def finish(self):
        gl, handle = self.gl, self.handle
        try:
            if gl.shader_integer(self.shader, GL_COMPILE_STATUS) != GL_TRUE:
                raise GpuError(f"compute shader failed to compile on {self.renderer}:\n{gl.shader_log(self.shader)}")
            if gl.program_integer(handle, GL_LINK_STATUS) != GL_TRUE:
                raise GpuError(f"compute shader failed to compile (link) on {self.renderer}:\n{gl.program_log(handle)}")
        except BaseException:
            self.release()
            raise
        gl.detach_shader(handle, self.shader)  # only now: detaching waits for the link, as asking does
        gl.delete_shader(self.shader)
        self.shader = self.handle = 0
        return Program(gl, handle, self.source)

    def release(self):
        if self.shader:
            self.gl.delete_shader(self.shader)
        if self.handle:
            self.gl.delete_program(self.handle)
        self.shader = self.handle = 0
