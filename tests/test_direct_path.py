"""The Interpreter's thin path (gles_delegate/direct_path.py): once placement='fastest' leaves the
whole model to one LiteRT interpreter, set_tensor / invoke / get_tensor are LiteRT's own calls,
with the Interpreter's errors, its tensor() views, signature runners and reset as before. The
GPU's time is set by monkeypatching placement.gpu_timer (llvmpipe's speed decides nothing here)."""
import threading
import time

import numpy as np
import pytest

from gles_delegate import GpuDelegate, Interpreter, cpu_litert, placement
from gles_delegate.cpu_litert import WholeModelStep
from gles_delegate.errors import ModelError
from tests.streaming_models import Ring, frames, ring_model
from tests.test_placement import litert_alone, tiny_model, x_of

LiteRT = pytest.importorskip("ai_edge_litert.interpreter").Interpreter
RING = Ring(frames=1, history=4, channels=8, filters=6)


@pytest.fixture(autouse=True)
def slow_gpu(monkeypatch):
    """Every GPU partition timed far slower than LiteRT runs these models."""
    monkeypatch.setattr(placement, "gpu_timer", lambda partition, graph: lambda: 1e3)


@pytest.fixture
def litert_calls(monkeypatch):
    """The calls each WholeModelStep makes to LiteRT's interpreter, as (name, tensor index)."""
    made = []

    def counting(interpreter):
        set_tensor, get_tensor, invoke = real(interpreter)
        return cpu_litert.LiteRTCalls(lambda i, x: (made.append(("set", i)), set_tensor(i, x))[1],
                                      lambda i: (made.append(("get", i)), get_tensor(i))[1],
                                      lambda: (made.append(("invoke", None)), invoke())[1])
    real = cpu_litert.native_calls
    monkeypatch.setattr(cpu_litert, "native_calls", counting)
    return made


def whole(data, **kwargs):
    """Our Interpreter of `data`, allocated, which placement='fastest' runs whole on LiteRT."""
    interpreter = Interpreter(model_content=data, experimental_delegates=[GpuDelegate(placement="fastest")], **kwargs)
    interpreter.allocate_tensors()
    assert [type(s) for s in interpreter._main.steps] == [WholeModelStep]
    return interpreter


def step(interpreter, x):
    """set the input, invoke, get the output."""
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    interpreter.invoke()
    return interpreter.get_tensor(interpreter.get_output_details()[0]["index"])


def test_an_invoke_is_one_litert_call_per_tensor_and_no_copy_through_the_storage(litert_calls, monkeypatch):
    """Per end-to-end run: one set per input, one invoke, one get per output, straight to LiteRT;
    the plan's step (its copies through our storage) never runs, and the storage never sees
    the inputs. The streaming model's state is carried as LiteRT carries it."""
    data, inputs = ring_model(RING), frames(RING, 4)
    interpreter = whole(data)

    def refuse(self, storage, capture=None):
        raise AssertionError("the plan's WholeModelStep ran: a copy through the storage")
    monkeypatch.setattr(WholeModelStep, "run", refuse)
    x, y = interpreter.get_input_details()[0]["index"], interpreter.get_output_details()[0]["index"]
    del litert_calls[:]  # what placement's timing called
    got = [step(interpreter, value) for value in inputs]
    assert litert_calls == [("set", x), ("invoke", None), ("get", y)] * len(inputs)
    assert not np.any(interpreter._main.storage[x])
    for ours_y, theirs in zip(got, litert_alone(data, inputs)):
        np.testing.assert_array_equal(ours_y, theirs)


def test_errors_are_the_interpreters_and_keep_the_thin_path():
    interpreter = whole(tiny_model())
    x = x_of()
    with pytest.raises(ValueError, match="expected float32"):
        interpreter.set_tensor(0, x.astype(np.float64))
    with pytest.raises(ValueError, match="expected float32"):  # LiteRT would copy its bytes as they are
        interpreter.set_tensor(0, x.astype(">f4"))
    with pytest.raises(ValueError, match=r"expected \[1, 4, 4, 3\]"):
        interpreter.set_tensor(0, x[..., :2].copy())
    with pytest.raises(ValueError, match="out of range"):
        interpreter.set_tensor(99, x)
    with pytest.raises(TypeError, match="a tensor index is an int, not float"):
        interpreter.set_tensor(0.0, x)
    with pytest.raises(TypeError, match="a tensor index is an int, not float"):
        interpreter.get_tensor(float(interpreter.get_output_details()[0]["index"]))
    shift = next(t for t in interpreter._main.graph.tensors if t.is_const)
    with pytest.raises(ValueError, match="constant"):
        interpreter.set_tensor(shift.index, np.zeros(shift.shape, np.float32))
    with pytest.raises(ValueError, match="subgraph index"):
        interpreter.get_tensor(0, 1)
    with pytest.raises(ValueError, match="Tensor data is null"):  # an intermediate LiteRT keeps to itself
        interpreter.get_tensor(interpreter._main.graph.nodes[0].outputs[0].index)
    assert interpreter._direct is not None
    np.testing.assert_array_equal(step(interpreter, x), litert_alone(tiny_model(), [x])[0])
    # An array of a subclass: converted and checked as ever, then LiteRT's.
    interpreter.set_tensor(0, x.view(type("Subclass", (np.ndarray,), {})))
    interpreter.invoke()
    np.testing.assert_array_equal(interpreter.get_tensor(interpreter.get_output_details()[0]["index"]),
                                  litert_alone(tiny_model(), [x])[0])
    assert interpreter._direct is not None


def test_an_index_of_numpy_s_int_types_reads_what_litert_holds():
    """get_tensor(np.int64(i)) (an index taken from an array of indices) reads LiteRT's output
    as get_tensor(i) does, not the storage the thin path leaves stale."""
    interpreter = whole(tiny_model())
    y = interpreter.get_output_details()[0]["index"]
    for seed in range(2):
        x = x_of(seed=seed)
        want = step(interpreter, x)
        for index in (np.int64(y), np.int32(y), np.array([y])[0]):
            np.testing.assert_array_equal(interpreter.get_tensor(index), want)
            np.testing.assert_array_equal(interpreter.get_tensor(index, np.int64(0)), want)
    np.testing.assert_array_equal(interpreter.get_tensor(np.int64(0)), x)
    assert interpreter._direct is not None


def test_allocation_is_required_as_before():
    interpreter = Interpreter(model_content=tiny_model(), experimental_delegates=[GpuDelegate(placement="fastest")])
    with pytest.raises(ValueError, match="allocate_tensors"):
        interpreter.invoke()
    interpreter.allocate_tensors()
    assert interpreter._direct is not None
    interpreter.resize_tensor_input(0, [2, 4, 4, 3])
    assert interpreter._direct is None
    for call in (interpreter.invoke, lambda: interpreter.set_tensor(0, x_of((2, 4, 4, 3))),
                 lambda: interpreter.get_tensor(interpreter.get_output_details()[0]["index"])):
        with pytest.raises(ValueError, match="resize_tensor_input"):
            call()
    interpreter.allocate_tensors()
    x = x_of((2, 4, 4, 3))
    theirs = LiteRT(model_content=tiny_model())
    theirs.resize_tensor_input(0, [2, 4, 4, 3])
    theirs.allocate_tensors()
    np.testing.assert_array_equal(step(interpreter, x), step(theirs, x))


def test_a_tensor_view_leaves_the_thin_path_with_the_state_carried():
    """tensor()'s views are of our storage: the Interpreter takes the values LiteRT holds (the
    inputs, the streaming state inside LiteRT carries on) and runs the plan from the storage."""
    data, inputs = ring_model(RING), frames(RING, 4)
    interpreter = whole(data)
    got = [step(interpreter, x) for x in inputs[:2]]
    x_view = interpreter.tensor(interpreter.get_input_details()[0]["index"])
    assert interpreter._direct is None
    np.testing.assert_array_equal(x_view(), inputs[1])  # what LiteRT held
    for x in inputs[2:]:
        x_view()[...] = x
        interpreter.invoke()
        got.append(interpreter.get_tensor(interpreter.get_output_details()[0]["index"]))
    for ours_y, theirs in zip(got, litert_alone(data, inputs)):
        np.testing.assert_array_equal(ours_y, theirs)


def test_a_signature_runner_runs_on_from_the_thin_paths_state():
    data, inputs = ring_model(RING, signatures="step"), frames(RING, 4)
    interpreter = whole(data)
    got = [step(interpreter, x) for x in inputs[:2]]
    runner = interpreter.get_signature_runner("step")
    got += [runner(x=x)["y"] for x in inputs[2:]]
    interpreter.allocate_tensors()  # nothing changed: the thin path again, on the same LiteRT interpreter
    assert interpreter._direct is not None
    got += [runner(x=x)["y"] for x in inputs[:1]]
    assert interpreter._direct is None
    for ours_y, theirs in zip(got, litert_alone(data, inputs + inputs[:1])):
        np.testing.assert_array_equal(ours_y, theirs)


@pytest.mark.parametrize("leave", ["no", "view", "set_input"])
def test_an_allocate_that_changes_nothing_keeps_the_stream_s_state(leave):
    """allocate_tensors() mid-stream without a resize keeps the state, as LiteRT's does and as
    placement='gpu' does: it made a new LiteRT interpreter, whose resource variables start at
    zero (the outputs of the next frames differed from LiteRT's by up to 0.8, with no error).
    Left for a view, or an input set in the storage, the thin path takes the storage's inputs."""
    data, inputs = ring_model(RING), frames(RING, 6)
    interpreter = whole(data)
    x = interpreter.get_input_details()[0]["index"]
    got = [step(interpreter, value) for value in inputs[:3]]
    if leave == "view":
        view = interpreter.tensor(x)
        view()[...] = inputs[3]
        del view
    elif leave == "set_input":
        interpreter.tensor(x)  # off the thin path: set_tensor writes the storage
        interpreter.set_tensor(x, inputs[3])
    interpreter.allocate_tensors()
    assert interpreter._direct is not None
    if leave != "no":
        interpreter.invoke()
        got.append(interpreter.get_tensor(interpreter.get_output_details()[0]["index"]))
    got += [step(interpreter, value) for value in inputs[len(got):]]
    for ours_y, theirs in zip(got, litert_alone(data, inputs), strict=True):
        np.testing.assert_array_equal(ours_y, theirs)


def test_setting_an_output_leaves_the_thin_path_and_reads_back_as_in_the_storage():
    interpreter = whole(tiny_model())
    y = interpreter.get_output_details()[0]["index"]
    value = np.full((1, 4, 4, 3), 7.0, np.float32)
    interpreter.set_tensor(y, value)
    assert interpreter._direct is None
    np.testing.assert_array_equal(interpreter.get_tensor(y), value)
    x = x_of()
    np.testing.assert_array_equal(step(interpreter, x), litert_alone(tiny_model(), [x])[0])


def test_reset_zeroes_the_variables_on_the_thin_path():
    """An LSTM's state tensors: readable and settable on the thin path, and reset to zeros."""
    from tests.ops.test_lstm import LstmSpec, full_lstm_model
    spec = LstmSpec(n_time=3, n_batch=2, n_input=3, n_cell=4)
    data, states = full_lstm_model("UNIDIRECTIONAL_SEQUENCE_LSTM", spec, np.random.default_rng(3))
    interpreter = whole(data)
    assert interpreter._direct is not None
    x = np.random.default_rng(4).uniform(-1, 1, spec.input_shape("UNIDIRECTIONAL_SEQUENCE_LSTM")).astype(np.float32)
    first = step(interpreter, x)
    assert any(np.any(interpreter.get_tensor(i)) for i in states)
    interpreter.reset_all_variables()
    assert interpreter._direct is not None and not any(np.any(interpreter.get_tensor(i)) for i in states)
    np.testing.assert_array_equal(step(interpreter, x), first)
    interpreter.set_tensor(states[0], np.ones_like(interpreter.get_tensor(states[0])))
    np.testing.assert_array_equal(interpreter.get_tensor(states[0]), 1)
    assert not np.array_equal(step(interpreter, x), first)


def test_a_failing_invoke_is_a_model_error():
    interpreter = whole(tiny_model())

    def fail():
        raise RuntimeError("a kernel failed")
    interpreter._direct.invoke = fail
    with pytest.raises(ModelError, match="the model failed in LiteRT: a kernel failed"):
        interpreter.invoke()


def test_get_tensor_during_an_invoke_waits_for_it():
    """As on the plan's path: get_tensor from another thread while LiteRT's invoke runs (the GIL
    released) reads the outputs once it finished."""
    interpreter = whole(tiny_model())
    started, invoke = threading.Event(), interpreter._direct.invoke

    def slow_invoke():
        started.set()
        time.sleep(0.05)
        invoke()
    interpreter._direct.invoke = slow_invoke
    x, y = x_of(), interpreter.get_output_details()[0]["index"]
    interpreter.set_tensor(0, np.zeros_like(x))
    interpreter.invoke()
    interpreter.set_tensor(0, x)
    started.clear()
    invoking = threading.Thread(target=interpreter.invoke)
    invoking.start()
    assert started.wait(30)
    value = interpreter.get_tensor(y)
    invoking.join()
    np.testing.assert_array_equal(value, litert_alone(tiny_model(), [x])[0])


def test_without_litert_s_wrapper_its_python_methods_are_called():
    class Bare:
        def set_tensor(self, index, value):
            pass

        def get_tensor(self, index):
            pass

        def invoke(self):
            pass
    bare = Bare()
    assert cpu_litert.native_calls(bare) == (bare.set_tensor, bare.get_tensor, bare.invoke)
    theirs = LiteRT(model_content=tiny_model())
    assert cpu_litert.native_calls(theirs).invoke == theirs._interpreter.Invoke
