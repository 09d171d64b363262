"""A LiteRT CPU partition (gles_delegate/cpu_litert.py) between two GPU partitions: the outputs
against LiteRT alone, after a resize, from several threads."""

import pytest

from gles_delegate import GpuDelegate, Interpreter
from tests.cpu_litert_models import diag_model, litert_outputs, random_input, segment_model
from tests.oplib import assert_close
from tests.threads import run_in_threads


def run(model, x, delegate, shape=None, backend="auto"):
    interpreter = Interpreter(model_content=model, experimental_delegates=[delegate], cpu_backend=backend)
    if shape is not None:
        interpreter.resize_tensor_input(interpreter.get_input_details()[0]["index"], shape)
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    interpreter.invoke()
    return interpreter.get_tensor(interpreter.get_output_details()[0]["index"]), interpreter.cpu_summary()


@pytest.mark.parametrize("backend", ["auto", "fallback", "litert"])
def test_litert_partition_between_gpu_partitions(backend):
    model, x = segment_model(), random_input((8, 4))
    with GpuDelegate(max_delegated_partitions=0) as delegate:
        ours, cpu = run(model, x, delegate, backend=backend)
        gpu = delegate.summary()
    (theirs,) = litert_outputs(model, [x])
    assert_close(ours, theirs)
    assert (gpu["partitions"], gpu["gpu_nodes"], gpu["cpu_nodes"]) == (2, 4, 2)
    assert cpu["litert_partitions"] == [["#2 (SEGMENT_SUM)", "#3 (MATRIX_DIAG)"]] and cpu["reference_nodes"] == []


@pytest.mark.parametrize("shape", [(5, 6), (1, 1)])
def test_resize_with_the_gpu(shape):
    model, x = diag_model(), random_input(shape, seed=7)
    with GpuDelegate(max_delegated_partitions=0) as delegate:
        ours, cpu = run(model, x, delegate, shape=shape)
        assert delegate.summary()["gpu_nodes"] == 2
    (theirs,) = litert_outputs(model, [x], shape=shape)
    assert ours.shape == shape + (shape[-1],)
    assert_close(ours, theirs)
    assert cpu["litert_nodes"] == ["#1 (MATRIX_DIAG)"]


def test_threads_with_the_gpu():
    model = segment_model()
    inputs = [random_input((8, 4), seed=k) for k in range(3)]
    expected = [litert_outputs(model, [x])[0] for x in inputs]
    with GpuDelegate(max_delegated_partitions=0) as delegate:
        shared = Interpreter(model_content=model, experimental_delegates=[delegate])
        shared.allocate_tensors()
        shared.set_tensor(0, inputs[0])

        def work(k):
            for _ in range(5):
                shared.invoke()
                assert_close(shared.get_tensor(shared.get_output_details()[0]["index"]), expected[0])
                assert_close(run(model, inputs[k], delegate)[0], expected[k])
        run_in_threads([lambda k=k: work(k) for k in range(3)])
        del shared
