import os
import sys

import pytest
from hypothesis import settings

# Every run draws the same examples: CI must not meet a case no earlier run met.
settings.register_profile("deterministic", derandomize=True, deadline=None)
settings.load_profile("deterministic")

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# No calibration cache unless a test asks for one (calibration_cache_dir): precision 'auto' tests
# watch calibration run, and one test's choice kept in ~/.cache would serve the next run's.
os.environ["GLES_DELEGATE_CALIBRATION_CACHE"] = ""

# setup.cfg maps gles_delegate.tools to tools/ (package_dir); an editable install made from another
# checkout maps it to that checkout's tools/: the tests of this checkout import its own.
import gles_delegate.tools  # noqa: E402

gles_delegate.tools.__path__[:] = [os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools")]


@pytest.fixture(scope="session")
def mediapipe_models():
    """{name: path} of the 14 MediaPipe models, fetched from PyPI once and cached."""
    from gles_delegate.tools.fetch_models import fetch_models
    return fetch_models()


def pytest_addoption(parser):
    parser.addoption("--gl-api", choices=("auto", "gles", "gl"), default=None,
                     help="GL API of every GPU context: sets GLES_DELEGATE_GL_API (default: that variable, else auto)")


def pytest_configure(config):
    api = config.getoption("--gl-api")
    if api:
        os.environ["GLES_DELEGATE_GL_API"] = api  # xdist workers run this too


def pytest_report_header(config):
    from gles_delegate.gpu.context import GpuError, acquire_shared, default_gl_api, release_shared
    try:
        context = acquire_shared()
    except GpuError as exc:
        return f"GPU: none ({exc})"
    try:
        return f"GPU: gl_api={default_gl_api()} -> {context.version} on {context.renderer} (EGL {context.egl_platform} display)"
    finally:
        release_shared(context)
