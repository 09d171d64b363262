"""Models holding ops no reference kernel runs (SEGMENT_SUM, MATRIX_DIAG: LiteRT's builtin resolver
does), between float ops the reference and the GPU run; for tests of gles_delegate/cpu_litert.py."""
import numpy as np

from gles_delegate.tflite import ModelBuilder

from .litert import run_litert

# Ops LiteRT 2.3's builtin resolver runs that no ops/ module implements (checked by a test).
LITERT_ONLY = ("SEGMENT_SUM", "MATRIX_DIAG")


def segment_model(rows=8, cols=4, version=1):
    """x [rows, cols] -> MUL -> TANH -> SEGMENT_SUM (constant segment ids, rows -> 4) ->
    MATRIX_DIAG -> LOGISTIC -> ADD -> y [4, cols, cols]: two LiteRT-only nodes (#2, #3) between
    two runs of float nodes."""
    b = ModelBuilder()
    x = b.input("x", (rows, cols))
    w = b.const("w", np.linspace(-2, 2, rows * cols, dtype=np.float32).reshape(rows, cols))
    scaled = b.tensor("scaled", (rows, cols))
    b.op("MUL", [x, w], [scaled], fused_activation_function=0)
    squashed = b.tensor("squashed", (rows, cols))
    b.op("TANH", [scaled], [squashed])
    ids = b.const("ids", np.sort(np.arange(rows, dtype=np.int32) * 4 // rows))
    summed = b.tensor("summed", (4, cols))
    b.op("SEGMENT_SUM", [squashed, ids], [summed], version=version)
    diag = b.tensor("diag", (4, cols, cols))
    b.op("MATRIX_DIAG", [summed], [diag])
    gated = b.tensor("gated", (4, cols, cols))
    b.op("LOGISTIC", [diag], [gated])
    y = b.tensor("y", (4, cols, cols))
    b.op("ADD", [gated, b.const("half", np.array([0.5], np.float32))], [y], fused_activation_function=0)
    b.output(y)
    return b.build()


def diag_model(shape=(2, 3)):
    """x [..., n] -> ABS -> MATRIX_DIAG -> SQRT -> y [..., n, n], its input resizable."""
    b = ModelBuilder()
    x = b.input("x", shape, shape_signature=(-1,) * len(shape))
    magnitude = b.tensor("magnitude", shape)
    b.op("ABS", [x], [magnitude])
    diag = b.tensor("diag", tuple(shape) + (shape[-1],))
    b.op("MATRIX_DIAG", [magnitude], [diag])
    y = b.tensor("y", tuple(shape) + (shape[-1],))
    b.op("SQRT", [diag], [y])
    b.output(y)
    return b.build()


class ClaimsNothing:
    """A delegate that claims no node. Without a delegate the Interpreter runs a model whose
    state or dynamic shapes LiteRT's sub-models cannot carry as the model file whole on LiteRT
    (whole_model.py); beside a delegate it plans node by node, LiteRT's runs and the reference's:
    what these tests of that plan look at."""

    def can_run(self, node):
        return False

    def partition(self, graph, candidates):
        return []


def run(model, inputs, shape=None, **kwargs):
    """(our outputs, cpu_summary()) after one invoke of our Interpreter (kwargs its arguments),
    the first input resized to `shape` first, when given."""
    from gles_delegate import Interpreter
    interpreter = Interpreter(model_content=model, **kwargs)
    if shape is not None:
        interpreter.resize_tensor_input(interpreter.get_input_details()[0]["index"], shape)
    interpreter.allocate_tensors()
    for detail, value in zip(interpreter.get_input_details(), inputs):
        interpreter.set_tensor(detail["index"], value)
    interpreter.invoke()
    return [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()], interpreter.cpu_summary()


def random_input(shape, seed=0):
    return np.random.default_rng(seed).uniform(-3, 3, shape).astype(np.float32)


def litert_outputs(model, inputs, shape=None):
    """LiteRT alone on `model` (its first input resized to `shape` first, when given)."""
    if shape is None:
        return run_litert(model, inputs)
    from .litert import LiteRTInterpreter
    interpreter = LiteRTInterpreter(model_content=model)
    interpreter.resize_tensor_input(interpreter.get_input_details()[0]["index"], shape)
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], inputs[0])
    interpreter.invoke()
    return [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]


def int16_conv_model():
    """(model, input) of a 16x8 CONV_2D (int16 activations with zero point 0, int8 per-channel
    weights, int64 bias): valid TFLite whose variant the reference has no kernel for."""
    from .oplib import In, build_model
    rng = np.random.default_rng(3)
    x = rng.integers(-3000, 3000, (1, 5, 5, 3)).astype(np.int16)
    weights = In(rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8), const=True, quant=(np.full(4, 0.02), 0, 0))
    bias = In(rng.integers(-1000, 1000, 4).astype(np.int64), const=True, quant=(np.full(4, 0.0002), 0, 0))
    model = build_model("CONV_2D", [In(x, quant=(0.01, 0)), weights, bias], [((1, 3, 3, 4), np.int16, (0.05, 0))],
                        {"padding": 1, "stride_w": 1, "stride_h": 1, "fused_activation_function": 0})
    return model, x


def hybrid_transpose_conv_model():
    """(model, input) of a dynamic-range TRANSPOSE_CONV (float32 input and output, int8 weights)."""
    from .oplib import In, build_model
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 4, 4, 3)).astype(np.float32)
    inputs = [In(np.array([1, 8, 8, 2], np.int32), const=True),
              In(rng.integers(-127, 128, (2, 3, 3, 3)).astype(np.int8), const=True, quant=(0.05, 0)), In(x)]
    model = build_model("TRANSPOSE_CONV", inputs, [((1, 8, 8, 2), np.float32, None)],
                        {"padding": 0, "stride_w": 2, "stride_h": 2})
    return model, x



_CONV_3D_OPTIONS = {"padding": 0, "stride_d": 1, "stride_h": 2, "stride_w": 1, "dilation_d_factor": 1,
                    "dilation_h_factor": 1, "dilation_w_factor": 1, "fused_activation_function": 1}


def conv3d_model(transpose=False):
    """(model, input) of a CONV_3D (x [1, 3, 4, 4, 2], filter [2, 3, 3, 2, 4] -> y [1, 3, 2, 4, 4],
    SAME, strides (1, 2, 1), RELU) or of a CONV_3D_TRANSPOSE (x [1, 3, 2, 4, 4], filter
    [2, 3, 3, 2, 4] -> y [1, 3, 4, 4, 2]): ops whose options table (Conv3DOptions) is not named
    after them."""
    rng = np.random.default_rng(5)
    shapes = [(1, 3, 4, 4, 2), (1, 3, 2, 4, 4)]
    x_shape, y_shape = shapes[::-1] if transpose else shapes
    x = rng.standard_normal(x_shape).astype(np.float32)
    b = ModelBuilder()
    xi = b.input("x", x_shape)
    w = b.const("w", rng.standard_normal((2, 3, 3, 2, 4)).astype(np.float32))
    y = b.tensor("y", y_shape)
    if transpose:
        b.op("CONV_3D_TRANSPOSE", [b.const("shape", np.array(y_shape, np.int32)), w, xi, -1], [y], **_CONV_3D_OPTIONS)
    else:
        b.op("CONV_3D", [xi, w, -1], [y], **_CONV_3D_OPTIONS)
    b.output(y)
    return b.build(), x


def random_model():
    """x [2, 3] -> (x + RANDOM_UNIFORM([2, 3]), x * RANDOM_STANDARD_NORMAL([2, 3])), seeded
    (RandomOptions: seed, seed2) as TF's converter writes tf.random.uniform(seed=...)."""
    b = ModelBuilder()
    x = b.input("x", (2, 3))
    shape = b.const("shape", np.array([2, 3], np.int32))
    for k, (op, combine) in enumerate([("RANDOM_UNIFORM", "ADD"), ("RANDOM_STANDARD_NORMAL", "MUL")]):
        noise, out = b.tensor(f"noise{k}", (2, 3)), b.tensor(f"out{k}", (2, 3))
        b.op(op, [shape], [noise], seed=7 + k, seed2=11)
        b.op(combine, [x, noise], [out], fused_activation_function=0)
        b.output(out)
    return b.build()


def runtime_segment_model(rows=6):
    """x [rows] float, seg [rows] int32 (runtime ids: 0, then steps of 0 or 1) -> SEGMENT_SUM ->
    y declared [1], shape_signature [-1], as TF's converter writes it: segment_sum.cc makes y a
    dynamic tensor, sized by the ids at invoke."""
    b = ModelBuilder()
    x, seg = b.input("x", (rows,)), b.input("seg", (rows,), np.int32)
    y = b.tensor("y", (1,), shape_signature=(-1,))
    b.op("SEGMENT_SUM", [x, seg], [y])
    b.output(y)
    return b.build()


def runtime_shape_random_model():
    """shape [2] int32 (a runtime input) -> RANDOM_UNIFORM (seeded) -> ABS -> y declared [1, 1],
    shape_signature [-1, -1]: the output's shape is the input's value, decided at invoke."""
    b = ModelBuilder()
    shape = b.input("shape", (2,), np.int32)
    noise, y = (b.tensor(name, (1, 1), shape_signature=(-1, -1)) for name in ("noise", "y"))
    b.op("RANDOM_UNIFORM", [shape], [noise], seed=3, seed2=4)
    b.op("ABS", [noise], [y])
    b.output(y)
    return b.build()
