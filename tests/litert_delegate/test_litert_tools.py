"""gles-benchmark, gles-parity and the demo with --runtime litert: LiteRT's Interpreter with our
delegate, beside gles_delegate's own, in one process."""
import json

import pytest

from gles_delegate.tools import benchmark_model, demo, parity_report
from tests.litert_delegate.models import add_model

pytest.importorskip("ai_edge_litert.interpreter")


def test_benchmark_side_by_side(tmp_path, capsys):
    model, out = tmp_path / "add.tflite", tmp_path / "bench.json"
    model.write_bytes(add_model())
    assert benchmark_model.main(["--graph", str(model), "--runtime", "litert", "--num_runs", "2", "--min_secs", "0",
                                 "--warmup_min_secs", "0", "--json", str(out)]) == 0
    run = json.loads(out.read_text())["compare"]["litert_gles_delegate"]
    assert run["status"] == "ok" and run["inference"]["count"] >= 2 and run["delegation"]["gpu_nodes"] == 1
    assert run["max_relative_error_vs_gles_delegate"] <= 1e-6
    pair = run["interleaved"]  # both paths timed in alternation on the one delegate
    assert pair["count"] == 2 and pair["ratio"] == pytest.approx(pair["litert_median_ms"] / pair["gles_median_ms"])
    assert "LiteRT + gles_delegate" in capsys.readouterr().out


def test_parity_runtime_litert(tmp_path):
    model = tmp_path / "add.tflite"
    model.write_bytes(add_model())
    parity_report.main([str(model), "--runtime", "litert", "--out", str(tmp_path / "report"), "--table", "none"])
    report = json.loads((tmp_path / "report" / "parity.json").read_text())["litert_delegate"]
    assert report["delegation"]["gpu_nodes"] == 1 and [r["relative"] for r in report["outputs"]] == [0.0]


def test_demo_runtime_litert(tmp_path, capsys):
    model = tmp_path / "add.tflite"
    model.write_bytes(add_model())
    assert demo.main(["--model", str(model), "--runtime", "litert", "--runs", "1"]) in (0, None)
    assert "1 nodes on the GPU" in capsys.readouterr().out
