"""gles-benchmark, gles-parity and the demo with --runtime litert: LiteRT's Interpreter with our
delegate, beside gles_delegate's own, in one process."""
import json
from argparse import Namespace

import numpy as np
import pytest

from gles_delegate import GpuDelegate, Interpreter
from gles_delegate.tools import benchmark_model, demo, parity_report
from tests.litert_delegate.models import add_model, segmentation_head_model
from tests.litert_delegate.test_litert_delegate import run

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


def test_empty_dispatches_keeps_the_io_path_and_runs_no_shader(tmp_path, capsys):
    """--empty_dispatches: an invoke still moves the inputs in and the outputs out, but no shader
    runs: a new input brings back the outputs the last real invoke left on the GPU."""
    data = segmentation_head_model(33)
    images = [np.random.default_rng(seed).uniform(-1, 1, (1, 33, 33, 3)).astype(np.float32) for seed in (0, 1)]
    with GpuDelegate() as delegate:
        interp = Interpreter(model_content=data, experimental_delegates=[delegate])
        interp.allocate_tensors()
        first = run(interp, images[0])
        assert not np.array_equal(run(interp, images[1]), first)
        run(interp, images[0])
        benchmark_model.empty_dispatches(delegate, Namespace(empty_dispatches=True))
        np.testing.assert_array_equal(run(interp, images[1]), first)
    model, out = tmp_path / "head.tflite", tmp_path / "bench.json"
    model.write_bytes(data)
    assert benchmark_model.main(["--graph", str(model), "--runtime", "litert", "--empty_dispatches", "--num_runs", "2",
                                 "--min_secs", "0", "--warmup_min_secs", "0", "--json", str(out)]) == 0
    assert "no GPU dispatch runs" in capsys.readouterr().out
    result = json.loads(out.read_text())
    assert result["params"]["empty_dispatches"]
    assert result["compare"]["litert_gles_delegate"]["interleaved"]["count"] == 2
