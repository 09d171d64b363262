"""Params baked into programs as constants (compiler._params_blocks): the literals are exact,
the plan binds no block for a baked step, and the outputs are the reference's at every
precision and every choice of compiler.BAKE_PARAMS."""
import numpy as np
import pytest

from gles_delegate import GpuDelegate
from gles_delegate.gpu import compiler, shader
from tests.gpu.gpulib import PRECISIONS
from tests.gpu.transforms.rulelib import Chain, check_gpu, random
from tests.oplib import run_ours

WORKGROUP = {"WG_X": 8, "WG_Y": 1, "WG_Z": 1}


def test_baked_literals_are_exact():
    floats = {"scale": 0.1, "least": float(np.finfo(np.float32).smallest_subnormal), "negative_zero": -0.0,
              "limits": (-np.inf, 6.0), "not_a_number": float("nan"), "third": np.float32(1 / 3)}
    ints = {"a_offset": 7, "minimum": -2**31, "maximum": 2**31 - 1, "grid": (3, 1, 2), "flags": (0, -1)}
    source = shader.assemble("softmax", WORKGROUP, {**floats, **ints}, False, False, baked=True)
    assert "uniform Params" not in source
    baked = shader.baked_params(source)
    assert baked.keys() == {**floats, **ints}.keys()
    for name, value in ints.items():
        assert baked[name][1] == tuple(np.atleast_1d(value).tolist()), name
    for name, value in floats.items():
        bits = np.array(baked[name][1], np.float32).view(np.uint32)
        np.testing.assert_array_equal(bits, np.atleast_1d(np.float32(value)).view(np.uint32), err_msg=name)
    assert shader.baked_params(shader.assemble("softmax", WORKGROUP, ints, False, False)) == {}


def shared_program_model():
    """Two convolutions of one shape (one program, two dispatches) between dispatches of their own."""
    c = Chain((1, 9, 9, 8))
    x = c.conv(c.x, 8, activation=1, seed=1)
    x = c.conv(x, 8, activation=1, seed=5)
    x = c.depthwise(x, stride=2, seed=9)
    x = c.op("MEAN", x, c.const([1, 2], np.int32), shape=(1, 8), keep_dims=False)
    return c.build(c.op("SOFTMAX", x, beta=0.5))


def plan_of(model, values, **options):
    with GpuDelegate(**options) as delegate:
        outputs = run_ours(model, values, experimental_delegates=[delegate])
        return outputs, delegate.partitions[0].plan


def sharing(plan):
    """{step index: how many steps use its program}."""
    uses = [step[0] for step in plan.steps]
    return {k: uses.count(program) for k, program in enumerate(uses)}


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("bake", compiler.BAKE_CHOICES)
def test_baked_plans_compute_the_reference(bake, precision, monkeypatch):
    model, values = shared_program_model(), [random((1, 9, 9, 8), 2)]
    monkeypatch.setattr(compiler, "BAKE_PARAMS", "none")
    shared = sharing(plan_of(model, values, precision=precision)[1])
    assert 1 in shared.values() and max(shared.values()) > 1  # the model has both kinds of step
    monkeypatch.setattr(compiler, "BAKE_PARAMS", bake)
    check_gpu(model, values, precision)
    _, plan = plan_of(model, values, precision=precision)
    for k, (source, _, size, _, _) in enumerate(plan.steps):
        baked = bake == "all" or (bake == "own" and shared[k] == 1)
        assert (size == 0) == baked and ("uniform Params {" in plan.sources[source]) == (not baked), (k, bake)


def test_own_baking_compiles_no_program_more_and_sustained_speed_bakes_all(monkeypatch):
    model, values = shared_program_model(), [random((1, 9, 9, 8), 2)]
    monkeypatch.setattr(compiler, "BAKE_PARAMS", "none")
    _, unbaked = plan_of(model, values)
    monkeypatch.setattr(compiler, "BAKE_PARAMS", "own")
    _, own = plan_of(model, values)
    assert len(own.sources) == len(unbaked.sources) < len(own.steps)
    assert len(own.params) < len(unbaked.params)
    _, every = plan_of(model, values, inference_preference="sustained_speed")
    assert all(step[2] == 0 for step in every.steps) and len(every.sources) == len(every.steps)


def test_an_unknown_bake_choice_is_refused():
    with pytest.raises(ValueError, match="bake must be one of"):
        compiler.compile_plan([], [], [], "fp32", {}, bake="some")


def test_calibration_trials_are_not_baked(monkeypatch, tmp_path):
    """precision 'auto' builds trial plans that differ in promotions: baked, each trial's sources
    would differ and compile again; only the plan that serves takes the delegate's choice."""
    from gles_delegate import calibrate
    asked = []

    def recording(*args, **kwargs):
        asked.append(args[8] if len(args) > 8 else kwargs.get("bake"))
        return compiler.compile_plan(*args, **kwargs)
    monkeypatch.setattr(calibrate, "compile_plan", recording)
    model, values = shared_program_model(), [random((1, 9, 9, 8), 2)]
    for preference, served in (("fast_single_answer", None), ("sustained_speed", "all")):
        asked.clear()
        plan_of(model, values, precision="auto", inference_preference=preference,
                calibration_cache_dir=str(tmp_path / preference))
        assert len(asked) >= 2 and asked[:-1] == ["none"] * (len(asked) - 1) and asked[-1] == served, asked
