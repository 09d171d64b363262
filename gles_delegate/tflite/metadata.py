"""The value ranges a model's TFLite metadata states for its inputs.

Models packed for MediaPipe and the TFLite Task library carry a "TFLITE_METADATA" entry: a
ModelMetadata flatbuffer (tflite-support's metadata_schema.fbs, file identifier "M001") with,
per input tensor, Stats (per-channel min and max of the values the model expects) and
NormalizationOptions (mean and std applied to the raw values before they enter the model; for
an image, raw values are 0..255). precision='auto' draws its calibration inputs from these
ranges: a model fed [0, 1] images is calibrated on [0, 1], not on U(-1, 1).

Metadata is optional and not checked by LiteRT, so a malformed entry is ignored here (no range),
never an error: every offset is checked against the buffer before it is followed.
"""
import struct

METADATA_NAME = "TFLITE_METADATA"
FILE_IDENTIFIER = b"M001"
IMAGE_RAW_RANGE = (0.0, 255.0)  # what NormalizationOptions normalizes for an image input
# Vtable slots (field order in metadata_schema.fbs; a union takes two: its type, then its value).
MODEL_SUBGRAPHS = 3            # ModelMetadata.subgraph_metadata
SUBGRAPH_INPUTS = 2            # SubGraphMetadata.input_tensor_metadata
TENSOR_CONTENT, TENSOR_PROCESS_UNITS, TENSOR_STATS = 3, 4, 5
CONTENT_PROPERTIES_TYPE = 0    # Content.content_properties (union type)
IMAGE_PROPERTIES = 2           # ContentProperties: FeatureProperties 1, ImageProperties 2, BoundingBox 3
UNIT_OPTIONS_TYPE, UNIT_OPTIONS = 0, 1
NORMALIZATION = 1              # ProcessUnitOptions.NormalizationOptions
STATS_MAX, STATS_MIN = 0, 1
NORM_MEAN, NORM_STD = 0, 1


class _Malformed(Exception):
    pass


class _Buffer:
    """Bounds-checked flatbuffer access over bytes."""

    def __init__(self, data):
        self.data = data

    def unpack(self, fmt, pos):
        if pos < 0 or pos + struct.calcsize(fmt) > len(self.data):
            raise _Malformed
        return struct.unpack_from(fmt, self.data, pos)[0]

    def follow(self, pos):
        """The position a uoffset at `pos` points to."""
        return pos + self.unpack("<I", pos)

    def field(self, table, slot):
        """Position of field `slot` of the table at `table`, or None when absent."""
        vtable = table - self.unpack("<i", table)
        size = self.unpack("<H", vtable)
        entry = 4 + 2 * slot
        if entry + 2 > size:
            return None
        offset = self.unpack("<H", vtable + entry)
        return table + offset if offset else None

    def table(self, table, slot):
        pos = self.field(table, slot)
        return None if pos is None else self.follow(pos)

    def vector(self, table, slot):
        """(start, length) of a vector field; (0, 0) when absent."""
        pos = self.table(table, slot)
        if pos is None:
            return 0, 0
        length = self.unpack("<I", pos)
        if pos + 4 + 4 * length > len(self.data):
            raise _Malformed
        return pos + 4, length

    def tables(self, table, slot):
        start, length = self.vector(table, slot)
        return [self.follow(start + 4 * k) for k in range(length)]

    def floats(self, table, slot):
        start, length = self.vector(table, slot)
        return list(struct.unpack_from(f"<{length}f", self.data, start)) if length else []

    def byte(self, table, slot):
        pos = self.field(table, slot)
        return 0 if pos is None else self.unpack("<B", pos)


def input_ranges(model, subgraph=0):
    """[(low, high) or None] per input of subgraph `subgraph` (in SubGraph.inputs order): the
    float range the model's metadata states for it (Stats min / max over its channels; else, for
    an image with NormalizationOptions, what 0..255 becomes). [] when the model has no readable
    metadata; None for an input the metadata says nothing usable about."""
    index = model.metadata.get(METADATA_NAME)
    if index is None or not 0 <= index < len(model.buffers):
        return []
    data = bytes(model.buffers[index])
    if len(data) < 8 or data[4:8] != FILE_IDENTIFIER:
        return []
    buf = _Buffer(data)
    try:
        subgraphs = buf.tables(buf.follow(0), MODEL_SUBGRAPHS)
        if subgraph >= len(subgraphs):
            return []
        return [_tensor_range(buf, tensor) for tensor in buf.tables(subgraphs[subgraph], SUBGRAPH_INPUTS)]
    except (_Malformed, struct.error):
        return []


def _tensor_range(buf, tensor):
    stats = buf.table(tensor, TENSOR_STATS)
    if stats is not None:
        low, high = buf.floats(stats, STATS_MIN), buf.floats(stats, STATS_MAX)
        if low and high and min(low) < max(high):
            return _finite(min(low), max(high))
    content = buf.table(tensor, TENSOR_CONTENT)
    if content is None or buf.byte(content, CONTENT_PROPERTIES_TYPE) != IMAGE_PROPERTIES:
        return None
    for unit in buf.tables(tensor, TENSOR_PROCESS_UNITS):
        if buf.byte(unit, UNIT_OPTIONS_TYPE) == NORMALIZATION:
            options = buf.table(unit, UNIT_OPTIONS)
            if options is None:
                return None
            means, stds = buf.floats(options, NORM_MEAN), buf.floats(options, NORM_STD)
            if not means or not stds or any(s == 0 for s in stds):
                return None
            ends = [(raw - m) / s for raw in IMAGE_RAW_RANGE for m in means for s in stds]
            return _finite(min(ends), max(ends))
    return None


def _finite(low, high):
    """(low, high) when both are finite and low < high, else None."""
    if not (abs(low) < float("inf") and abs(high) < float("inf")) or not low < high:
        return None
    return float(low), float(high)
