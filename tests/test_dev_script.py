"""./dev.sh test runs both passes (the suite, then tests/gpu on desktop GL) and fails when either
fails: run here with a stand-in venv whose python records its arguments and fails on demand."""
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _fake_venv(tmp_path, failing_pass):
    """A VENV whose bin/python logs each call and exits 1 on the call numbered `failing_pass`."""
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    log = tmp_path / "calls"
    python.write_text(f'#!/bin/sh\necho "$*" >> {log}\n'
                      f'[ "$(wc -l < {log})" -eq {failing_pass} ] && exit 1\nexit 0\n')
    python.chmod(0o755)
    (tmp_path / "venv" / ".installed").touch()  # newer than setup.cfg: no install step
    return tmp_path / "venv", log


@pytest.mark.parametrize("failing_pass", [1, 2, 0])
def test_both_passes_run_and_either_failure_fails(tmp_path, failing_pass):
    venv, log = _fake_venv(tmp_path, failing_pass)
    result = subprocess.run(["bash", str(ROOT / "dev.sh"), "test"], env={**os.environ, "VENV": str(venv)},
                            capture_output=True, text=True, timeout=120)
    calls = log.read_text().splitlines()
    assert len(calls) == 2 and "--gl-api gl tests/gpu" in calls[1], calls
    assert (result.returncode != 0) == (failing_pass != 0), (result.returncode, result.stderr)
