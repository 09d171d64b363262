"""What reading a .tflite file may build: the bounds the reader (reader.py, tables.py) holds a
file to, so that a hostile file is a ModelError rather than a crash, a hang or a huge allocation."""
import struct

MAX_TENSOR_ELEMENTS = 1 << 31
MAX_RANK = 16
# What reading may build, in estimated bytes of Python objects: WORK_PER_BYTE per byte of the
# file plus WORK_BASE. A flatbuffer may point many times at one table or vector (a DAG), so
# without a budget a small file could make the reader build millions of objects.
WORK_PER_BYTE, WORK_BASE = 32, 4 << 20
TABLE_COST, INT_COST, STRING_COST = 256, 40, 64
INT_STRUCTS = [struct.Struct(f"<{n}i") for n in range(MAX_RANK + 1)]  # shapes, operators' tensor lists
