"""The driver's own shader cache inside serialization_dir, so that one directory is all an
application ships for a warm start.

A serialization entry holds program binaries, but drivers compile further behind them: llvmpipe
turns a program into machine code at its first dispatch (2.6 s of selfie_segmentation's first
invoke here without its cache, 0.1 s with it) and NVIDIA keeps its own binaries. Both keep those
in a per-user directory that an application cannot ship; Mesa reads MESA_SHADER_CACHE_DIR and
NVIDIA __GL_SHADER_DISK_CACHE_PATH when the process initializes its first EGL display, so the
variables are set before that, and never over the user's own choice.
"""
import os

from . import egl
from .serialization import safe_directory

# Environment variable -> the folder under <serialization_dir>/driver_shader_cache/ it names.
VARIABLES = {"MESA_SHADER_CACHE_DIR": "mesa", "__GL_SHADER_DISK_CACHE_PATH": "nvidia"}
FOLDER = "driver_shader_cache"


def point_driver_cache(directory):
    """Point every driver-cache variable the user has not set at a private folder of
    `directory` (made 0700 on the way). Returns {variable: path} of what it set: {} once the
    process has opened an EGL display (the driver read its environment then), or when
    `directory` is not private to this user (its binaries could be someone else's code)."""
    if egl.any_display_opened() or not safe_directory(directory):
        return {}
    chosen = {}
    for variable, folder in VARIABLES.items():
        if variable in os.environ:
            continue
        path = os.path.join(directory, FOLDER, folder)
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
        except OSError:
            continue  # an unwritable directory: the driver keeps its default cache
        os.environ[variable] = chosen[variable] = path
    return chosen
