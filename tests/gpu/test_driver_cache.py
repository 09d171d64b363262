"""The driver's shader cache goes into serialization_dir (issue 20, item 3): a start with an empty
home directory and only the serialization_dir of an earlier start is warm for the driver too.
Each start is its own process: the driver reads the variables at the process's first display."""
import json
import os
import subprocess
import sys

from tests.gpu.gpulib import START_IN_A_PROCESS

START = START_IN_A_PROCESS + """
import json, os
print(json.dumps({"first_invoke_s": first_invoke_s, "mesa": os.environ.get("MESA_SHADER_CACHE_DIR"),
                  "nvidia": os.environ.get("__GL_SHADER_DISK_CACHE_PATH"),
                  "renderer": delegate.summary()["gl_version"]}))
"""


def _start(model, directory, home, **env):
    """One start in a fresh process whose home (and so the drivers' default caches) is `home`."""
    clean = {k: v for k, v in os.environ.items()
             if k not in ("MESA_SHADER_CACHE_DIR", "__GL_SHADER_DISK_CACHE_PATH", "XDG_CACHE_HOME")}
    home.mkdir(exist_ok=True)
    result = subprocess.run([sys.executable, "-c", START, str(model), str(directory), "0"], capture_output=True,
                            text=True, timeout=300, env={**clean, "HOME": str(home), **env})
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_a_start_with_an_empty_home_is_warm_from_the_serialization_dir(mediapipe_models, tmp_path):
    model, directory = mediapipe_models["selfie_segmentation"], tmp_path / "cache"
    cold = _start(model, directory, tmp_path / "home1")
    assert cold["mesa"] == str(directory / "driver_shader_cache" / "mesa")
    assert cold["nvidia"] == str(directory / "driver_shader_cache" / "nvidia")
    driver = "mesa" if "Mesa" in cold["renderer"] else "nvidia"  # the two this package points
    assert any((directory / "driver_shader_cache" / driver).rglob("*")), f"{cold['renderer']} wrote nothing there"
    warm = _start(model, directory, tmp_path / "home2")  # another user's machine: nothing in ~/.cache
    if driver == "mesa":  # llvmpipe compiles every shader at the first dispatch (seconds) unless its cache has them
        assert warm["first_invoke_s"] < cold["first_invoke_s"] / 2, (cold, warm)


def test_the_users_own_setting_wins(mediapipe_models, tmp_path):
    mine = str(tmp_path / "mine")
    got = _start(mediapipe_models["hand_recrop"], tmp_path / "cache", tmp_path / "home", MESA_SHADER_CACHE_DIR=mine)
    assert got["mesa"] == mine and got["nvidia"] == str(tmp_path / "cache" / "driver_shader_cache" / "nvidia")


def test_a_directory_others_can_write_is_not_used(mediapipe_models, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    got = _start(mediapipe_models["hand_recrop"], shared, tmp_path / "home")
    assert got["mesa"] is None and not (shared / "driver_shader_cache").exists()
