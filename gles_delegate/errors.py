"""Error types raised by gles_delegate."""


class ModelError(ValueError):
    """A .tflite model is malformed or uses something we cannot run.

    The message says what is wrong and where (tensor, operator or buffer index).
    """


class GpuError(RuntimeError):
    """The GPU or its driver cannot do what was asked (no EGL, no compute, out of memory)."""


class StateError(ValueError, RuntimeError):
    """A call the interpreter cannot take in its state: set_tensor(), invoke() or get_tensor()
    before allocate_tensors() (or after a resize_tensor_input() or a failed allocate_tensors()
    that it has not followed), invoke() after the GpuDelegate of its partitions was closed.

    LiteRT raises RuntimeError for these invokes (ValueError for set_tensor / get_tensor before
    allocation): this is both, so code written for LiteRT's types, or for our ValueError, catches it.
    """


class ResizeError(ModelError, RuntimeError):
    """allocate_tensors() after resize_tensor_input(): the model cannot run at the new input shapes
    (the message names the operator that cannot take them). LiteRT raises RuntimeError there;
    this is also the ModelError (a ValueError) it was before."""


class HalfOverflowWarning(RuntimeWarning):
    """Half storage (precision 'fp16', 'fp16_fp32acc', or the tensors 'auto' keeps in half)
    rounded a finite value beyond half's range (65504) to inf at an invoke, and it reached a GPU
    partition's output: a float output came out inf or NaN, or an integer or bool output may
    hold a wrong value, where LiteRT's float32 would not (gpu/half_overflow.py). Shown once per partition by Python's default filter;
    `warnings.simplefilter("error", HalfOverflowWarning)` makes such an invoke raise."""
