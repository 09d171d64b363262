"""Window attributes a file may hold (STABLEHLO_REDUCE_WINDOW's, read from the operator's second
options union): any window, stride, dilation and padding, huge, zero or negative, with the
reference alone and with the GpuDelegate; only a ModelError may come out, at allocate_tensors()
or invoke(), never another exception, a hang or an unbounded allocation; and where both run,
the GPU gives the reference's outputs. LiteRT is left out (its kernel trusts these attributes:
cpu_backend 'reference')."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gles_delegate import GpuDelegate, Interpreter, ModelError
from tests.reduce_window_models import Window, window_model
from tests.reliability.test_fuzz import FUZZ, time_limit

SHAPE = (1, 4, 5, 3)
EXTREMES = (-(2 ** 40), -(2 ** 31), -3, -1, 0, 2 ** 31, 2 ** 40)
ATTRIBUTES = ("window", "strides", "base_dilations", "window_dilations", "padding")


@st.composite
def windows(draw):
    """Sane attributes (sizes 1-3, padding -1 to 2), then up to three values made extreme."""
    values = {name: draw(st.lists(st.integers(1, 3), min_size=4, max_size=4)) for name in ATTRIBUTES[:4]}
    values["padding"] = draw(st.lists(st.integers(-1, 2), min_size=8, max_size=8))
    for _ in range(draw(st.integers(0, 3))):
        name = draw(st.sampled_from(ATTRIBUTES))
        values[name][draw(st.integers(0, len(values[name]) - 1))] = draw(st.sampled_from(EXTREMES))
    return Window(*(tuple(values[name]) for name in ATTRIBUTES))


def run(model, x, delegates):
    interpreter = Interpreter(model_content=model, experimental_delegates=delegates, cpu_backend="reference")
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    interpreter.invoke()
    return interpreter.get_tensor(interpreter.get_output_details()[0]["index"])


@settings(FUZZ, max_examples=150)
@given(geometry=windows(), body=st.sampled_from(("ADD", "MAXIMUM", "MUL", "SUB")))
def test_any_window_attributes_are_a_model_error_or_the_reference_s_outputs(geometry, body):
    try:
        out_shape = geometry.out_shape(SHAPE)
    except ZeroDivisionError:  # a zero stride
        out_shape = SHAPE
    if any(not 0 <= d < 1 << 20 for d in out_shape) or np.prod(out_shape, dtype=object) > 1 << 20:
        out_shape = SHAPE  # declared as some shape the file may give: ours must refuse the difference
    model = window_model(SHAPE, geometry, body, out_shape=tuple(int(d) for d in out_shape))
    x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    with time_limit(30):
        try:
            reference = run(model, x, [])
        except ModelError:
            return
        with GpuDelegate() as delegate:
            gpu = run(model, x, [delegate])
    assert gpu.shape == reference.shape
    scale = float(np.max(np.abs(reference[np.isfinite(reference)]), initial=1.0))
    np.testing.assert_allclose(gpu, reference, rtol=1e-5, atol=1e-5 * scale)
