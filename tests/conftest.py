import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="session")
def mediapipe_models():
    """{name: path} of the 14 MediaPipe models, fetched from PyPI once and cached."""
    from gles_delegate.tools.fetch_models import fetch_models
    return fetch_models()
