"""A partition's float32 outputs stay in its mapped I/O buffer after invoke (MappedIo.read_outputs,
the Interpreter storage's defer_output): get_tensor() copies each out once, and every other way of
reading the tensor (a CPU node, a view from Interpreter.tensor(), the next partition's input, the
partition being released) copies it into the storage first. Each way must see the values of the
last invoke that wrote it."""

import numpy as np
import pytest

from gles_delegate import GpuDelegate, Interpreter, ModelError
from tests.forking import in_forked_child
from tests.gpu.test_float_view import computed_indices_model
from tests.gpu.test_io_paths import IO_PATHS, add_relu_model, use_io_path
from tests.oplib import cpu_node

SHAPE = (1, 5, 4, 6)


def model(cpu_tail=False):
    """out = RELU(x + y); with cpu_tail also tail = |out| by an op without a GPU kernel
    (oplib.cpu_node: it runs on the CPU, reading the partition's output)."""
    def absolute(b, out):
        tail = b.tensor("tail", SHAPE, np.float32)
        cpu_node(b, out, tail)
        b.output(tail)
    return add_relu_model(SHAPE, absolute if cpu_tail else None)


def invoke(interpreter, seed):
    """Set seeded inputs, invoke; returns what `out` must hold."""
    rng = np.random.default_rng(seed)
    values = [rng.normal(size=SHAPE).astype(np.float32) * 4 for _ in range(2)]
    for detail, value in zip(interpreter.get_input_details(), values):
        interpreter.set_tensor(detail["index"], value)
    interpreter.invoke()
    return np.maximum(values[0] + values[1], 0)


def allocated(delegate, cpu_tail=False):
    interpreter = Interpreter(model_content=model(cpu_tail), experimental_delegates=[delegate])
    interpreter.allocate_tensors()
    return interpreter, interpreter.get_output_details()[0]["index"]


@pytest.mark.parametrize("path", IO_PATHS)
def test_get_tensor_copies_the_last_invoke_once(monkeypatch, path):
    with GpuDelegate() as delegate:
        use_io_path(monkeypatch, delegate, path)
        interpreter, out = allocated(delegate)
        for seed in range(3):
            expected = invoke(interpreter, seed)
            storage = interpreter._main.storage
            deferred = delegate.context.persistent_mapping and path != "copied"
            assert (out in storage.pending) == deferred
            first = interpreter.get_tensor(out)
            np.testing.assert_array_equal(first, expected)
            first[...] = -1  # a copy: the next get_tensor is not affected
            np.testing.assert_array_equal(interpreter.get_tensor(out), expected)


def test_a_view_sees_every_invoke():
    """While the user holds a view of the storage, outputs are copied in at once (the view
    must change with each invoke, as LiteRT's does)."""
    with GpuDelegate() as delegate:
        interpreter, out = allocated(delegate)
        invoke(interpreter, 0)
        view = interpreter.tensor(out)()
        for seed in (1, 2):
            expected = invoke(interpreter, seed)
            assert out not in interpreter._main.storage.pending
            np.testing.assert_array_equal(view, expected)


def test_a_cpu_node_reads_the_deferred_output():
    with GpuDelegate() as delegate:
        interpreter, out = allocated(delegate, cpu_tail=True)
        assert delegate.summary()["cpu_nodes"] >= 1
        tail = interpreter.get_output_details()[1]["index"]
        for seed in range(2):
            expected = invoke(interpreter, seed)
            # a 1x1 L2 pool: sqrt(x^2), |x| to the last bit or so
            np.testing.assert_allclose(interpreter.get_tensor(tail), np.abs(expected),
                                       rtol=2 * np.finfo(np.float32).eps, atol=0)
            np.testing.assert_array_equal(interpreter.get_tensor(out), expected)


def test_closing_the_delegate_copies_the_outputs_in_first():
    """Releasing the partition unmaps its buffer: the storage must hold the values by then."""
    delegate = GpuDelegate()
    interpreter, out = allocated(delegate)
    expected = invoke(interpreter, 3)
    storage = interpreter._main.storage
    assert out in storage.pending
    delegate.close()
    assert not storage.pending
    np.testing.assert_array_equal(dict.__getitem__(storage, out), expected)


def test_setting_the_tensor_drops_the_deferred_value():
    with GpuDelegate() as delegate:
        interpreter, out = allocated(delegate)
        invoke(interpreter, 4)
        storage = interpreter._main.storage
        storage[out] = np.full(SHAPE, 7, np.float32)
        assert out not in storage.pending
        np.testing.assert_array_equal(interpreter.get_tensor(out), np.full(SHAPE, 7, np.float32))


def test_a_fork_copies_the_outputs_in_first():
    """A forked child may not inherit the driver's mapping (NVIDIA's): the parent copies every
    deferred output into its storage before it forks, and the child reads them from there."""
    with GpuDelegate() as delegate:
        interpreter, out = allocated(delegate)
        expected = invoke(interpreter, 5)
        storage = interpreter._main.storage
        assert out in storage.pending
        assert in_forked_child(lambda: not storage.pending
                               and np.array_equal(dict.__getitem__(storage, out), expected))
        assert not storage.pending
        np.testing.assert_array_equal(interpreter.get_tensor(out), expected)


def test_an_invoke_failing_a_status_word_leaves_the_last_good_outputs():
    """Kernels that set status words (a GATHER of out-of-range indices) fail the invoke after
    the GPU wrote the mapping: outputs of such partitions are copied at once, so the last good
    invoke's stay readable."""
    table = np.arange(1, 13, dtype=np.float32).reshape(4, 3)
    with GpuDelegate() as delegate:
        interpreter = Interpreter(model_content=computed_indices_model(table, 2), experimental_delegates=[delegate])
        interpreter.allocate_tensors()
        x, out = interpreter.get_input_details()[0]["index"], interpreter.get_output_details()[0]["index"]
        interpreter.set_tensor(x, np.array([3, 0], np.float32))
        interpreter.invoke()
        assert out not in interpreter._main.storage.pending
        interpreter.set_tensor(x, np.array([1, 9], np.float32))
        with pytest.raises(ModelError, match="gather index out of range"):
            interpreter.invoke()
        np.testing.assert_array_equal(interpreter.get_tensor(out), table[[3, 0]])
