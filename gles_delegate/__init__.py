"""gles_delegate: a TensorFlow Lite GPU delegate on OpenGL ES 3.1 compute shaders.

    from gles_delegate import Interpreter, GpuDelegate
    interp = Interpreter("model.tflite", experimental_delegates=[GpuDelegate()])
"""
__version__ = "0.1.0"  # setup.cfg reads it (attr:)

from .errors import GpuError, HalfOverflowWarning, ModelError, ResizeError, StateError
from .delegate import CompatibilityList, GpuDelegate, GpuDelegateOptions, load_delegate
from .interpreter import Interpreter, InterpreterOptions, SignatureRunner

__all__ = ["CompatibilityList", "load_delegate", "GpuDelegate", "GpuDelegateOptions", "Interpreter", "InterpreterOptions", "SignatureRunner", "ModelError", "GpuError", "StateError", "ResizeError", "HalfOverflowWarning"]
