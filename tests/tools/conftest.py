"""Fixtures of the tools' tests: a small model built with our writer (the one docs/usage.md's
gles-inspect example shows: tools/doc_examples.py), and a real one."""
import pytest

from gles_delegate.tflite import ModelBuilder
from gles_delegate.tools.doc_examples import small_model_bytes


@pytest.fixture(scope="session")
def small_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("models") / "small.tflite"
    path.write_bytes(small_model_bytes())
    return path


@pytest.fixture(scope="session")
def litert_refused_model(tmp_path_factory):
    """A model LiteRT cannot load (a RELU of an op version it does not know), which this package
    runs: the tools then say why LiteRT is missing from their report and go on."""
    b = ModelBuilder()
    x = b.input("x", (1, 4, 4, 4))
    y = b.tensor("y", (1, 4, 4, 4))
    b.op("RELU", [x], [y], version=99)
    b.output(y)
    path = tmp_path_factory.mktemp("models") / "future.tflite"
    path.write_bytes(b.build())
    return path


@pytest.fixture(scope="session")
def selfie(mediapipe_models):
    return mediapipe_models["selfie_segmentation"]
