"""Reader and writer: what the writer writes, the reader reads back unchanged."""
import numpy as np
import pytest

from gles_delegate.tflite import ModelBuilder, read_model, write_model
from gles_delegate.tflite.model import DimensionMetadata, Sparsity
from gles_delegate.tflite.writer import quantize_params


def same(a, b):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (a is None and b is None) or (a is not None and b is not None and np.array_equal(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if hasattr(a, "__dataclass_fields__"):
        return all(same(getattr(a, k), getattr(b, k)) for k in a.__dataclass_fields__)
    return a == b


def small_model():
    b = ModelBuilder()
    x = b.input("x", (1, 5, 5, 3), shape_signature=(-1, 5, 5, 3))
    w = b.const("w", np.arange(2 * 3 * 3 * 3, dtype=np.float32).reshape(2, 3, 3, 3))
    bias = b.const("bias", np.array([0.5, -0.5], np.float32))
    y = b.tensor("y", (1, 5, 5, 2))
    b.op("CONV_2D", [x, w, bias], [y], padding=0, stride_w=1, stride_h=1, fused_activation_function=1)
    q = b.tensor("q", (1, 5, 5, 2), np.int8, quantization=quantize_params([0.1, 0.2], [0, 1], 3))
    b.op("QUANTIZE", [y], [q])
    r = b.tensor("r", (25, 2), np.int8, quantization=(0.1, 0))
    b.op("RESHAPE", [q, -1], [r], new_shape=[25, 2])
    c = b.tensor("c", (25, 2), np.int8)
    b.op("MyCustom", [r], [c], custom_options=b"\x01\x02\x03")
    b.output(c)
    b.signature("serving_default", {"x": x}, {"c": c})
    return b


def test_builder_roundtrip_keeps_everything():
    # The reader fills every options field (defaults too), so compare read-write-read.
    back = read_model(write_model(small_model().model()))
    for external in (False, True):
        assert same(back, read_model(write_model(back, external_buffers=external)))
    ops = back.subgraphs[0].operators
    assert [o.op for o in ops] == ["CONV_2D", "QUANTIZE", "RESHAPE", "MyCustom"]
    assert ops[0].options["fused_activation_function"] == 1 and ops[0].options["padding"] == 0
    assert ops[2].options["new_shape"] == (25, 2) and ops[2].inputs[1] == -1
    assert ops[3].custom and ops[3].custom_options == b"\x01\x02\x03"
    q = back.subgraphs[0].tensors[4].quantization
    assert q.quantized_dimension == 3 and np.allclose(q.scales, [0.1, 0.2]) and list(q.zero_points) == [0, 1]
    assert back.subgraphs[0].tensors[0].shape_signature == (-1, 5, 5, 3)
    assert back.signature_defs[0].inputs == {"x": 0}


def test_constant_buffers_are_zero_copy_aligned_and_read_only():
    data = small_model().build()
    model = read_model(data)
    w = model.tensor_data(0, 1)
    assert w.shape == (2, 3, 3, 3) and w.dtype == np.float32
    assert np.array_equal(w, np.arange(54, dtype=np.float32).reshape(2, 3, 3, 3))
    assert not w.flags.writeable
    assert w.ctypes.data % 16 == 0 or w.base is not None  # viewed in place, not copied
    with pytest.raises(ValueError):
        w[0, 0, 0, 0] = 1


def test_sparsity_roundtrip():
    b = ModelBuilder()
    sparsity = Sparsity(traversal_order=(0, 1), block_map=(), dim_metadata=[
        DimensionMetadata("DENSE", dense_size=2),
        DimensionMetadata("SPARSE_CSR", array_segments=np.array([0, 1, 3]), array_indices=np.array([2, 0, 1]))])
    w = b.tensor("w", (2, 3), np.float32, data=np.array([1, 2, 3], np.float32), sparsity=sparsity)
    y = b.tensor("y", (2, 3))
    b.op("DENSIFY", [w], [y])
    b.output(y)
    back = read_model(b.build())
    assert same(back.subgraphs[0].tensors[0].sparsity, sparsity)


def test_variable_tensor_roundtrip():
    b = ModelBuilder()
    state = b.tensor("state", (1, 4), is_variable=True)
    y = b.tensor("y", (1, 4))
    b.op("RELU", [state], [y])
    b.output(y)
    tensors = read_model(b.build()).subgraphs[0].tensors
    assert tensors[state].is_variable and not tensors[y].is_variable


@pytest.mark.parametrize("name", ["selfie_segmentation", "pose_detection", "face_landmark_with_attention"])
def test_real_models_roundtrip(mediapipe_models, name):
    model = read_model(mediapipe_models[name])
    assert same(model, read_model(write_model(model)))
    assert same(model, read_model(write_model(model, external_buffers=True)))


def test_a_large_file_reads_as_its_bytes(mediapipe_models):
    """A model file over PRIVATE_READ_BYTES is read into mapped anonymous memory, not bytes:
    it must parse to the same model, with the same digest, and its weights stay read-only."""
    import hashlib
    from pathlib import Path

    from gles_delegate.tflite import reader
    path = mediapipe_models["hand_landmark_full"]
    data = Path(path).read_bytes()
    assert len(data) >= reader.PRIVATE_READ_BYTES
    from_path, from_bytes = read_model(path, background_digest=True), read_model(data)
    assert not isinstance(from_path.source_bytes, bytes)  # the private-memory path was taken
    assert from_path.digest == hashlib.sha256(data).hexdigest() == from_bytes.digest
    assert len(from_path.buffers) == len(from_bytes.buffers)
    for a, b in zip(from_path.buffers, from_bytes.buffers):
        np.testing.assert_array_equal(a, b)
        assert not a.flags.writeable
    big = max(from_path.buffers, key=len)
    with pytest.raises(ValueError):
        big[0] = 1

