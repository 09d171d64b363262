"""Invoking from threads: another thread than the builder's, two interpreters at once on one
shared GL context, one interpreter handed from thread to thread."""

import numpy as np
import pytest

from gles_delegate import GpuDelegate, Interpreter
from tests.reliability.conftest import assert_same, conv_model, invoke, pending_gl_error
from tests.threads import run_in_threads

pytestmark = pytest.mark.usefixtures("gpu_available")


def reference(model, x):
    interpreter = Interpreter(model_content=model)
    interpreter.allocate_tensors()
    return invoke(interpreter, x)


def test_invoke_from_another_thread_than_the_builder():
    model = conv_model()
    x = np.random.default_rng(0).uniform(-1, 1, (1, 8, 8, 3)).astype(np.float32)
    with GpuDelegate() as delegate:
        interpreter = Interpreter(model_content=model, experimental_delegates=[delegate])
        interpreter.allocate_tensors()
        results = []
        run_in_threads([lambda: results.append(invoke(interpreter, x))])
        assert_same(results[0], reference(model, x))
        assert delegate.summary()["cpu_nodes"] == 0
        # And back on the building thread.
        assert_same(invoke(interpreter, x), reference(model, x))
        assert pending_gl_error(delegate.context) == "GL_NO_ERROR"


def test_delegate_built_on_a_thread_invoked_on_another():
    model = conv_model()
    x = np.random.default_rng(1).uniform(-1, 1, (1, 8, 8, 3)).astype(np.float32)
    built = {}

    def build():
        built["delegate"] = GpuDelegate()
        built["interpreter"] = Interpreter(model_content=model, experimental_delegates=[built["delegate"]])
        built["interpreter"].allocate_tensors()
    run_in_threads([build])
    results = []
    run_in_threads([lambda: results.append(invoke(built["interpreter"], x))])
    assert_same(results[0], reference(model, x))
    built["delegate"].close()


def test_two_interpreters_on_two_threads_concurrently():
    """Two models on one shared GL context, each thread checking every one of its results."""
    models = [conv_model(seed=3), conv_model((2, 6, 10, 3), seed=4)]
    rng = np.random.default_rng(5)
    inputs = [[rng.uniform(-1, 1, (1, 8, 8, 3)).astype(np.float32) for _ in range(4)],
              [rng.uniform(-1, 1, (2, 6, 10, 3)).astype(np.float32) for _ in range(4)]]
    expected = [[reference(m, x) for x in xs] for m, xs in zip(models, inputs)]
    delegates = [GpuDelegate(), GpuDelegate()]
    assert delegates[0].context is delegates[1].context
    interpreters = []
    for model, delegate in zip(models, delegates):
        interpreter = Interpreter(model_content=model, experimental_delegates=[delegate])
        interpreter.allocate_tensors()
        interpreters.append(interpreter)
    counts = [0, 0]

    def worker(k):
        def loop():
            for i in range(200):
                assert_same(invoke(interpreters[k], inputs[k][i % 4]), expected[k][i % 4])
                counts[k] += 1
        return loop
    run_in_threads([worker(0), worker(1)])
    assert counts == [200, 200]
    assert pending_gl_error(delegates[0].context) == "GL_NO_ERROR"
    for d in delegates:
        d.close()


def test_one_interpreter_invoked_from_several_threads_in_turn():
    model = conv_model()
    rng = np.random.default_rng(6)
    xs = [rng.uniform(-1, 1, (1, 8, 8, 3)).astype(np.float32) for _ in range(8)]
    expected = [reference(model, x) for x in xs]
    with GpuDelegate() as delegate:
        interpreter = Interpreter(model_content=model, experimental_delegates=[delegate])
        interpreter.allocate_tensors()
        for k in range(8):  # eight threads, one after the other
            got = []
            run_in_threads([lambda: got.append(invoke(interpreter, xs[k]))])
            assert_same(got[0], expected[k])


def test_one_interpreter_shared_by_threads_at_once_stays_consistent():
    """invoke() holds the interpreter's lock: threads calling invoke() on one interpreter at
    once never see a half-run graph (each run computes the same outputs from the same input)."""
    model = conv_model()
    x = np.random.default_rng(7).uniform(-1, 1, (1, 8, 8, 3)).astype(np.float32)
    expected = reference(model, x)
    with GpuDelegate() as delegate:
        interpreter = Interpreter(model_content=model, experimental_delegates=[delegate])
        interpreter.allocate_tensors()
        interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
        out = [d["index"] for d in interpreter.get_output_details()]

        def loop():
            for _ in range(100):
                interpreter.invoke()
        run_in_threads([loop, loop, loop])
        assert_same([interpreter.get_tensor(i) for i in out], expected)
