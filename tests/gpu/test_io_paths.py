"""The three ways a partition's inputs and outputs move (gpu/runtime.py): kernels reading and
writing the persistently mapped host buffer itself (I/O of at most DIRECT_IO_MAX_BYTES), a DMA
copy between it and device memory (larger I/O), and glBufferSubData / glMapBufferRange where
the context cannot map persistently. All three give the same bytes."""
import numpy as np
import pytest

from gles_delegate import GpuDelegate, Interpreter
from gles_delegate.gpu import runtime
from gles_delegate.tflite import ModelBuilder

SHAPE = (1, 9, 7, 6)  # 6 channels: the I/O is converted to and from PHWC4 by kernels


def add_relu_model(shape=SHAPE, tail=None):
    """out = RELU(x + y), the model's first output; tail(builder, out), when given, adds more."""
    b = ModelBuilder()
    x, y = b.input("x", shape, np.float32), b.input("y", shape, np.float32)
    s, out = b.tensor("s", shape, np.float32), b.tensor("out", shape, np.float32)
    b.op("ADD", [x, y], [s], fused_activation_function=0)
    b.op("RELU", [s], [out])
    b.output(out)
    if tail is not None:
        tail(b, out)
    return b.build()


IO_PATHS = ["direct", "device", "copied"]


def use_io_path(monkeypatch, delegate, path):
    """Make the partitions `delegate` compiles from now on move their I/O by `path` (IO_PATHS)."""
    monkeypatch.setattr(runtime, "DIRECT_IO_MAX_BYTES", 1 << 20 if path == "direct" else 0)
    if path == "copied":
        monkeypatch.setattr(delegate.context, "persistent_mapping", False)


def check_io_path(partition, path):
    """The partition moves its I/O by `path` (by CopiedIo where the context cannot map persistently)."""
    if path == "copied" or not partition.context.persistent_mapping:
        assert isinstance(partition.io, runtime.CopiedIo)
    else:
        assert partition.io.direct == (path == "direct")
        assert (partition.io.device is None) == (path == "direct")


@pytest.mark.parametrize("path", IO_PATHS)
def test_io_paths_agree(monkeypatch, path):
    rng = np.random.default_rng(0)
    values = [rng.normal(size=SHAPE).astype(np.float32) for _ in range(2)]
    with GpuDelegate() as delegate:
        use_io_path(monkeypatch, delegate, path)
        interpreter = Interpreter(model_content=add_relu_model(), experimental_delegates=[delegate])
        interpreter.allocate_tensors()
        for _ in range(2):  # a second invoke reads the inputs anew and overwrites the outputs
            values = [v[..., ::-1].copy() for v in values]
            for detail, value in zip(interpreter.get_input_details(), values):
                interpreter.set_tensor(detail["index"], value)
            interpreter.invoke()
            out = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
            np.testing.assert_array_equal(out, np.maximum(values[0] + values[1], 0))
        (partition,) = delegate.partitions
        check_io_path(partition, path)


@pytest.mark.parametrize("path", ["direct", "device"])
def test_a_refused_io_mapping_says_so(monkeypatch, path):
    """The driver refuses to map the I/O staging buffer: a GpuError naming it and its size,
    nothing left pending (the conftest fails a test that leaves a GL error)."""
    from gles_delegate import GpuError
    delegate = GpuDelegate()
    use_io_path(monkeypatch, delegate, path)
    monkeypatch.setattr(delegate.context.gl, "map_buffer_range", lambda *args: 0)
    interpreter = Interpreter(model_content=add_relu_model(), experimental_delegates=[delegate])
    with pytest.raises(GpuError, match="I/O staging buffer of"):
        interpreter.allocate_tensors()
