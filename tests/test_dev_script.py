"""./dev.sh test runs both passes (the suite, then tests/gpu on desktop GL) and fails when either
fails: run here with a stand-in venv whose python records its arguments and fails on demand."""
import configparser
import os
import re
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


@pytest.mark.parametrize("mode", ["test", "test-lower-bounds"])
@pytest.mark.parametrize("failing_pass", [1, 2, 0])
def test_both_passes_run_and_either_failure_fails(tmp_path, failing_pass, mode):
    venv, log = _fake_venv(tmp_path, failing_pass)
    result = subprocess.run(["bash", str(ROOT / "dev.sh"), mode], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "VENV": str(venv), "VENV_LOWER": str(venv)})
    calls = log.read_text().splitlines()
    assert len(calls) == 2 and "--gl-api gl tests/gpu" in calls[1], calls
    assert (result.returncode != 0) == (failing_pass != 0), (result.returncode, result.stderr)


def _requirements():
    """{name: specifier} of setup.cfg's install_requires."""
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    lines = [line.strip() for line in parser["options"]["install_requires"].splitlines() if line.strip()]
    return dict(re.match(r"([A-Za-z0-9_.-]+)(.*)", line).groups() for line in lines)


def test_dependencies_are_ranges_whose_lower_bounds_ci_installs():
    """No exact pin (the package installs beside other software); each lower bound is what
    tests/lower-bounds.txt, which ./dev.sh test-lower-bounds installs, pins; nothing unimported."""
    requirements = _requirements()
    assert "glcontext" not in requirements, "moderngl brings glcontext; the package never imports it"
    pins = dict(line.split("==") for line in (ROOT / "tests" / "lower-bounds.txt").read_text().splitlines()
                if line and not line.startswith("#"))
    assert set(pins) == set(requirements)
    for name, spec in requirements.items():
        assert "==" not in spec, f"{name} is pinned: {spec}"
        lower = re.search(r">=([0-9.]+)", spec).group(1)
        assert pins[name].startswith(lower), f"{name}: setup.cfg allows >= {lower}, CI installs {pins[name]}"
