"""Tools on a model LiteRT cannot load (an op it lacks, as MediaPipe's custom ops in models
gles-fetch-models fetches): each says so in one line and goes on with what it can do."""
import json

import pytest

from gles_delegate.tools import bench_invoke, benchmark_model, demo, parity_report, top1_agreement


def _litert_line(out):
    """The one line of `out` saying LiteRT cannot run the model (and there is exactly one)."""
    lines = [line for line in out.splitlines() if "LiteRT cannot run this model: " in line]
    assert len(lines) == 1, out
    assert "version" in lines[0]  # why: the op version LiteRT does not know
    return lines[0]


def test_demo_compares_with_the_reference_only(litert_refused_model, capsys):
    assert demo.main(["--model", str(litert_refused_model), "--runs", "1"]) == 0
    out, err = capsys.readouterr()
    assert _litert_line(out).endswith("compared with the numpy reference only") and "Traceback" not in err
    assert "vs numpy reference" in out and "LiteRT (XNNPACK)" not in out


def test_top1_compares_with_the_reference(litert_refused_model, capsys):
    assert top1_agreement.main([str(litert_refused_model), "--seeds", "2"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| future |"))
    assert "| 2/2 |" in row and "| numpy reference (LiteRT cannot run this model: " in row
    _litert_line(row)


def test_bench_invoke_times_ours_and_says_why_not_litert(litert_refused_model, capsys):
    argv = ["--graph", str(litert_refused_model), "--litert", "--runs", "3", "--warmup", "1", "--warmup-secs", "0"]
    assert bench_invoke.main(argv) == 0
    out = capsys.readouterr().out
    assert _litert_line(out).startswith("future: ")
    row = next(line for line in out.splitlines() if line.startswith("future "))
    assert row.split()[-2:] == ["n/a", "n/a"]


def test_parity_runtime_litert_says_why_and_reports_the_rest(litert_refused_model, tmp_path, capsys):
    out = tmp_path / "report"
    assert parity_report.main([str(litert_refused_model), "--runtime", "litert", "--table", "none",
                               "--out", str(out)]) == 0
    said = [line for line in capsys.readouterr().out.splitlines() if line.startswith("LiteRT Interpreter + ")]
    assert len(said) == 1 and ": LiteRT cannot run this model: " in said[0]
    report = json.loads((out / "parity.json").read_text())
    assert report["litert_delegate"]["error"].startswith("LiteRT cannot run this model: ")
    assert report["summary"]["compared"] == 1


def test_benchmark_runtime_litert_says_why_in_its_row(litert_refused_model, capsys):
    argv = ["--graph", str(litert_refused_model), "--runtime", "litert", "--num_runs", "1", "--min_secs", "0",
            "--warmup_min_secs", "0"]
    assert benchmark_model.main(argv) == 0
    assert "LiteRT + gles_delegate   unavailable: " in _litert_line(capsys.readouterr().out)


def test_demo_runtime_litert_is_one_line(litert_refused_model, capsys):
    with pytest.raises(SystemExit) as exit_info:
        demo.main(["--model", str(litert_refused_model), "--runtime", "litert"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and len(err.splitlines()) == 1
    assert "error: ToolError: --runtime litert: LiteRT cannot run this model: " in err
