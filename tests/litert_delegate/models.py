"""Small models for the LiteRT delegate tests, built with our writer."""
import numpy as np

from gles_delegate.tflite import ModelBuilder


def mixed_model():
    """CONV_2D -> LOGISTIC, CAST(conv -> int64) -> CAST(-> float32), ADD of the two on
    [1, 8, 8, 4]: the GPU holds no int64 tensor (its float view takes bool and int32 only), so
    nodes 2 and 3 can only run on LiteRT's CPU kernels; 0, 1 and 4 on the GPU."""
    b = ModelBuilder()
    x = b.input("x", (1, 8, 8, 4))
    w = b.const("w", np.random.default_rng(1).standard_normal((4, 3, 3, 4)).astype(np.float32) * 0.3)
    bias = b.const("bias", np.linspace(-0.2, 0.2, 4, dtype=np.float32))
    a, s, c, d = (b.tensor(name, (1, 8, 8, 4)) for name in "ascd")
    q = b.tensor("q", (1, 8, 8, 4), np.int64)
    b.op("CONV_2D", [x, w, bias], [a], padding=0, stride_w=1, stride_h=1, fused_activation_function=0)
    b.op("LOGISTIC", [a], [s])
    b.op("CAST", [a], [q])
    b.op("CAST", [q], [c])
    b.op("ADD", [c, s], [d], fused_activation_function=0)
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
