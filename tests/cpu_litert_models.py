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
