"""Small models for the LiteRT delegate tests, built with our writer."""
import numpy as np

from gles_delegate.tflite import ModelBuilder


def mixed_model():
    """CONV_2D -> LOGISTIC -> GREATER -> SELECT_V2 -> ADD on [1, 8, 8, 4]: the comparison has no
    GPU kernel (a bool output) and SELECT_V2 no kernel in this package at all (GPU or reference),
    so nodes 2 and 3 can only run on LiteRT's CPU kernels; 0, 1 and 4 on the GPU."""
    b = ModelBuilder()
    x = b.input("x", (1, 8, 8, 4))
    w = b.const("w", np.random.default_rng(1).standard_normal((4, 3, 3, 4)).astype(np.float32) * 0.3)
    bias = b.const("bias", np.linspace(-0.2, 0.2, 4, dtype=np.float32))
    a, s, c, d = (b.tensor(name, (1, 8, 8, 4)) for name in "ascd")
    m = b.tensor("m", (1, 8, 8, 4), np.bool_)
    b.op("CONV_2D", [x, w, bias], [a], padding=0, stride_w=1, stride_h=1, fused_activation_function=0)
    b.op("LOGISTIC", [a], [s])
    b.op("GREATER", [s, b.const("half", np.array([0.5], np.float32))], [m])
    b.op("SELECT_V2", [m, s, a], [c])
    b.op("ADD", [c, b.const("one", np.ones(4, np.float32))], [d], fused_activation_function=0)
    b.output(d)
    return b.build()


def add_model(shape=(1, 4, 4, 3)):
    """y = relu(x + 0.5), x with a free batch dimension (resizable)."""
    b = ModelBuilder()
    x = b.input("x", shape, shape_signature=(-1,) + tuple(shape[1:]))
    y = b.tensor("y", shape)
    b.op("ADD", [x, b.const("c", np.full(shape[-1], 0.5, np.float32))], [y], fused_activation_function=1)
    b.output(y)
    return b.build()
