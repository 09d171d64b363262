"""gles-bench-compare and gles-profile through their entry points (timings are not asserted:
only that every runtime was measured or says why not)."""
import json
import re
from pathlib import Path

import numpy as np
import pytest

from gles_delegate.gpu import workgroup_tuner
from gles_delegate.tools import bench_compare, common, profile_model


def test_bench_compare_writes_a_table_and_json(small_model, tmp_path, capsys):
    out = tmp_path / "cmp"
    assert bench_compare.main(["--models-dir", str(small_model.parent), "--runs", "2", "--warmup", "1",
                               "--out", str(out)]) == 0
    table = (out / "results.md").read_text()
    assert "bench_compare" in table.splitlines()[0]  # the command that produced it
    header = [c.strip() for c in table.splitlines()[2].strip("|").split("|")]
    row = dict(zip(header, [c.strip() for c in next(line for line in table.splitlines()
                                                       if line.startswith("| small |")).strip("|").split("|")]))
    for column in ("ours fp32", "ours fp16_fp32acc", "XNNPACK 1t", "XNNPACK 16t"):
        assert re.fullmatch(r"\d+\.\d\d", row[column]), (column, row[column])
    assert re.fullmatch(r"\d\.\de[-+]\d\d", row["error ours fp32"])  # against XNNPACK, on the same inputs
    assert {"LiteRT GPU", "LiteRT GPU f32", "error LiteRT GPU", "error LiteRT GPU f32"} <= set(row)
    rows = json.loads((out / "results.json").read_text())
    assert rows[0]["ours_fp32"]["cpu_nodes"] == 1  # L2_POOL_2D has no GPU kernel
    assert rows[0]["ours_fp32"]["error_vs_xnnpack"] < 1e-5 and "outputs" not in rows[0]["ours_fp32"]
    for key in ("litert_gpu", "litert_gpu_f32"):  # measured, or why not (no Vulkan here)
        assert "median_ms" in rows[0][key] or rows[0][key]["error"]
    # --merge: the rows of both files in order, one table, nothing measured again.
    merged = tmp_path / "merged"
    assert bench_compare.main(["--merge", str(out / "results.json"), "--merge", str(out / "results.json"),
                               "--out", str(merged)]) == 0
    lines = (merged / "results.md").read_text().splitlines()
    assert "--merge" in lines[0] and [line for line in lines if line.startswith("| small |")] == \
        [next(line for line in table.splitlines() if line.startswith("| small |"))] * 2
    assert json.loads((merged / "results.json").read_text()) == rows * 2
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        bench_compare.main(["--merge", str(out / "results.md"), "--out", str(merged)])
    assert stop.value.code != 0 and "--merge" in capsys.readouterr().err


def test_bench_compare_skips_the_baselines_named(small_model, tmp_path):
    out = tmp_path / "cmp"
    assert bench_compare.main([str(small_model), "--runs", "2", "--warmup", "1", "--warmup-secs", "0",
                               "--skip", "xnnpack_1", "--skip", "litert_gpu_f32", "--out", str(out)]) == 0
    (result,) = json.loads((out / "results.json").read_text())
    assert "xnnpack_1" not in result and "litert_gpu_f32" not in result and "median_ms" in result["xnnpack_16"]
    lines = (out / "results.md").read_text().splitlines()
    header = [c.strip() for c in lines[2].strip("|").split("|")]
    small = next(x for x in lines if x.startswith("| small |"))
    row = dict(zip(header, [c.strip() for c in small.strip("|").split("|")]))
    assert row["XNNPACK 1t"] == "-" and row["LiteRT GPU f32"] == "-" and row["XNNPACK 16t"] not in ("-", "n/a")
    with pytest.raises(SystemExit):
        bench_compare.main([str(small_model), "--skip", "xnnpack_16", "--out", str(out)])


def test_bench_compare_fastest_times_placement_fastest(small_model, tmp_path):
    out = tmp_path / "cmp"
    assert bench_compare.main([str(small_model), "--runs", "2", "--warmup", "1", "--warmup-secs", "0",
                               "--fastest", "--out", str(out)]) == 0
    lines = (out / "results.md").read_text().splitlines()
    header = [c.strip() for c in lines[2].strip("|").split("|")]
    row = dict(zip(header, [c.strip() for c in next(x for x in lines if x.startswith("| small |")).strip("|").split("|")]))
    assert re.fullmatch(r"\d+\.\d\d", row["ours fastest"]) and re.fullmatch(r"\d+\.\d\d", row["ours fastest / XNNPACK 16t"])
    (fastest,) = [r["ours_fastest"] for r in json.loads((out / "results.json").read_text())]
    assert fastest["placement"] == "fastest" and fastest["precision"] == "fp16_fp32acc"
    assert row["fastest on"] == bench_compare.placed_on(fastest) and row["fastest on"] in ("GPU", "CPU", "GPU+CPU")
    assert all(r["gpu_ms"] is not None for r in fastest["placements"])  # the small model is measured


def test_bench_compare_sustained_times_a_program_per_dispatch(small_model, tmp_path):
    out = tmp_path / "cmp"
    assert bench_compare.main([str(small_model), "--runs", "2", "--warmup", "1", "--warmup-secs", "0",
                               "--sustained", "fp32", "--out", str(out)]) == 0
    lines = (out / "results.md").read_text().splitlines()
    header = [c.strip() for c in lines[2].strip("|").split("|")]
    row = dict(zip(header, [c.strip() for c in next(x for x in lines if x.startswith("| small |")).strip("|").split("|")]))
    assert re.fullmatch(r"\d+\.\d\d", row["ours sustained"])
    (result,) = json.loads((out / "results.json").read_text())
    sustained = result["ours_sustained"]
    assert sustained["precision"] == "fp32" and sustained["programs"] == sustained["dispatches"] > 1
    best = min([result[f"ours_{p}"]["median_ms"] for p in bench_compare.PRECISIONS] + [sustained["median_ms"]])
    assert row["best ours / XNNPACK 16t"] == f"{best / result['xnnpack_16']['median_ms']:.2f}"


def test_relative_error_is_over_the_worst_output():
    reference = [np.array([1.0, -4.0]), np.array([[2.0]])]
    assert bench_compare.relative_error([np.array([1.0, -4.0]), np.array([[2.5]])], reference) == 0.25
    assert bench_compare.relative_error([np.array([1.0, -3.0]), np.array([[2.0]])], reference) == 0.25
    assert bench_compare.relative_error([np.zeros(3), np.array([[2.0]])], reference) == float("inf")


def test_bench_compare_needs_models(capsys):
    with pytest.raises(SystemExit) as stop:
        bench_compare.main(["--runs", "2"])
    assert stop.value.code == 2 and "give models" in capsys.readouterr().err


def test_profile_lists_dispatches(small_model, capsys):
    assert profile_model.main([str(small_model), "--runs", "2", "--precision", "fp32"]) == 0
    text = capsys.readouterr().out
    assert re.search(r"small \[fp32\]: end-to-end median \d+\.\d+ ms", text)
    assert re.search(r"\d+ dispatches: sum of GPU times (n/a|\d+\.\d+ ms), CPU issue loop \d+\.\d+ ms", text)


def test_profile_defaults_to_fp32_and_says_why_a_gpu_time_is_missing(small_model, capsys):
    assert profile_model.main([str(small_model), "--runs", "2"]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert line.startswith("[defaults] small [fp32]: ")  # the precision every other tool defaults to
    gpu_time = line.split("invoke GPU time ")[1]
    assert re.fullmatch(r"\d+\.\d+ ms|n/a \(.*(timer|EXT_disjoint_timer_query).*\)", gpu_time), gpu_time


def test_profile_floor_times_the_loop_altered_and_leaves_it_as_planned(small_model, capsys):
    """--floor's altered loops (no barriers, one workgroup, doubled binds) run, each timed or n/a,
    and the partition then computes what it did before."""
    from gles_delegate import GpuDelegate, Interpreter
    assert profile_model.main([str(small_model), "--runs", "2", "--floor"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "dispatch loop GPU time" in x)
    cells = line.split("(ms): ")[1].split("; ")
    assert [c.rsplit(" ", 1)[0] for c in cells] == ["as planned", "no barriers", "one workgroup each",
                                                   "one workgroup, no barriers", "params bound twice",
                                                   "program switched twice"]
    assert all(re.fullmatch(r"n/a|\d+\.\d{3}", c.rsplit(" ", 1)[1]) for c in cells), cells
    with GpuDelegate() as delegate:
        interpreter = Interpreter(model_path=str(small_model), experimental_delegates=[delegate])
        interpreter.allocate_tensors()
        for detail in interpreter.get_input_details():
            interpreter.set_tensor(detail["index"], np.linspace(-1, 1, np.prod(detail["shape"]),
                                                                dtype=np.float32).reshape(detail["shape"]))
        out = interpreter.get_output_details()[0]["index"]
        interpreter.invoke()
        before, planned = interpreter.get_tensor(out).copy(), delegate.partitions[0].segments
        profile_model.floor_line(delegate.partitions[0], interpreter)
        assert delegate.partitions[0].segments is planned
        interpreter.invoke()
        assert np.array_equal(interpreter.get_tensor(out), before)


def test_profile_paired_runs_b_with_the_setting_and_a_without(small_model, monkeypatch, capsys):
    """--paired: side B's partition is built and invoked with the setting, side A's with the
    defaults, the runs alternate in blocks, and the constant is the default again afterwards."""
    from gles_delegate.gpu import runtime
    seen = []  # (partition, DIRECT_IO_MAX_BYTES at its invoke, whether its I/O is direct)
    real_run = runtime.GpuPartition.run

    def spy(partition, storage, capture=None):
        seen.append((partition, runtime.DIRECT_IO_MAX_BYTES, partition.io.direct))
        return real_run(partition, storage, capture)
    monkeypatch.setattr(runtime.GpuPartition, "run", spy)
    default = runtime.DIRECT_IO_MAX_BYTES
    assert profile_model.main([str(small_model), "--runs", "8", "--warmup-secs", "0", "--paired",
                               "--set", "gpu.runtime.DIRECT_IO_MAX_BYTES=0"]) == 0
    line = capsys.readouterr().out.strip()
    assert re.fullmatch(r"small \[fp32\] A \(defaults\) \d+\.\d{3} ms, B \(gpu.runtime.DIRECT_IO_MAX_BYTES=0\) "
                        r"\d+\.\d{3} ms: B / A \d+\.\d{3} \(median of 1 blocks of 19 runs; B faster in [01]\)", line), line
    partitions = list(dict.fromkeys(p for p, _, _ in seen))
    assert len(partitions) == 2 and runtime.DIRECT_IO_MAX_BYTES == default
    a, b = partitions
    assert {(value, direct) for p, value, direct in seen if p is a} == {(default, True)}
    assert {(value, direct) for p, value, direct in seen if p is b} == {(0, False)}  # built with it too
    order = [p for p, _, _ in seen][-40:]  # the timed block: 20 of A, then 20 of B
    assert order == [a] * 20 + [b] * 20

def test_top1_agreement_table(small_model, capsys):
    from gles_delegate.tools import top1_agreement
    assert top1_agreement.main([str(small_model), "--seeds", "3"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| small |"))
    assert "| fp32 | 3/3 |" in row  # ours and LiteRT agree on this model's first output


def test_bench_init_warm_start_hits_the_cache(small_model, tmp_path, capsys):
    """Fresh processes (cold, driver cache only, two warm): the warm ones load the entry the cold
    one stored, all give the same output bytes, and every column is a number."""
    from gles_delegate.tools import bench_init
    out = tmp_path / "init.md"
    assert bench_init.main(["--models", str(small_model), "--repeat", "1", "--out", str(out), "--profile", "5",
                            "--phases", "--warm-starts", "2"]) == 0
    text = out.read_text()
    assert "median of 1 (the warm columns: of 2 warm starts, 2 a repetition)" in text
    row = next(line for line in text.splitlines() if line.startswith("| small |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert len(cells) == 19 and cells[-1] == "yes"  # same outputs, and the warm start hit the cache
    assert all(re.fullmatch(r"-?\d+(\.\d)?%?", c) for c in cells[1:-1]), cells
    profile = text.split("A warm start of small under cProfile", 1)[1].split("```")[1].strip().splitlines()
    assert profile[0].split()[:2] == ["ncalls", "tottime"] and len(profile) == 6  # --profile 5: five functions
    # --phases: every phase of a warm start ran (a column appears once its function was called),
    # each a number
    header, phases = [line for line in text.split("Where a warm start goes", 1)[1].splitlines()
                      if line.startswith("| ")][:2]
    timed = dict(zip([c.strip() for c in header.strip("|").split("|")],
                     [c.strip() for c in phases.strip("|").split("|")]))
    assert timed["model"] == "small" and all(re.fullmatch(r"\d+\.\d", v) for k, v in timed.items() if k != "model")
    assert {"read + parse the model", "partition()", "read entry", "unpack header", "buffer arena",
            "programs"} <= set(timed)
    assert float(timed["partition()"]) > 0, timed


def test_bench_init_against_another_tree(small_model, tmp_path):
    """--against: every repetition also runs the other tree's worker on the other tree's package
    (a copy of this tree here: the worker reports where it imported gles_delegate from), and the
    A/B table gives both sides, the ratio and whether their outputs agree."""
    import shutil
    from gles_delegate.tools import bench_init
    root = Path(__file__).resolve().parents[2]
    other = tmp_path / "other tree"
    shutil.copytree(root / "gles_delegate", other / "gles_delegate", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(root / "tools", other / "tools", ignore=shutil.ignore_patterns("__pycache__"))
    if (root / "kernels_glsl").is_dir():
        shutil.copytree(root / "kernels_glsl", other / "kernels_glsl")
    out = tmp_path / "ab.md"
    assert bench_init.main(["--models", str(small_model), "--repeat", "2", "--against", str(other),
                            "--out", str(out)]) == 0
    text = out.read_text().split("A/B (`--against`)", 1)[1]
    assert f"the other tree's ({other})" in text
    row = next(line for line in text.splitlines() if line.startswith("| small |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert re.fullmatch(r"\d+\.\d+", cells[2]) and cells[-1] == "yes", cells
    assert all(re.fullmatch(r"\d+\.\d / \d+\.\d", c) for c in cells[1:2] + cells[3:6]), cells
    with pytest.raises(SystemExit):
        bench_init.main(["--models", str(small_model), "--against", str(tmp_path)])  # not a source tree


def test_profile_ab_runs_each_setting_and_restores_it(small_model, capsys):
    import pytest
    from gles_delegate.gpu import runtime
    before = runtime.FLUSH_FIRST
    assert profile_model.main([str(small_model), "--runs", "2", "--set", "gpu.runtime.FLUSH_FIRST=0"]) == 0
    text = capsys.readouterr().out
    assert "[defaults] small" in text and "[gpu.runtime.FLUSH_FIRST=0] small" in text
    assert runtime.FLUSH_FIRST == before
    with pytest.raises(SystemExit):
        profile_model.main([str(small_model), "--set", "gpu.runtime.NO_SUCH_CONSTANT=1"])


def test_profile_set_takes_a_tuple_for_a_tuple_constant():
    """A workgroup shape is set as a Python tuple of its length; anything else is refused."""
    import argparse
    import pytest
    from gles_delegate.gpu.kernels import reduce
    _, module, attribute, value = common.tuning_setting("gpu.kernels.reduce.PARALLEL_LANES=(64, 8)")
    assert (module, attribute, value) == (reduce, "PARALLEL_LANES", (64, 8))
    for bad in ("64", "(64, 8, 1)", "(64,"):
        with pytest.raises(argparse.ArgumentTypeError, match="is a tuple of 2"):
            common.tuning_setting(f"gpu.kernels.reduce.PARALLEL_LANES={bad}")


def test_bench_init_runs_from_an_installed_copy(small_model, tmp_path):
    """The layout a wheel installs (tools/ inside the package, no source tree around it): the
    console script starts its worker processes from there too."""
    import os
    import shutil
    import subprocess
    import sys
    root = Path(__file__).resolve().parents[2]
    site = tmp_path / "site"
    shutil.copytree(root / "gles_delegate", site / "gles_delegate")
    for folder in ("tools", "kernels_glsl"):
        shutil.copytree(root / folder, site / "gles_delegate" / folder)
    out = tmp_path / "init.md"
    env = {**os.environ, "PYTHONPATH": str(site)}
    done = subprocess.run([sys.executable, "-c", "import sys; from gles_delegate.tools.bench_init import main; "
                           "sys.exit(main(sys.argv[1:]))", "--models", str(small_model), "--repeat", "1",
                           "--out", str(out)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    row = next(line for line in out.read_text().splitlines() if line.startswith("| small |"))
    assert row.rstrip().endswith("| yes |")


def test_bench_init_merges_platform_tables(tmp_path):
    """--merge: one row per model, each platform's start-up columns from its own table()."""
    import argparse
    from gles_delegate.tools import bench_init

    def results(name, cold_ms, warm_ms, renderer):
        def run(init_ms, hit):
            return {"partition_ms": init_ms - 5, "init_ms": init_ms, "store_ms": 0, "invoke_ms": 3, "steady_ms": 1,
                    "outputs": "x", "cache_hit": hit, "renderer": renderer, "gl_version": "GL"}
        return {name: {"cold": [run(cold_ms, False)], "driver": [run(cold_ms / 2, False)],
                       "warm": [run(warm_ms, True)], "entry_bytes": [2e6]}}
    args = argparse.Namespace(precision="fp32", repeat=1)
    paths = []
    for label, rows in (("gpu", {**results("a", 498, 48, "GPU"), **results("b", 998, 98, "GPU")}),
                        ("soft", results("a", 2998, 98, "soft"))):
        paths.append(tmp_path / f"{label}.md")
        paths[-1].write_text(bench_init.table(rows, f"gles-bench-init --label {label}", args) + "\n")
    out = tmp_path / "merged.md"
    assert bench_init.main(["--merge", f"gpu={paths[0]}", f"soft={paths[1]}", "--out", str(out)]) == 0
    lines = out.read_text().splitlines()
    assert lines[0].startswith("| model | gpu start-up cold | gpu start-up warm | gpu start-up warm/cold |")
    assert lines[2] == "| a | 500 | 50 | 10.0% | 9.6% | 8.7% | yes | 3000 | 100 | 3.3% | 3.3% | 3.1% | yes |"
    assert lines[3] == "| b | 1000 | 100 | 10.0% | 9.8% | 9.4% | yes | - | - | - | - | - | - |"
    assert "- gpu: `gles-bench-init --label gpu` (GPU, GL)" in lines


def test_profile_tunes_workgroups_when_asked(small_model, capsys, monkeypatch):
    # The GL timer replaced by a cost that prefers small workgroups (llvmpipe's clock does not
    # time compute work): the delegate tunes, and the header says so.
    monkeypatch.setattr(workgroup_tuner._Session, "time",
                        lambda session, step, source, groups, repeats=1: 1e6 * (1 + source.count("WG_X 1\n")))
    assert profile_model.main([str(small_model), "--runs", "2", "--tune-workgroups"]) == 0
    assert "small [fp32, workgroups tuned]: end-to-end median" in capsys.readouterr().out
    assert profile_model.main([str(small_model), "--runs", "2"]) == 0
    assert "workgroups tuned" not in capsys.readouterr().out
