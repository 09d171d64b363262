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

