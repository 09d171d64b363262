"""Error types raised by gles_delegate."""


class ModelError(ValueError):
    """A .tflite model is malformed or uses something we cannot run.

    The message says what is wrong and where (tensor, operator or buffer index).
    """


class GpuError(RuntimeError):
    """The GPU or its driver cannot do what was asked (no EGL, no compute, out of memory)."""
