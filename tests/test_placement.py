"""placement='fastest' (gles_delegate/placement.py): a partition the CPU runs clearly faster goes
to LiteRT's kernels, in our Interpreter and in LiteRT's; 'gpu' never measures. The GPU's time is
set by monkeypatching placement.gpu_ms (llvmpipe's speed decides nothing here)."""
import logging

import numpy as np
import pytest

from gles_delegate import GpuDelegate, Interpreter, cpu_litert, placement
from gles_delegate.cpu_litert import LiteRTStep, WholeModelStep
from gles_delegate.gpu.runtime import GpuPartition
from gles_delegate.tflite import ModelBuilder
from gles_delegate.tools import common
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


@pytest.fixture
def slow_gpu(monkeypatch):
    """placement.gpu_ms reports SLOW_GPU_MS; returns the partitions it was asked about."""
    asked = []

    def gpu_ms(partition, graph):
        asked.append(partition)
        return SLOW_GPU_MS
    monkeypatch.setattr(placement, "gpu_ms", gpu_ms)
    return asked


def test_a_slow_gpu_partition_moves_to_litert_and_computes_what_litert_does(slow_gpu):
    data, x = tiny_model(), x_of()
    with GpuDelegate(placement="fastest") as delegate:
        interpreter = ours(data, delegate)
        summary = delegate.summary()
        assert summary["gpu_nodes"] == 0 and summary["partitions"] == 0 and len(slow_gpu) == 1
        (record,) = summary["placements"]
        assert record["on"] == "cpu" and record["gpu_ms"] == SLOW_GPU_MS and record["cpu"] == "LiteRT sub-model"
        assert 0 < record["cpu_ms"] < SLOW_GPU_MS / placement.MARGIN
        assert slow_gpu[0].released  # its GL objects freed at once
        # Nothing is left on the GPU: the model file runs whole on one LiteRT interpreter.
        assert [type(s) for s in interpreter._main.steps] == [WholeModelStep]
        assert interpreter.cpu_summary()["litert_nodes"] == ["#0 (ADD)", "#1 (TANH)", "#2 (MUL)"]
        np.testing.assert_array_equal(run(interpreter, x), litert_alone(data, [x])[0])  # the same kernels
        reason = common.cpu_reason(interpreter._main.graph.nodes[1], delegate)
        assert reason.startswith("placement='fastest': LiteRT sub-model") and "the CPU runs it" in reason


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


def test_the_cpu_must_be_faster_by_the_margin(monkeypatch):
    monkeypatch.setattr(placement, "cpu_ms", lambda step, graph: 1.0)
    for gpu, on in ((placement.MARGIN * 0.9, "gpu"), (placement.MARGIN * 1.1, "cpu")):
        monkeypatch.setattr(placement, "gpu_ms", lambda partition, graph: gpu)
        with GpuDelegate(placement="fastest") as delegate:
            ours(tiny_model(), delegate)
            assert [r["on"] for r in delegate.summary()["placements"]] == [on]
            assert delegate.summary()["gpu_nodes"] == (3 if on == "gpu" else 0)


def test_a_fast_gpu_partition_stays_and_runs_on_the_gpu(monkeypatch):
    monkeypatch.setattr(placement, "gpu_ms", lambda partition, graph: 0.0)
    data, x = tiny_model(), x_of()
    with GpuDelegate(placement="fastest") as delegate:
        interpreter = ours(data, delegate)
        (record,) = delegate.summary()["placements"]
        assert record["on"] == "gpu" and record["cpu_ms"] > 0 and "the GPU runs it" in record["why"]
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
    monkeypatch.setattr(placement, "gpu_ms", refuse)
    monkeypatch.setattr(placement, "cpu_ms", refuse)
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
    monkeypatch.setattr(placement, "gpu_ms", lambda partition, graph: 0.0)
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


def test_timing_runs_the_step_it_is_given():
    """cpu_ms runs a LiteRT sub-model step WARMUP_RUNS + TIMED_RUNS times on zeros."""
    from gles_delegate.graph import Graph
    from gles_delegate.tflite import read_model
    graph = Graph.from_model(read_model(tiny_model()))
    step = LiteRTStep(graph, graph.nodes)
    calls = []
    real_run = step.run
    step.run = lambda storage: (calls.append(storage[0].copy()), real_run(storage))
    assert placement.cpu_ms(step, graph) >= 0
    assert len(calls) == placement.WARMUP_RUNS + placement.TIMED_RUNS and not np.any(calls[0])


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
    assert rows and "placement='fastest': LiteRT sub-model" in rows[0] and f"GPU {SLOW_GPU_MS:.3f} ms" in rows[0]


@pytest.mark.parametrize("whole_ms, on", [(None, "cpu"), (SLOW_GPU_MS * 10, "gpu")])
def test_partitions_timed_by_the_whole_model_move_together_or_not_at_all(slow_gpu, monkeypatch, whole_ms, on):
    """Two partitions of resource variables (around an ADD_N no GPU kernel runs): no sub-model
    holds them, so the whole model's time is set against both GPU times together."""
    if whole_ms is not None:
        real = placement.cpu_ms
        monkeypatch.setattr(placement, "cpu_ms", lambda step, graph: whole_ms if isinstance(step, WholeModelStep)
                            else real(step, graph))
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
