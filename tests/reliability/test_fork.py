"""os.fork() after a delegate was made: the child gets a clear GpuError from the inherited
delegate (never a hang: Mesa's llvmpipe runs dispatches on threads the child does not have),
and a GpuDelegate made in the child works.

Each scenario runs in a `python -c` subprocess that forks, so a regression hangs that
subprocess (killed after TIMEOUT seconds), not pytest.
"""
import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from tests.reliability.conftest import assert_same, conv_model, invoke
from gles_delegate import Interpreter

pytestmark = pytest.mark.usefixtures("gpu_available")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TIMEOUT = 120

# The parent makes a delegate and an interpreter, invokes once, then forks; the child runs
# CHILD (with `report(key, value)`), the parent waits for it and invokes again.
SCENARIO = """
import json, os, sys
import numpy as np
from gles_delegate import CompatibilityList, GpuDelegate, GpuError, Interpreter
from tests.reliability.conftest import conv_model, invoke
x = np.ones((1, 8, 8, 3), np.float32)
delegate = GpuDelegate()
interpreter = Interpreter(model_content=conv_model(), experimental_delegates=[delegate])
interpreter.allocate_tensors()
invoke(interpreter, x)
if {probe_all}:
    CompatibilityList.devices()  # initializes every EGL display in the parent
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    found = {{}}
    def report(key, value):
        found[key] = value
    def error_of(call):
        try:
            call()
        except GpuError as exc:
            return str(exc)
        return None
    try:
{child}
    finally:
        os.write(write, json.dumps(found).encode())
        os._exit(0)
os.close(write)
with os.fdopen(read) as pipe:
    found = json.loads(pipe.read() or "{{}}")
os.waitpid(pid, 0)
found["parent_pid"] = os.getpid()
found["parent_after"] = invoke(interpreter, x)[1].tolist()
print(json.dumps(found))
"""

INHERITED = """
        report("pid", os.getpid())
        report("invoke", error_of(lambda: interpreter.invoke()))
        report("allocate", error_of(lambda: Interpreter(model_content=conv_model(),
                                                        experimental_delegates=[delegate]).allocate_tensors()))
        report("reallocate", error_of(interpreter.allocate_tensors))
        delegate.close()  # only drops the parent's objects
        report("closed", True)
"""

OWN_DELEGATE = """
        report("parent_driver", delegate.context.egl.display.vendor)
        report("new_delegate", error_of(lambda: GpuDelegate().close()))
        if found["new_delegate"] is not None:
            sys.exit(0)
        with GpuDelegate() as own:
            report("shares_parent_context", own.context is delegate.context)
            child = Interpreter(model_content=conv_model(), experimental_delegates=[own])
            child.allocate_tensors()
            report("cpu_nodes", own.summary()["cpu_nodes"])
            report("outputs", [out.tolist() for out in invoke(child, x)])
"""

NO_DISPLAY_LEFT = """
        report("new_delegate", error_of(GpuDelegate))
"""


def run_scenario(child, probe_all=False):
    """Run SCENARIO with `child` as the forked child's code; the dict both processes reported."""
    script = SCENARIO.format(child=child, probe_all=probe_all)
    # A session of its own: on a hang, the forked child dies with its parent (killpg).
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, cwd=ROOT, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        pytest.fail(f"the fork scenario hung (killed after {TIMEOUT} s)")
    assert process.returncode == 0, stderr
    return json.loads(stdout.splitlines()[-1])


def expected_outputs():
    interpreter = Interpreter(model_content=conv_model())
    interpreter.allocate_tensors()
    return invoke(interpreter, np.ones((1, 8, 8, 3), np.float32))


def test_child_using_the_parents_delegate_gets_a_clear_error():
    found = run_scenario(INHERITED)
    for call in ("invoke", "allocate", "reallocate"):
        message = found[call]
        assert message is not None, f"{call} in the child raised nothing"
        assert f"belongs to process {found['parent_pid']}" in message, message
        assert "os.fork()" in message and "new GpuDelegate" in message and str(found["pid"]) in message
    assert found["closed"]
    assert_same([np.array(found["parent_after"], np.float32)], expected_outputs()[1:])  # the parent still works


def test_child_makes_its_own_delegate():
    """A child's own delegate works on a display its parent did not initialize, of Mesa's driver;
    where the parent's driver is another (NVIDIA's), whose threads fork does not copy, the child
    gets a clear error instead (a context there hung: egl.FORKED_DRIVER)."""
    found = run_scenario(OWN_DELEGATE)
    if "Mesa" not in found["parent_driver"]:
        message = found["new_delegate"]
        assert message is not None and "which process" in message and "'spawn'" in message, message
        return
    assert found["new_delegate"] is None, found["new_delegate"]
    assert found["shares_parent_context"] is False
    assert found["cpu_nodes"] == 0
    assert_same([np.array(out, np.float32) for out in found["outputs"]], expected_outputs())


def test_child_without_a_display_of_its_own_gets_a_clear_error():
    """Every display was initialized before the fork: a new delegate in the child cannot be
    made, and says why instead of hanging."""
    found = run_scenario(NO_DISPLAY_LEFT, probe_all=True)
    message = found["new_delegate"]
    assert message is not None and "before os.fork()" in message, message


class _DriverDisplay:
    """A display as egl._open_display returns it, for the driver check alone."""

    def __init__(self, vendor):
        self.vendor, self.pid, self.label = vendor, os.getpid(), "EGL device 7"


@pytest.mark.parametrize("vendor, refused", [("NVIDIA Corporation", True), ("Mesa Project", False)])
def test_a_child_refuses_a_driver_its_parent_initialized(monkeypatch, vendor, refused):
    """A driver other than Mesa's keeps process-wide threads that fork() does not copy (NVIDIA's
    child hung in its first GL call on a display of its own): a display of a driver a parent
    process initialized is refused with a clear error; Mesa starts each display afresh."""
    from gles_delegate.errors import GpuError
    from gles_delegate.gpu import egl
    monkeypatch.setattr(egl, "_displays", {})
    monkeypatch.setattr(egl, "_vendor_pids", {vendor: os.getpid() + 1})  # the parent's
    monkeypatch.setattr(egl, "_open_display", lambda platform, index: _DriverDisplay(vendor))
    if not refused:
        assert egl.open_display("device", 7).vendor == vendor
        return
    for attempt in range(2):  # the refusal is cached, as a display that cannot be opened
        with pytest.raises(GpuError, match=f"EGL device 7 is served by the EGL driver of {vendor}, which process "
                                           f"{os.getpid() + 1} initialized before os.fork()"):
            egl.open_display("device", 7)
