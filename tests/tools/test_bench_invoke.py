"""tools/bench_invoke.py (gles-bench-invoke): its models compute what they say, and its report
has every part it promises (timings are not asserted). Imported from this tree's tools/ (the
installed gles_delegate.tools may be another checkout's)."""
import re

import numpy as np

from gles_delegate import GpuDelegate, Interpreter
from tools import bench_invoke
from tests.control_flow_models import stateful_counter


def test_report_has_times_calls_and_pieces(capsys):
    argv = ["--models", "add", "conv10", "--runs", "3", "--warmup", "1", "--gl-calls", "--breakdown",
            "--empty-dispatches"]
    assert bench_invoke.main(argv) == 0
    text = capsys.readouterr().out
    for model in ("add", "conv10"):
        assert re.search(rf"^{model}\s+\d+\s+\d+\.\d / \d+\.\d\s+\d+\.\d / \d+\.\d$", text, re.M), text
        calls = re.search(rf"^{model}: (\d+) GL/EGL calls per end-to-end run: (.*)$", text, re.M)
        assert calls and "dispatch_compute_fast" in calls[2] and "eglMakeCurrent" not in calls[2]
        # A steady invoke keeps the partition's storage-buffer bindings (gpu/runtime.py _begin).
        assert "bind_buffer_base_fast" not in calls[2]
        assert re.search(rf"^{model}: pieces of an end-to-end run", text, re.M)
    assert "every dispatch 0x0x0 workgroups" in text


def test_graph_files_are_timed_too(tmp_path, capsys):
    path = tmp_path / "user_model.tflite"
    path.write_bytes(bench_invoke.add_model())
    assert bench_invoke.main(["--graph", str(path), "--runs", "3", "--warmup", "1", "--breakdown"]) == 0
    text = capsys.readouterr().out
    assert re.search(r"^user_model\s+\d+\s+\d+\.\d / \d+\.\d", text, re.M), text
    assert re.search(r"^user_model: pieces of an end-to-end run", text, re.M)
    assert not re.search(r"^(add|conv10)\s", text, re.M)  # --graph alone: no built-in model


def test_models_compute_what_they_say():
    rng = np.random.default_rng(0)
    with GpuDelegate() as delegate:
        interpreter = Interpreter(model_content=bench_invoke.add_model(), experimental_delegates=[delegate])
        interpreter.allocate_tensors()
        x, y = (rng.normal(size=(1, 8, 8, 4)).astype(np.float32) for _ in range(2))
        run = bench_invoke.end_to_end_runner(interpreter, [x, y])
        with bench_invoke.EmptyDispatches(delegate.context):
            run()
        (out,) = run()[2]  # the real dispatch is back
        np.testing.assert_array_equal(out, x + y)
    reference = Interpreter(model_content=bench_invoke.conv10_model(layers=2, size=6, channels=4))
    reference.allocate_tensors()
    assert [list(d["shape"]) for d in reference.get_output_details()] == [[1, 6, 6, 4]]
    assert len(reference._main.graph.nodes) == 2


def test_litert_difference_compares_the_first_invoke_of_each(tmp_path, capsys):
    """A model with state answers differently at every invoke: the LiteRT column compares the
    first outputs of each interpreter, not ours after one run with LiteRT's after thousands."""
    path = tmp_path / "counter.tflite"
    path.write_bytes(stateful_counter(np.zeros((1, 4), np.float32)))
    assert bench_invoke.main(["--models", "--graph", str(path), "--runs", "20", "--warmup", "5",
                              "--warmup-secs", "0", "--litert"]) == 0
    row = re.search(r"^counter\s.*\s(\S+)$", capsys.readouterr().out, re.M)
    assert row and float(row[1]) == 0.0, row
