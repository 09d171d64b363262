"""Half storage's overflow noticed (gpu/half_overflow.py, common.glsl note_overflow): a store that
rounds a finite value beyond 65504 to inf sets the partition's overflow word; an invoke whose
outputs then come out inf or NaN warns (HalfOverflowWarning) naming the partition and the output,
one whose outputs stay finite is only counted, 'auto' computes such an invoke again with float32
storage, and none of it happens at fp32 or within range."""
import warnings

import numpy as np
import pytest

from gles_delegate import GpuDelegate, HalfOverflowWarning, Interpreter
from gles_delegate.gpu import compiler, io_loads
from gles_delegate.tflite import ModelBuilder
from gles_delegate.tflite.writer import quantize_params
from tests.litert import run_litert
from tests.gpu.gpulib import invoked_keeping_every_tensor
from tests.gpu.test_io_loads import SHAPE, reader_model
from tests.gpu.test_io_paths import IO_PATHS, check_io_path, use_io_path
from tests.gpu.transforms.rulelib import Chain
from tests.streaming_models import Ring, frames, ring_model

# Half math ('fp16': mediump, which NVIDIA computes in fp16) overflows in the arithmetic itself,
# before any store: only the precisions that compute in float32 are checked store by store.
HALF_STORAGE = ["fp16_fp32acc", "auto"]
GAIN = 1000.0  # the model's MUL: inputs of 100 give 1e5, beyond half's 65504
F16_EPS = float(np.finfo(np.float16).eps)  # an input rounded to half moves the output by at most half of it


def gained_model(after):
    """x -> MUL by GAIN -> `after` (an elementwise op) -> the output."""
    c = Chain((1, 8, 8, 6))
    y = c.op("MUL", c.x, c.const(np.full((6,), GAIN, np.float32)))
    return c.build(c.op(after, y))


def invoked(model, values, precision):
    """(outputs, summary()['half_overflow'], the HalfOverflowWarnings raised) of one invoke."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with GpuDelegate(precision=precision) as delegate:
            interp = Interpreter(model_content=model, experimental_delegates=[delegate])
            interp.allocate_tensors()
            for detail, value in zip(interp.get_input_details(), values):
                interp.set_tensor(detail["index"], value)
            interp.invoke()
            outputs = [interp.get_tensor(d["index"]) for d in interp.get_output_details()]
            record = delegate.summary()["half_overflow"]
            del interp
    return outputs, record, [w for w in caught if issubclass(w.category, HalfOverflowWarning)]


def scaled(shape, scale):
    return (np.random.default_rng(0).uniform(-1, 1, shape) * scale).astype(np.float32)


def test_an_overflow_that_reaches_an_output_warns_naming_it():
    outputs, record, said = invoked(gained_model("ABS"), [scaled((1, 8, 8, 6), 100.0)], "fp16_fp32acc")
    assert not np.isfinite(outputs[0]).all()  # the half storage's inf, which the warning is about
    assert record["invokes"] == record["reached_outputs"] == 1 and record["recomputed"] == 0
    assert record["first"] == {"nodes": "#0 (MUL) .. #1 (ABS)",
                               "outputs": [{"index": 3, "tensor": "t3_abs", "how": "came out inf or NaN"}]}
    [warning] = said
    assert "#0 (MUL) .. #1 (ABS)" in str(warning.message) and "3 ('t3_abs')" in str(warning.message)


def test_auto_computes_an_overflowed_invoke_again_in_float32():
    """'auto' promises float32's answers: its float32 twin recomputes the invoke (made once, at
    the first such invoke); an invoke within range runs the half plan alone."""
    model, big, small = gained_model("ABS"), scaled((1, 8, 8, 6), 100.0), scaled((1, 8, 8, 6), 10.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with GpuDelegate(precision="auto") as delegate:
            interp = Interpreter(model_content=model, experimental_delegates=[delegate])
            interp.allocate_tensors()
            partition, twins, outputs = delegate.partitions[0], [], []
            for x in (big, big, small):
                interp.set_tensor(interp.get_input_details()[0]["index"], x)
                interp.invoke()
                outputs.append(interp.get_tensor(interp.get_output_details()[0]["index"]).copy())
                twins.append(partition.twin)
            record = delegate.summary()["half_overflow"]
            del interp
    for x, out in zip((big, big, small), outputs):
        expected = np.abs(x * np.float32(GAIN))
        np.testing.assert_allclose(out, expected, rtol=0, atol=4 * np.finfo(np.float32).eps * expected.max()
                                   if x is big else 2 * F16_EPS * expected.max())  # the last one in half storage
    assert twins[0] is not None and twins[0] is twins[1] is twins[2]
    assert record["invokes"] == record["reached_outputs"] == record["recomputed"] == 2
    said = [str(w.message) for w in caught if issubclass(w.category, HalfOverflowWarning)]
    assert len(said) == 2 and all("computed them again with float32 storage" in m for m in said)


def test_auto_does_not_run_a_stateful_partition_twice():
    """A partition holding resource variables has no twin (its second run would advance the
    state twice): the overflow is warned of as in half storage alone."""
    ring = Ring()
    x = frames(ring, 1)[0] * np.float32(1e6)
    outputs, record, said = invoked(ring_model(ring), [x], "auto")
    assert record["reached_outputs"] == 1 and record["recomputed"] == 0
    assert len(said) == 1 and "where float32 storage would not" in str(said[0].message)


@pytest.mark.parametrize("precision", HALF_STORAGE)
def test_an_overflow_the_model_absorbs_is_counted_without_a_warning(precision):
    """TANH of the overflowed inf is 1, as of 1e5: the outputs are right, nothing to warn of."""
    x = scaled((1, 8, 8, 6), 100.0)
    outputs, record, said = invoked(gained_model("TANH"), [x], precision)
    np.testing.assert_allclose(outputs[0], np.tanh(x * GAIN), atol=1e-3)
    assert record == {"invokes": 1, "reached_outputs": 0, "recomputed": 0, "first": None} and said == []


@pytest.mark.parametrize("precision", HALF_STORAGE + ["fp32"])
def test_values_within_range_set_nothing(precision):
    outputs, record, said = invoked(gained_model("ABS"), [scaled((1, 8, 8, 6), 60.0)], precision)
    assert np.isfinite(outputs[0]).all()
    assert record == {"invokes": 0, "reached_outputs": 0, "recomputed": 0, "first": None} and said == []


def test_fp32_plans_have_no_overflow_word():
    with GpuDelegate(precision="fp32") as delegate:
        interp = Interpreter(model_content=gained_model("ABS"), experimental_delegates=[delegate])
        interp.allocate_tensors()
        plan = delegate.partitions[0].plan
        assert plan.overflow_offset == -1 and not any("#define HALF_OVERFLOW_WORD" in s for s in plan.sources)
        del interp


@pytest.mark.parametrize("loads", [True, False], ids=["loaded by its reader", "convert_in"])
@pytest.mark.parametrize("kind", ["conv", "elementwise"])
def test_an_input_beyond_half_range_is_an_overflow(kind, loads, monkeypatch):
    """The input itself stored in half: by convert_in's store, or rounded by the reader that
    loads it from the I/O buffer (common.glsl as_stored)."""
    monkeypatch.setattr(io_loads, "ENABLED", loads)
    outputs, record, said = invoked(reader_model(kind), [scaled(SHAPE, 1e6)], "fp16_fp32acc")
    assert record["invokes"] == 1 and record["reached_outputs"] == 1 and len(said) == 1


def test_the_check_can_be_switched_off(monkeypatch):
    """compiler.HALF_OVERFLOW_CHECK (for timing it): no word, no count, no warning."""
    monkeypatch.setattr(compiler, "HALF_OVERFLOW_CHECK", False)
    outputs, record, said = invoked(gained_model("ABS"), [scaled((1, 8, 8, 6), 100.0)], "fp16_fp32acc")
    assert not np.isfinite(outputs[0]).all()
    assert record["invokes"] == 0 and said == []


def test_the_warning_can_be_made_an_error():
    with warnings.catch_warnings():
        warnings.simplefilter("error", HalfOverflowWarning)
        with GpuDelegate(precision="fp16_fp32acc") as delegate:
            interp = Interpreter(model_content=gained_model("ABS"), experimental_delegates=[delegate])
            interp.allocate_tensors()
            interp.set_tensor(interp.get_input_details()[0]["index"], scaled((1, 8, 8, 6), 100.0))
            with pytest.raises(HalfOverflowWarning, match="beyond half precision's range"):
                interp.invoke()
            del interp


def saturating_model():
    """int8 a + b at a scale of 1000 into an int8 of scale 2000, then RELU: codes 60 + 60 are
    120000 in the float view, past half, and the output's inf quantizes to 127 (LiteRT: 60)."""
    b = ModelBuilder()
    q_in, q_out = quantize_params(1000.0, 0), quantize_params(2000.0, 0)
    a, c = (b.input(name, (1, 4, 4, 8), np.int8, quantization=q_in) for name in "ac")
    total = b.tensor("total", (1, 4, 4, 8), np.int8, quantization=q_out)
    b.op("ADD", [a, c], [total], fused_activation_function=0)
    out = b.tensor("out", (1, 4, 4, 8), np.int8, quantization=q_out)
    b.op("RELU", [total], [out])
    b.output(out)
    return b.build()


@pytest.mark.parametrize("precision", ["fp32", "fp16_fp32acc", "auto"])
def test_an_overflow_into_an_integer_output_is_warned_of(precision):
    """An integer output cannot show the inf: any overflow of its partition is warned of."""
    model, values = saturating_model(), [np.full((1, 4, 4, 8), 60, np.int8)] * 2
    outputs, record, said = invoked(model, values, precision)
    if precision == "fp16_fp32acc":
        assert (outputs[0] == 127).all() and len(said) == 1 and "may be wrong (int8" in str(said[0].message)
    else:  # 'auto' calibrates on the quantized tensors' real ranges: the sum is kept in float
        np.testing.assert_array_equal(outputs[0], run_litert(model, values)[0])
        assert said == []


def test_a_recomputed_invoke_keeps_the_twins_tensors_too():
    """experimental_preserve_all_tensors: the tensors inside the partition are the twin's run's
    as well, so the MUL's output is float32's 1e5, not half's inf."""
    x = scaled((1, 8, 8, 6), 100.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HalfOverflowWarning)
        with GpuDelegate(precision="auto") as delegate:
            interp = invoked_keeping_every_tensor(gained_model("ABS"), delegate, x)
            product = interp.get_tensor(2)
            assert delegate.summary()["half_overflow"]["recomputed"] == 1
            del interp
    np.testing.assert_allclose(product, x * np.float32(GAIN), rtol=4 * np.finfo(np.float32).eps)


@pytest.mark.parametrize("activation, tested", [(0, True), (1, True), (2, False), (3, False)])
def test_a_conv_whose_activation_bounds_its_stores_goes_without_the_test(activation, tested):
    """compiler.BOUNDED_BY_ACTIVATION: a convolution ending in RELU_N1_TO_1 or RELU6 stores values within
    [-1, 6]: its program has no test; with no activation or RELU (unbounded) it has one. The
    first convolution loads the input from the I/O buffer (IN_IO, an input of over 64 KiB): its
    loads still round to half, so it keeps the test whatever its activation; the last stores
    the output, without activation."""
    c = Chain(SHAPE)
    y = c.conv(c.conv(c.x, 8, activation=activation), 8, activation=activation, seed=2)
    with GpuDelegate(precision="fp16_fp32acc") as delegate:
        interp = Interpreter(model_content=c.build(c.conv(y, 8, seed=3)), experimental_delegates=[delegate])
        interp.allocate_tensors()
        plan = delegate.partitions[0].plan
        sources = [plan.sources[step[0]] for step, template in zip(plan.steps, plan.templates) if template == "conv2d"]
        del interp
    assert "#define IN_IO 1" in sources[0]
    assert ["#define HALF_OVERFLOW_WORD" in s for s in sources] == [True, tested, True]


@pytest.mark.parametrize("path", IO_PATHS)
def test_every_io_path_reads_the_overflow_word(path, monkeypatch):
    """The word is zeroed and read back on each I/O path (MappedIo direct or through device
    memory, CopiedIo with the status words in one write and one read): an overflowing invoke,
    then one within range, counted once."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HalfOverflowWarning)
        with GpuDelegate(precision="fp16_fp32acc") as delegate:
            use_io_path(monkeypatch, delegate, path)
            interp = Interpreter(model_content=gained_model("ABS"), experimental_delegates=[delegate])
            interp.allocate_tensors()
            check_io_path(delegate.partitions[0], path)
            for scale in (100.0, 10.0):
                interp.set_tensor(interp.get_input_details()[0]["index"], scaled((1, 8, 8, 6), scale))
                interp.invoke()
            assert np.isfinite(interp.get_tensor(interp.get_output_details()[0]["index"])).all()
            assert delegate.summary()["half_overflow"]["reached_outputs"] == 1
            del interp
