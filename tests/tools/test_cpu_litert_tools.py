"""gles-parity and gles-inspect on a model whose SEGMENT_SUM / MATRIX_DIAG have no reference kernel:
those nodes run through LiteRT (gles_delegate/cpu_litert.py) and the tools say so; the reference
stays the oracle of every other node."""
import json

import pytest

from gles_delegate.tools import inspect_model, parity_report
from tests.cpu_litert_models import segment_model

LITERT_NODES = ["#2 (SEGMENT_SUM)", "#3 (MATRIX_DIAG)"]


@pytest.fixture(scope="module")
def segment_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("models") / "segment.tflite"
    path.write_bytes(segment_model())
    return path


def test_parity_names_the_nodes_litert_ran(segment_path, tmp_path, capsys):
    out = tmp_path / "report"
    assert parity_report.main([str(segment_path), "--out", str(out), "--max_delegated_partitions", "0"]) == 0
    text = capsys.readouterr().out
    assert "2 node(s) have no reference kernel and ran through LiteRT's kernels" in text
    report = json.loads((out / "parity.json").read_text())
    assert report["summary"]["litert_nodes"] == LITERT_NODES
    where = {r["node"]: r["where"] for r in report["rows"]}
    assert [where[n] for n in ("#0 (MUL)", "#1 (TANH)", "#4 (LOGISTIC)", "#5 (ADD)")] == ["GPU"] * 4
    assert [where[n] for n in LITERT_NODES] == ["LiteRT"] * 2
    # The float nodes after the LiteRT ones: GPU against the reference, which matches LiteRT alone.
    last = next(r for r in report["rows"] if r["node"] == "#5 (ADD)")
    assert last["gpu_vs_reference"]["within"] and last["reference_vs_litert"]["within"]
    assert "SEGMENT_SUM" in (out / "report.html").read_text()


def test_inspect_says_which_cpu_nodes_run_on_litert(segment_path, capsys):
    assert inspect_model.main([str(segment_path), "--nodes", "--max_delegated_partitions", "0"]) == 0
    text = capsys.readouterr().out
    assert "2 on the CPU (2 of them through LiteRT's kernels in 1 sub-model(s)) ==" in text
    rows = [line.split() for line in text.splitlines() if line.startswith("#2 (SEGMENT_SUM)")]
    assert ["LiteRT"] in [row[2:3] for row in rows]
