"""The EGL calls the delegate needs, through ctypes on libEGL.so.1: find a display headless,
create an OpenGL ES 3.1 (or desktop OpenGL 4.3 core) context on it, make it current on any thread.

Displays are tried in this order, the first that gives the context wins:
  'device'       EGL_EXT_device_enumeration + EGL_EXT_platform_device: one display per GPU. NVIDIA's
                 driver needs it (no display server); Mesa lists its DRM render nodes and its
                 software device (llvmpipe) here too. Hardware devices go before software ones.
  'surfaceless'  EGL_MESA_platform_surfaceless: Mesa without a display server.
  'default'      eglGetDisplay(EGL_DEFAULT_DISPLAY): vendor EGLs of embedded boards (Mali, Adreno).
A context is made current without a surface (EGL_KHR_surfaceless_context), else on a 1x1 pbuffer.

Displays are initialized once and never terminated: EGL keeps one display per device and process,
and other users (moderngl, glcontext, the application) may share it. GL entry points are looked up
once per process too (see proc_address): they do not depend on the context. Neither a display nor
a context survives os.fork(): a child refuses the displays its parent initialized (FORKED_DISPLAY)
and opens the others itself.
"""
import ctypes
import ctypes.util
import os
import threading

import numpy as np

from ..errors import GpuError

# -- EGL constants (EGL 1.5 and the extensions named beside them) ------------------------------
EGL_SUCCESS = 0x3000
EGL_NONE = 0x3038
EGL_DONT_CARE = -1
EGL_EXTENSIONS = 0x3055
EGL_VENDOR = 0x3053
EGL_VERSION = 0x3054
EGL_SURFACE_TYPE = 0x3033
EGL_PBUFFER_BIT = 0x0001
EGL_RENDERABLE_TYPE = 0x3040
EGL_OPENGL_ES2_BIT = 0x0004
EGL_OPENGL_BIT = 0x0008
EGL_OPENGL_ES3_BIT = 0x0040                   # EGL 1.5 / EGL_KHR_create_context
EGL_WIDTH = 0x3057
EGL_HEIGHT = 0x3056
EGL_DRAW = 0x3059
EGL_READ = 0x305A
EGL_OPENGL_ES_API = 0x30A0
EGL_OPENGL_API = 0x30A2
EGL_CONTEXT_CLIENT_VERSION = 0x3098           # EGL 1.4 name of EGL_CONTEXT_MAJOR_VERSION
EGL_CONTEXT_MAJOR_VERSION = 0x3098
EGL_CONTEXT_MINOR_VERSION = 0x30FB
EGL_CONTEXT_OPENGL_PROFILE_MASK = 0x30FD
EGL_CONTEXT_OPENGL_CORE_PROFILE_BIT = 0x0001
EGL_PLATFORM_DEVICE_EXT = 0x313F              # EGL_EXT_platform_device
EGL_PLATFORM_SURFACELESS_MESA = 0x31DD        # EGL_MESA_platform_surfaceless
EGL_DRM_DEVICE_FILE_EXT = 0x3233              # EGL_EXT_device_drm
EGL_DRM_RENDER_NODE_FILE_EXT = 0x3377         # EGL_EXT_device_drm_render_node
EGL_RENDERER_EXT = 0x335F                     # EGL_EXT_device_query_name

_ERROR_NAMES = {
    0x3000: "EGL_SUCCESS", 0x3001: "EGL_NOT_INITIALIZED", 0x3002: "EGL_BAD_ACCESS",
    0x3003: "EGL_BAD_ALLOC", 0x3004: "EGL_BAD_ATTRIBUTE", 0x3005: "EGL_BAD_CONFIG",
    0x3006: "EGL_BAD_CONTEXT", 0x3007: "EGL_BAD_CURRENT_SURFACE", 0x3008: "EGL_BAD_DISPLAY",
    0x3009: "EGL_BAD_MATCH", 0x300A: "EGL_BAD_NATIVE_PIXMAP", 0x300B: "EGL_BAD_NATIVE_WINDOW",
    0x300C: "EGL_BAD_PARAMETER", 0x300D: "EGL_BAD_SURFACE", 0x300E: "EGL_CONTEXT_LOST",
}

# GL enums used to identify a context (valid in OpenGL ES 3.1 and OpenGL 4.3 core).
GL_VENDOR, GL_RENDERER, GL_VERSION = 0x1F00, 0x1F01, 0x1F02
GL_SHADING_LANGUAGE_VERSION = 0x8B8C

# What each API asks of EGL: bound API, renderable bit, context attributes, the lowest version.
APIS = {
    "gles": {"name": "OpenGL ES 3.1", "bind": EGL_OPENGL_ES_API, "renderable": EGL_OPENGL_ES3_BIT,
             "attribs": [EGL_CONTEXT_MAJOR_VERSION, 3, EGL_CONTEXT_MINOR_VERSION, 1]},
    "gl": {"name": "OpenGL 4.3 core", "bind": EGL_OPENGL_API, "renderable": EGL_OPENGL_BIT,
           "attribs": [EGL_CONTEXT_MAJOR_VERSION, 4, EGL_CONTEXT_MINOR_VERSION, 3,
                       EGL_CONTEXT_OPENGL_PROFILE_MASK, EGL_CONTEXT_OPENGL_CORE_PROFILE_BIT]},
}
PLATFORMS = ("device", "surfaceless", "default")
SOFTWARE_RENDERERS = ("llvmpipe", "softpipe", "swiftshader", "swrast")  # GL_RENDERER names of CPU rasterizers

# Mesa's llvmpipe runs compute work on threads of its screen (one per display); fork() copies
# the display into the child but not those threads, so a dispatch there would wait forever.
FORKED_DISPLAY = ("{label} was initialized by process {pid}, before os.fork(): an EGL display does not "
                  "survive fork (its driver threads stay in the parent), so process {here} cannot use it")

# A driver other than Mesa's may keep process-wide state (NVIDIA's: its shader compiler's threads)
# that fork() copies without the threads: a child's context of it hung in its first
# glMaxShaderCompilerThreadsKHR, although the child opened a display of its own. Mesa starts each
# display afresh (tests/reliability/test_fork.py: a child's own delegate works on llvmpipe).
MESA_VENDOR = "Mesa"
FORKED_DRIVER = ("{label} is served by the EGL driver of {vendor}, which process {pid} initialized before "
                 "os.fork(): that driver's threads stay in the parent, and a context of it in process {here} "
                 "would hang; make GpuDelegates only after forking, or start worker processes with "
                 "multiprocessing's 'spawn' method")

MISSING_EGL = ("no EGL/OpenGL driver could be loaded ({error}). On Debian install "
               "libegl1 libegl-mesa0 libgl1-mesa-dri libgles2 (Mesa, gives llvmpipe without a GPU); "
               "with an NVIDIA GPU, its driver's EGL vendor library must be installed.")

_vp, _int, _uint = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint
# One type for every attribute list (EGL reads up to EGL_NONE): a `c_int * n` per list is a new
# ctypes type each time, a reference cycle once dropped (gles_delegate/raw_memory.py).
_AttribList = _int * 16


class _Library:
    """libEGL.so.1 with typed entry points (core ones by dlsym, extensions by eglGetProcAddress)."""

    def __init__(self):
        name = ctypes.util.find_library("EGL") or "libEGL.so.1"
        try:
            self.dll = ctypes.CDLL("libEGL.so.1")
        except OSError:
            try:
                self.dll = ctypes.CDLL(name)
            except OSError as exc:
                raise GpuError(MISSING_EGL.format(error=exc)) from None
        core = {
            "eglGetError": (_int, []),
            "eglGetDisplay": (_vp, [_vp]),
            "eglInitialize": (_uint, [_vp, ctypes.POINTER(_int), ctypes.POINTER(_int)]),
            "eglQueryString": (ctypes.c_char_p, [_vp, _int]),
            "eglChooseConfig": (_uint, [_vp, ctypes.POINTER(_int), ctypes.POINTER(_vp), _int,
                                        ctypes.POINTER(_int)]),
            "eglBindAPI": (_uint, [_uint]),
            "eglQueryAPI": (_uint, []),
            "eglCreateContext": (_vp, [_vp, _vp, _vp, ctypes.POINTER(_int)]),
            "eglDestroyContext": (_uint, [_vp, _vp]),
            "eglCreatePbufferSurface": (_vp, [_vp, _vp, ctypes.POINTER(_int)]),
            "eglDestroySurface": (_uint, [_vp, _vp]),
            "eglMakeCurrent": (_uint, [_vp, _vp, _vp, _vp]),
            "eglGetCurrentContext": (_vp, []),
            "eglGetCurrentDisplay": (_vp, []),
            "eglGetCurrentSurface": (_vp, [_int]),
            "eglGetProcAddress": (_vp, [ctypes.c_char_p]),
        }
        for fname, (restype, argtypes) in core.items():
            try:
                function = getattr(self.dll, fname)
            except AttributeError:
                raise GpuError(MISSING_EGL.format(error=f"{name} has no {fname}")) from None
            function.restype, function.argtypes = restype, argtypes
            setattr(self, fname, function)
        text = self.eglQueryString(None, EGL_EXTENSIONS)  # client extensions (EGL_EXT_client_extensions)
        if text is None:
            self.eglGetError()  # EGL_BAD_DISPLAY where client extensions are not supported
        self.client_extensions = frozenset((text or b"").decode().split())
        self.eglQueryDevicesEXT = self._extension(
            "eglQueryDevicesEXT", _uint, _int, ctypes.POINTER(_vp), ctypes.POINTER(_int))
        self.eglQueryDeviceStringEXT = self._extension("eglQueryDeviceStringEXT", ctypes.c_char_p, _vp, _int)
        self.eglGetPlatformDisplay = (
            self._extension("eglGetPlatformDisplayEXT", _vp, _uint, _vp, ctypes.POINTER(_int))
            if "EGL_EXT_platform_base" in self.client_extensions else None)

    def _extension(self, fname, restype, *argtypes):
        address = self.eglGetProcAddress(fname.encode())
        return ctypes.CFUNCTYPE(restype, *argtypes)(address) if address else None

    def error(self, what):
        code = self.eglGetError()
        return f"{what} failed ({_ERROR_NAMES.get(code, hex(code))})"


_library = None
_library_lock = threading.Lock()


def library():
    """The loaded EGL library (GpuError when there is none)."""
    global _library
    with _library_lock:
        if _library is None:
            _library = _Library()
        return _library


# -- displays ------------------------------------------------------------------------------------
class Display:
    """An initialized EGL display. platform: 'device' | 'surfaceless' | 'default';
    device_index: the index in eglQueryDevicesEXT's list (device platform only)."""

    def __init__(self, handle, platform, device_index=None, device_extensions=(), device_file=None,
                 device_name=None):
        egl = library()
        self.handle = handle
        self.platform = platform
        self.device_index = device_index
        self.device_extensions = frozenset(device_extensions)
        self.device_file = device_file
        self.device_name = device_name
        self.pid = os.getpid()
        major, minor = _int(), _int()
        if not egl.eglInitialize(handle, ctypes.byref(major), ctypes.byref(minor)):
            raise GpuError(egl.error(f"eglInitialize on {self.label}"))
        self.version = (major.value, minor.value)
        self.extensions = frozenset((egl.eglQueryString(handle, EGL_EXTENSIONS) or b"").decode().split())
        self.vendor = (egl.eglQueryString(handle, EGL_VENDOR) or b"?").decode(errors="replace")

    @property
    def software(self):
        """True for Mesa's software device (llvmpipe/softpipe) on the device platform."""
        return "EGL_MESA_device_software" in self.device_extensions

    @property
    def label(self):
        if self.platform != "device":
            return f"{self.platform} display"
        what = self.device_file or self.device_name or ("software" if self.software else "")
        return f"EGL device {self.device_index}" + (f" ({what})" if what else "")

    def has(self, extension):
        return extension in self.extensions

    @property
    def create_context_ok(self):
        """EGL_CONTEXT_MINOR_VERSION, profiles and EGL_OPENGL_ES3_BIT are usable."""
        return self.version >= (1, 5) or self.has("EGL_KHR_create_context")


_displays = {}  # (platform, device index) -> Display, or the GpuError it gave
_vendor_pids = {}  # EGL vendor string -> the process that first initialized a display of it
_displays_lock = threading.RLock()


def enumerate_devices():
    """[(EGLDeviceEXT, device extensions, DRM file or None, name or None)] in EGL's order, or
    None when EGL cannot enumerate devices (no EGL_EXT_device_enumeration/platform_device)."""
    egl = library()
    if egl.eglQueryDevicesEXT is None or egl.eglGetPlatformDisplay is None \
            or "EGL_EXT_platform_device" not in egl.client_extensions:
        return None
    count = _int()
    if not egl.eglQueryDevicesEXT(0, None, ctypes.byref(count)):
        egl.eglGetError()
        return None
    handles = np.zeros(max(count.value, 1), np.uintp)  # not a `c_void_p * n`: see _AttribList
    if not egl.eglQueryDevicesEXT(count.value, ctypes.cast(handles.ctypes.data, ctypes.POINTER(_vp)),
                                  ctypes.byref(count)):
        egl.eglGetError()
        return None
    devices = []
    for handle in handles[:count.value].tolist():
        extensions = _device_string(handle, EGL_EXTENSIONS) or ""
        drm = None
        if "EGL_EXT_device_drm_render_node" in extensions:
            drm = _device_string(handle, EGL_DRM_RENDER_NODE_FILE_EXT)
        if drm is None and "EGL_EXT_device_drm" in extensions.split():
            drm = _device_string(handle, EGL_DRM_DEVICE_FILE_EXT)
        name = _device_string(handle, EGL_RENDERER_EXT) if "EGL_EXT_device_query_name" in extensions else None
        devices.append((handle, extensions.split(), drm, name))
    return devices


def _device_string(handle, name):
    egl = library()
    if egl.eglQueryDeviceStringEXT is None:
        return None
    value = egl.eglQueryDeviceStringEXT(handle, name)
    if value is None:
        egl.eglGetError()  # clear EGL_BAD_PARAMETER
        return None
    return value.decode(errors="replace")


def any_display_opened():
    """Whether this process has initialized an EGL display (the driver has read its environment)."""
    with _displays_lock:
        return any(isinstance(d, Display) for d in _displays.values())


def open_display(platform, device_index=None):
    """The initialized Display of a platform (and device), cached per process; GpuError if it
    cannot be opened (the failure is cached too, so a missing platform is probed once), or if
    this process is a fork() child of the one that initialized it."""
    key = (platform, device_index)
    with _displays_lock:
        cached = _displays.get(key)
        if cached is None:
            try:
                cached = _forked_driver(_open_display(platform, device_index))
            except GpuError as exc:
                cached = exc
            _displays[key] = cached
        elif isinstance(cached, Display) and cached.pid != os.getpid():
            cached = GpuError(FORKED_DISPLAY.format(label=cached.label, pid=cached.pid, here=os.getpid()))
            _displays[key] = cached
        if isinstance(cached, GpuError):
            raise GpuError(str(cached))
        return cached


def _forked_driver(display):
    """`display`, once its driver is known usable in this process: GpuError (FORKED_DRIVER) when
    a parent initialized a display of the same non-Mesa driver before os.fork()."""
    pid = _vendor_pids.setdefault(display.vendor, display.pid)
    if pid != display.pid and MESA_VENDOR not in display.vendor:
        raise GpuError(FORKED_DRIVER.format(label=display.label, vendor=display.vendor, pid=pid, here=display.pid))
    return display


def _open_display(platform, device_index):
    egl = library()
    if platform == "device":
        devices = enumerate_devices()
        if devices is None:
            raise GpuError("this EGL cannot enumerate devices (no EGL_EXT_device_enumeration / "
                           "EGL_EXT_platform_device)")
        if not 0 <= device_index < len(devices):
            raise GpuError(f"EGL device {device_index} does not exist ({len(devices)} found)")
        handle, extensions, drm, name = devices[device_index]
        display = egl.eglGetPlatformDisplay(EGL_PLATFORM_DEVICE_EXT, handle, None)
        if not display:
            raise GpuError(egl.error(f"eglGetPlatformDisplayEXT(EGL_PLATFORM_DEVICE_EXT, device {device_index})"))
        return Display(display, "device", device_index, extensions, drm, name)
    if platform == "surfaceless":
        if egl.eglGetPlatformDisplay is None or "EGL_MESA_platform_surfaceless" not in egl.client_extensions:
            raise GpuError("this EGL has no EGL_MESA_platform_surfaceless")
        display = egl.eglGetPlatformDisplay(EGL_PLATFORM_SURFACELESS_MESA, None, None)
        if not display:
            raise GpuError(egl.error("eglGetPlatformDisplayEXT(EGL_PLATFORM_SURFACELESS_MESA)"))
        return Display(display, "surfaceless")
    if platform == "default":
        display = egl.eglGetDisplay(None)
        if not display:
            raise GpuError(egl.error("eglGetDisplay(EGL_DEFAULT_DISPLAY)"))
        return Display(display, "default")
    raise ValueError(f"unknown EGL platform {platform!r}; known: {list(PLATFORMS)}")


def candidate_displays(device_index=None):
    """(platform, device index) to try, best first. With a device_index: that device only.
    Without: hardware devices, then software devices, then surfaceless, then default."""
    if device_index is not None:
        return [("device", device_index)]
    devices = enumerate_devices() or []
    software = ["EGL_MESA_device_software" in extensions for _, extensions, _, _ in devices]
    order = [i for i in range(len(devices)) if not software[i]] + [i for i in range(len(devices)) if software[i]]
    return [("device", i) for i in order] + [("surfaceless", None), ("default", None)]


# -- GL entry points -----------------------------------------------------------------------------
_addresses = {}         # ('egl' | api, GL function name) -> address (int), see Context.proc_address
_client_libraries = {}  # api -> CDLL of its client library, or None where none loads
_addresses_lock = threading.Lock()


def _library_symbol(api, name):
    """Address of `name` in the GL client library of `api` (libGLESv2 / libOpenGL), 0 if absent."""
    if api not in _client_libraries:
        names = ("libGLESv2.so.2", "libGLESv2.so") if api == "gles" else ("libOpenGL.so.0", "libGL.so.1", "libGL.so")
        _client_libraries[api] = next((library for library in map(_load_optional, names) if library), None)
    library = _client_libraries[api]
    if library is None:
        return 0
    return ctypes.cast(getattr(library, name, None) or 0, _vp).value or 0


def _load_optional(name):
    """ctypes.CDLL(name), or None where it does not load."""
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None


# -- contexts ------------------------------------------------------------------------------------
class Context:
    """An EGL context of `api` ('gles' or 'gl') on `display`, not current on any thread when made.

    enter()/exit(token) make it current on the calling thread and restore what was current
    there before (another context, or none). `share`: a Context of the same display and API
    whose objects (buffers, programs, syncs) this one shares, made with the same config.
    """

    def __init__(self, display, api, use_pbuffer=None, share=None):
        egl = library()
        spec = APIS[api]
        self._egl = egl
        self.display = display
        self.api = api
        self.bind = spec["bind"]
        self.surface = None
        self.handle = None
        if api == "gl" and not display.create_context_ok:
            raise GpuError(f"{display.label}: EGL {display.version[0]}.{display.version[1]} without "
                           "EGL_KHR_create_context cannot create an OpenGL core context")
        if use_pbuffer is None:
            use_pbuffer = share.surface is not None if share else not display.has("EGL_KHR_surfaceless_context")
        if display.create_context_ok:
            renderable, attribs = spec["renderable"], list(spec["attribs"])
        else:  # EGL 1.4: ask for ES 3 with EGL_CONTEXT_CLIENT_VERSION, check 3.1 once current
            renderable, attribs = EGL_OPENGL_ES2_BIT, [EGL_CONTEXT_CLIENT_VERSION, 3]
        config = share.config if share else self._choose_config(renderable, use_pbuffer)
        self.config = config
        thread_api = egl.eglQueryAPI()
        if not egl.eglBindAPI(spec["bind"]):
            raise GpuError(egl.error(f"{display.label}: eglBindAPI({spec['name']})"))
        attribs = _AttribList(*attribs, EGL_NONE)
        handle = egl.eglCreateContext(display.handle, config, share.handle if share else None, attribs)
        message = None if handle else egl.error(f"{display.label}: eglCreateContext({spec['name']})")
        egl.eglBindAPI(thread_api)  # leave the calling thread's bound API as it was
        if not handle:
            raise GpuError(message)
        self.handle = handle
        if use_pbuffer:
            size = _AttribList(EGL_WIDTH, 1, EGL_HEIGHT, 1, EGL_NONE)
            surface = egl.eglCreatePbufferSurface(display.handle, config, size)
            if not surface:
                message = egl.error(f"{display.label}: eglCreatePbufferSurface(1x1)")
                self.destroy()
                raise GpuError(message)
            self.surface = surface

    def _choose_config(self, renderable, use_pbuffer):
        egl, display = library(), self.display
        surface_types = [EGL_PBUFFER_BIT] if use_pbuffer else [EGL_PBUFFER_BIT, EGL_DONT_CARE]
        for surface_type in surface_types:
            attribs = _AttribList(EGL_RENDERABLE_TYPE, renderable, EGL_SURFACE_TYPE, surface_type, EGL_NONE)
            config, count = _vp(), _int()
            if egl.eglChooseConfig(display.handle, attribs, ctypes.byref(config), 1, ctypes.byref(count)) \
                    and count.value > 0:
                return config
            egl.eglGetError()
        if not use_pbuffer and (display.has("EGL_KHR_no_config_context") or display.has("EGL_MESA_configless_context")):
            return None  # EGL_NO_CONFIG_KHR
        raise GpuError(f"{display.label}: no EGL config renders {APIS[self.api]['name']}"
                       + (" to a pbuffer" if use_pbuffer else ""))

    # -- current on a thread -------------------------------------------------------------------
    def is_current(self):
        egl = self._egl
        if egl.eglQueryAPI() != self.bind:
            egl.eglBindAPI(self.bind)
        return egl.eglGetCurrentContext() == self.handle

    def enter(self):
        """Make current on this thread; returns a token for exit() that restores the thread's
        previous API and context."""
        egl = self._egl
        api = egl.eglQueryAPI()
        if api != self.bind:
            egl.eglBindAPI(self.bind)
        previous = egl.eglGetCurrentContext()
        if previous == self.handle:
            return (api, True, None)
        saved = None
        if previous:
            saved = (egl.eglGetCurrentDisplay(), egl.eglGetCurrentSurface(EGL_DRAW),
                     egl.eglGetCurrentSurface(EGL_READ), previous)
        if not egl.eglMakeCurrent(self.display.handle, self.surface, self.surface, self.handle):
            message = egl.error(f"eglMakeCurrent of the {APIS[self.api]['name']} context on "
                                f"{threading.current_thread().name}")
            if api != self.bind:
                egl.eglBindAPI(api)
            raise GpuError(message)
        return (api, False, saved)

    def exit(self, token, keep=False):
        """Restore what enter() found current; with `keep`, a thread that had no context current
        keeps this one current (the next enter() on it makes no EGL call)."""
        egl = self._egl
        api, was_current, saved = token
        if not was_current and not (keep and saved is None):
            if saved is None:
                egl.eglMakeCurrent(self.display.handle, None, None, None)
            else:
                egl.eglMakeCurrent(*saved)
        if api != self.bind:
            egl.eglBindAPI(api)

    # -- GL entry points ---------------------------------------------------------------------------
    def proc_address(self, name):
        """Address of a GL function (0 if absent), the same int object for every context of the
        process. eglGetProcAddress returns core functions where EGL_KHR_(client_)get_all_proc_addresses
        says so (Mesa, NVIDIA, glvnd); elsewhere core functions come from the client library
        (libGLESv2 / libOpenGL). Either way the address does not depend on the context (EGL 1.5
        section 3.10). One int per name matters: moderngl 5.x's create_context keeps a reference
        to every address its loader returns (about 670), so fresh ints leaked 21 KiB a call."""
        egl = self._egl
        all_procs = ("EGL_KHR_client_get_all_proc_addresses" in egl.client_extensions
                     or self.display.has("EGL_KHR_get_all_proc_addresses"))
        key = ("egl" if all_procs else self.api, name)
        with _addresses_lock:
            address = _addresses.get(key)
            if address is None:
                address = (not all_procs and _library_symbol(self.api, name)) \
                    or egl.eglGetProcAddress(name.encode()) or 0
                _addresses[key] = address
            return address

    def gl_strings(self):
        """{vendor, renderer, version, glsl} of the context (call while it is current)."""
        get_string = ctypes.CFUNCTYPE(ctypes.c_char_p, _uint)(self.proc_address("glGetString"))
        names = {"vendor": GL_VENDOR, "renderer": GL_RENDERER, "version": GL_VERSION,
                 "glsl": GL_SHADING_LANGUAGE_VERSION}
        return {key: (get_string(enum) or b"?").decode(errors="replace") for key, enum in names.items()}

    def release_current(self):
        """Make no context current on this thread if this one is (a thread's last use of it)."""
        if self.handle is not None and self.is_current():
            self._egl.eglMakeCurrent(self.display.handle, None, None, None)

    def destroy(self):
        """Destroy the context (and its pbuffer); unbinds it first if current on this thread."""
        egl = library()
        if self.handle is not None:
            if self.is_current():
                egl.eglMakeCurrent(self.display.handle, None, None, None)
            egl.eglDestroyContext(self.display.handle, self.handle)
            self.handle = None
        if self.surface is not None:
            egl.eglDestroySurface(self.display.handle, self.surface)
            self.surface = None


def version_ok(api, version):
    """True when a GL_VERSION string is at least what the delegate needs for `api`:
    OpenGL ES 3.1 ('OpenGL ES 3.2 Mesa ...') or OpenGL 4.3 ('4.6.0 NVIDIA ...')."""
    text = version.strip()
    is_es = text.startswith("OpenGL ES ")  # not 'OpenGL ES-CM 1.1' (ES 1.x)
    if is_es != (api == "gles") or text.startswith("OpenGL ES-"):
        return False
    words = text.removeprefix("OpenGL ES ").split()
    number = words[0] if words else ""
    try:
        major, minor = (int(part) for part in number.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= ((3, 1) if api == "gles" else (4, 3))


def create_context(device_index=None, apis=("gles", "gl"), use_pbuffer=None, platforms=PLATFORMS):
    """The first context that works: displays in candidate_displays() order (only those of
    `platforms`), and on each the APIs in `apis` order. Returns (Context, gl_strings).
    GpuError lists every attempt."""
    attempts = []
    for platform, index in candidate_displays(device_index):
        if platform not in platforms:
            continue
        try:
            display = open_display(platform, index)
        except GpuError as exc:
            attempts.append(str(exc))
            continue
        for api in apis:
            try:
                context = Context(display, api, use_pbuffer)
            except GpuError as exc:
                attempts.append(str(exc))
                continue
            try:
                token = context.enter()
            except GpuError as exc:
                context.destroy()
                attempts.append(str(exc))
                continue
            try:
                strings = context.gl_strings()
            finally:
                context.exit(token)
            if version_ok(api, strings["version"]):
                return context, strings
            context.destroy()
            attempts.append(f"{display.label}: {APIS[api]['name']} asked, got {strings['version']} "
                            f"({strings['renderer']})")
    raise GpuError("; ".join(attempts) or "no EGL display to try")


def probe():
    """Every display the delegate could use and what each gives: a list of dicts
    {index, platform, egl_device, renderer, vendor, software, apis: {api: GL_VERSION}, errors}.
    Creates and destroys a small context per display and API; the calling thread's current
    context is left as it was."""
    found = []
    for platform, index in candidate_displays():
        entry = {"index": index, "platform": platform, "egl_device": None, "renderer": None,
                 "vendor": None, "software": False, "apis": {}, "errors": {}}
        try:
            display = open_display(platform, index)
        except GpuError as exc:
            if platform == "device":
                entry["errors"]["display"] = str(exc)
                found.append(entry)
            continue
        entry["egl_device"] = display.device_file or display.device_name
        entry["software"] = display.software
        entry["egl_vendor"] = display.vendor
        entry["egl_version"] = f"{display.version[0]}.{display.version[1]}"
        for api in APIS:
            try:
                context = Context(display, api)
            except GpuError as exc:
                entry["errors"][api] = str(exc)
                continue
            try:
                token = context.enter()
                try:
                    strings = context.gl_strings()
                finally:
                    context.exit(token)
            except GpuError as exc:
                entry["errors"][api] = str(exc)
                continue
            finally:
                context.destroy()
            if version_ok(api, strings["version"]):
                entry["apis"][api] = strings["version"]
            else:
                entry["errors"][api] = f"{APIS[api]['name']} asked, got {strings['version']}"
            entry["renderer"] = entry["renderer"] or strings["renderer"]
            entry["vendor"] = entry["vendor"] or strings["vendor"]
        renderer = (entry["renderer"] or "").lower()
        entry["software"] = entry["software"] or any(name in renderer for name in SOFTWARE_RENDERERS)
        found.append(entry)
    found.sort(key=lambda e: (PLATFORMS.index(e["platform"]), e["index"] if e["index"] is not None else -1))
    return found


def describe_found(found):
    """One line per probed display, for error messages: '0 llvmpipe (...) [gles 3.2, gl 4.5]'."""
    lines = []
    for entry in found:
        name = entry["index"] if entry["platform"] == "device" else entry["platform"]
        apis = ", ".join(f"{api}: {version}" for api, version in entry["apis"].items()) or "no usable API"
        lines.append(f"{name} {entry['renderer'] or '(no context)'} [{apis}]")
    return "; ".join(lines)
