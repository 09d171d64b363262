"""The graph compiler: barriers only where dispatches depend on each other, and workgroup tuning
(the memory plan: test_memory.py; the workgroup heuristic: test_workgroups.py)."""
import logging

import numpy as np
import pytest

from gles_delegate import GpuDelegate
from gles_delegate.graph import Tensor
from gles_delegate.gpu import compiler, gl, transforms, workgroup_tuner
from gles_delegate.gpu.kernels.base import Dispatch
from tests.gpu.gpulib import PRECISIONS
from tests.oplib import assert_close, run_ours
from tests.gpu.transforms.rulelib import Chain, check_gpu, dispatches, random


def tensor(index, shape):
    return Tensor(index, f"t{index}", tuple(shape), np.dtype(np.float32))


def compiled(model, values, **options):
    """(outputs, the plan of the model's one partition)."""
    with GpuDelegate(**options) as delegate:
        outputs = run_ours(model, values, experimental_delegates=[delegate])
        return outputs, delegate.partitions[0].plan


def barriers_of(plan):
    return [(label, step[4]) for label, step in zip(plan.labels, plan.steps)]


# -- barriers ------------------------------------------------------------------------------------
def concat_model(widths):
    c = Chain((1, 5, 5, 4))
    parts = [c.op("ABS", c.conv(c.x, w, seed=k)) for k, w in enumerate(widths)]
    return c.build(c.op("CONCATENATION", *parts, shape=(1, 5, 5, sum(widths)), axis=3))


def test_concatenation_of_slice_aligned_parts_needs_no_barrier_between_them(monkeypatch):
    monkeypatch.setattr(transforms.concat_in_place, "ENABLED", False)  # the copies (else written in place)
    _, plan = compiled(concat_model([4, 8, 4]), [random((1, 5, 5, 4))])
    flags = [flag for label, flag in barriers_of(plan) if "CONCATENATION" in label]
    assert flags == [True, False, False]  # after the producers, then none between the boxes


def test_concatenation_parts_sharing_a_slice_are_ordered():
    """Widths 3 + 6: the second box starts mid-slice and merges into the slice the first wrote."""
    model = concat_model([3, 6])
    outputs, plan = compiled(model, [random((1, 5, 5, 4))])
    flags = [flag for label, flag in barriers_of(plan) if "CONCATENATION" in label]
    assert flags == [True, True]
    check_gpu(model, [random((1, 5, 5, 4))])


def test_independent_dispatches_share_one_barrier():
    """Two convolutions of the input write different tensors: one barrier before the first
    (it reads what convert_in wrote), none before the second."""
    c = Chain((1, 6, 6, 4))
    a, b = c.conv(c.x, 4, seed=1), c.conv(c.x, 4, seed=2)
    _, plan = compiled(c.build(a, b), [random((1, 6, 6, 4))])
    assert [flag for _, flag in barriers_of(plan)][:3] == [False, True, False]


def test_barrier_rules_on_synthetic_dispatches():
    x, y, z = tensor(0, (1, 4, 4, 8)), tensor(1, (1, 4, 4, 8)), tensor(2, (1, 4, 4, 8))
    offsets = {id(x): 0, id(y): 32, id(z): 64}
    def d(reads, writes, box=None):
        return Dispatch("t", (1, 1, 1), reads=reads, writes=writes, box=box)
    # write x; read x (RAW); write z reading nothing (independent); write y over what was read (WAR)
    flags = compiler._barriers([d((), (x,)), d((x,), (y,)), d((), (z,)), d((z,), (x,))], offsets)
    assert flags == [False, True, False, True]
    # disjoint boxes of one tensor: no barrier; overlapping boxes: a barrier
    left, right = ((0, 1), (0, 1), (0, 4), (0, 4)), ((0, 1), (1, 2), (0, 4), (0, 4))
    assert compiler._barriers([d((), (x,), left), d((), (x,), right)], offsets) == [False, False]
    assert compiler._barriers([d((), (x,), left), d((), (x,), left)], offsets) == [False, True]


# -- workgroup tuning (the heuristic: test_workgroups.py) ---------------------------------------
def tuning_model():
    c = Chain((1, 12, 12, 8))
    return c.build(c.op("HARD_SWISH", c.depthwise(c.conv(c.x, 8))))


def fake_timer(monkeypatch, cost):
    """Replace the GL timer by cost(workgroup) in ns: the tuning logic without a GPU clock.
    Returns {ubo offset of a step: {workgroup: cost}} of what was timed."""
    timed = {}

    def time(session, step, source, groups, repeats=1):
        wg = tuple(int(source.split(f"#define WG_{a} ")[1].split()[0]) for a in "XYZ")
        timed.setdefault(step[1], {})[wg] = cost(wg)
        return cost(wg)
    monkeypatch.setattr(workgroup_tuner._Session, "time", time)
    return timed


def test_tuning_keeps_the_fastest_workgroup_of_each_dispatch(monkeypatch):
    timed = fake_timer(monkeypatch, lambda wg: 1000.0 * wg[0] * wg[1] * wg[2] + wg[0])  # small groups win
    model, values = tuning_model(), [random((1, 12, 12, 8))]
    reference = run_ours(model, values)
    outputs, plan = compiled(model, values, tune_workgroups=True)
    assert_close(outputs[0], reference[0])
    assert plan.tuned and len(plan.workgroups) == len(plan.steps)
    heuristic = compiled(model, values)[1].workgroups
    changed = 0
    for wg, step, default in zip(plan.workgroups, plan.steps, heuristic):
        assert f"#define WG_X {wg[0]}\n" in plan.sources[step[0]]
        costs = timed.get(step[1], {})
        if len(costs) > 1:  # the fastest, unless it beats the heuristic's by less than MIN_GAIN
            fastest = min(costs, key=costs.get)
            gain = costs[fastest] < (1 - workgroup_tuner.MIN_GAIN) * costs[default]
            assert wg == (fastest if gain else default)
            changed += wg != default
    assert changed >= 2


def test_sustained_speed_tunes_too(monkeypatch):
    fake_timer(monkeypatch, lambda wg: 1e6 / wg[0])
    _, plan = compiled(tuning_model(), [random((1, 12, 12, 8))], inference_preference="sustained_speed")
    assert plan.tuned


def test_real_timer_runs_or_explains_why_not(caplog):
    """On this GPU's own clock: either tuned, or (llvmpipe, whose GL_TIME_ELAPSED reports 1 ns
    for compute work) the heuristic kept with a warning. Either way the results hold."""
    model, values = tuning_model(), [random((1, 12, 12, 8))]
    with caplog.at_level(logging.WARNING, logger="gles_delegate"):
        outputs, plan = compiled(model, values, tune_workgroups=True)
    assert_close(outputs[0], run_ours(model, values)[0])
    assert plan.tuned or "workgroup tuning skipped" in caplog.text


def test_tuning_without_timer_queries_keeps_the_heuristic(monkeypatch, caplog):
    monkeypatch.setattr(workgroup_tuner, "timer_unavailable", lambda context: "no timer here")
    model, values = tuning_model(), [random((1, 12, 12, 8))]
    _, untuned = compiled(model, values)
    with caplog.at_level(logging.WARNING, logger="gles_delegate"):
        _, plan = compiled(model, values, tune_workgroups=True)
    assert "no timer here" in caplog.text and not plan.tuned
    assert plan.workgroups == untuned.workgroups and plan.sources == untuned.sources


def test_a_candidate_that_fails_to_compile_keeps_the_heuristic(monkeypatch, caplog):
    """A tuning candidate the driver refuses (the first of those started together): the
    heuristic's workgroups are kept, with a warning, the results hold, and the candidates
    started with it are released rather than left compiling."""
    fake_timer(monkeypatch, lambda wg: 1e6 / wg[0])
    release, released = gl.PendingProgram.release, []

    class TunerProgram(gl.Program):  # the tuner's programs only: the delegate's compile as it is
        @classmethod
        def start(cls, gl_functions, sources, *args, **kwargs):
            broken = [sources[0].replace("void main()", "void unused() { nope; }\nvoid main()", 1), *sources[1:]]
            return gl.Program.start(gl_functions, broken, *args, **kwargs)

    def counted_release(self):
        released.append(bool(self.handle))
        release(self)
    monkeypatch.setattr(workgroup_tuner, "Program", TunerProgram)
    monkeypatch.setattr(gl.PendingProgram, "release", counted_release)
    model, values = tuning_model(), [random((1, 12, 12, 8))]
    with caplog.at_level(logging.WARNING, logger="gles_delegate"):
        outputs, plan = compiled(model, values, tune_workgroups=True)
    assert "workgroup tuning failed" in caplog.text and not plan.tuned
    assert_close(outputs[0], run_ours(model, values)[0])
    assert released.count(True) >= 2  # the broken one, and at least one started beside it


# -- a permutation of an input, read from the I/O buffer -----------------------------------------
def nchw_model(perm=(0, 2, 3, 1), shape=(1, 3, 7, 6), also_read=False, scale_after=False, aliased=False):
    """A PyTorch model's image input: TRANSPOSE to NHWC, then a convolution. also_read: an ABS
    of the input too; aliased: a FULLY_CONNECTED of the input reshaped to rows, an alias of its
    storage (gles-fuzz-graphs seed 54 case 770: that FC read the TRANSPOSE's output)."""
    c = Chain(shape)
    out_shape = tuple(shape[p] for p in perm)
    nhwc = c.op("TRANSPOSE", c.x, c.const(perm, np.int32), shape=out_shape)
    if scale_after:  # an epilogue step on the TRANSPOSE's copy, or before it (elementwise_after_layout)
        nhwc = c.op("ABS", nhwc)
    outputs = [c.conv(nhwc, 5, seed=3)] + ([c.op("ABS", c.x)] if also_read else [])
    if aliased:
        rows = c.op("RESHAPE", c.x, c.const([-1, shape[-1]], np.int32), shape=(rows_count(shape), shape[-1]))
        outputs.append(c.op("FULLY_CONNECTED", rows, c.const(random((4, shape[-1]), 5)), c.const(random(4, 6)),
                            shape=(rows_count(shape), 4), keep_num_dims=False))
    return c.build(*outputs)


def rows_count(shape):
    return int(np.prod(shape[:-1]))


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("perm", [(0, 2, 3, 1), (0, 3, 1, 2), (2, 1, 0, 3)])
def test_an_input_only_a_transpose_reads_is_converted_into_its_output(perm, precision, monkeypatch):
    """convert_in reads the I/O slot with the permuted strides and writes the TRANSPOSE's output:
    one dispatch (and barrier) less, the same values."""
    model = nchw_model(perm)
    values = [random((1, 3, 7, 6), 2)]
    summary, _ = check_gpu(model, values, precision)
    _, plan = compiled(model, values, precision=precision)
    assert [label.split(" as ")[-1] for label in plan.labels[:1]] == ["#0 (TRANSPOSE)"]
    monkeypatch.setattr(compiler, "PERMUTE_ON_INPUT", False)
    assert dispatches(model, values) == summary["dispatches"] + 1


@pytest.mark.parametrize("case", ["also_read", "scale_after", "aliased"])
def test_a_transpose_that_is_not_the_input_s_only_plain_copy_stays(case):
    """The input also read by another node, or through an alias of its storage, or an ABS after
    the TRANSPOSE (its step, or moved before it): the TRANSPOSE's dispatch stays."""
    shape = (1, 3, 7, 4)  # 4 channels: [21, 4] rows have the input's PHWC4 layout (an alias)
    model = nchw_model(shape=shape, **{case: True})
    values = [random(shape, 2)]
    check_gpu(model, values)
    _, plan = compiled(model, values)
    assert any(label == "#0 (TRANSPOSE)" for label in plan.labels)
