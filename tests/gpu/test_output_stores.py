"""Partition outputs stored straight into the I/O buffer by the kernels computing them
(compiler.fuse_output_stores, common.glsl OUT_IO): one dispatch fewer per output; one that
dispatches of the partition read is stored into its arena storage too (OUT_IO 2); every path
that reads tensors back (preserve_all_tensors, debug_nonfinite, precision 'auto') still sees the
outputs."""
import numpy as np
import pytest

from gles_delegate import GpuDelegate, Interpreter
from gles_delegate.gpu import compiler, transforms
from tests.gpu.gpulib import PRECISIONS, invoked_keeping_every_tensor
from tests.oplib import run_ours
from tests.gpu.transforms.rulelib import Chain, check_gpu, random

SHAPE = (1, 5, 6, 7)  # 7 channels: the second slice padded, which the I/O buffer leaves out


def two_heads():
    """y = conv(x) (also read by z), z = relu(y) + abs(conv2(x)): y is read inside the
    partition, z is not."""
    c = Chain(SHAPE)
    y = c.conv(c.x, 6, seed=1)
    z = c.op("ADD", c.op("RELU", y), c.op("ABS", c.conv(c.x, 6, seed=2)))
    return c.build(y, z)


def plan_of(model, values, **options):
    with GpuDelegate(**options) as delegate:
        outputs = run_ours(model, values, experimental_delegates=[delegate])
        return outputs, delegate.partitions[0].plan, delegate.summary()


@pytest.mark.parametrize("precision", PRECISIONS)
def test_an_output_read_inside_the_partition_is_stored_by_its_kernel_too(precision):
    """y, which relu(y) reads, is stored by its conv into the I/O buffer and its arena storage
    (no convert_out, as for z); only z is left out of the arena (io_stores)."""
    model, values = two_heads(), [random(SHAPE)]
    check_gpu(model, values, precision)
    outputs, plan, _ = plan_of(model, values, precision=precision)
    assert "convert_out" not in plan.templates
    assert len(plan.io_stores) == 1 and sum("#define OUT_IO 2" in s for s in plan.sources) == 1


def test_outputs_match_the_plan_with_converts(monkeypatch):
    model, values = two_heads(), [random(SHAPE, 3)]
    fused, fused_plan, _ = plan_of(model, values)
    monkeypatch.setattr(compiler, "FUSE_OUTPUT_STORES", False)
    plain, plain_plan, _ = plan_of(model, values)
    assert len(plain_plan.steps) == len(fused_plan.steps) + 2 and plain_plan.io_stores == []
    for a, b in zip(fused, plain):
        np.testing.assert_array_equal(a, b)


def test_an_output_written_by_several_dispatches(monkeypatch):
    """A concatenation writes its output in one dispatch per input, each its own box (whole
    slices: a box starting mid-slice reads the slice back, MERGE, and keeps its convert_out).
    With its inputs written in place instead (rule concat_in_place), a convert_out reads it."""
    monkeypatch.setattr(transforms.concat_in_place, "ENABLED", False)
    c = Chain(SHAPE)
    parts = [c.op("ABS", c.conv(c.x, w, seed=w)) for w in (4, 8)]
    model = c.build(c.op("CONCATENATION", *parts, shape=SHAPE[:3] + (12,), axis=3))
    summary, _ = check_gpu(model, [random(SHAPE, 4)])
    _, plan, _ = plan_of(model, [random(SHAPE, 4)])
    assert "convert_out" not in plan.templates and len(plan.io_stores) == 1
    monkeypatch.setattr(transforms.concat_in_place, "ENABLED", True)
    check_gpu(model, [random(SHAPE, 4)])
    _, plan, _ = plan_of(model, [random(SHAPE, 4)])
    assert plan.templates == ["convert_in", "conv2d", "conv2d", "convert_out"] and plan.io_stores == []


def test_preserve_all_tensors_and_debug_nonfinite_see_the_stored_output(caplog):
    c = Chain(SHAPE)
    model = c.build(c.op("EXP", c.op("ABS", c.x)))  # EXP overflows to +inf for |x| > 88.7
    x = random(SHAPE, 5)
    x[0, 2, 3, 6] = 100.0
    with GpuDelegate(debug_nonfinite=True) as delegate:
        interp = invoked_keeping_every_tensor(model, delegate, x)
        assert delegate.partitions[0].plan.io_stores
        out = interp.get_tensor(interp.get_output_details()[0]["index"])
        first = delegate.summary()["first_nonfinite"]
    assert np.isinf(out[0, 2, 3, 6]) and np.isfinite(np.delete(out.ravel(), np.ravel_multi_index((0, 2, 3, 6), SHAPE))).all()
    assert first["index"] == interp.get_output_details()[0]["index"] and first["inf"] == 1
    assert first["element"] == (0, 2, 3, 6) and first["dispatch"] is not None


def test_debug_nonfinite_names_an_output_kept_in_the_arena_first():
    """y = exp(|x|), a graph output its reader z = -y reads too: y's dispatch stores it in the
    I/O buffer and the arena (OUT_IO 2), and the check reads it from the arena as it goes, so the
    first non-finite value is y's, not that of z, which overflows after it."""
    c = Chain(SHAPE)
    y = c.op("EXP", c.op("ABS", c.x))
    model = c.build(y, c.op("NEG", y))
    x = random(SHAPE, 7)
    x[0, 1, 2, 3] = 100.0
    with GpuDelegate(debug_nonfinite=True) as delegate:
        interp = Interpreter(model_content=model, experimental_delegates=[delegate])
        interp.allocate_tensors()
        plan = delegate.partitions[0].plan
        assert "convert_out" not in plan.templates and len(plan.io_stores) == 1
        interp.set_tensor(interp.get_input_details()[0]["index"], x)
        interp.invoke()
        y_out, z_out = (interp.get_tensor(d["index"]) for d in interp.get_output_details())
        first = delegate.summary()["first_nonfinite"]
    assert np.isposinf(y_out[0, 1, 2, 3]) and np.isneginf(z_out[0, 1, 2, 3])
    assert first["index"] == interp.get_output_details()[0]["index"] and first["element"] == (0, 1, 2, 3)


def test_precision_auto_calibrates_with_stored_outputs():
    """((x + 1000) - 1000) * 2 loses x in half storage; calibration judges the stored output."""
    c = Chain(SHAPE)
    thousand = c.const(np.full(7, 1000.0, np.float32))
    y = c.op("SUB", c.op("ADD", c.x, thousand), thousand)
    model = c.build(c.op("MUL", y, c.const(np.full(7, 2.0, np.float32))))
    x = random(SHAPE, 6)
    with GpuDelegate(precision="auto", rewrite_rules=False) as delegate:
        out = run_ours(model, [x], experimental_delegates=[delegate])[0]
        calibration, promoted = delegate.summary()["calibration"][0], delegate.summary()["promoted_tensors"]
        assert delegate.partitions[0].plan.io_stores
    assert promoted and calibration["output_error"] <= calibration["target"]
    expected = x.astype(np.float64) * 2
    assert np.max(np.abs(out - expected)) <= 1e-2 * np.max(np.abs(expected))
