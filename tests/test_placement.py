"""placement='fastest' (gles_delegate/placement.py): a partition the CPU runs measurably faster
goes to LiteRT's kernels, in our Interpreter and in LiteRT's; 'gpu' never measures. The GPU's time
is set by monkeypatching placement.gpu_timer (llvmpipe's speed decides nothing here)."""
import logging

import numpy as np
import pytest

from gles_delegate import GpuDelegate, Interpreter, cpu_litert, placement
from gles_delegate.cpu_litert import LiteRTStep, WholeModelStep
from gles_delegate.gpu.runtime import GpuPartition
from gles_delegate.tflite import ModelBuilder
from gles_delegate.tools import common
from tests.control_flow_models import check_keras_rnn, keras_rnn_loop, rnn_case, rnn_loop, stepped_loop
from tests.streaming_models import Ring, frames, ring_model

LiteRT = pytest.importorskip("ai_edge_litert.interpreter").Interpreter
SLOW_GPU_MS = 1e3  # what the patched GPU timing reports: far slower than any CPU run of these models


def tiny_model():
    """x [1, 4, 4, 3] (its batch resizable) -> ADD (a constant) -> TANH -> MUL (a constant) -> y:
    three nodes, one GPU partition."""
    b = ModelBuilder()
    x = b.input("x", (1, 4, 4, 3), shape_signature=(-1, 4, 4, 3))
    shifted, squashed, y = (b.tensor(name, (1, 4, 4, 3)) for name in ("shifted", "squashed", "y"))
    b.op("ADD", [x, b.const("shift", np.array([0.5, -1.0, 2.0], np.float32))], [shifted], fused_activation_function=0)
    b.op("TANH", [shifted], [squashed])
    b.op("MUL", [squashed, b.const("scale", np.array([3.0], np.float32))], [y], fused_activation_function=0)
    b.output(y)
    return b.build()


def large_model():
    """x [1, 64, 64, 64] -> CONV_2D 3x3 to 64 channels -> y: 151 M multiply-adds, over
    placement.MEASURE_MAX_WORK."""
    b = ModelBuilder()
    x = b.input("x", (1, 64, 64, 64))
    w = np.random.default_rng(0).normal(0, 0.05, (64, 3, 3, 64)).astype(np.float32)
    y = b.tensor("y", (1, 64, 64, 64))
    b.op("CONV_2D", [x, b.const("w", w), b.const("bias", np.zeros(64, np.float32))], [y], padding=0, stride_w=1,
         stride_h=1, dilation_w_factor=1, dilation_h_factor=1, fused_activation_function=0)
    b.output(y)
    return b.build()


def x_of(shape=(1, 4, 4, 3), seed=0):
    return np.random.default_rng(seed).uniform(-2, 2, shape).astype(np.float32)


def run(interpreter, x):
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    interpreter.invoke()
    return interpreter.get_tensor(interpreter.get_output_details()[0]["index"])


def litert_alone(data, inputs):
    interpreter = LiteRT(model_content=data)
    interpreter.allocate_tensors()
    return [run(interpreter, x) for x in inputs]


def ours(data, delegate, **kwargs):
    interpreter = Interpreter(model_content=data, experimental_delegates=[delegate], **kwargs)
    interpreter.allocate_tensors()
    return interpreter


def fixed(ms):
    """A timer (placement.gpu_timer's kind) that runs nothing and reports `ms`."""
    return lambda: ms


@pytest.fixture
def slow_gpu(monkeypatch):
    """placement.gpu_timer's timers report SLOW_GPU_MS; returns the partitions it was asked about."""
    asked = []

    def gpu_timer(partition, graph):
        asked.append(partition)
        return fixed(SLOW_GPU_MS)
    monkeypatch.setattr(placement, "gpu_timer", gpu_timer)
    return asked


def test_a_slow_gpu_partition_moves_to_litert_and_computes_what_litert_does(slow_gpu):
    data, x = tiny_model(), x_of()
    with GpuDelegate(placement="fastest") as delegate:
        interpreter = ours(data, delegate)
        summary = delegate.summary()
        assert summary["gpu_nodes"] == 0 and summary["partitions"] == 0 and len(slow_gpu) == 1
        (record,) = summary["placements"]
        # Like with like: what runs once the partition moves, the model file whole on LiteRT.
        assert record["on"] == "cpu" and record["gpu_ms"] == SLOW_GPU_MS and record["cpu"] == "LiteRT whole model"
        assert 0 < record["cpu_ms"] < SLOW_GPU_MS
        assert record["cpu_faster_runs"] == record["paired_runs"] == placement.WINS_NEEDED  # stopped once certain
        assert slow_gpu[0].released  # its GL objects freed at once
        # Nothing is left on the GPU: the model file runs whole on one LiteRT interpreter.
        assert [type(s) for s in interpreter._main.steps] == [WholeModelStep]
        assert interpreter.cpu_summary()["litert_nodes"] == ["#0 (ADD)", "#1 (TANH)", "#2 (MUL)"]
        np.testing.assert_array_equal(run(interpreter, x), litert_alone(data, [x])[0])  # the same kernels
        reason = common.cpu_reason(interpreter._main.graph.nodes[1], delegate)
        assert reason.startswith("placement='fastest': LiteRT whole model") and "the CPU runs it" in reason


def test_a_resize_measures_again_and_runs_the_model_whole_at_the_new_shape(slow_gpu):
    data, x = tiny_model(), x_of((3, 4, 4, 3))
    with GpuDelegate(placement="fastest") as delegate:
        interpreter = ours(data, delegate)
        interpreter.resize_tensor_input(interpreter.get_input_details()[0]["index"], [3, 4, 4, 3])
        interpreter.allocate_tensors()
        assert len(slow_gpu) == 2 and [type(s) for s in interpreter._main.steps] == [WholeModelStep]
        theirs = LiteRT(model_content=data)
        theirs.resize_tensor_input(theirs.get_input_details()[0]["index"], [3, 4, 4, 3])
        theirs.allocate_tensors()
        np.testing.assert_array_equal(run(interpreter, x), run(theirs, x))


def test_a_warm_start_from_the_serialization_cache_is_placed_too(slow_gpu, tmp_path):
    """The cache stores the partitions before placement (the option is no part of its key): a
    warm start measures again and leaves the slow partition to the CPU."""
    data = tiny_model()
    with GpuDelegate(serialization_dir=str(tmp_path)) as delegate:
        ours(data, delegate)
        assert delegate.summary()["gpu_nodes"] == 3
    with GpuDelegate(serialization_dir=str(tmp_path), placement="fastest") as delegate:
        ours(data, delegate)
        summary = delegate.summary()
        assert summary["cache_hit"] and summary["gpu_nodes"] == 0 and len(slow_gpu) == 1


def alternating(times):
    """A timer reporting `times` (ms) in turn, from the first again after the last."""
    calls = iter(range(10**9))
    return lambda: times[next(calls) % len(times)]


def test_the_cpu_must_be_faster_in_enough_paired_runs(monkeypatch):
    """The CPU takes the model when it was faster in WINS_NEEDED rounds, however small the
    difference, and not in one round less, however large: the rule is the sign test's."""
    warmup = [None] * placement.WARMUP_RUNS  # the warm-up's reports, not counted
    needed, pairs = placement.WINS_NEEDED, placement.PAIRS
    monkeypatch.setattr(placement, "gpu_timer", lambda partition, graph: fixed(1.0))
    for wins, on in ((needed - 1, "gpu"), (needed, "cpu")):
        cpu = [0.999] * wins + [100.0] * (pairs - wins)  # the CPU's wins first, then its losses
        monkeypatch.setattr(placement, "whole_timer", lambda step, graph: alternating(warmup + cpu))
        with GpuDelegate(placement="fastest") as delegate:
            ours(tiny_model(), delegate)
            (record,) = delegate.summary()["placements"]
            assert (record["on"], record["cpu_faster_runs"]) == (on, wins), record
            assert delegate.summary()["gpu_nodes"] == (3 if on == "gpu" else 0)


def test_the_sign_test_threshold_is_the_binomial_tail():
    """WINS_NEEDED against an independent count over all 2^PAIRS outcomes of fair coin tosses."""
    pairs, alpha = placement.PAIRS, placement.ALPHA
    wins = np.array([bin(k).count("1") for k in range(2 ** pairs)])
    tail = [np.mean(wins >= k) for k in range(pairs + 2)]
    assert tail[placement.WINS_NEEDED] <= alpha < tail[placement.WINS_NEEDED - 1]
    assert (placement.wins_needed(10, 0.05), placement.wins_needed(15, 0.01)) == (9, 13)


def test_a_tie_moves_to_the_cpu_at_most_alpha_of_the_time():
    """Both sides drawn from one distribution of times (noise of 30%): over 4000 decisions the
    CPU takes at most ALPHA of them, to within three standard deviations of that count."""
    rng = np.random.default_rng(0)

    def noisy():
        return lambda: float(rng.lognormal(0.0, 0.3))
    decisions = 4000
    moved = sum(placement.compare([noisy()], noisy()).cpu_faster for _ in range(decisions))
    alpha = placement.ALPHA
    assert moved <= decisions * alpha + 3 * np.sqrt(decisions * alpha * (1 - alpha))


def test_rounds_stop_once_the_outcome_is_certain():
    """A GPU always faster costs WINS_LOST + 1 rounds, a CPU always faster WINS_NEEDED."""
    assert placement.compare([fixed(1.0)], fixed(2.0)).rounds == placement.WINS_LOST + 1
    assert placement.compare([fixed(2.0)], fixed(1.0)).rounds == placement.WINS_NEEDED
    both = placement.compare([fixed(1.0), fixed(2.0)], fixed(2.5))  # one round's GPU time: the partitions' sum
    assert (both.gpu_ms, both.cpu_ms, both.cpu_faster) == (3.0, 2.5, True)


@pytest.mark.parametrize("one_thread_faster", [True, False])
def test_the_whole_model_runs_at_the_thread_count_measured_faster(slow_gpu, monkeypatch, one_thread_faster):
    """Asked for 4 threads, the whole model is also timed on one (XNNPACK's thread pool costs
    more than a tiny model's work) and runs at the count measured faster."""
    fast, slow = 0.001, 0.002

    def whole_timer(step, graph):
        return fixed(fast if (step.num_threads == 1) == one_thread_faster else slow)
    monkeypatch.setattr(placement, "whole_timer", whole_timer)
    threads = 1 if one_thread_faster else 4
    with GpuDelegate(placement="fastest") as delegate:
        interpreter = ours(tiny_model(), delegate, num_threads=4)
        (record,) = delegate.summary()["placements"]
        assert record["on"] == "cpu" and record["threads"] == threads and "thread" in record["why"]
        assert [type(s) for s in interpreter._main.steps] == [WholeModelStep]
        assert interpreter._main.steps[0].num_threads == threads


def test_a_fast_gpu_partition_stays_and_runs_on_the_gpu(monkeypatch):
    monkeypatch.setattr(placement, "gpu_timer", lambda partition, graph: fixed(0.0))
    data, x = tiny_model(), x_of()
    with GpuDelegate(placement="fastest") as delegate:
        interpreter = ours(data, delegate)
        (record,) = delegate.summary()["placements"]
        assert record["on"] == "gpu" and record["cpu_ms"] > 0 and "the GPU runs it" in record["why"]
        assert record["cpu_faster_runs"] == 0 and record["paired_runs"] == placement.WINS_LOST + 1
        assert [type(s) for s in interpreter._main.steps] == [GpuPartition]
        ref = litert_alone(data, [x])[0]
        assert np.abs(run(interpreter, x) - ref).max() <= 1e-5 * np.abs(ref).max()


def test_a_large_partition_is_not_measured_and_stays(slow_gpu):
    data = large_model()
    with GpuDelegate(placement="fastest") as delegate:
        interpreter = ours(data, delegate)
        (record,) = delegate.summary()["placements"]
        assert placement.work(interpreter._main.graph.nodes) > placement.MEASURE_MAX_WORK
        assert record["on"] == "gpu" and record["gpu_ms"] is None and "MEASURE_MAX_WORK" in record["why"]
        assert slow_gpu == [] and delegate.summary()["gpu_nodes"] == 1


def test_gpu_placement_never_measures(monkeypatch):
    def refuse(*args):
        raise AssertionError("placement='gpu' measured a partition")
    for timer in ("gpu_timer", "cpu_timer", "whole_timer"):
        monkeypatch.setattr(placement, timer, refuse)
    data, x = tiny_model(), x_of()
    with GpuDelegate() as delegate:
        interpreter = ours(data, delegate)
        run(interpreter, x)
        summary = delegate.summary()
        assert summary["placement"] == "gpu" and summary["placements"] == [] and summary["gpu_nodes"] == 3


def test_without_litert_every_partition_stays_on_the_gpu_and_it_is_said_once(slow_gpu, monkeypatch, caplog):
    monkeypatch.setattr(cpu_litert, "litert_interpreter_class", lambda: None)
    data = tiny_model()
    with GpuDelegate(placement="fastest") as delegate, caplog.at_level(logging.WARNING, "gles_delegate"):
        for _ in range(2):
            ours(data, delegate)
            (record,) = delegate.summary()["placements"]
            assert record["on"] == "gpu" and record["why"] == placement.NO_LITERT
            assert delegate.summary()["gpu_nodes"] == 3
    assert slow_gpu == []
    assert sum("ai-edge-litert is not installed" in r.getMessage() for r in caplog.records) == 1


def test_nodes_the_reference_would_run_are_not_measured(slow_gpu):
    """cpu_backend 'fallback' runs CPU nodes on the numpy reference, which is never chosen for speed."""
    with GpuDelegate(placement="fastest") as delegate:
        ours(tiny_model(), delegate, cpu_backend="fallback")
        (record,) = delegate.summary()["placements"]
        assert record["on"] == "gpu" and "cpu_backend='fallback'" in record["why"]
        assert slow_gpu == []


def test_a_streaming_model_of_resource_variables_runs_whole_on_litert(slow_gpu):
    """Its partition reads and assigns resource variables (no LiteRT sub-model can hold them):
    the whole model file is timed, and runs whole on LiteRT, its state carried from invoke to
    invoke as LiteRT carries it."""
    ring = Ring(frames=1, history=4, channels=8, filters=6)
    data, inputs = ring_model(ring), frames(ring, 4)
    with GpuDelegate(placement="fastest") as delegate:
        interpreter = ours(data, delegate)
        (record,) = delegate.summary()["placements"]
        assert record["on"] == "cpu" and record["cpu"] == "LiteRT whole model", record
        assert [type(s) for s in interpreter._main.steps] == [WholeModelStep]
        got = [run(interpreter, x) for x in inputs]
    for ours_y, theirs in zip(got, litert_alone(data, inputs)):
        np.testing.assert_array_equal(ours_y, theirs)


def test_litert_runs_the_nodes_the_delegate_declines(slow_gpu):
    from gles_delegate.litert.native import native_delegates
    data, x = tiny_model(), x_of()
    with GpuDelegate(placement="fastest") as delegate:
        interpreter = LiteRT(model_content=data, experimental_delegates=[delegate])
        interpreter.allocate_tensors()
        assert native_delegates(delegate)[0].plans[0].claimed == []
        (record,) = delegate.summary()["placements"]
        assert record["on"] == "cpu" and record["gpu_ms"] == SLOW_GPU_MS and record["cpu_ms"] > 0
        np.testing.assert_array_equal(run(interpreter, x), litert_alone(data, [x])[0])


def test_litert_keeps_a_partition_the_gpu_runs_faster(monkeypatch):
    from gles_delegate.litert.native import native_delegates
    monkeypatch.setattr(placement, "gpu_timer", lambda partition, graph: fixed(0.0))
    with GpuDelegate(placement="fastest") as delegate:
        interpreter = LiteRT(model_content=tiny_model(), experimental_delegates=[delegate])
        interpreter.allocate_tensors()
        assert native_delegates(delegate)[0].plans[0].claimed == [0, 1, 2]
        assert [r["on"] for r in delegate.summary()["placements"]] == ["gpu"]


def test_work_counts_a_convolution_by_its_multiply_adds():
    from gles_delegate.graph import Graph
    from gles_delegate.tflite import read_model
    (conv,) = Graph.from_model(read_model(large_model())).nodes
    assert placement.work([conv]) == 64 * 64 * 64 * (3 * 3 * 64)


def test_timers_run_the_step_they_are_given_once_per_call():
    """cpu_timer runs a LiteRT sub-model step on zeros; whole_timer the whole model through its
    LiteRT calls (as the Interpreter's thin path: one set per input, one invoke, one get per output)."""
    from gles_delegate.graph import Graph
    from gles_delegate.tflite import read_model
    graph = Graph.from_model(read_model(tiny_model()))
    step = LiteRTStep(graph, graph.nodes)
    calls = []
    real_run = step.run
    step.run = lambda storage: (calls.append(storage[0].copy()), real_run(storage))
    timer = placement.cpu_timer(step, graph)
    assert timer() >= 0 and timer() >= 0
    assert len(calls) == 2 and not np.any(calls[0])
    whole, made = WholeModelStep(graph), []
    set_tensor, get_tensor, invoke = whole.calls
    whole.calls = cpu_litert.LiteRTCalls(lambda i, x: (made.append(("set", i, x.any())), set_tensor(i, x)),
                                         lambda i: (made.append(("get", i)), get_tensor(i))[1],
                                         lambda: (made.append(("invoke",)), invoke()))
    assert placement.whole_timer(whole, graph)() >= 0
    assert made == [("set", graph.inputs[0].index, False), ("invoke",), ("get", graph.outputs[0].index)]


def test_placement_is_a_checked_option():
    with pytest.raises(ValueError, match="placement must be one of"):
        GpuDelegate(placement="cpu")
    from gles_delegate.delegate import parse_plugin_options
    assert parse_plugin_options({"placement": "FASTEST"}).placement == "fastest"


def test_an_lstm_state_runs_whole_on_litert_and_resets(slow_gpu):
    """The LSTM's variable state tensors cannot be in a sub-model: the whole model runs on LiteRT,
    the state carried in our storage (readable with get_tensor) and zeroed by reset_all_variables."""
    from tests.ops.test_lstm import LstmSpec, full_lstm_model, run_twice_and_reset
    spec = LstmSpec(n_time=3, n_batch=2, n_input=3, n_cell=4)
    data, states = full_lstm_model("UNIDIRECTIONAL_SEQUENCE_LSTM", spec, np.random.default_rng(3))
    rng = np.random.default_rng(4)
    feeds = [[rng.uniform(-1, 1, spec.input_shape("UNIDIRECTIONAL_SEQUENCE_LSTM")).astype(np.float32)]
             for _ in range(2)]
    with GpuDelegate(placement="fastest") as delegate:
        interpreter = Interpreter(model_content=data, experimental_delegates=[delegate])
        got = run_twice_and_reset(interpreter, feeds, states)
        assert [r["cpu"] for r in delegate.summary()["placements"]] == ["LiteRT whole model"]
        assert [type(s) for s in interpreter._main.steps] == [WholeModelStep]
    theirs = run_twice_and_reset(LiteRT(model_content=data), feeds, states)
    assert not np.array_equal(got[0], got[3])  # the state carried over
    for a, b in zip(got, theirs):
        np.testing.assert_array_equal(a, b)


def test_gles_inspect_gives_what_was_measured_as_the_reason(slow_gpu, tmp_path, capsys):
    from gles_delegate.tools import inspect_model
    path = tmp_path / "tiny.tflite"
    path.write_bytes(tiny_model())
    assert inspect_model.main([str(path), "--placement", "fastest"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("#1 (TANH)")]
    assert rows and "placement='fastest': LiteRT whole model" in rows[0] and f"GPU {SLOW_GPU_MS:.3f} ms" in rows[0]


@pytest.mark.parametrize("whole_ms, on", [(None, "cpu"), (SLOW_GPU_MS * 10, "gpu")])
def test_partitions_timed_by_the_whole_model_move_together_or_not_at_all(slow_gpu, monkeypatch, whole_ms, on):
    """Two partitions of resource variables (around an ATAN2 no GPU kernel runs): no sub-model
    holds them, so the whole model's time is set against both GPU times together."""
    if whole_ms is not None:
        monkeypatch.setattr(placement, "whole_timer", lambda step, graph: fixed(whole_ms))
    ring = Ring(frames=1, history=4, channels=8, filters=6)
    data, inputs = ring_model(ring, reader=True), frames(ring, 3)
    with GpuDelegate(placement="fastest", max_delegated_partitions=0) as delegate:
        interpreter = ours(data, delegate)
        records = delegate.summary()["placements"]
        assert [r["on"] for r in records] == [on, on] and {r["cpu"] for r in records} == {"LiteRT whole model"}
        assert all("the GPU time of all 2 partitions" in r["why"] for r in records)
        assert (type(interpreter._main.steps[0]) is WholeModelStep) == (on == "cpu")
        got = [run(interpreter, x) for x in inputs]
    for ours_y, theirs in zip(got, litert_alone(data, inputs)):
        np.testing.assert_allclose(ours_y, theirs, rtol=1e-5, atol=1e-5 * np.abs(theirs).max())


@pytest.mark.parametrize("whole_ms, loop_ms, on", [(1e-3, 1e-3, "cpu"), (1e3, 1e-3, "gpu"), (1.5, 1.0, "cpu")],
                         ids=["whole faster", "gpu faster", "faster only with the loop beside the gpu"])
def test_a_model_whose_loop_its_constants_bound_is_timed_whole(monkeypatch, whole_ms, loop_ms, on):
    """rnn_loop runs its body `steps` times, a constant (loop_bounds.py): on zeros as on anything.
    The whole model is timed against the GPU partition (the FULLY_CONNECTED head, 1 ms) plus the
    loop beside it as a LiteRT sub-model (loop_ms): 1.5 ms beats 1 ms + 1 ms, not 1 ms alone.
    The head alone is timed against a sub-model of it (1000 ms) where the whole loses; the
    outputs are LiteRT's either way."""
    timed_whole = []
    monkeypatch.setattr(placement, "whole_timer", lambda step, graph: timed_whole.append(step) or fixed(whole_ms))
    monkeypatch.setattr(placement, "gpu_timer", lambda partition, graph: fixed(1.0))
    monkeypatch.setattr(placement, "cpu_timer",
                        lambda step, graph: fixed(loop_ms if [n.op for n in step.nodes] == ["WHILE"] else 1e3))
    wx, wh, bias, head, inputs = rnn_case(4, 1, 3, 5)
    data = rnn_loop(wx, wh, bias, head, 4, 1)
    with GpuDelegate(placement="fastest") as delegate:
        interpreter = ours(data, delegate)
        assert len(timed_whole) >= 1
        (record,) = delegate.summary()["placements"]
        assert record["on"] == on
        if on == "cpu":  # the whole model's comparison decided it (else the head's alone did)
            assert "LiteRT whole model" in record["why"] and "with the 1 CPU nodes beside them" in record["why"]
        assert (type(interpreter._main.steps[0]) is WholeModelStep) == (on == "cpu")
        for detail, value in zip(interpreter.get_input_details(), inputs):
            interpreter.set_tensor(detail["index"], value)
        interpreter.invoke()
        got = [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]
    theirs = LiteRT(model_content=data)
    theirs.allocate_tensors()
    for detail, value in zip(theirs.get_input_details(), inputs):
        theirs.set_tensor(detail["index"], value)
    theirs.invoke()
    for mine, output in zip(got, theirs.get_output_details()):
        expected = theirs.get_tensor(output["index"])
        np.testing.assert_allclose(mine, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


@pytest.mark.parametrize("through", ["thin path", "storage"])
def test_a_model_with_dynamic_tensors_runs_whole_on_litert(monkeypatch, through):
    """keras_rnn_loop's loop outputs are dynamic tensors (placeholder shapes): the whole model on
    LiteRT resizes them itself, so placement may hand it over (it was kept off the whole-model
    path, the loop run by our Python per iteration). Its outputs, read through the thin path or
    after leaving it for the storage (a tensor() view), are LiteRT's."""
    monkeypatch.setattr(placement, "whole_timer", lambda step, graph: fixed(1e-3))
    monkeypatch.setattr(placement, "gpu_timer", lambda partition, graph: fixed(1.0))
    case = rnn_case(4, 2, n_in=3, n_hidden=5)
    data = keras_rnn_loop(*case[:4], 4, 2)
    with GpuDelegate(placement="fastest") as delegate:
        interpreter = ours(data, delegate)
        assert [type(s) for s in interpreter._main.steps] == [WholeModelStep]
        for detail, value in zip(interpreter.get_input_details(), case[4]):
            interpreter.set_tensor(detail["index"], value)
        if through == "storage":
            interpreter.tensor(interpreter.get_input_details()[0]["index"])  # leaves the thin path
        interpreter.invoke()
        got = [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]
    check_keras_rnn(got, case, data)


def test_a_model_that_loops_is_not_timed_whole(monkeypatch):
    """A WHILE whose step is an input never ends on the zeros placement times with: LiteRT's
    invoke of the whole model hung allocate_tensors() (placement='gpu': 0.1 s). The whole model
    is not timed (a loop's time on zeros is no measure of real inputs'), the partition alone is,
    and the model computes what LiteRT does."""
    timed_whole = []
    monkeypatch.setattr(placement, "whole_timer", lambda step, graph: timed_whole.append(step) or fixed(1e-3))
    data = stepped_loop((1, 4))
    interpreter = ours(data, GpuDelegate(placement="fastest"))
    assert timed_whole == []
    x, step = x_of((1, 4)), np.array(1, np.int32)
    theirs = LiteRT(model_content=data)
    theirs.allocate_tensors()
    for interp in (interpreter, theirs):
        interp.set_tensor(0, x)
        interp.set_tensor(1, step)
        interp.invoke()
    for output in theirs.get_output_details():
        np.testing.assert_allclose(interpreter.get_tensor(output["index"]), theirs.get_tensor(output["index"]),
                                   rtol=4 * np.finfo(np.float32).eps)
