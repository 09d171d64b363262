"""Random valid graphs agree with LiteRT on every path (tools/fuzz_graphs.py, `gles-fuzz-graphs`):
our reference kernels, our Interpreter with the GpuDelegate and LiteRT with the GpuDelegate, each
output within gles-parity's fp32 tolerance of LiteRT's (integers exactly, quantized ones to one
step), on every invoke of a case. A bounded run of a few seeds of each generator family; the tool
runs as long as you like (docs/reliability.md has its figures). The fuzzer is also shown to report
what it should: a corrupted GPU output (an integer one off by 1 too), a NaN and an exception are
findings, written and minimised."""
import json

import numpy as np
import pytest

from gles_delegate import GpuDelegate, Interpreter
from gles_delegate.tools import fuzz_graphs as fg

pytest.importorskip("ai_edge_litert.interpreter")

SEEDS = (101, 202, 303)
CASES = 6
MAX_NODES = 18


def quiet(line):
    pass


@pytest.mark.parametrize("seed", SEEDS)
def test_random_graphs_agree_with_litert_on_every_path(seed, tmp_path):
    summary = fg.fuzz(seed, cases=CASES, paths="abcd", max_nodes=MAX_NODES, out_dir=tmp_path, log=quiet,
                      families=("float",))
    assert summary["cases"] == CASES
    assert summary["compared"] == CASES and summary["nodes_compared"] >= 3 * CASES
    for path in "bcd":  # every path ran on every compared model, and took it
        assert summary["results"][path] == {"ok": CASES}, summary["results"]
    assert sum(summary["ops_on_gpu"].values()) > 0 and summary["rules_applied"]
    assert summary["findings"] == [], json.dumps(summary["findings"], indent=1, default=str)
    assert list(tmp_path.iterdir()) == []


def test_the_generator_is_deterministic_and_litert_takes_what_it_writes():
    """Two hundred models, each run by LiteRT's XNNPACK and builtin kernels without complaint
    (no GPU here: the generator's shape bookkeeping alone), and the same bytes for the same seed."""
    ops = set()
    for case in range(200):
        spec = fg.generate(7, case, families=("float",))
        data, _ = spec.build()
        assert fg.generate(7, case, families=("float",)).build()[0] == data
        assert len(spec.nodes) >= 3
        details = fg._input_details(data)
        assert details is not None, spec.text()
        assert_litert_runs(spec, data, fg.case_inputs(spec, 7, case, details))
        ops.update(spec.ops())
    assert {"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "ADD", "MUL", "SUB", "LOGISTIC", "TANH", "HARD_SWISH",
            "RELU", "MEAN", "SOFTMAX", "CONCATENATION", "SLICE", "STRIDED_SLICE", "SPLIT", "SPLIT_V", "RESHAPE",
            "TRANSPOSE", "PAD", "AVERAGE_POOL_2D", "MAX_POOL_2D", "BATCH_MATMUL", "GATHER", "TILE", "PADV2",
            "RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR"} <= ops


def assert_litert_runs(spec, data, steps):
    """LiteRT's default kernels (without XNNPACK for a model with variables, which it crashes on)
    and its builtin ones run every step of the case."""
    for outputs, why in (fg.litert_default(data, steps, xnnpack=not spec.variables), fg.litert_builtin(data, steps)):
        assert outputs is not None, f"{why}\n{spec.text()}"


FAMILY_OPS = {
    "int32": {"GATHER", "EMBEDDING_LOOKUP", "FLOOR_DIV", "FLOOR_MOD", "CAST", "SELECT_V2", "ARG_MAX", "LESS"},
    "quant": {"QUANTIZE", "DEQUANTIZE", "CONV_2D", "FULLY_CONNECTED", "ADD", "CONCATENATION"},
    "state": {"VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE"},
    "signal": {"L2_NORMALIZATION", "RFFT2D", "COMPLEX_ABS"},
    "resize": {"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "MEAN", "SOFTMAX", "CONCATENATION", "STRIDED_SLICE",
               "RESHAPE", "TRANSPOSE", "BATCH_MATMUL", "GATHER"},
    "edge": {"PACK", "UNPACK", "BROADCAST_TO", "CUMSUM", "GATHER_ND", "ONE_HOT"},
    "cells": {"FULLY_CONNECTED", "SLICE", "LOGISTIC", "TANH", "CONCATENATION", "DEPTHWISE_CONV_2D", "ADD"},
}


@pytest.mark.parametrize("family", sorted(FAMILY_OPS))
def test_each_family_writes_models_litert_runs(family):
    """Thirty models of each family, every step of each case run by LiteRT's two kernel sets,
    with the family's ops among them (no GPU here)."""
    ops = set()
    for case in range(30):
        spec = fg.generate(5, case, families=(family,))
        assert spec.family == family and len(spec.steps) >= 2
        data, _ = spec.build()
        details = fg._input_details(data)
        assert details is not None, spec.text()
        assert_litert_runs(spec, data, fg.case_inputs(spec, 5, case, details))
        ops.update(spec.ops())
    assert FAMILY_OPS[family] <= ops


@pytest.mark.parametrize("family", sorted(FAMILY_OPS))
def test_each_family_agrees_with_litert_on_every_path(family, tmp_path):
    summary = fg.fuzz(SEEDS[0], cases=3, paths="abcde", max_nodes=12, out_dir=tmp_path, log=quiet, families=(family,))
    assert summary["families"] == {family: 3}
    for path in "bcde":  # e: LiteRT's kernels in ours, the state family's files whole on LiteRT
        assert summary["results"][path] == {"ok": 3}, summary["results"]
    assert summary["findings"] == [], json.dumps(summary["findings"], indent=1, default=str)


def test_the_resize_family_resizes_dynamic_inputs_between_invokes():
    """Its inputs declare -1 dimensions; its steps resize them (to other sizes, to 1, back to the
    first sizes and to those again, each before an invoke), and LiteRT's outputs follow: their
    shapes change between invokes in most cases."""
    changed = 0
    for case in range(30):
        spec = fg.generate(9, case, families=("resize",))
        data, _ = spec.build()
        details = fg._input_details(data)
        assert any(-1 in d["shape_signature"] for d in details), spec.text()
        steps = fg.case_inputs(spec, 9, case, details)
        resizes = [s.shapes for s in steps if isinstance(s, fg.Resize)]
        assert len(resizes) == 4 and resizes[-1] == resizes[-2] and resizes[-2] == tuple(
            tuple(int(n) for n in d["shape"]) for d in details)
        assert [isinstance(s, list) for s in steps] == [True] + [False, True] * 4  # each resize, then an invoke
        outputs, why = fg.litert_default(data, steps)
        assert outputs is not None, why
        shapes = [o.shape for o in outputs[::len(spec.outputs)]]
        changed += len(set(shapes)) > 1
    assert changed >= 20


def test_a_refused_resize_is_a_finding_however_clean(monkeypatch, tmp_path):
    """LiteRT ran every resize of the case, so our Interpreter's clean ValueError at one (paths b
    and c) is a finding, named for the resize and its cause."""
    def refuse(self, index, shape, strict=False):
        raise ValueError("no resize here")
    monkeypatch.setattr(fg.Interpreter, "resize_tensor_input", refuse)
    summary = fg.fuzz(SEEDS[0], cases=1, paths="abcd", max_nodes=6, out_dir=tmp_path, minimize_findings=False,
                      log=quiet, families=("resize",))
    assert summary["results"] == {"b": {"exception": 1}, "c": {"exception": 1}, "d": {"ok": 1}}
    assert {f["exception"] for f in summary["findings"]} == {"ResizeFailure(ValueError)"}
    assert "inputs resized to" in summary["findings"][0]["message"]


def corrupting(monkeypatch, how, path="c"):
    """Make run_path's results for `path` wrong in one way."""
    original = fg.run_path

    def run_path(which, data, inputs, *args, **kwargs):
        if how == "refuse":  # every path: the model is one we do not run
            raise ValueError("a clean refusal")
        outputs = original(which, data, inputs, *args, **kwargs)
        if which != path:
            return outputs
        if how == "raise":
            raise RuntimeError("a bug in the delegate")
        if how == "refuse_on_gpu":
            raise ValueError("no kernel runs what a rule made")
        if how == "int_plus_one":  # the first integer output, one element off by 1
            k = next(k for k, o in enumerate(outputs) if o.dtype == np.int32)
            wrong = outputs[k].copy()
            wrong.flat[wrong.size // 2] += 1
            return outputs[:k] + [wrong] + outputs[k + 1:]
        first = outputs[0].copy()
        first.flat[first.size // 2] = np.nan if how == "nan" else first.flat[first.size // 2] + 0.5
        return [first] + outputs[1:]
    monkeypatch.setattr(fg, "run_path", run_path)


def test_a_wrong_gpu_output_is_a_finding_written_and_minimised(monkeypatch, tmp_path):
    corrupting(monkeypatch, "value")
    summary = fg.fuzz(SEEDS[0], cases=1, paths="abc", max_nodes=10, out_dir=tmp_path, log=quiet, families=("float",))
    assert summary["results"]["b"] == {"ok": 1} and summary["results"]["c"] == {"tolerance": 1}
    finding, = summary["findings"]
    assert finding["path"] == "c" and finding["kind"] == "tolerance" and finding["output"] == 0
    assert finding["max_abs"] == pytest.approx(0.5, rel=0.01) and finding["max_abs"] > finding["tolerance"]
    assert finding["reproduce"] == f"gles-fuzz-graphs --seed {SEEDS[0]} --case 0 --paths ac --families float " \
                                   f"--max-nodes 10"
    minimized = finding["minimized"]
    assert 1 <= minimized["nodes"] <= finding["nodes"] and minimized["persists_without_rules"] is True
    line, = (tmp_path / "tolerance-s101-c0-c.json").read_text().splitlines()
    assert json.loads(line)["case"] == 0
    for name in ("tolerance-s101-c0-c.tflite", "tolerance-s101-c0-c-min.tflite"):
        assert (tmp_path / name).read_bytes()[4:8] == b"TFL3"


@pytest.mark.parametrize("how, kind", [("nan", "nan"), ("raise", "exception"), ("refuse_on_gpu", "exception"),
                                       ("refuse", None)])
def test_nan_and_exceptions_are_findings_a_clean_refusal_is_not(how, kind, monkeypatch, tmp_path):
    """A ValueError is a refusal where the model does not run without the delegate either; on
    the GPU path alone it is a finding (the delegate must leave to the CPU what it cannot run)."""
    corrupting(monkeypatch, how)
    summary = fg.fuzz(SEEDS[1], cases=1, paths="ac", max_nodes=6, out_dir=tmp_path, minimize_findings=False,
                      log=quiet, families=("float",))  # a float output to corrupt, whatever families exist
    assert summary["results"]["c"] == {kind or "refused": 1}
    assert [f["kind"] for f in summary["findings"]] == ([kind] if kind else [])


INT_CASE = (5, 0)  # (seed, case) of an int32-family model with int32 outputs


def test_an_integer_output_off_by_one_is_a_finding(monkeypatch, tmp_path):
    seed, case = INT_CASE
    spec = fg.generate(seed, case, families=("int32",))
    assert any(np.dtype(spec.tensors[t].dtype) == np.int32 for t in spec.outputs), spec.text()
    corrupting(monkeypatch, "int_plus_one")
    summary = fg.fuzz(seed, paths="ac", only_case=case, out_dir=tmp_path, minimize_findings=False, log=quiet,
                      families=("int32",))
    finding, = summary["findings"]
    assert finding["kind"] == "tolerance" and finding["max_abs"] == 1 and finding["tolerance"] == 0


def test_integers_are_held_exactly_quantized_ones_to_one_step():
    """Integers exactly where their floor is 0 (floors() gives integer outputs none), within it
    where half storage moves them (a CAST of a rounded float: with_half_storage); quantized ones
    to one step; complex ones as their float pairs."""
    ints = [np.array([[3, -7, 2 ** 31 - 1]], np.int32)]
    assert fg.judge(ints, ints, [0.0], 1e-4, [0.0]) is None
    off = fg.judge([ints[0] + np.int32([[0, 1, 0]])], ints, [0.0], 1e-4, [0.0])  # no rtol for integers
    assert off["kind"] == "tolerance" and off["tolerance"] == 0
    assert fg.judge([ints[0] + np.int32([[0, 1, 0]])], ints, [0.0], 1e-4, [1.0]) is None
    assert fg.judge([ints[0] + np.int32([[0, 2, 0]])], ints, [0.0], 1e-4, [1.0])["tolerance"] == 1
    q = [np.array([[-128, 5, 127]], np.int8)]
    assert fg.judge([q[0] + np.int8([[1, 0, 0]])], q, [0.0], 1e-4, quantum=[1.0]) is None
    assert fg.judge([q[0] + np.int8([[2, 0, 0]])], q, [0.0], 1e-4, quantum=[1.0])["tolerance"] == 1
    # a DEQUANTIZE of scale 0.01: one step is 0.01, plus the float32 rounding of both sides (the floor)
    dequantized, floor = [np.array([[0.5, -0.25]], np.float32)], [16 * np.finfo(np.float32).eps * 0.5]
    assert fg.judge([dequantized[0] + 0.01], dequantized, [0.0], 1e-4, floor, quantum=[0.01]) is None
    assert fg.judge([dequantized[0] + 0.03], dequantized, [0.0], 1e-4, floor, quantum=[0.01])["kind"] == "tolerance"
    spectrum = [np.array([1 + 2j, -3j], np.complex64)]       # complex: its float pairs
    assert fg.judge([spectrum[0] + 1e-3j], spectrum, [0.0], 1e-4)["kind"] == "tolerance"
    both = fg.judge([ints[0], ints[0] + 1], [ints[0], ints[0]], [0.0, 0.0], 1e-4, per_invoke=1)
    assert both["message"].startswith("invoke 1 output 0")


def test_python_s_own_type_error_is_no_clean_refusal():
    def unpack():
        base, strides = None
    for exc_type, fn in ((TypeError, unpack), (ValueError, lambda: int("x"))):
        try:
            fn()
        except exc_type as exc:
            assert not fg.is_clean(exc)
    try:
        raise ValueError("a model we refuse")
    except ValueError as exc:
        assert fg.is_clean(exc)


def test_judge_follows_the_tolerance_and_litert_spread():
    want = [np.array([[1.0, -2.0]], np.float32)]
    assert fg.judge([want[0] + 1e-4], want, [0.0], 1e-4) is None                      # 1e-4 <= 1e-4 x 2
    over = fg.judge([want[0] + 3e-4], want, [0.0], 1e-4)
    assert over["kind"] == "tolerance" and over["max_rel"] == pytest.approx(1.5e-4, rel=1e-3)
    assert fg.judge([want[0] + 3e-4], want, [2e-4], 1e-4) is None                     # within 2x LiteRT's spread
    assert fg.judge([want[0] + 3e-4], want, [0.0], 1e-4, [4e-4]) is None              # within the floor
    assert fg.judge([np.full((1, 2), np.nan, np.float32)], want, [0.0], 1e-4)["kind"] == "nan"
    assert fg.judge([want[0].reshape(2, 1)], want, [0.0], 1e-4)["kind"] == "shape"
    assert fg.judge([want[0].astype(np.float64)], want, [0.0], 1e-4)["kind"] == "dtype"


def test_the_command_line_reproduces_one_case(tmp_path, capsys):
    summary_file = tmp_path / "summary.json"
    assert fg.main(["--seed", str(SEEDS[2]), "--case", "3", "--max-nodes", "8", "--paths", "c",
                    "--out", str(tmp_path / "found"), "--json", str(summary_file)]) == 0
    summary = json.loads(summary_file.read_text())
    assert summary["cases"] == 1 and summary["compared"] == 1 and summary["paths"] == "ac"
    assert "1 cases in" in capsys.readouterr().out


def test_a_findings_reproduce_line_makes_the_same_case_the_same_way(monkeypatch, tmp_path):
    """Every option that changes which model a case is (--families, --min-nodes, --max-nodes) or
    how it runs (--precision, --set) is on the line: without --families a case of seed 101
    drawn from 'float' alone is another family's model."""
    import shlex
    corrupting(monkeypatch, "value")
    setting = "gpu.runtime.DIRECT_IO_MAX_BYTES=-1"
    summary = fg.fuzz(SEEDS[0], cases=1, paths="ac", min_nodes=4, max_nodes=9, precision="fp16", out_dir=tmp_path,
                      log=quiet, families=("float", "int32"), minimize_findings=False,
                      settings=[fg.common.tuning_setting(setting)])
    finding, = summary["findings"]
    assert summary["settings"] == [setting]
    argv = shlex.split(finding["reproduce"])
    assert argv[0] == "gles-fuzz-graphs"
    args = fg.build_parser().parse_args(argv[1:])
    assert (args.precision, args.paths, [s[0] for s in args.set]) == ("fp16", "ac", [setting])
    again = fg.generate(args.seed, args.case, args.min_nodes, args.max_nodes, args.families)
    first = fg.generate(SEEDS[0], 0, 4, 9, ("float", "int32"))
    assert again.build()[0] == first.build()[0]
    assert fg.generate(args.seed, args.case).build()[0] != first.build()[0]  # the options matter


def test_set_is_in_force_for_every_case_and_restored_after(monkeypatch, tmp_path):
    """--set DIRECT_IO_MAX_BYTES=-1 (with io_loads') puts the GPU paths' I/O in device memory,
    which no generated model reaches at the default (64 KiB, MAX_ELEMENTS floats are 12 KiB):
    every partition the case makes runs so, and the constants are back after the run."""
    from gles_delegate.gpu import io_loads, runtime
    defaults = runtime.DIRECT_IO_MAX_BYTES, io_loads.MIN_IO_BYTES
    made = []
    original = runtime.MappedIo.__init__

    def spied(self, context, plan):
        original(self, context, plan)
        made.append(self.direct)
    monkeypatch.setattr(runtime.MappedIo, "__init__", spied)
    summary_file = tmp_path / "summary.json"
    assert fg.main(["--seed", "5", "--case", "0", "--families", "float", "--paths", "cd", "--out",
                    str(tmp_path / "found"), "--json", str(summary_file),
                    "--set", "gpu.runtime.DIRECT_IO_MAX_BYTES=-1", "--set", "gpu.io_loads.MIN_IO_BYTES=-1"]) == 0
    summary = json.loads(summary_file.read_text())
    assert summary["compared"] == 1 and summary["settings"] == ["gpu.runtime.DIRECT_IO_MAX_BYTES=-1",
                                                                 "gpu.io_loads.MIN_IO_BYTES=-1"]
    assert made and not any(made)
    assert (runtime.DIRECT_IO_MAX_BYTES, io_loads.MIN_IO_BYTES) == defaults


def test_minimum_limits_plan_every_gpu_path_for_a_small_device(monkeypatch, tmp_path):
    """--minimum-limits: each GPU path's delegate sees OpenGL ES 3.1's minimum limits, and no
    persistent mapping, while the run lasts (its findings reproduce with the flag), this
    device's after."""
    def invocations():
        with fg.GpuDelegate() as delegate:
            return delegate.context.limits["max_workgroup_invocations"], delegate.context.persistent_mapping
    before, seen, original = invocations(), [], fg.run_path

    def run_path(path, *args, **kwargs):
        if path in "cd":
            seen.append(invocations())
        return original(path, *args, **kwargs)
    monkeypatch.setattr(fg, "run_path", run_path)
    summary = fg.fuzz(5, cases=1, paths="acd", out_dir=tmp_path, log=quiet, families=("float",),
                      minimize_findings=False, minimum_limits=True)
    assert summary["compared"] == 1 and summary["findings"] == [] and summary["minimum_limits"] is True
    assert seen == [(128, False)] * 2 and invocations() == before
    assert fg.reproduce_options("fp32", tuple(fg.FAMILIES), 3, 25, (), True) == ["--minimum-limits"]


def test_random_workgroups_vary_the_workgroups_the_same_way_each_time(tmp_path):
    """--workgroups random: the GPU paths tune, and the tuner picks among the candidates and odd
    shapes at random, the same picks for the same partition again (a --case run, the
    minimiser), the heuristic's after; outputs stay LiteRT's (the run has no finding)."""
    from gles_delegate.gpu import compiler
    spec = fg.generate(5, 0, families=("float",))
    data, _ = spec.build()
    steps = fg.case_inputs(spec, 5, 0, fg._input_details(data))

    def workgroups():
        with GpuDelegate(fg.gpu_options("fp32")) as delegate:
            interpreter = Interpreter(model_content=data, experimental_delegates=[delegate])
            interpreter.allocate_tensors()
            fg.run_steps(interpreter, steps[:1])
            return [tuple(p.plan.workgroups) for p in delegate.partitions]
    heuristic = workgroups()
    original = compiler.candidates
    with fg.random_workgroups(7):
        picked, again = workgroups(), workgroups()
    with fg.random_workgroups(8):
        other = workgroups()
    assert picked == again and picked != heuristic and other != picked
    assert any(wg in fg.ODD_WORKGROUPS for p in picked for wg in p)
    assert workgroups() == heuristic and compiler.candidates is original and not fg.gpu_options("fp32").tune_workgroups
    summary = fg.fuzz(5, cases=2, paths="acd", log=quiet, families=("float",), minimize_findings=False,
                      workgroups="random", out_dir=tmp_path)
    assert summary["compared"] == 2 and summary["findings"] == [] and summary["workgroups"] == "random"


def test_a_crash_of_litert_skips_the_case_and_the_run_goes_on(monkeypatch):
    """LiteRT's kernels run once in a forked child first: a process-killing LiteRT (2.3 aborted
    on an int8 model of seed 21 case 429) skips the case as refused, naming the signal."""
    import os
    monkeypatch.setattr(fg, "litert_default", lambda *args, **kwargs: os.abort())
    outcome = fg.run_case(fg.generate(5, 0, families=("float",)), 5, 0, "abcd")
    assert (outcome.status, outcome.why) == ("litert_refused", "LiteRT crashed running the model (SIGABRT)")


def test_a_run_leaves_the_package_log_as_it_was():
    """fuzz() quiets the package's log while it runs and restores it: a level left at ERROR hid
    the warnings later tests in the same process expect (seen with 14 test workers on the H100)."""
    import logging
    logger = logging.getLogger("gles_delegate")
    before = logger.level
    fg.fuzz(5, cases=1, paths="a", log=quiet, families=("float",))
    assert logger.level == before


def test_a_kernel_that_fails_to_compile_is_a_finding(monkeypatch, tmp_path):
    """A GPU kernel that does not compile leaves its node to the CPU with right outputs: the
    fuzzer reports it on both GPU paths (a POINTWISE_DAG group that indexed past its registers
    hid that way: seed 33 case 53)."""
    from gles_delegate.gpu import shader
    original = shader.template

    def template(name):  # every op kernel broken; the partition's input / output copies not
        text = original(name)
        return text if name.startswith("convert") else text + "\nvoid gles_test_broken() { undeclared_in_test = 1; }\n"
    monkeypatch.setattr(shader, "template", template)
    summary = fg.fuzz(5, paths="acd", only_case=0, out_dir=tmp_path, minimize_findings=False, log=quiet,
                      families=("float",))
    kinds = {f["path"]: (f["kind"], f.get("exception")) for f in summary["findings"]}
    assert kinds == {p: ("exception", "KernelCompileFailure") for p in "cd"}, summary["findings"]


class _Kept:
    """Stands in for LiteRT's interpreter that kept every tensor (floors' `interpreter`)."""

    def __init__(self, values):
        self.values = values

    def get_tensor(self, index):
        return self.values[index]


@pytest.mark.parametrize("x, judged", [([2.9999998, 0.5, 1.0], False), ([3.0, 2.5, -1.25], True)])
def test_an_output_past_a_step_near_its_jump_is_not_judged(x, judged):
    """FLOOR of 2.9999998 (one float32 ulp of 3 from its jump, within fg.STEP_ULPS): another order
    of float32 sums may give 3.0000002, a jump of 1 no tolerance of the output allows, so the output
    is not judged (floor inf); exactly on a step (3.0) or away from one, it is."""
    spec = fg.Spec()
    t = spec.add(fg.TensorSpec((1, 3), "input"))
    y = spec.add(fg.TensorSpec((1, 3), "value"))
    spec.inputs, spec.nodes, spec.outputs = [t], [fg.NodeSpec("FLOOR", [t], [y])], [y]
    values = {t: np.float32([x]), y: np.floor(np.float32([x]))}
    floor, = fg.floors(spec, {t: t, y: y}, _Kept(values))
    assert np.isfinite(floor) == judged


def test_an_inexact_value_exactly_on_a_step_is_not_judged_an_exact_one_is():
    """SIGN of x + c where LiteRT's sum is exactly 0 (seed 65 case 398: a RFFT2D term that
    cancels to 0 in LiteRT, 1e-16 on the GPU, then CEIL): rounding may take it either way, so the
    output is not judged; SIGN of a model input exactly 0 is the same on every path, and judged."""
    spec = fg.Spec()
    t = spec.add(fg.TensorSpec((1, 2), "input"))
    c = spec.add(fg.TensorSpec((), "const", np.float32(0.5)))
    s = spec.add(fg.TensorSpec((1, 2), "value"))
    y = spec.add(fg.TensorSpec((1, 2), "value"))
    z = spec.add(fg.TensorSpec((1, 2), "value"))
    spec.inputs, spec.outputs = [t], [y, z]
    spec.nodes = [fg.NodeSpec("ADD", [t, c], [s]), fg.NodeSpec("SIGN", [s], [y]), fg.NodeSpec("SIGN", [t], [z])]
    x = np.float32([[-0.5, 0.0]])
    values = {t: x, s: x + 0.5, y: np.sign(x + 0.5), z: np.sign(x)}
    floor = fg.floors(spec, {k: k for k in values}, _Kept(values))
    assert floor[0] == np.inf and np.isfinite(floor[1])


def test_an_int8_average_pool_s_tie_is_tflite_s(tmp_path):
    """Seed 76 case 468 (all seven families; an int8 AVERAGE_POOL_2D -> CONV_2D -> TILE -> ADD ->
    QUANTIZE, 2 steps off where the bound is 1): the pool rounded a tie of the raw integers' mean
    otherwise than TFLite's integer kernel, and the convolution grew it. Since the pool rounds
    as TFLite does (gpu/kernels/pool.py INTEGER_MEAN), no finding."""
    families = ("float", "int32", "quant", "state", "signal", "resize", "edge")  # as the run drew them
    summary = fg.fuzz(76, paths="ac", only_case=468, minimize_findings=False, out_dir=tmp_path, log=quiet,
                      families=families)
    assert summary["compared"] == 1 and summary["findings"] == [], summary["findings"]


def test_litert_s_three_kernel_sets_count_in_its_spread(tmp_path):
    """Seed 115 case 3823 (families state, int32, quant, resize): an int8 MEAN over H and W with
    keep_dims, requantized to half its scale. LiteRT's XNNPACK and BUILTIN_REF kernels gave 6
    where its optimized builtin kernel, which the reference follows bit for bit
    (tests/ops/test_reduce.py), gave 7 (raw mean 6.476 rounded twice), and the requantization
    made it 2 steps on path b. The optimized kernels' run counts in LiteRT's spread now."""
    summary = fg.fuzz(115, paths="ab", only_case=3823, minimize_findings=False, out_dir=tmp_path, log=quiet,
                      families=("state", "int32", "quant", "resize"))
    assert summary["compared"] == 1 and summary["findings"] == [], summary["findings"]


def test_a_hoisted_node_keeps_its_fused_operands_computed_first(tmp_path):
    """Seed 117 case 536 (all seven families, fp16_fp32acc; minimized: PRELU, L2_NORMALIZATION,
    BATCH_MATMUL, ADD, SUB): fuse_residual_add made the ADD an epilogue step of the BATCH_MATMUL
    reading the L2_NORMALIZATION's output, then made the SUB a step of the PRELU reading the
    BATCH_MATMUL's, and hoisted the BATCH_MATMUL before the PRELU, ahead of the L2_NORMALIZATION
    its step reads: the sum read a stale value (0.75 x max|LiteRT| off, paths c and d). hoist
    now requires every tensor a node reads, fused operands included, to exist first."""
    summary = fg.fuzz(117, paths="ac", only_case=536, minimize_findings=False, out_dir=tmp_path, log=quiet,
                      precision="fp16_fp32acc", families=("float", "int32", "quant", "state", "signal", "resize", "edge"))
    assert summary["compared"] == 1 and summary["findings"] == [], summary["findings"]


def test_approximate_gelu_of_negative_values_in_half_math(tmp_path):
    """Seed 122 case 299 (all eight families, precision fp16; minimized: LOG_SOFTMAX, GELU,
    SLICE): GELU's 1 + tanh(z) cancelled for the negative LOG_SOFTMAX values in half math, 1.7e-2
    of the output's largest value off (the bound is 1e-2), paths c and d. The kernel computes
    x / (1 + exp(-2z)) now (epilogue.glsl)."""
    summary = fg.fuzz(122, paths="ac", only_case=299, minimize_findings=False, out_dir=tmp_path, log=quiet,
                      precision="fp16")
    assert summary["compared"] == 1 and summary["findings"] == [], summary["findings"]


def test_an_element_litert_s_kernel_sets_disagree_is_finite_is_not_judged():
    """LiteRT's XNNPACK EXP saturates where its builtin one overflows: LOG(EXP(213)) is 88.4 on
    one and inf on the other, and the GPU's (whose compiler may fold the pair) 213. An output
    where the kernel sets disagree on an element's finiteness has an unbounded spread; equal
    infinities and NaN against NaN agree, and a finite difference stays what it is."""
    inf, nan = np.inf, np.nan
    want = [np.array([1.0, 88.4], np.float32), np.array([inf, nan, 2.0], np.float32)]
    other = [np.array([1.0, inf], np.float32), np.array([inf, nan, 2.5], np.float32)]
    assert fg.spreads(want, other) == [inf, 0.5]
    assert fg.spreads(want, [want[0], np.array([-inf, nan, 2.0], np.float32)])[1] == inf
    assert fg.spreads(want, [want[0], np.array([inf, 1.0, 2.0], np.float32)])[1] == inf
    assert fg.spreads([np.float32(2.0)], [np.float32(2.5)]) == [0.5]  # a 0-d output


def test_an_overflow_litert_saturates_on_one_kernel_set_is_no_finding(tmp_path):
    """Seed 124 case 158 (all eight families, fp32; minimized: ... BATCH_MATMUL, MUL, EXP, PAD,
    EXP, LOG): the second EXP's input reached 213, LiteRT's XNNPACK gave LOG(EXP(x)) 88.4 and
    its builtin kernels inf; the GPU's 213 was a finding, 5.4e3 x max|LiteRT| off."""
    summary = fg.fuzz(124, paths="ac", only_case=158, minimize_findings=False, out_dir=tmp_path, log=quiet)
    assert summary["compared"] == 1 and summary["findings"] == [], summary["findings"]
