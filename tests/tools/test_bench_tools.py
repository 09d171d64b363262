"""gles-bench-compare and gles-profile through their entry points (timings are not asserted:
only that every runtime was measured or says why not)."""
import json
import re

from gles_delegate.tools import bench_compare, profile_model


def test_bench_compare_writes_a_table_and_json(small_model, tmp_path, capsys):
    out = tmp_path / "cmp"
    assert bench_compare.main([str(small_model), "--runs", "2", "--warmup", "1", "--out", str(out)]) == 0
    table = (out / "results.md").read_text()
    assert "bench_compare" in table.splitlines()[0]  # the command that produced it
    row = next(line for line in table.splitlines() if line.startswith("| small |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert all(re.fullmatch(r"\d+\.\d\d", c) for c in cells[1:3])  # ours, both precisions
    assert all(re.fullmatch(r"\d+\.\d\d", c) for c in cells[4:6])  # XNNPACK 1 and 16 threads
    rows = json.loads((out / "results.json").read_text())
    assert rows[0]["ours_fp32"]["cpu_nodes"] == 1  # PACK has no GPU kernel
    litert_gpu = rows[0]["litert_gpu"]
    assert "median_ms" in litert_gpu or litert_gpu["error"]  # measured, or why not (no Vulkan here)


def test_profile_lists_dispatches(small_model, capsys):
    assert profile_model.main([str(small_model), "--runs", "2", "--precision", "fp32"]) == 0
    text = capsys.readouterr().out
    assert re.search(r"small \[fp32\]: end-to-end median \d+\.\d+ ms", text)
    assert re.search(r"\d+ dispatches: sum of GPU times (n/a|\d+\.\d+ ms), CPU issue loop \d+\.\d+ ms", text)


def test_top1_agreement_table(small_model, capsys):
    from gles_delegate.tools import top1_agreement
    assert top1_agreement.main([str(small_model), "--seeds", "3"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| small |"))
    assert "| fp32 | 3/3 |" in row  # ours and LiteRT agree on this model's first output


def test_bench_init_warm_start_hits_the_cache(small_model, tmp_path, capsys):
    """Three fresh processes (cold, driver cache only, warm): the warm one loads the entry the cold
    one stored, all three give the same output bytes, and every column is a number."""
    from gles_delegate.tools import bench_init
    out = tmp_path / "init.md"
    assert bench_init.main(["--models", str(small_model), "--repeat", "1", "--out", str(out)]) == 0
    row = next(line for line in out.read_text().splitlines() if line.startswith("| small |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert len(cells) == 19 and cells[-1] == "yes"  # same outputs, and the warm start hit the cache
    assert all(re.fullmatch(r"-?\d+(\.\d)?%?", c) for c in cells[1:-1]), cells


def test_profile_ab_runs_each_setting_and_restores_it(small_model, capsys):
    import pytest
    from gles_delegate.gpu import runtime
    before = runtime.FLUSH_FIRST
    assert profile_model.main([str(small_model), "--runs", "2", "--set", "gpu.runtime.FLUSH_FIRST=0"]) == 0
    text = capsys.readouterr().out
    assert "[defaults] small" in text and "[gpu.runtime.FLUSH_FIRST=0] small" in text
    assert runtime.FLUSH_FIRST == before
    with pytest.raises(SystemExit):
        profile_model.main([str(small_model), "--set", "gpu.runtime.NO_SUCH_CONSTANT=1"])


def test_bench_init_runs_from_an_installed_copy(small_model, tmp_path):
    """The layout a wheel installs (tools/ inside the package, no source tree around it): the
    console script starts its worker processes from there too."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    site = tmp_path / "site"
    shutil.copytree(root / "gles_delegate", site / "gles_delegate")
    for folder in ("tools", "kernels_glsl"):
        shutil.copytree(root / folder, site / "gles_delegate" / folder)
    out = tmp_path / "init.md"
    env = {**os.environ, "PYTHONPATH": str(site)}
    done = subprocess.run([sys.executable, "-c", "import sys; from gles_delegate.tools.bench_init import main; "
                           "sys.exit(main(sys.argv[1:]))", "--models", str(small_model), "--repeat", "1",
                           "--out", str(out)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    row = next(line for line in out.read_text().splitlines() if line.startswith("| small |"))
    assert row.rstrip().endswith("| yes |")
