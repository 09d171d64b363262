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


def _batch_of(b, x, rank):
    """SHAPE(x) -> STRIDED_SLICE: x's batch as an int32 scalar, as Keras computes it."""
    shape, size = b.tensor(f"shape_{x}", (rank,), np.int32), b.tensor(f"batch_{x}", (), np.int32)
    b.op("SHAPE", [x], [shape], out_type=2)
    one = np.array([1], np.int32)
    b.op("STRIDED_SLICE", [shape, b.const(f"begin_{x}", np.array([0], np.int32)), b.const(f"end_{x}", one),
                           b.const(f"strides_{x}", one)], [size], shrink_axis_mask=1)
    return size


def batch_div8_model():
    """x [None, 4] -> ADD 1 -> RESHAPE to [B // 8, 8, 4] (SHAPE, STRIDED_SLICE, FLOOR_DIV, PACK)
    -> MUL 2 -> SUM over axis 1 -> [B // 8, 4]. Declared at batch 1, the RESHAPE's target is
    [0, 8, 4]: invalid until the input is resized to a multiple of 8."""
    b = ModelBuilder()
    x = b.input("x", (1, 4), shape_signature=(-1, 4))
    a = b.tensor("a", (1, 4), shape_signature=(-1, 4))
    b.op("ADD", [x, b.const("one", np.float32(1.0))], [a], fused_activation_function=0)
    groups, target = b.tensor("groups", (), np.int32), b.tensor("target", (3,), np.int32)
    b.op("FLOOR_DIV", [_batch_of(b, x, 2), b.const("eight", np.int32(8))], [groups])
    b.op("PACK", [groups, b.const("d8", np.int32(8)), b.const("d4", np.int32(4))], [target], values_count=3, axis=0)
    r, m = (b.tensor(name, (1, 8, 4), shape_signature=(-1, 8, 4)) for name in "rm")
    b.op("RESHAPE", [a, target], [r])
    b.op("MUL", [r, b.const("two", np.float32(2.0))], [m], fused_activation_function=0)
    y = b.tensor("y", (1, 4), shape_signature=(-1, 4))
    b.op("SUM", [m, b.const("axis", np.array([1], np.int32))], [y], keep_dims=False)
    b.output(y)
    return b.build()


def unpack_fc_model():
    """x [None, 2, 3] -> UNPACK -> FULLY_CONNECTED of each half; logistic(fc0 + FILL([B, 5],
    0.25)) + fc1 -> LOGISTIC, the FILL's shape from SHAPE(x) (a Keras zero state), in TF's order:
    operators 0, 1 (SHAPE, STRIDED_SLICE) before the UNPACK #2, 5, 6 (PACK, FILL) between the
    FCs #3, #4 and the rest. The SHAPE chain folds into a constant (claimed), and LiteRT puts it
    in a delegate kernel of its own, apart from the GPU nodes."""
    b = ModelBuilder()
    x = b.input("x", (1, 2, 3), shape_signature=(-1, 2, 3))
    batch = _batch_of(b, x, 3)
    halves = [b.tensor(f"x{k}", (1, 3), shape_signature=(-1, 3)) for k in range(2)]
    b.op("UNPACK", [x], halves, num=2, axis=1)
    w = b.const("w", np.random.default_rng(7).standard_normal((5, 3)).astype(np.float32))
    f0, f1, fill, s0, a0, s1, y = (b.tensor(n, (1, 5), shape_signature=(-1, 5))
                                   for n in ("f0", "f1", "fill", "s0", "a0", "s1", "y"))
    for half, out in zip(halves, (f0, f1)):
        b.op("FULLY_CONNECTED", [half, w, -1], [out], fused_activation_function=0, keep_num_dims=False)
    dims = b.tensor("dims", (2,), np.int32)
    b.op("PACK", [batch, b.const("units", np.int32(5))], [dims], values_count=2, axis=0)
    b.op("FILL", [dims, b.const("quarter", np.float32(0.25))], [fill])
    b.op("ADD", [f0, fill], [a0], fused_activation_function=0)
    b.op("LOGISTIC", [a0], [s0])
    b.op("ADD", [f1, s0], [s1], fused_activation_function=0)
    b.op("LOGISTIC", [s1], [y])
    b.output(y)
    return b.build()


def segmentation_head_model(size=257, classes=21):
    """A DeepLab v3-like output on a small graph: x [1, size, size, 3] -> CONV_2D 3x3 (SAME) to
    `classes` channels -> y [1, size, size, classes] (257x257x21: DeepLab v3's 5.5 MB float32
    output), so that an invoke is mostly the output's way out (issue 41 item 3)."""
    b = ModelBuilder()
    x = b.input("x", (1, size, size, 3))
    w = b.const("w", np.random.default_rng(3).standard_normal((classes, 3, 3, 3)).astype(np.float32) * 0.3)
    bias = b.const("bias", np.linspace(-0.5, 0.5, classes, dtype=np.float32))
    y = b.tensor("y", (1, size, size, classes))
    b.op("CONV_2D", [x, w, bias], [y], padding=0, stride_w=1, stride_h=1, fused_activation_function=0)
    b.output(y)
    return b.build()
