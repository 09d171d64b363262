"""Malformed files give ModelError (a ValueError) saying what and where, never a crash."""
import numpy as np
import pytest

from gles_delegate import ModelError
from gles_delegate.tflite import ModelBuilder, read_model
from gles_delegate.tflite.model import TensorDef


def conv_builder():
    b = ModelBuilder()
    x = b.input("x", (1, 4, 4, 2))
    w = b.const("w", np.ones((3, 1, 1, 2), np.float32))
    y = b.tensor("y", (1, 4, 4, 3))
    b.op("CONV_2D", [x, w, -1], [y], padding=0, stride_w=1, stride_h=1)
    b.output(y)
    return b


def test_not_a_model():
    with pytest.raises(ModelError, match="too short"):
        read_model(b"abc")
    with pytest.raises(ModelError, match="file identifier"):
        read_model(b"\x00" * 64)


def test_model_error_is_a_value_error():
    assert issubclass(ModelError, ValueError)


def test_truncated_model_is_rejected_at_every_length():
    data = conv_builder().build()
    for cut in range(8, len(data), 7):
        try:
            read_model(data[:cut])
        except ModelError:
            pass


def test_tensor_index_out_of_range_names_the_operator():
    b = conv_builder()
    b.operators[0].inputs = (0, 7, -1)
    with pytest.raises(ModelError, match=r"operator 0: tensor index 7 out of range"):
        read_model(b.build())


def test_buffer_size_mismatch_names_the_tensor():
    b = conv_builder()
    b.tensors[1] = TensorDef(name="w", shape=(3, 1, 1, 3), type_name="FLOAT32", buffer=1)
    with pytest.raises(ModelError, match=r"tensor 1 \('w'\).*holds 24 bytes"):
        read_model(b.build())


def test_huge_shape_is_rejected_without_allocating():
    b = conv_builder()
    b.tensors[2] = TensorDef(name="y", shape=(1 << 20, 1 << 20, 4, 3), type_name="FLOAT32")
    with pytest.raises(ModelError, match="more than"):
        read_model(b.build())


def test_external_buffer_beyond_file():
    data = bytearray(conv_builder().build(external_buffers=True))
    # Shrink the file so the stored offset/size point past its end.
    with pytest.raises(ModelError, match="beyond the file"):
        read_model(bytes(data[:-8]))


def test_unknown_builtin_code():
    data = conv_builder().build()
    model = read_model(data)
    assert model.subgraphs[0].operators[0].op == "CONV_2D"
    # CONV_2D is builtin code 3; find the OperatorCode table's fields by flipping to an unknown code.
    patched = data.replace(b"\x03\x00\x00\x00", b"\xff\x7f\x00\x00", 1)
    try:
        read_model(patched)
    except ModelError:
        pass


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="cannot read model file"):
        read_model(str(tmp_path / "nope.tflite"))
