"""The resource variable ops' reference kernels (ops/variables.py) against LiteRT's: the
streaming models of tests/streaming_models.py step by step (the oracle of the GPU's
tests/gpu/test_variables.py), READ_VARIABLE's declared shape (a larger variable read truncated,
as LiteRT's memcpy of the output's bytes does; a rank-0 output dynamic), and the refusal of a
smaller variable, which LiteRT would read past."""
import numpy as np
import pytest

from gles_delegate import Interpreter
from gles_delegate.errors import ModelError
from gles_delegate.tflite import ModelBuilder
from tests.litert import RESOLVERS, LiteRTInterpreter
from tests.streaming_models import Ring, frames, ring_model

RINGS = {"float32": Ring(), "int8": Ring(quantized=True), "int8 depthwise": Ring(conv="DEPTHWISE_CONV_2D", quantized=True),
         "assigns 4 frames": Ring(keep_from=1), "negative begin": Ring(keep_from=-2)}


def _pair(model, cpu_backend="reference"):
    """Our Interpreter (the reference kernels; or under 'auto', the model file whole on LiteRT,
    whole_model.py) and LiteRT's reference kernels, both allocated."""
    ours = Interpreter(model_content=model, cpu_backend=cpu_backend)
    theirs = LiteRTInterpreter(model_content=model, experimental_op_resolver_type=RESOLVERS["reference"])
    for interpreter in (ours, theirs):
        interpreter.allocate_tensors()
    return ours, theirs


def _step(interpreter, x):
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    interpreter.invoke()
    return [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]


def _same(ours, theirs):
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
    if ours.dtype.kind == "f":  # one convolution: the order of its sum
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
    else:
        np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("cpu_backend", ["reference", "auto"])
@pytest.mark.parametrize("name", sorted(RINGS))
def test_streaming_models_match_litert_step_by_step(name, cpu_backend):
    ring = RINGS[name]
    ours, theirs = _pair(ring_model(ring), cpu_backend)
    assert ours._whole_on_litert() == (cpu_backend == "auto")
    for x in frames(ring, 6):
        _same(_step(ours, x)[0], _step(theirs, x)[0])


@pytest.mark.parametrize("cpu_backend", ["reference", "auto"])
@pytest.mark.parametrize("keep_from", [None, -2])
def test_streaming_models_match_litert_across_a_resize(keep_from, cpu_backend):
    """The variable keeps its frames through resize_tensor_input + allocate_tensors, as in
    LiteRT: whole on LiteRT, its interpreter is resized, not made again."""
    ring = Ring(keep_from=keep_from)
    ours, theirs = _pair(ring_model(ring), cpu_backend)
    for x in frames(ring, 2):
        _same(_step(ours, x)[0], _step(theirs, x)[0])
    rng = np.random.default_rng(4)
    for interpreter in (ours, theirs):
        interpreter.resize_tensor_input(interpreter.get_input_details()[0]["index"], (1, 5, 1, ring.channels))
        interpreter.allocate_tensors()
    assert ours._whole_on_litert() == (cpu_backend == "auto")
    for _ in range(3):
        x = rng.normal(0, 1, (1, 5, 1, ring.channels)).astype(np.float32)
        _same(_step(ours, x)[0], _step(theirs, x)[0])


def _read_model(initial, read_shape):
    """CALL_ONCE assigns `initial`; each invoke reads the variable into an output declared of
    `read_shape` and adds input x (of that shape) to it."""
    b = ModelBuilder()
    x = b.input("x", read_shape)
    init = b.subgraph("init")
    b.op("CALL_ONCE", [], [], init_subgraph_index=init.index)
    handle = b.tensor("handle", (), type_name="RESOURCE")
    b.op("VAR_HANDLE", [], [handle], container="", shared_name="v")
    value, total = b.tensor("value", read_shape), b.tensor("total", read_shape)
    b.op("READ_VARIABLE", [handle], [value])
    b.op("ADD", [value, x], [total], fused_activation_function=0)
    b.output(value)
    b.output(total)
    init_handle = init.tensor("handle", (), type_name="RESOURCE")
    init.op("VAR_HANDLE", [], [init_handle], container="", shared_name="v")
    init.op("ASSIGN_VARIABLE", [init_handle, init.const("initial", initial)], [])
    return b.build()


def test_a_larger_variable_is_read_truncated_as_litert_does():
    initial = np.arange(12, dtype=np.float32).reshape(3, 4)
    ours, theirs = _pair(_read_model(initial, (2, 3)))
    x = np.ones((2, 3), np.float32)
    for got, expected in zip(_step(ours, x), _step(theirs, x)):
        _same(got, expected)
    np.testing.assert_array_equal(_step(ours, x)[0], initial.reshape(-1)[:6].reshape(2, 3))


def test_a_read_declared_of_rank_0_takes_the_variables_shape():
    initial = np.arange(6, dtype=np.float32).reshape(2, 3)
    model = _read_model(initial, ())
    ours, theirs = _pair(model)
    got, expected = _step(ours, np.float32(1))[0], _step(theirs, np.float32(1))[0]
    _same(got, expected)
    np.testing.assert_array_equal(got, initial)
    assert ours._main.dynamic


def test_a_smaller_variable_is_a_model_error_naming_the_read():
    ours = Interpreter(model_content=_read_model(np.zeros(4, np.float32), (2, 3)))
    ours.allocate_tensors()
    with pytest.raises(ModelError, match=r"#2 \(READ_VARIABLE\).*shape \[4\] into an output of shape \[2, 3\]"):
        _step(ours, np.ones((2, 3), np.float32))
