"""The workgroup heuristic: within the device limits, the shapes it picks, and no GL behind it
(the tuner that times candidates on the GPU is gpu/workgroup_tuner.py, tested in test_compiler.py)."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gles_delegate
from gles_delegate.gpu import workgroups

LIMITS = [{"max_workgroup_size": (1024, 1024, 64), "max_workgroup_invocations": 1024},
          {"max_workgroup_size": (128, 128, 64), "max_workgroup_invocations": 128},
          {"max_workgroup_size": (64, 8, 4), "max_workgroup_invocations": 64}]


@pytest.mark.parametrize("limits", LIMITS)
def test_heuristic_and_candidates_fit_the_limits(limits):
    rng = np.random.default_rng(0)
    for _ in range(200):
        grid = tuple(int(g) for g in rng.integers(1, 300, 3))
        for wg in workgroups.candidates(grid, limits):
            assert all(w <= m for w, m in zip(wg, limits["max_workgroup_size"]))
            assert np.prod(wg) <= limits["max_workgroup_invocations"]
            assert all(w & (w - 1) == 0 for w in wg)


def test_heuristic_shapes():
    limits = LIMITS[0]
    assert workgroups.choose_workgroup((1000, 1, 1), limits) == (128, 1, 1)  # 1-D: all along x
    assert workgroups.choose_workgroup((7, 7, 32), limits) == (8, 8, 2)
    assert workgroups.choose_workgroup((16, 8, 1000), limits) == (16, 8, 1)
    assert workgroups.choose_workgroup((1, 1, 1), limits) == (1, 1, 1)


def test_requests_are_clamped():
    assert workgroups.clamp_workgroup((16, 64, 1), LIMITS[2]) == (16, 4, 1)
    assert workgroups.clamp_workgroup((256, 1, 1), LIMITS[1]) == (128, 1, 1)


# The package's __init__ imports the public API, whose delegate owns a GL context: the child
# registers the package without running it, so only what the named modules import is loaded.
IMPORT_PURE = """
import importlib, sys, types
package = types.ModuleType("gles_delegate")
package.__path__ = [{path!r}]
sys.modules["gles_delegate"] = package
for name in {modules!r}:
    importlib.import_module(name)
print(" ".join(sorted(sys.modules)))
"""
PURE = ("gles_delegate.gpu.kernels", "gles_delegate.gpu.workgroups", "gles_delegate.gpu.memory",
        "gles_delegate.gpu.compiler")
GL = ("gles_delegate.gpu.gl", "gles_delegate.gpu.runtime", "gles_delegate.gpu.context",
      "gles_delegate.gpu.egl", "gles_delegate.gpu.workgroup_tuner", "moderngl")


def imported_by(modules):
    """The sys.modules names a fresh interpreter holds after importing `modules`."""
    code = IMPORT_PURE.format(path=str(Path(gles_delegate.__file__).parent), modules=modules)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(done.stdout.split())


def test_kernel_builders_and_the_heuristic_import_no_gl():
    loaded = imported_by(PURE)
    assert set(PURE) <= loaded  # the check itself imported them
    assert not loaded & set(GL), sorted(loaded & set(GL))


def test_the_tuner_is_where_the_gl_is():
    """The same check sees GL imports when there are some (so the test above can fail)."""
    assert {"gles_delegate.gpu.gl", "gles_delegate.gpu.runtime"} <= imported_by(("gles_delegate.gpu.workgroup_tuner",))
