"""The microWakeWord streaming keyword spotters that pymicro-wakeword ships (int8 features in,
uint8 probability out, state in resource variables set by CALL_ONCE): every node but the
CALL_ONCE on the GPU in one partition, and, over a stream of invokes, each output equal to what
LiteRT's own Interpreter gives for the same stream: exactly at fp32; at half storage within two
quantization steps, the bound of tests/gpu/test_quantized_models.py (the snapped activations
stored as halves can move a later requantization across a rounding boundary, layer after layer). Random features leave most of the
probabilities at 0, so the logit (LOGISTIC's int8 input) is compared too, read back through
experimental_preserve_all_tensors on both sides."""
import numpy as np
import pytest

from gles_delegate import GpuDelegate, Interpreter
from gles_delegate.graph import Graph
from gles_delegate.tflite import read_model
from gles_delegate.tools.common import seeded_inputs
from gles_delegate.tools.fetch_models import WAKE_WORDS, fetch_models
from tests.litert import LiteRTInterpreter

pytestmark = pytest.mark.filterwarnings("ignore:Warning. Enabling .experimental_preserve_all_tensors.:UserWarning")
STREAM = 8  # invokes: the ring buffers in the variables fill and wrap
STEPS = {"fp32": 0, "fp16_fp32acc": 2, "auto": 2}


@pytest.fixture(scope="session")
def wake_word_models():
    """{name: path} of pymicro-wakeword's four models, fetched from PyPI once and cached."""
    return fetch_models(wheel=WAKE_WORDS)


def logit_index(path):
    """The tensor LOGISTIC reads: the model's last int8 value before its probability."""
    graph = Graph.from_model(read_model(open(path, "rb").read()))
    (logistic,) = [n for n in graph.nodes if n.op == "LOGISTIC"]
    return logistic.inputs[0].index


def stream(interpreter, frames, logit):
    """(probability, logit) after each frame, fed in order to one interpreter (its state carried)."""
    interpreter.allocate_tensors()
    (inp,), (out,) = interpreter.get_input_details(), interpreter.get_output_details()
    outputs = []
    for frame in frames:
        interpreter.set_tensor(inp["index"], frame)
        interpreter.invoke()
        outputs.append((interpreter.get_tensor(out["index"]).copy(), interpreter.get_tensor(logit).copy()))
    return outputs


@pytest.mark.parametrize("precision", STEPS)
@pytest.mark.parametrize("name", WAKE_WORDS.names)
def test_a_wake_word_model_streams_on_the_gpu_as_on_litert(wake_word_models, name, precision):
    path = str(wake_word_models[name])
    details = Interpreter(model_path=path).get_input_details()
    frames = [seeded_inputs(details, seed)[0] for seed in range(STREAM)]
    logit = logit_index(path)
    expected = stream(LiteRTInterpreter(model_path=path, experimental_preserve_all_tensors=True), frames, logit)
    with GpuDelegate(precision=precision) as delegate:
        ours = stream(Interpreter(model_path=path, experimental_delegates=[delegate],
                                  experimental_preserve_all_tensors=True), frames, logit)
        summary = delegate.summary()
    assert (summary["cpu_nodes"], summary["partitions"]) == (1, 1), summary  # the CALL_ONCE
    assert summary["gpu_nodes"] >= 40, summary
    for step, pairs in enumerate(zip(ours, expected)):
        for what, a, b in zip(("probability", "logit"), *pairs):
            assert a.dtype == b.dtype and a.shape == b.shape
            apart = int(np.max(np.abs(a.astype(np.int32) - b.astype(np.int32))))
            assert apart <= STEPS[precision], f"{name} [{precision}] invoke {step}: {what} {apart} steps from LiteRT"
    assert len({bytes(logit) for _, logit in expected}) > 1, "the stream should move the logit"
