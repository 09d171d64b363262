"""The command-line tools through their console entry points, on a model built with our writer
and on MediaPipe's selfie_segmentation (run counts kept small: this is not a benchmark)."""
import copy
import io
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from importlib.metadata import entry_points
from pathlib import Path

import numpy as np
import pytest

from gles_delegate.gpu import kernels
from gles_delegate.tools import benchmark_model, common, inspect_model, parity_report

SCRIPTS = {"gles-benchmark": "gles_delegate.tools.benchmark_model:main",
           "gles-inspect": "gles_delegate.tools.inspect_model:main",
           "gles-parity": "gles_delegate.tools.parity_report:main"}
QUICK_RUNS = ["--num_runs=3", "--min_secs=0", "--warmup_runs=1", "--warmup_min_secs=0"]


def run_script(name, *args, cwd=None):
    """Run a console script as a user would: the installed executable when there is one,
    else its declared entry point through this interpreter."""
    declared = {ep.name: ep.value for ep in entry_points(group="console_scripts")}
    assert declared.get(name) == SCRIPTS[name], f"{name} is not declared in setup.cfg (pip install -e .)"
    script = Path(sys.executable).parent / name
    if script.exists():
        command = [str(script), *map(str, args)]
    else:
        module, function = SCRIPTS[name].split(":")
        command = [sys.executable, "-c", f"import sys; from {module} import {function}; sys.exit({function}())",
                   *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, timeout=300)


# -- Model Explorer node data: the documented shape ---------------------------------------------
# model_explorer/node_data_builder.py (ai-edge-model-explorer): GraphNodeData holds `results`
# {node key (node id or an output tensor name): NodeDataResult {value: number, bgColor?,
# textColor?}}, and optionally thresholds [ThresholdItem {value, bgColor, textColor?}],
# gradient [GradientItem {stop in [0, 1], bgColor?, textColor?}] and display flags.
GRAPH_NODE_DATA_KEYS = {"results", "thresholds", "gradient", "hideInAggregatedStatsTable",
                        "hideInChildrenStatsTable", "hideAggregatedStats", "showExpandedSummaryOnGroupNode",
                        "showLabelCountColumnsInChildrenStatsTable"}


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def validate_node_data(data):
    """Raise AssertionError unless `data` is Model Explorer GraphNodeData."""
    assert isinstance(data, dict) and isinstance(data.get("results"), dict), "needs a results object"
    assert set(data) <= GRAPH_NODE_DATA_KEYS, f"unknown keys {set(data) - GRAPH_NODE_DATA_KEYS}"
    for key, result in data["results"].items():
        assert isinstance(key, str) and key, key
        assert isinstance(result, dict) and set(result) <= {"value", "bgColor", "textColor"}, result
        assert _number(result["value"]) or isinstance(result["value"], str), result
        assert all(isinstance(result[c], str) for c in ("bgColor", "textColor") if c in result)
    for item in data.get("thresholds", []):
        assert set(item) <= {"value", "bgColor", "textColor"} and _number(item["value"]), item
        assert isinstance(item["bgColor"], str), item
    values = [item["value"] for item in data.get("thresholds", [])]
    assert values == sorted(values), "thresholds are upper bounds in increasing order"
    for item in data.get("gradient", []):
        assert set(item) <= {"stop", "bgColor", "textColor"} and 0 <= item["stop"] <= 1, item


def load_strict_json(path):
    """json.load that refuses NaN / Infinity (not JSON, and Model Explorer's parser rejects them)."""
    def refuse(constant):
        raise ValueError(f"{path}: {constant} is not JSON")
    return json.loads(Path(path).read_text(), parse_constant=refuse)


def test_node_data_validator_rejects_what_model_explorer_would():
    validate_node_data({"results": {"t": {"value": 1.0}}, "thresholds": [{"value": 1, "bgColor": "red"}]})
    for bad in ({"result": {}}, {"results": {"t": {"val": 1}}}, {"results": {"t": {"value": float("nan")}}},
                {"results": {}, "thresholds": [{"value": 2, "bgColor": "r"}, {"value": 1, "bgColor": "g"}]},
                {"results": {}, "colours": []}):
        with pytest.raises(AssertionError):
            validate_node_data(bad)


# -- gles-benchmark -----------------------------------------------------------------------------
def check_benchmark_json(data):
    assert set(benchmark_model.JSON_KEYS) <= set(data)
    for phase in ("warmup", "inference"):
        assert set(data[phase]) == set(benchmark_model.STATS_KEYS)
    assert set(data["memory"]) == set(benchmark_model.MEMORY_KEYS)
    assert data["inference"]["count"] >= data["params"]["num_runs"]
    s = data["inference"]
    assert s["min_ms"] <= s["median_ms"] <= s["max_ms"] and s["min_ms"] <= s["p90_ms"] <= s["max_ms"]
    assert data["memory"]["host_peak_rss_mb"] > 0


def test_benchmark_cli_small_model(small_model, tmp_path):
    out = tmp_path / "bench.json"
    result = run_script("gles-benchmark", f"--graph={small_model}", *QUICK_RUNS, "--precision=fp16_fp32acc",
                        f"--json={out}")
    assert result.returncode == 0, result.stderr
    assert "Inference timings in ms" in result.stdout and "Initialized session" in result.stdout
    data = json.loads(out.read_text())
    check_benchmark_json(data)
    assert data["runtime"] == "gles_delegate GPU"
    assert data["delegation"]["precision"] == "fp16_fp32acc"
    assert (data["delegation"]["gpu_nodes"], data["delegation"]["cpu_nodes"]) == (4, 1)
    assert data["delegation"]["ops"]["L2_POOL_2D"] == {"gpu": 0, "cpu": 1}
    assert data["memory"]["gpu_intermediate_bytes"] >= data["memory"]["gpu_intermediate_lower_bound_bytes"] > 0
    assert "compare" not in data


def test_benchmark_reference_cpu_path_says_num_threads_is_ignored(small_model, tmp_path, capsys):
    out = tmp_path / "cpu.json"
    assert benchmark_model.main([f"--graph={small_model}", "--use_gpu=false", "--num_threads=4",
                                 "--cpu_backend=reference", *QUICK_RUNS, f"--json={out}"]) == 0
    assert "is ignored by the numpy reference kernels" in capsys.readouterr().out
    data = json.loads(out.read_text())
    check_benchmark_json(data)
    assert data["runtime"] == "gles_delegate CPU (numpy reference kernels)"
    assert data["memory"]["gpu_intermediate_bytes"] == 0


def test_benchmark_cpu_path_runs_on_litert_by_default(small_model, tmp_path, capsys):
    out = tmp_path / "cpu.json"
    assert benchmark_model.main([f"--graph={small_model}", "--use_gpu=false", "--num_threads=2", *QUICK_RUNS,
                                 f"--json={out}"]) == 0
    text = capsys.readouterr().out
    assert "CPU nodes: 5 on LiteRT's kernels in 1 sub-model(s), 0 on the numpy reference kernels" in text
    assert "is ignored" not in text
    assert json.loads(out.read_text())["runtime"] == "gles_delegate CPU (LiteRT's kernels)"


def test_benchmark_selfie_against_litert(selfie, tmp_path, capsys):
    out = tmp_path / "selfie.json"
    assert benchmark_model.main([f"--graph={selfie}", "--num_runs=2", "--min_secs=0", "--warmup_min_secs=0",
                                 "--compare=litert", f"--json={out}"]) == 0
    text = capsys.readouterr().out
    assert "LiteRT XNNPACK" in text and "LiteRT GPU accelerator" in text
    data = json.loads(out.read_text())
    check_benchmark_json(data)
    xnnpack, gpu = data["compare"]["litert_xnnpack"], data["compare"]["litert_gpu"]
    assert xnnpack["status"] == "ok" and xnnpack["inference"]["count"] >= 2
    assert xnnpack["max_relative_error_vs_gles_delegate"] < 1e-4
    # Without Vulkan / OpenCL (this machine) LiteRT's GPU accelerator is reported, not fatal.
    assert gpu["status"] == "ok" or gpu["status"].startswith(("unavailable: ", "failed: ")), gpu
    assert data["delegation"]["cpu_nodes"] == 0 and data["delegation"]["partitions"] == 1


def test_progress_bar_appears_only_on_long_phases():
    quiet = io.StringIO()
    bar = common.Progress("x", 4, after_s=60, stream=quiet)
    for k in range(1, 5):
        bar.update(k)
    bar.close()
    assert quiet.getvalue() == ""
    log = io.StringIO()
    bar = common.Progress("warm-up", 4, after_s=0, stream=log)
    for k in range(1, 5):
        bar.update(k)
    bar.close()
    lines = log.getvalue().splitlines()
    assert lines[-1].startswith("warm-up [") and "4/4" in lines[-1]


def test_litert_failure_reason_names_the_cause():
    native = ("Warning: Couldn't load Vulkan: libvulkan.so.1: cannot open shared object file\n"
              "ERROR: [delegate_webgpu.cc:359] Failed to initialize WebGPU environment: INTERNAL: No adapters found\n")
    reason = common.failure_reason(RuntimeError("ERROR: [./litert/cc/litert_compiled_model.h:1961]"), native)
    assert reason.startswith("Failed to initialize WebGPU environment: INTERNAL: No adapters found")
    assert "libvulkan" in reason


def fails_like_litert(*args, **kwargs):
    """What LiteRT's CompiledModel does without a GPU: the reason on native stderr, an exception
    naming a source line."""
    os.write(2, b"Warning: Couldn't load Vulkan: libvulkan.so.1: cannot open shared object file\n"
                b"ERROR: [delegate_webgpu.cc:359] Failed to initialize WebGPU environment: INTERNAL: No adapters found\n")
    raise RuntimeError("ERROR: [./litert/cc/litert_compiled_model.h:1961]")


def test_native_call_raises_what_native_code_logged():
    with pytest.raises(RuntimeError) as info:
        common.native_call(fails_like_litert)
    assert str(info.value) == ("Failed to initialize WebGPU environment: INTERNAL: No adapters found "
                               "(Couldn't load Vulkan: libvulkan.so.1: cannot open shared object file)")


def test_benchmark_and_bench_compare_say_why_litert_gpu_cannot_run(small_model, monkeypatch):
    from gles_delegate.tools import bench_compare
    compiled_model = pytest.importorskip("ai_edge_litert.compiled_model")
    monkeypatch.setattr(compiled_model.CompiledModel, "from_file", staticmethod(fails_like_litert))
    reason = "Failed to initialize WebGPU environment: INTERNAL: No adapters found (Couldn't load Vulkan: "
    assert benchmark_model.bench_litert_gpu(small_model, [], None)["status"].startswith(f"unavailable: {reason}")
    assert bench_compare.guarded(bench_compare.litert_gpu, small_model, [], None)["error"].startswith(reason)


# -- gles-inspect -------------------------------------------------------------------------------
def test_inspect_cli_small_model(small_model, tmp_path):
    dot = tmp_path / "small.dot"
    result = run_script("gles-inspect", small_model, "--nodes", "--dot", dot, "--svg")
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert "4 on the GPU in 1 partition(s), 1 on the CPU" in text
    assert "#4 (L2_POOL_2D)" in text and "no GPU kernel for L2_POOL_2D" in text
    assert "== Rewrite rules applied ==" in text
    assert "kernels (template x dispatches): " in text and "convert_in x2" in text
    assert "memory plan: arena" in text and "lower bound" in text and "naive" in text
    graph = dot.read_text()
    assert graph.startswith("digraph model {") and graph.rstrip().endswith("}")
    assert graph.count("{") == graph.count("}")
    assert 'n4 [shape=box, fillcolor="#ffcc80"' in graph  # L2_POOL_2D: CPU colour
    assert 'n0 [shape=box, fillcolor="#a5d6a7"' in graph  # ADD: GPU partition 0
    if shutil.which("dot"):
        assert "<svg" in (tmp_path / "small.dot.svg").read_text()
    else:
        assert "not on PATH" in text


def test_inspect_prints_rewrite_log_when_present(small_model, capsys):
    assert inspect_model.main([str(small_model)]) == 0
    text = capsys.readouterr().out
    section = text.split("== Rewrite rules applied ==")[1].split("==")[0]
    assert "#3 (RELU)" in section and "APPLIED" in section


def test_inspect_selfie(selfie, capsys):
    assert inspect_model.main([str(selfie), "--nodes"]) == 0
    text = capsys.readouterr().out
    assert "on the CPU ==" in text and "every node runs on the GPU" in text
    assert "Convolution2DTransposeBias" in text and "kernels (template x dispatches): " in text
    assert re.search(r"#244 \(Convolution2DTransposeBias\) +GPU p0 +1 ", text)


# -- gles-parity --------------------------------------------------------------------------------
def check_parity_outputs(out, model_tensor_names):
    report = load_strict_json(out / "parity.json")
    html = (out / "report.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and "data:image/png;base64," in html
    assert "<script" not in html and "http" not in html.split("<body>")[1]  # self-contained
    node_data = load_strict_json(out / "model_explorer_gpu_vs_reference.json")
    validate_node_data(node_data)
    assert set(node_data["results"]) <= model_tensor_names and node_data["results"]
    if report["summary"]["litert_compared"]:
        validate_node_data(load_strict_json(out / "model_explorer_reference_vs_litert.json"))
    for row in report["rows"]:
        if row["status"] == "fused away":
            assert row["gpu_vs_reference"] is None
    return report


def tensor_names(path):
    from gles_delegate.tflite import read_model
    return {t.name for t in read_model(str(path)).subgraphs[0].tensors}


def test_parity_cli_small_model_passes(small_model, tmp_path):
    result = run_script("gles-parity", small_model, "--out", tmp_path / "report", "--seed", "3")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "every compared op is within tolerance" in result.stdout
    report = check_parity_outputs(tmp_path / "report", tensor_names(small_model))
    assert report["litert"] == "ok" and report["seed"] == 3
    assert "scaled" in report["summary"]["fused_away"]  # the MUL's output: RELU fused into it
    assert "sum" not in report["summary"]["fused_away"]  # a graph output
    by_tensor = {r["tensor"]: r for r in report["rows"]}
    assert by_tensor["pooled"]["where"] == "CPU" and by_tensor["sum"]["where"] == "GPU"
    assert by_tensor["sum"]["gpu_vs_reference"]["within"] and by_tensor["sum"]["reference_vs_litert"]["within"]


def test_parity_flags_a_broken_kernel(small_model, tmp_path, monkeypatch, capsys):
    def add_computing_a_minus_b(node, env):
        as_sub = copy.copy(node)
        as_sub.op = "SUB"
        return kernels.BUILD["SUB"](as_sub, env)
    monkeypatch.setitem(kernels.BUILD, "ADD", add_computing_a_minus_b)
    out = tmp_path / "broken"
    assert parity_report.main([str(small_model), "--out", str(out), "--table", "over"]) == 1
    text = capsys.readouterr().out
    assert "first op over tolerance: #0 (ADD)" in text
    report = check_parity_outputs(out, tensor_names(small_model))
    first = report["summary"]["first_over_tolerance"]
    assert (first["node"], first["op"], first["tensor"]) == ("#0 (ADD)", "ADD", "sum")
    # Only the ADD's own kernel is wrong; LOGISTIC, MUL + RELU and L2_POOL_2D inherit its error.
    assert [k["node"] for k in report["summary"]["kernels_over_tolerance"]] == ["#0 (ADD)"]
    over = [r["node"] for r in report["rows"] if r["gpu_vs_reference"] and not r["gpu_vs_reference"]["within"]]
    assert over[0] == "#0 (ADD)" and len(over) >= 3
    assert report["summary"]["litert_over_tolerance"] == 0  # the reference still matches LiteRT
    node_data = load_strict_json(out / "model_explorer_gpu_vs_reference.json")
    assert node_data["results"]["sum"]["value"] > node_data["thresholds"][0]["value"]
    assert node_data["results"]["scaled_relu"]["value"] > node_data["thresholds"][0]["value"]  # inherited


def test_parity_selfie(selfie, tmp_path, capsys):
    out = tmp_path / "selfie"
    assert parity_report.main([str(selfie), "--out", str(out), "--table", "none"]) == 0
    report = check_parity_outputs(out, tensor_names(selfie))
    s = report["summary"]
    assert report["litert"] == "ok" and s["litert_compared"] > 100 and s["litert_over_tolerance"] == 0
    assert s["compared"] > 50 and s["over_tolerance"] == 0 and s["first_over_tolerance"] is None
    # Every node output is either compared or named as fused away by a rewrite rule.
    assert s["compared"] + len(s["fused_away"]) >= 136 and len(s["fused_away"]) > 20
    assert s["folded"] > 0  # the fp16 weights' DEQUANTIZE nodes
    assert "activation_10" in load_strict_json(out / "model_explorer_gpu_vs_reference.json")["results"]
    assert "every compared op is within tolerance" in capsys.readouterr().out


def synthetic_parity_report():
    """A parity report of four rows (no model run): two tensors constant folding made constants,
    an ADD within tolerance and a MUL over it."""
    def metrics(rel):
        return {"max_abs": rel, "max_rel": rel, "rmse": rel, "cosine": 1.0, "worst_index": [0, 1],
                "tolerance": 1e-4, "within": rel <= 1e-4}

    def row(position, op, status, rel=None):
        m = None if rel is None else metrics(rel)
        return {"position": position, "node_index": position, "node": f"#{position} ({op})", "op": op,
                "tensor_index": 10 + position, "tensor": f"t{position}", "shape": [1, 8], "dtype": "float32",
                "where": "GPU" if m else "-", "partition": 0 if m else None, "status": status,
                "gpu_vs_reference": m, "local": m, "reference_vs_litert": m}
    rows = [row(0, "DEQUANTIZE", parity_report.FOLDED), row(1, "DEQUANTIZE", parity_report.FOLDED),
            row(2, "ADD", parity_report.COMPARED, 8.1e-6), row(3, "MUL", parity_report.COMPARED, 8.1e-2)]
    return {"model": "m.tflite", "renderer": "GPU", "gl_version": "GL", "precision": "fp32", "tolerance": 1e-4,
            "reference_tolerance": 1e-4, "seed": 0, "litert": "ok", "gles_delegate_version": "0", "rewrites": [],
            "summary": parity_report.summarize(rows), "rows": rows}


def test_parity_judges_against_twice_the_spread_of_litert_kernel_sets():
    reference = np.array([1.0, -0.5], np.float32)
    value = reference + np.array([3e-4, 0], np.float32)
    assert not parity_report.compare(value, reference, 1e-4)["within"]
    metrics = parity_report.compare(value, reference, 1e-4, spread=2e-4)
    assert metrics["within"] and metrics["by_spread"] and metrics["spread_rel"] == pytest.approx(2e-4)
    assert not parity_report.compare(value, reference, 1e-4, spread=1e-4)["within"]  # 3e-4 > 2 x 1e-4
    assert not parity_report.compare(reference, reference, 1e-4, spread=1e-3)["by_spread"]  # within anyway


def cancelling_model(k=2048, delta=1e-5):
    """x [1, k] -> CONCATENATION [x, x] -> FULLY_CONNECTED whose rows are [w, -w (1 + delta)] with
    |w| ~ 1e3: each output is a small difference of two large sums, which kernels that sum in
    another order round differently (CONCATENATION: exact in every kernel set)."""
    from gles_delegate.tflite import ModelBuilder
    w = np.random.default_rng(0).uniform(1e3, 2e3, k).astype(np.float32)
    b = ModelBuilder()
    x = b.input("x", (1, k))
    weights = b.const("w", np.tile(np.concatenate([w, -w * (1 + delta)]), (4, 1)).astype(np.float32))
    both, y = b.tensor("both", (1, 2 * k)), b.tensor("y", (1, 4))
    b.op("CONCATENATION", [x, x], [both], axis=1, fused_activation_function=0)
    b.op("FULLY_CONNECTED", [both, weights, -1], [y], fused_activation_function=0, weights_format=0,
         keep_num_dims=False, asymmetric_quantize_inputs=False)
    b.output(y)
    return b.build()


def test_litert_spread_is_the_disagreement_of_its_kernel_sets(tmp_path):
    path = tmp_path / "cancelling.tflite"
    path.write_bytes(cancelling_model())
    inputs = common.seeded_inputs([{"index": 0, "dtype": np.float32, "shape": (1, 2048)}])
    litert, why_not = parity_report.run_litert(path, inputs)
    assert why_not is None
    spread = parity_report.litert_spread(path, inputs, litert)
    index = {d["name"]: d["index"] for d in litert.get_tensor_details()}
    largest = np.abs(litert.get_tensor(index["y"])).max()
    assert spread[index["y"]] > 1e-4 * largest  # the kernel sets round the cancelling sums differently
    assert spread[index["both"]] == 0.0  # and concatenate alike


def test_parity_pose_landmark_full_is_within_litert_spread(mediapipe_models, tmp_path, capsys):
    """LiteRT's builtin and reference kernels disagree on pose_landmark_full's last layers by more
    than the fp32 tolerance (2.3e-3 relative at seed 0): the GPU and the reference are judged
    against that spread, and the report says so."""
    out = tmp_path / "pose"
    assert parity_report.main([str(mediapipe_models["pose_landmark_full"]), "--out", str(out), "--table", "none"]) == 0
    s = load_strict_json(out / "parity.json")["summary"]
    assert s["over_tolerance"] == 0 and s["litert_over_tolerance"] == 0 and s["within_by_spread"] > 0
    assert s["largest_litert_spread"]["spread_rel"] > 1e-4
    assert "LiteRT's own kernel sets disagree" in capsys.readouterr().out


def test_parity_html_table_reads_well(tmp_path):
    parity_report.write_html(synthetic_parity_report(), tmp_path / "report.html")
    text = (tmp_path / "report.html").read_text()
    style = text.split("<style>")[1].split("</style>")[0]
    assert re.search(r"(^|[\s,])td[^{]*\{[^}]*white-space: nowrap", style)  # "8.1e-02" never breaks at its "-"
    table = text.split("<table>")[1].split("</table>")[0]
    headers = re.findall(r"<th>(.*?)</th>", table)
    assert len(set(headers)) == len(headers) and headers[-1] == "ref vs LiteRT max abs"
    rows = re.findall(r"<tr[^>]*>.*?</tr>", table, re.S)[1:]
    assert len(rows) == 3 and "DEQUANTIZE" not in "".join(rows[1:])  # the folded ones: one summary row
    assert "2 tensors folded into constants at load (DEQUANTIZE x2)" in rows[0]
    target = re.search(r'First op over tolerance: <a href="#([\w-]+)">', text).group(1)
    assert [r for r in rows if f'id="{target}"' in r] == [r for r in rows if "#3 (MUL)" in r] != []


def test_parity_plot_legend_covers_no_point():
    fig = parity_report.plot_figure(synthetic_parity_report())
    fig.canvas.draw()
    ax = fig.axes[0]
    legend, plot_area = ax.get_legend().get_window_extent(), ax.get_window_extent()
    assert not legend.overlaps(plot_area)
    assert fig.bbox.contains(legend.x1 - 1, legend.y0 + 1)  # and is not cut off


def test_parity_handles_a_model_litert_cannot_run(litert_refused_model, tmp_path, capsys):
    assert parity_report.main([str(litert_refused_model), "--out", str(tmp_path / "r"), "--table", "none"]) == 0
    report = load_strict_json(tmp_path / "r" / "parity.json")
    assert report["litert"].startswith("LiteRT cannot run this model")
    assert report["summary"]["compared"] == 1 and report["summary"]["litert_compared"] == 0
    assert not (tmp_path / "r" / "model_explorer_reference_vs_litert.json").exists()


def test_warm_up_runs_for_its_count_and_at_least_its_seconds():
    calls = []
    common.warm_up(lambda: calls.append(1), 3, 0)
    assert len(calls) == 3
    start = time.perf_counter()
    common.warm_up(lambda: time.sleep(0.005), 1, 0.05)  # a GPU's clocks rise only under load
    assert time.perf_counter() - start >= 0.05
