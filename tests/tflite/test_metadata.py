"""tflite/metadata.py and calibrate.input_ranges: the input ranges precision='auto' calibrates
on, from a model's TFLite metadata (built here with flatbuffers, as tflite-support writes it),
its quantization, or the default; a malformed metadata entry is ignored, never an error."""
import flatbuffers
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gles_delegate.calibrate import input_ranges, sample_inputs
from gles_delegate.graph import Graph
from gles_delegate.tflite import ModelBuilder, metadata, read_model, write_model
from gles_delegate.tflite.writer import quantize_params

SHAPE = (1, 4, 4, 3)


def _floats(b, values):
    b.StartVector(4, len(values), 4)
    for v in reversed(values):
        b.PrependFloat32(v)
    return b.EndVector()


def _table(b, fields, slots):
    """A table of uoffset fields {slot: offset} and ubyte fields {slot: ('u8', value)}."""
    b.StartObject(slots)
    for slot, value in fields.items():
        if isinstance(value, tuple):
            b.PrependUint8Slot(slot, value[1], 0)
        else:
            b.PrependUOffsetTRelativeSlot(slot, value, 0)
    return b.EndObject()


def _vector(b, offsets):
    b.StartVector(4, len(offsets), 4)
    for offset in reversed(offsets):
        b.PrependUOffsetTRelative(offset)
    return b.EndVector()


def metadata_bytes(tensors):
    """A ModelMetadata flatbuffer with one subgraph whose inputs have `tensors`: dicts with
    optional 'stats' (min list, max list) and 'norm' (mean list, std list) of an image input."""
    b = flatbuffers.Builder(0)
    entries = []
    for spec in tensors:
        fields = {}
        if "stats" in spec:
            low, high = spec["stats"]
            fields[metadata.TENSOR_STATS] = _table(b, {metadata.STATS_MAX: _floats(b, high),
                                                       metadata.STATS_MIN: _floats(b, low)}, 2)
        if "norm" in spec:
            mean, std = spec["norm"]
            options = _table(b, {metadata.NORM_MEAN: _floats(b, mean), metadata.NORM_STD: _floats(b, std)}, 2)
            unit = _table(b, {metadata.UNIT_OPTIONS_TYPE: ("u8", metadata.NORMALIZATION),
                              metadata.UNIT_OPTIONS: options}, 2)
            fields[metadata.TENSOR_PROCESS_UNITS] = _vector(b, [unit])
            image = _table(b, {}, 2)
            fields[metadata.TENSOR_CONTENT] = _table(b, {0: ("u8", metadata.IMAGE_PROPERTIES), 1: image}, 3)
        entries.append(_table(b, fields, 7))
    subgraph = _table(b, {metadata.SUBGRAPH_INPUTS: _vector(b, entries)}, 9)
    root = _table(b, {metadata.MODEL_SUBGRAPHS: _vector(b, [subgraph])}, 8)
    b.Finish(root, file_identifier=metadata.FILE_IDENTIFIER)
    return bytes(b.Output())


def model_with(meta, inputs=1, quantization=None, quantize_reader=False):
    """A model of `inputs` float inputs added together (or one input read by a QUANTIZE to int8
    (scale 0.05, zero point 10) and back), with `meta` as its TFLITE_METADATA entry."""
    b = ModelBuilder()
    xs = [b.input(f"x{k}", SHAPE, quantization=quantization) for k in range(inputs)]
    y = b.tensor("y", SHAPE)
    if quantize_reader:
        q = b.tensor("q", SHAPE, np.int8, quantization=(0.05, 10))
        b.op("QUANTIZE", [xs[0]], [q])
        b.op("DEQUANTIZE", [q], [y])
    else:
        b.op("ADD", [xs[0], xs[-1]], [y])
    b.output(y)
    model = b.model()
    if meta is not None:
        model.buffers.append(np.frombuffer(meta, np.uint8))
        model.metadata[metadata.METADATA_NAME] = len(model.buffers) - 1
    return read_model(write_model(model))


def test_stats_and_normalization_give_each_input_its_range():
    meta = metadata_bytes([{"stats": ([0.0, 0.0, 0.0], [1.0, 1.0, 0.5]), "norm": ([0.0], [255.0])},
                           {"norm": ([127.5], [127.5])}])
    model = model_with(meta, inputs=2)
    assert metadata.input_ranges(model) == [(0.0, 1.0), (-1.0, 1.0)]
    graph = Graph.from_model(model)
    ranges = input_ranges(graph)
    assert [ranges[t.index] for t in graph.inputs] == [(0.0, 1.0, "metadata"), (-1.0, 1.0, "metadata")]
    sample = sample_inputs(graph, seed=3)[0]
    first = sample[graph.inputs[0].index]
    assert first.min() >= 0.0 and first.max() <= 1.0 and first.min() < 0.1  # drawn over [0, 1]


def test_per_channel_normalization_spans_every_channel():
    meta = metadata_bytes([{"norm": ([100.0, 120.0, 140.0], [50.0, 60.0, 70.0])}])
    low, high = metadata.input_ranges(model_with(meta))[0]
    assert low == pytest.approx(-140.0 / 50.0) and high == pytest.approx(155.0 / 50.0)


@pytest.mark.parametrize("damage", ["truncated", "bad identifier", "offset past the end", "zero std"])
def test_malformed_metadata_is_ignored(damage):
    meta = metadata_bytes([{"norm": ([127.5], [0.0 if damage == "zero std" else 127.5])}])
    if damage == "truncated":
        meta = meta[:len(meta) // 2]
    elif damage == "bad identifier":
        meta = meta[:4] + b"XXXX" + meta[8:]
    elif damage == "offset past the end":
        meta = (len(meta) * 4).to_bytes(4, "little") + meta[4:]
    ranges = metadata.input_ranges(model_with(meta))
    assert ranges in ([], [None])
    graph = Graph.from_model(model_with(meta))
    assert input_ranges(graph)[graph.inputs[0].index] == (-1.0, 1.0, "default")


def test_without_metadata_the_quantization_says_the_range():
    recorded = quantize_params(0.1, 0)
    recorded.min, recorded.max = np.array([-2.0], np.float32), np.array([6.0], np.float32)
    graph = Graph.from_model(model_with(None, quantization=recorded))
    assert input_ranges(graph)[graph.inputs[0].index] == (-2.0, 6.0, "quantization min/max")
    graph = Graph.from_model(model_with(None, quantize_reader=True))
    low, high, where = input_ranges(graph)[graph.inputs[0].index]
    # int8 with scale 0.05 and zero point 10: (-128 - 10) * 0.05 .. (127 - 10) * 0.05
    assert (low, high) == pytest.approx((-6.9, 5.85)) and "QUANTIZE" in where
    graph = Graph.from_model(model_with(None))
    assert input_ranges(graph)[graph.inputs[0].index] == (-1.0, 1.0, "default")


# What MediaPipe 0.10.14's models state for their image input (metadata Stats); the others carry
# no TFLITE_METADATA entry (hand_recrop, iris_landmark, palm_detection_lite, pose_landmark_full).
MEDIAPIPE_RANGES = {"selfie_segmentation": (0.0, 1.0), "face_detection_short_range": (-1.0, 1.0),
                    "hand_landmark_full": (0.0, 1.0), "pose_detection": (-1.0, 1.0), "hand_recrop": None}


@pytest.mark.parametrize("name", sorted(MEDIAPIPE_RANGES))
def test_mediapipe_models_state_their_input_range(mediapipe_models, name):
    graph = Graph.from_model(read_model(str(mediapipe_models[name])))
    low, high, where = input_ranges(graph)[graph.inputs[0].index]
    expected = MEDIAPIPE_RANGES[name]
    assert ((low, high), where) == ((expected, "metadata") if expected else ((-1.0, 1.0), "default"))


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_damaged_metadata_never_raises(data):
    """Any byte of the entry overwritten (offsets, lengths, the union type): a list of ranges or
    None entries comes back, never an exception (metadata is optional: LiteRT ignores it)."""
    meta = bytearray(metadata_bytes([{"stats": ([0.0], [1.0]), "norm": ([127.5], [127.5])}, {"norm": ([0.0], [255.0])}]))
    for _ in range(data.draw(st.integers(1, 8))):
        meta[data.draw(st.integers(0, len(meta) - 1))] = data.draw(st.integers(0, 255))
    ranges = metadata.input_ranges(model_with(bytes(meta), inputs=2))
    assert isinstance(ranges, list)
    for entry in ranges:
        assert entry is None or (len(entry) == 2 and entry[0] < entry[1])
