"""Which LiteRT interpreter is asking for our TfLiteDelegate, and the model it runs.

LiteRT's Python Interpreter (and tflite_runtime's and tf.lite's, the same code) calls
`delegate._get_native_delegate_pointer()` from its __init__, after it made the native
interpreter (`self._interpreter`) and kept the delegates (`self._delegates`), with the
`model_path` / `model_content` it was given as locals. The model bytes are where this package
reads every node's inputs and options from (the same reader, graph and partitioner as its own
Interpreter), rather than from the runtime's builtin_data structs, whose layouts differ per op.
"""
import importlib.metadata
import sys
from dataclasses import dataclass

from . import abi

MAX_FRAMES = 8  # how far up the stack the interpreter's __init__ may be (subclasses add frames)
DISTRIBUTIONS = {"ai_edge_litert": ("ai-edge-litert", "ai-edge-litert-nightly"),
                 "tflite_runtime": ("tflite-runtime", "tflite-runtime-nightly"),
                 "tensorflow": ("tensorflow", "tensorflow-cpu", "tf-nightly")}


@dataclass
class Caller:
    """The interpreter being built: the Python object, its native wrapper (whose destruction
    destroys the native interpreter), the runtime package and version, and the model bytes."""
    interpreter: object
    wrapper: object
    package: str
    version: str
    model_bytes: bytes


def find_caller(delegate):
    """The Caller whose __init__ is asking for `delegate`'s pointer; RuntimeError when there is
    none (called from elsewhere), the runtime is not supported, or the model cannot be read."""
    frame = sys._getframe(1)
    for _ in range(MAX_FRAMES):
        frame = frame.f_back
        if frame is None:
            break
        owner = frame.f_locals.get("self")
        if owner is not None and any(d is delegate for d in getattr(owner, "_delegates", None) or ()) \
                and getattr(owner, "_interpreter", None) is not None:
            package = type(owner).__module__.split(".")[0]
            version = runtime_version(package)
            abi.check_runtime(package, version)
            return Caller(owner, owner._interpreter, package, version, _model_bytes(frame.f_locals, owner))
    raise RuntimeError("GpuDelegate._get_native_delegate_pointer() is called by a LiteRT / TFLite Interpreter "
                       "while it is built (Interpreter(..., experimental_delegates=[GpuDelegate()])); "
                       "no such interpreter is calling it")


def runtime_version(package):
    """The installed version of runtime `package` ('?' when unknown)."""
    version = getattr(sys.modules.get(package), "__version__", None)
    for name in DISTRIBUTIONS.get(package, ()):
        if version is not None:
            break
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return version or "?"


def _model_bytes(local_vars, interpreter):
    """The model the interpreter was given, as bytes (read again from model_path: the file the
    native interpreter mapped a moment ago, or another one if it was replaced since, which
    verify.check_subgraph finds at Prepare)."""
    content = local_vars.get("model_content") or getattr(interpreter, "_model_content", None)
    if content:
        return bytes(content)
    path = local_vars.get("model_path")
    if not path:
        raise RuntimeError("GpuDelegate: the interpreter was given neither model_path nor model_content")
    with open(path, "rb") as f:
        return f.read()
