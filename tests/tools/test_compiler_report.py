"""gles-compiler-report: the figures of a small model, its Markdown table."""
import numpy as np

from gles_delegate.tools import compiler_report
from tests.gpu.transforms.rulelib import Chain


def small_model(tmp_path):
    c = Chain((1, 8, 8, 4))
    y = c.op("ADD", c.op("HARD_SWISH", c.conv(c.x, 4)), c.x)
    path = tmp_path / "small.tflite"
    path.write_bytes(c.build(c.op("RESHAPE", y, c.const((1, 64, 4), np.int32), shape=(1, 64, 4))))
    return path


def test_report_of_a_small_model(tmp_path, capsys):
    path = small_model(tmp_path)
    markdown = tmp_path / "table.md"
    assert compiler_report.main([str(path), "--parity", "--markdown", str(markdown)]) == 0
    row = compiler_report.measure(path, "fp32")
    # off: convert in, conv, hard swish, add, reshape storing the output; on: the conv does it
    # all, its output read through a free reshape (an alias: converted out).
    assert (row["dispatches_off"], row["dispatches_on"]) == (5, 3)
    assert row["intermediate"] == row["lower_bound"] <= row["naive"]
    error, against = compiler_report.parity(path, "fp32")
    assert error < 1e-5 and against in ("LiteRT", "reference")
    text = markdown.read_text()
    assert text.startswith("Produced by `gles-compiler-report ") and "| small | 4 | 5 | 3 |" in text
    assert "small" in capsys.readouterr().out
