"""tools/bench_scale.py (gles-bench-scale): its models compute what they say, a run reports every
phase and size with the growth between them and the comparison with another tree, and a bad
command line is refused in one line (timings are not asserted). Imported from this tree's
tools/."""
import json
import re
from pathlib import Path

import numpy as np
import pytest

from gles_delegate import Interpreter
from tests.tools.test_cli import refused
from tools import bench_scale

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("every_output", [False, True])
def test_the_models_add_one_per_node(every_output):
    interpreter = Interpreter(model_content=bench_scale.scale_model(5, every_output=every_output))
    interpreter.allocate_tensors()
    x = np.random.default_rng(0).random(bench_scale.SHAPE, np.float32)
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    interpreter.invoke()
    outputs = [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]
    expected = [x + k for k in range(1, 6)] if every_output else [x + 5]
    assert len(outputs) == len(expected)
    for got, want in zip(outputs, expected):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_a_run_reports_every_phase_size_and_the_other_tree(tmp_path, capsys):
    out = tmp_path / "scale.json"
    argv = ["--nodes", "20", "40", "--cases", "ours/outputs", "litert/chain", "--against", str(ROOT),
            "--json", str(out)]
    assert bench_scale.main(argv) == 0
    text = capsys.readouterr().out
    seconds = r"\d+\.\d\d \(\d+\.\d\d\)"  # wall (CPU)
    phases = rf"{seconds} \| {seconds} \| {seconds}"  # load, allocate, start-up
    for case in ("ours/outputs", "litert/chain"):
        for nodes, growth in (("20", "-"), ("40", r"\d+\.\d\d")):
            row = rf"^\| {case} \| {nodes} \| {phases} \| {growth} \| {seconds} \| \S+ \| {seconds} \| \d+\.\d\d \|$"
            assert re.search(row, text, re.M), text
    assert f"this: {ROOT}" in text and f"against: {ROOT}" in text
    data = json.loads(out.read_text())
    runs = data["results"]["litert/chain"]["40"]
    assert set(runs) == {"this", "against"} and set(runs["this"][0]["phases"]) == {"load", "allocate", "invoke"}
    assert max(r["error"] for case in data["results"].values() for size in case.values()
               for side in size.values() for r in side) < 1e-6


def test_growth_per_doubling():
    assert bench_scale.per_doubling([(1000, 1.0), (2000, 2.0), (8000, 32.0)]) == [None, 2.0, 4.0]


BAD = [(["--nodes", "0"], "argument --nodes: expected an integer >= 1, got 0"),
       (["--nodes", "x"], "argument --nodes: invalid int value: 'x'"),
       (["--cases", "ours/nothing"], "argument --cases: invalid choice: 'ours/nothing'"),
       (["--repeat", "-1"], "argument --repeat: expected an integer >= 1, got -1"),
       (["--against", "/nonexistent"], "is not a gles_delegate source tree"),
       (["--bogus"], "unrecognized arguments: --bogus")]


@pytest.mark.parametrize("argv, why", BAD)
def test_a_bad_command_line_is_refused_in_one_line(argv, why, capsys):
    assert why in refused(bench_scale.main, argv, capsys)
