"""GpuDelegate as a real TfLiteDelegate for LiteRT's (or tflite_runtime's, tf.lite's) Interpreter.

    Interpreter(model_path=..., experimental_delegates=[GpuDelegate()])   # ai_edge_litert's

abi.py: the C structs and the supported runtimes; source.py: which interpreter and model;
verify.py: whether that model is the one LiteRT loaded; plan.py: what to claim; native.py: the
TfLiteDelegate and its callbacks; kernel.py: one delegate kernel's run over LiteRT's tensor memory;
memory.py: that memory as the kernel sees it, and the outputs it lends LiteRT.
"""
from ..gc_pause import gc_paused
from .native import native_delegate_pointer as _native_pointer
from .source import find_caller


def native_delegate_pointer(delegate):
    """The TfLiteDelegate* (an int) for the LiteRT interpreter now being built with `delegate`."""
    with gc_paused():  # reading the model: gc_pause.py
        return _native_pointer(delegate, find_caller(delegate))
