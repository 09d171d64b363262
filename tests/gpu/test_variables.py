"""Resource variables held by GPU partitions (gpu/variables.py, gpu/kernels/variables.py,
variable_store.py, resource_variables.py), on the streaming models of tests/streaming_models.py:
the whole model but CALL_ONCE runs in one GPU partition, the state stays in its memory between
invokes (one upload, no download), every step gives the reference's outputs (and the reference
LiteRT's), and whatever reads or writes the variable on the CPU side (a CPU node, another
partition, another signature's subgraph) sees the latest value."""
import weakref

import numpy as np
import pytest

from gles_delegate import GpuDelegate, Interpreter
from gles_delegate.errors import ModelError
from gles_delegate.gpu.runtime import GpuPartition
from gles_delegate.gpu.variable_sync import Codec
from gles_delegate.graph import Tensor
from gles_delegate.tflite.writer import quantize_params
from tests.gpu.gpulib import PRECISIONS
from tests.litert import RESOLVERS, LiteRTInterpreter
from tests.oplib import assert_close
from tests.refcount import collector_disabled
from tests.streaming_models import Ring, frames, ring_model
from tests.tolerance import F16_U, F32_U, sum_bound

RINGS = {"float32 conv": Ring(), "int8 conv": Ring(quantized=True),
         "int8 depthwise": Ring(conv="DEPTHWISE_CONV_2D", quantized=True)}


def _ours(model, delegate=None, **kwargs):
    """Our Interpreter, allocated: the reference (cpu_backend 'fallback') for the nodes no
    `delegate` takes, unless kwargs say otherwise."""
    interpreter = Interpreter(model_content=model, experimental_delegates=[delegate] if delegate else None,
                              **{"cpu_backend": "fallback", **kwargs})
    interpreter.allocate_tensors()
    return interpreter


def _litert(model):
    interpreter = LiteRTInterpreter(model_content=model, experimental_op_resolver_type=RESOLVERS["reference"])
    interpreter.allocate_tensors()
    return interpreter


def _step(interpreter, x):
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    interpreter.invoke()
    return [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]


def _gpu_steps(interpreter):
    return [s for s in interpreter._main.steps if isinstance(s, GpuPartition)]


def _conv_bound(reference, u=F32_U):
    """Per-element bound on two evaluations of the float model's convolution, from the buffer
    the reference interpreter computed at its last step (tolerance.sum_bound)."""
    node = next(n for n in reference._main.graph.nodes if n.op.endswith("CONV_2D"))
    inputs = [reference.get_tensor(node.inputs[0].index), node.inputs[1].data, node.inputs[2].data]
    return sum_bound(node, inputs, u)[0]


def _check(ring, ours, reference, theirs=None, u=F32_U):
    """The GPU's output against the reference's (int8: exact), and the reference's against
    LiteRT's reference kernels, at one step."""
    for got, expected in [(ours, reference[0])] + ([(reference[0], theirs[0])] if theirs else []):
        if ring.quantized:
            np.testing.assert_array_equal(got, expected)
        else:
            assert_close(got, expected, bound=_conv_bound(reference[1], u))


@pytest.mark.parametrize("name", sorted(RINGS))
def test_streaming_model_runs_in_one_partition_step_by_step(name):
    ring = RINGS[name]
    model = ring_model(ring)
    reference, theirs = _ours(model), _litert(model)
    with GpuDelegate(precision="fp32") as delegate:
        gpu = _ours(model, delegate)
        [partition] = _gpu_steps(gpu)
        assert sorted(n.op for n in partition.nodes) == sorted(
            ["VAR_HANDLE", "READ_VARIABLE", "CONCATENATION", ring.conv, "STRIDED_SLICE", "ASSIGN_VARIABLE"])
        assert delegate.summary()["cpu_nodes"] == 1  # CALL_ONCE
        for x in frames(ring, 6):
            _check(ring, _step(gpu, x)[0], (_step(reference, x)[0], reference), _step(theirs, x))


@pytest.mark.parametrize("precision", PRECISIONS)
def test_int8_state_is_exact_in_every_precision(precision):
    """The int8 ring buffer's values are on its grid: half storage holds them exactly, so the
    state read back through the 'state' signature is the frames, whatever the precision."""
    ring = Ring(quantized=True)
    model = ring_model(ring, signatures=True)
    reference = _ours(model)
    with GpuDelegate(precision=precision) as delegate:
        gpu = _ours(model, delegate)
        for x in frames(ring, 4):
            ours, expected = _step(gpu, x)[0], _step(reference, x)[0]
            assert np.abs(ours.astype(np.int64) - expected).max() <= 1  # the float view: one step at most
            state = gpu.get_signature_runner("state")()["state"]
            np.testing.assert_array_equal(state, reference.get_signature_runner("state")()["state"])
            np.testing.assert_array_equal(state, x[:, -ring.history:])


def test_the_state_moves_to_the_gpu_once(monkeypatch):
    """CALL_ONCE's initializer assigns the state on the CPU; the partition uploads it at its first
    run and never again, and nothing downloads it until the partition goes (its delegate
    closes: the CPU then holds it)."""
    moves = {"upload": 0, "download": 0}
    write, read = GpuPartition.write_tensor, GpuPartition.read_tensor

    def counted(kind, function):
        def run(*args):
            moves[kind] += 1
            return function(*args)
        return run
    monkeypatch.setattr(GpuPartition, "write_tensor", counted("upload", write))
    monkeypatch.setattr(GpuPartition, "read_tensor", counted("download", read))
    ring = Ring(quantized=True)
    with GpuDelegate(precision="fp32") as delegate:
        gpu = _ours(ring_model(ring), delegate)
        for x in frames(ring, 5):
            _step(gpu, x)
        gpu.reset_all_variables()  # variable tensors only: the resource variables stay where they are
        _step(gpu, frames(ring, 1)[0])
        assert moves == {"upload": 1, "download": 0}
    assert moves == {"upload": 1, "download": 1}
    rid = gpu._subgraphs.resource_ids[("", "ring")]
    np.testing.assert_array_equal(gpu._subgraphs.variables.read(rid), frames(ring, 1)[0][:, -ring.history:])


def test_a_partition_holding_variables_goes_by_reference_counting():
    """A GPU partition holds its GpuVariables, which refer back to it weakly: once its interpreter
    is dropped and its delegate closed, it goes at once (a strong reference made the two a cycle,
    left for the cyclic collector)."""
    ring = Ring()
    with collector_disabled():
        with GpuDelegate(precision="fp32") as delegate:
            gpu = _ours(ring_model(ring), delegate)
            _step(gpu, frames(ring, 1)[0])
            (partition,) = _gpu_steps(gpu)
            assert partition.variables is not None and partition.variables.partition is partition
            gone = weakref.ref(partition)
            del gpu, partition
        assert gone() is None


@pytest.mark.parametrize("partitions", [1, 0], ids=["cpu reader", "second partition"])
def test_a_later_read_sees_what_the_gpu_assigned(partitions):
    """After the GPU's ASSIGN_VARIABLE, a READ_VARIABLE past an op the GPU lacks runs on the CPU
    (max_delegated_partitions=1: it downloads the state) or in a second partition (it gets the
    state from the first through the store); either way it reads the frames just assigned."""
    ring = Ring()
    model = ring_model(ring, reader=True)
    reference, theirs = _ours(model), _litert(model)
    with GpuDelegate(precision="fp32", max_delegated_partitions=partitions) as delegate:
        gpu = _ours(model, delegate)
        readers = [p for p in _gpu_steps(gpu) if any(n.op == "READ_VARIABLE" for n in p.nodes)]
        assert len(readers) == (1 if partitions == 1 else 2)
        for x in frames(ring, 4):
            ours, expected = _step(gpu, x), _step(reference, x)
            np.testing.assert_array_equal(ours[1], x[:, -ring.history:])
            np.testing.assert_array_equal(ours[1], expected[1])
            np.testing.assert_array_equal(ours[1], _step(theirs, x)[1])
            _check(ring, ours[0], (expected[0], reference))


def test_the_state_written_through_a_signature_reaches_the_gpu():
    """'set_state' assigns the state (in its own partition); the next step of the main one
    reads it, as LiteRT's does."""
    ring = Ring()
    model = ring_model(ring, signatures=True)
    reference, theirs = _ours(model), _litert(model)
    state = np.random.default_rng(5).normal(0, 1, (1, ring.history, 1, ring.channels)).astype(np.float32)
    with GpuDelegate(precision="fp32") as delegate:
        gpu = _ours(model, delegate)
        for k, x in enumerate(frames(ring, 4)):
            if k == 2:
                for interpreter in (gpu, reference, theirs):
                    interpreter.get_signature_runner("set_state")(s=state)
            ours, expected = _step(gpu, x), _step(reference, x)
            _check(ring, ours[0], (expected[0], reference), _step(theirs, x))
            np.testing.assert_array_equal(gpu.get_signature_runner("state")()["state"],
                                          theirs.get_signature_runner("state")()["state"])


def test_a_state_of_another_shape_assigned_between_invokes_replans_on_the_cpu():
    """'set_state' given a state of 4 frames (its input resized): the main subgraph's partition
    holds 2, so its next invoke plans again, with the variable's nodes on the CPU, and goes on
    as LiteRT does (READ_VARIABLE keeps its declared 2 frames: the first 2 of the 4)."""
    ring = Ring()
    model = ring_model(ring, signatures=True)
    theirs = _litert(model)
    state = np.random.default_rng(6).normal(0, 1, (1, 4, 1, ring.channels)).astype(np.float32)
    with GpuDelegate(precision="fp32") as delegate:
        gpu = _ours(model, delegate)
        for interpreter in (gpu, theirs):
            _step(interpreter, frames(ring, 1)[0])
            interpreter.get_signature_runner("set_state")(s=state)
        for x in frames(ring, 3, seed=2):
            np.testing.assert_allclose(_step(gpu, x)[0], _step(theirs, x)[0], rtol=1e-5, atol=1e-5)
        assert not any(n.op == "READ_VARIABLE" for p in _gpu_steps(gpu) for n in p.nodes)
        assert any(n.op == ring.conv for p in _gpu_steps(gpu) for n in p.nodes)


@pytest.mark.parametrize("keep_from", [None, 1], ids=["state of 2 frames", "state of 4 frames"])
def test_an_assignment_of_another_shape_keeps_the_variable_on_the_cpu(keep_from):
    """keep_from=1 assigns 4 frames to a variable initialized with 2: its shape is not fixed, so
    its reads and assignments stay on the CPU (the convolution does not), and every step reads
    the first 2 frames as LiteRT's does."""
    ring = Ring(keep_from=keep_from)
    model = ring_model(ring)
    theirs = _litert(model)
    with GpuDelegate(precision="fp32") as delegate:
        gpu = _ours(model, delegate)
        on_gpu = {n.op for p in _gpu_steps(gpu) for n in p.nodes}
        assert ("READ_VARIABLE" in on_gpu) == (keep_from is None) and ring.conv in on_gpu
        for x in frames(ring, 4):
            np.testing.assert_allclose(_step(gpu, x)[0], _step(theirs, x)[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("keep_from", [-2, None], ids=["negative begin: fixed", "begin 3: grows"])
def test_resize_keeps_the_state(keep_from):
    """Three steps, the frame count resized from 3 to 5, three more: the state assigned before
    the resize is read after it (the old partition hands it to the CPU, the new one uploads
    it). A negative begin keeps 2 frames at any frame count (the variable stays on the GPU); a
    begin of 3 keeps 4 after the resize (its shape changes: the CPU reads and assigns it), as
    in LiteRT."""
    ring = Ring(keep_from=keep_from)
    model = ring_model(ring)
    theirs = _litert(model)
    with GpuDelegate(precision="fp32") as delegate:
        gpu = _ours(model, delegate)
        for x in frames(ring, 3):
            np.testing.assert_allclose(_step(gpu, x)[0], _step(theirs, x)[0], rtol=1e-5, atol=1e-5)
        for interpreter in (gpu, theirs):
            interpreter.resize_tensor_input(interpreter.get_input_details()[0]["index"], (1, 5, 1, ring.channels))
            interpreter.allocate_tensors()
        on_gpu = {n.op for p in _gpu_steps(gpu) for n in p.nodes}
        assert ("READ_VARIABLE" in on_gpu) == (keep_from is not None)
        rng = np.random.default_rng(3)
        for _ in range(3):
            x = rng.normal(0, 1, (1, 5, 1, ring.channels)).astype(np.float32)
            ours, expected = _step(gpu, x)[0], _step(theirs, x)[0]
            assert ours.shape == expected.shape
            np.testing.assert_allclose(ours, expected, rtol=1e-5, atol=1e-5)


def test_binding_the_variables_leaves_the_interpreters_graph_as_it_was():
    """The float partition's view is the interpreter's own nodes (quant.float_view):
    gpu/variables.bind rebinds copies of its READ_VARIABLE / ASSIGN_VARIABLE nodes, whose inputs
    in the graph stay the VAR_HANDLE outputs."""
    interpreter = _ours(ring_model(Ring()), GpuDelegate())
    assert _gpu_steps(interpreter)
    graph = interpreter._main.graph
    handles = {id(n.outputs[0]) for n in graph.nodes if n.op == "VAR_HANDLE"}
    access = [n for n in graph.nodes if n.op in ("READ_VARIABLE", "ASSIGN_VARIABLE")]
    assert access and all(id(n.inputs[0]) in handles for n in access)


def test_two_interpreters_of_one_model_keep_separate_state():
    ring = Ring(quantized=True)
    model = ring_model(ring)
    references = [_ours(model), _ours(model)]
    with GpuDelegate(precision="fp32") as delegate:
        gpus = [_ours(model, delegate), _ours(model, delegate)]
        for k, x in enumerate(frames(ring, 6)):
            which = 0 if k % 3 else 1  # interleaved, unevenly
            np.testing.assert_array_equal(_step(gpus[which], x)[0], _step(references[which], x)[0])


def test_reset_all_variables_leaves_resource_variables_as_litert():
    ring = Ring()
    model = ring_model(ring)
    reference, theirs = _ours(model), _litert(model)
    with GpuDelegate(precision="fp32") as delegate:
        gpu = _ours(model, delegate)
        for k, x in enumerate(frames(ring, 4)):
            if k == 2:
                for interpreter in (gpu, reference, theirs):
                    interpreter.reset_all_variables()
            _check(ring, _step(gpu, x)[0], (_step(reference, x)[0], reference), _step(theirs, x))


def test_reading_a_variable_nothing_assigned_is_a_model_error_naming_the_read():
    ring = Ring()
    model = ring_model(ring, init=False)
    for delegates in ([], [GpuDelegate(precision="fp32")]):
        interpreter = Interpreter(model_content=model, experimental_delegates=delegates)
        interpreter.allocate_tensors()
        assert bool(delegates) == bool(_gpu_steps(interpreter))
        with pytest.raises(ModelError, match=r"#1 \(READ_VARIABLE\).*nothing has assigned yet"):
            _step(interpreter, frames(ring, 1)[0])


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_every_int8_value_round_trips_through_the_gpu(precision):
    """set_state writes all 256 integers (uploaded as their real values), 'state' reads them back
    (downloaded from one partition, uploaded to another, read, quantized): the same integers."""
    ring = Ring(history=4, channels=64, quantized=True)
    values = np.arange(-128, 128).astype(np.int8).reshape(1, 4, 1, 64)
    with GpuDelegate(precision=precision) as delegate:
        gpu = _ours(ring_model(ring, signatures=True), delegate)
        gpu.get_signature_runner("set_state")(s=values)
        np.testing.assert_array_equal(gpu.get_signature_runner("state")()["state"], values)


def test_litert_with_the_delegate_leaves_the_variables_to_litert():
    """On LiteRT's Interpreter the variable nodes stay on LiteRT (its resource variables are its
    own); the rest of the model runs on the GPU, and every step matches LiteRT."""
    ring = Ring(quantized=True)
    model = ring_model(ring)
    theirs = _litert(model)
    with GpuDelegate(precision="fp32", max_delegated_partitions=0) as delegate:
        ours = LiteRTInterpreter(model_content=model, experimental_delegates=[delegate])
        ours.allocate_tensors()
        for x in frames(ring, 5):
            np.testing.assert_array_equal(_step(ours, x)[0], _step(theirs, x)[0])


def test_a_cached_partition_holds_its_variables(tmp_path):
    ring = Ring(quantized=True)
    model = ring_model(ring)
    reference = _ours(model)
    with GpuDelegate(precision="fp32", serialization_dir=str(tmp_path)) as first:
        _ours(model, first)
    with GpuDelegate(precision="fp32", serialization_dir=str(tmp_path)) as second:
        gpu = _ours(model, second)
        assert second.summary()["cache_hit"]
        for x in frames(ring, 4):
            np.testing.assert_array_equal(_step(gpu, x)[0], _step(reference, x)[0])


def test_preserved_tensors_show_the_state_read():
    ring = Ring()
    model = ring_model(ring)
    # An intermediate is readable after invoke only when preserved (its memory is shared after).
    reference = _ours(model, experimental_preserve_all_tensors=True)
    with GpuDelegate(precision="fp32") as delegate:
        gpu = _ours(model, delegate, experimental_preserve_all_tensors=True)
        state = next(n.outputs[0].index for n in gpu._main.graph.nodes if n.op == "READ_VARIABLE")
        for x in frames(ring, 3):
            _step(gpu, x), _step(reference, x)
            np.testing.assert_array_equal(gpu.get_tensor(state), reference.get_tensor(state))


@pytest.mark.parametrize("precision", ["fp16", "fp16_fp32acc"])
def test_float_state_in_half_storage(precision):
    """A float32 state in half storage carries half's rounding of the frames (the bound: the
    convolution's sum in half, plus one half rounding of each buffer value)."""
    ring = Ring()
    model = ring_model(ring)
    reference = _ours(model)
    with GpuDelegate(precision=precision) as delegate:
        gpu = _ours(model, delegate)
        for x in frames(ring, 4):
            ours, expected = _step(gpu, x)[0], _step(reference, x)[0]
            assert_close(ours, expected, bound=2 * _conv_bound(reference, F16_U) + 1e-3)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_the_codec_round_trips_every_integer_through_half_storage(dtype):
    """An 8-bit variable's integers -> their real values -> half storage -> the same integers,
    on grids of any zero point and scales up to 1 (255 steps of half's 11-bit significand stay
    within a quarter step)."""
    rng = np.random.default_rng(7)
    info = np.iinfo(dtype)
    q = np.arange(info.min, info.max + 1).astype(dtype)
    for _ in range(50):
        grid = (float(10 ** rng.uniform(-5, 0)), int(rng.integers(info.min, info.max + 1)))
        codec = Codec(Tensor(0, "v", q.shape, np.dtype(dtype), quantization=quantize_params(*grid)))
        real = codec.to_gpu(q)
        for stored in (real, real.astype(np.float16).astype(np.float32)):
            np.testing.assert_array_equal(codec.to_cpu(stored), q)


def test_calibration_runs_neither_the_initializer_nor_an_assignment():
    """Precision 'auto' runs the model's CPU nodes on sample inputs to calibrate the GPU
    partition: it must not run CALL_ONCE's initializer nor a CPU ASSIGN_VARIABLE (keep_from=1
    leaves the variable's nodes on the CPU), or the first invoke would read calibration data."""
    ring = Ring(keep_from=1)
    model = ring_model(ring)
    theirs = _litert(model)
    with GpuDelegate(precision="auto") as delegate:
        gpu = _ours(model, delegate)
        assert gpu._subgraphs.variables.read(0) is None and not gpu._subgraphs.initialized
        for x in frames(ring, 3):
            assert_close(_step(gpu, x)[0], _step(theirs, x)[0], bound=0.05)
