"""tools/bench_split.py (gles-bench-split): its model splits as it says, the three runtimes run
side by side and agree, and the report and JSON have every part they promise (timings are not
asserted). Imported from this tree's tools/."""
import json
import re

import numpy as np

from gles_delegate import GpuDelegate, Interpreter
from tools import bench_split

QUICK = ["--blocks", "2", "--size", "6", "--channels", "4", "--runs", "3", "--warmup", "1", "--warmup-secs", "0"]


def test_report_compares_the_three_runtimes(tmp_path, capsys):
    out = tmp_path / "split.json"
    assert bench_split.main(QUICK + ["--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "8 nodes on the GPU in 2 partitions, 2 on the CPU (ours, 'auto': 2 LiteRT sub-models" in text
    for name in bench_split.RUNTIMES:
        assert re.search(rf"^{re.escape(name)}\s+\d+ / \d+\s+\d+ / \d+\s+\d+\.\d\dx\s+\S+$", text, re.M), text
    data = json.loads(out.read_text())
    assert set(data["times"]) == set(bench_split.RUNTIMES)
    assert data["ratio_to_litert"]["LiteRT + delegate"] == 1.0
    # The same GPU kernels and LiteRT's CPU kernels in both: the same outputs.
    assert data["max_abs_diff_from_litert"]["ours (auto)"] == 0.0
    assert data["max_abs_diff_from_litert"]["ours (reference)"] < 1e-4


def test_empty_dispatches_and_a_graph_file(tmp_path, capsys):
    path = tmp_path / "split.tflite"
    path.write_bytes(bench_split.split_model(blocks=1, size=4, channels=4, cpu_ops=["L2_POOL_2D"]))
    argv = ["--graph", str(path), "--runs", "2", "--warmup", "0", "--warmup-secs", "0", "--empty-dispatches"]
    assert bench_split.main(argv) == 0
    text = capsys.readouterr().out
    assert f"model: {path}" in text and "every dispatch 0x0x0 workgroups" in text
    assert "4 nodes on the GPU in 1 partitions, 1 on the CPU" in text


def test_the_model_computes_blocks_then_the_cpu_ops():
    """One block and its CPU op, recomputed with numpy: x + project(relu(expand(dw(x)))), then a
    3x3 SAME L2 pool (TFLite's counts only the window's cells inside the input)."""
    data = bench_split.split_model(blocks=1, size=5, channels=2)
    x = np.random.default_rng(1).standard_normal((1, 5, 5, 2)).astype(np.float32)
    with GpuDelegate(max_delegated_partitions=0) as delegate:
        interpreter = Interpreter(model_content=data, experimental_delegates=[delegate], cpu_backend="reference")
        interpreter.allocate_tensors()
        interpreter.set_tensor(0, x)
        interpreter.invoke()
        ours = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
        graph = interpreter._main.graph
        weights = {t.name: t.data for t in graph.tensors if t.is_const}
        assert delegate.summary()["gpu_nodes"] == 4
    padded = np.pad(x[0], ((1, 1), (1, 1), (0, 0)))
    taps = [padded[i:i + 5, j:j + 5] * weights["dw0_w"][0, i, j] for i in range(3) for j in range(3)]
    dw = sum(taps) + weights["dw0_b"]
    expand = np.maximum(dw @ weights["expand0_w"][:, 0, 0, :].T + weights["expand0_b"], 0)
    block = x[0] + expand @ weights["project0_w"][:, 0, 0, :].T + weights["project0_b"]
    squares = np.pad(block ** 2, ((1, 1), (1, 1), (0, 0)))
    counts = np.pad(np.ones((5, 5, 1)), ((1, 1), (1, 1), (0, 0)))
    window = lambda a: sum(a[i:i + 5, j:j + 5] for i in range(3) for j in range(3))
    np.testing.assert_allclose(ours[0], np.sqrt(window(squares) / window(counts)), rtol=1e-4, atol=1e-5)
