"""Fixtures of the tools' tests: a small model built with our writer, and a real one."""
import numpy as np
import pytest

from gles_delegate.tflite import ModelBuilder


def small_model_bytes():
    """x, y [1,8,8,4] -> ADD -> LOGISTIC -> MUL by a constant -> RELU (fused into the MUL), then
    PACK of the RELU and LOGISTIC outputs (no GPU kernel: CPU). The ADD reads graph inputs and
    its output 'sum' is a graph output, so no rewrite can fuse it away: a test can break its
    kernel and expect the report to name it."""
    b = ModelBuilder()
    x = b.input("x", (1, 8, 8, 4))
    y = b.input("y", (1, 8, 8, 4))
    scale = b.const("scale", np.array([0.5, -1.0, 2.0, 1.5], np.float32))
    total, gate = b.tensor("sum", (1, 8, 8, 4)), b.tensor("gate", (1, 8, 8, 4))
    scaled, scaled_relu = b.tensor("scaled", (1, 8, 8, 4)), b.tensor("scaled_relu", (1, 8, 8, 4))
    stacked = b.tensor("stacked", (2, 1, 8, 8, 4))
    b.op("ADD", [x, y], [total], fused_activation_function=0)
    b.op("LOGISTIC", [total], [gate])
    b.op("MUL", [gate, scale], [scaled], fused_activation_function=0)
    b.op("RELU", [scaled], [scaled_relu])
    b.op("PACK", [scaled_relu, gate], [stacked], values_count=2, axis=0)
    b.output(total)
    b.output(stacked)
    return b.build()


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
