"""tools/precision_report.py: its table has every column it promises, and its timing warms both
interpreters up and alternates them (timings themselves are not asserted: the machine is shared).
Imported from this tree's tools/ (the installed gles_delegate.tools may be another checkout's)."""
from tools import precision_report


def test_alternate_warms_up_then_alternates():
    calls = []

    def clock(name, seconds):
        def call():
            calls.append(name)
            return seconds
        return call

    half_ms, auto_ms = precision_report.alternate(clock("a", 0.002), clock("b", 0.003), runs=4, warmup=2,
                                                  warmup_secs=0)
    assert calls == ["a", "b"] * 2 + ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert (half_ms, auto_ms) == (2.0, 3.0)


def test_table_has_every_column(small_model, capsys, tmp_path):
    out = tmp_path / "auto.md"
    argv = [str(small_model), "--latency-runs", "2", "--warmup", "1", "--out", str(out)]
    assert precision_report.main(argv) == 0
    rows = [line for line in out.read_text().splitlines() if line.startswith("| small ")]
    assert len(rows) == 1
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert len(cells) == len(precision_report.HEADERS)
    named = dict(zip(precision_report.HEADERS, cells))
    for column in ("fp16_fp32acc", "auto", "auto (calib. inputs)"):
        assert float(named[column]) <= 1e-2
    ms_half, ms_auto, ratio = (float(named[c]) for c in ("fp16_fp32acc ms", "auto ms", "auto / fp16_fp32acc"))
    assert ms_half > 0 and ms_auto > 0 and abs(ratio - ms_auto / ms_half) <= 0.01 + 0.02 * ratio  # ms cells: 3 digits
    assert "auto / fp16_fp32acc" in capsys.readouterr().out


def test_without_timing_the_latency_cells_are_dashes(small_model, tmp_path):
    out = tmp_path / "auto.md"
    assert precision_report.main([str(small_model), "--samples", "3", "--out", str(out)]) == 0
    row = [line for line in out.read_text().splitlines() if line.startswith("| small ")][0]
    assert row.rstrip(" |").endswith("| - | - | -")
