"""Read .tflite flatbuffers into a ModelDef: the many small tables (tensors, operators, buffers)
by reading their vtables directly, at the field offsets the generated schema bindings use, and
the rest through the bindings' accessor objects.

The bindings trust the file; this module does not. Every vector length is checked against the
file size before it is iterated, every index against what it indexes, every buffer range
against the file, and every shape against an element-count limit, so that a hostile file gives
a ModelError rather than a crash, a hang or a huge allocation.
"""
import math
import os
import struct

import numpy as np
import tflite

from ..errors import ModelError
from ..private_read import read_private
from . import schema, tables
from .limits import (INT_COST, INT_STRUCTS, MAX_RANK, MAX_TENSOR_ELEMENTS, STRING_COST, TABLE_COST, WORK_BASE,
                     WORK_PER_BYTE)
from .model import (BackgroundDigest, DimensionMetadata, ModelDef, OperatorDef, Quantization, SignatureDef,
                    Sparsity, SubgraphDef, TensorDef)

FILE_IDENTIFIER = b"TFL3"
PRIVATE_READ_BYTES = 1 << 20  # smaller files are read into bytes
_SPARSE_VECTOR_TYPES = {1: (tflite.Int32Vector, np.dtype("<i4")), 2: (tflite.Uint16Vector, np.dtype("<u2")),
                        3: (tflite.Uint8Vector, np.dtype("u1"))}
_DIM_FORMATS = schema.enum_names(tflite.DimensionType)
_SOFFSET, _VOFFSET, _UOFFSET = struct.Struct("<i"), struct.Struct("<H"), struct.Struct("<I")
# Scalar fields the hot paths (tensors, operators, sparsity) read without the generated accessor objects,
# which cost a few microseconds of Python a field: (table, accessor) -> struct of the field.
_SCALARS = {"Type": struct.Struct("<b"), "Buffer": _UOFFSET, "IsVariable": struct.Struct("<?"),
            "OpcodeIndex": _UOFFSET, "Offset": struct.Struct("<Q"), "Size": struct.Struct("<Q"),
            "Format": struct.Struct("<b"), "DenseSize": struct.Struct("<i"),
            "ArraySegmentsType": struct.Struct("<B"), "ArrayIndicesType": struct.Struct("<B"),
            "BuiltinOptionsType": struct.Struct("<B"), "BuiltinOptions2Type": struct.Struct("<B")}


def _slots(table_class, *accessors):
    """The vtable slot of each field (slot k at byte 4 + 2k of the vtable), for _Reader.slots."""
    return tuple((schema.vtable_offset(table_class, accessor) - 4) // 2 for accessor in accessors)


# The fields the hot paths read of every tensor, operator, buffer and sparse dimension, by vtable slot.
_TENSOR_FIELDS = ("Shape", "Type", "Buffer", "Name", "Quantization", "IsVariable", "Sparsity", "ShapeSignature")
_T = dict(zip(_TENSOR_FIELDS, _slots(tflite.Tensor, *_TENSOR_FIELDS)))
_OPERATOR_FIELDS = ("OpcodeIndex", "Inputs", "Outputs", "BuiltinOptionsType", "BuiltinOptions", "Intermediates",
                    "BuiltinOptions2Type", "BuiltinOptions2")
_O = dict(zip(_OPERATOR_FIELDS, _slots(tflite.Operator, *_OPERATOR_FIELDS)))
_BUFFER_FIELDS = ("Data", "Offset", "Size")
_B = dict(zip(_BUFFER_FIELDS, _slots(tflite.Buffer, *_BUFFER_FIELDS)))
_DIMENSION_FIELDS = ("Format", "DenseSize", "ArraySegmentsType", "ArraySegments", "ArrayIndicesType", "ArrayIndices")
_D = dict(zip(_DIMENSION_FIELDS, _slots(tflite.DimensionMetadata, *_DIMENSION_FIELDS)))
_SLOT_COUNT = 1 + max(*_T.values(), *_O.values(), *_B.values(), *_D.values())  # slots read of each table (unused ones cost nothing)
_SLOT_STRUCTS = [struct.Struct(f"<{n}H") for n in range(_SLOT_COUNT + 1)]
_T_TYPE, _T_SHAPE, _T_SIGNATURE, _T_BUFFER = _T["Type"], _T["Shape"], _T["ShapeSignature"], _T["Buffer"]
_T_NAME, _T_QUANTIZATION, _T_SPARSITY, _T_IS_VARIABLE = _T["Name"], _T["Quantization"], _T["Sparsity"], _T["IsVariable"]
_O_OPCODE, _O_INPUTS, _O_OUTPUTS, _O_INTERMEDIATES = _O["OpcodeIndex"], _O["Inputs"], _O["Outputs"], _O["Intermediates"]
_O_OPTIONS_TYPE, _O_OPTIONS = _O["BuiltinOptionsType"], _O["BuiltinOptions"]
_O_OPTIONS2_TYPE, _O_OPTIONS2 = _O["BuiltinOptions2Type"], _O["BuiltinOptions2"]


def read_model(source, background_digest=False):
    """Parse a .tflite model from bytes (or a path) into a ModelDef.

    Raises ModelError naming what is wrong and where for anything malformed. The ModelDef keeps
    the bytes (source_bytes); its `digest` is their sha256 (the serialization cache keys entries
    by it), computed once: when first asked for, or with background_digest=True in a thread that
    runs while this parses (for callers that know the digest will be needed).
    """
    if isinstance(source, (str, os.PathLike)):
        data = _read_file(source)  # bytes, or an mmap (slices of it are bytes too)
    elif isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
    else:
        raise TypeError(f"read_model expects bytes or a path, got {type(source).__name__}")
    if len(data) < 8:
        raise ModelError(f"not a .tflite model: {len(data)} bytes is too short for a flatbuffer")
    if data[4:8] != FILE_IDENTIFIER:
        raise ModelError(f"not a .tflite model: file identifier is {data[4:8]!r}, expected {FILE_IDENTIFIER!r}")
    job = BackgroundDigest(data) if background_digest else None
    try:
        model = _Reader(data).model()
    except ModelError:
        raise
    except (struct.error, IndexError, ValueError, TypeError, OverflowError, UnicodeDecodeError,
            AttributeError, RecursionError) as exc:
        raise ModelError(f"corrupt .tflite model: {type(exc).__name__}: {exc}") from None
    model.source_bytes, model.digest_job = data, job
    return model


def _read_file(path):
    """The file's bytes; a large file's in private anonymous memory (private_read: not a map of
    the file, which a truncation in place would turn into SIGBUS, and filled with few page faults)."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < PRIVATE_READ_BYTES:
                return f.read()
            data, count = read_private(f.fileno(), size)
            if count != size or os.read(f.fileno(), 1):
                raise ValueError(f"cannot read model file {path!r}: it changed size while being read")
            return data
    except OSError as exc:
        raise ValueError(f"cannot read model file {path!r}: {exc.strerror}") from None


class _Reader:
    def __init__(self, data):
        self.data = data
        self.root = tflite.Model.GetRootAs(data, 0)
        self.where = "model"
        self.budget = WORK_PER_BYTE * len(data) + WORK_BASE
        self._vtable_of = self._vtable = self._vtable_size = None  # field_at's last table

    def spend(self, cost):
        """Charge `cost` estimated bytes of what reading builds against the file's budget."""
        self.budget -= cost
        if self.budget < 0:
            raise ModelError(f"{self.where}: the file refers to its tables and vectors more often than a "
                             f"model of {len(self.data)} bytes can (shared offsets would make reading it "
                             f"build more than {WORK_PER_BYTE} x its size)")

    def table(self):
        self.spend(TABLE_COST)

    # -- bounded access -------------------------------------------------------------------
    # The field_* methods read a field of the table at `pos` of the file directly (the vtable
    # walk the generated accessors do, without their objects): the reader's hot paths.
    def field_at(self, pos, table_class, accessor):
        """File position of a field of the table at `pos`, or 0 when the table lacks it."""
        data, offset = self.data, schema.vtable_offset(table_class, accessor)
        if pos != self._vtable_of:  # the hot paths read several fields of one table in a row
            vtable = pos - _SOFFSET.unpack_from(data, pos)[0]
            # All three at once: a read that fails must not leave pos's entry naming another vtable.
            self._vtable, self._vtable_size, self._vtable_of = vtable, _VOFFSET.unpack_from(data, vtable)[0], pos
        if offset >= self._vtable_size:
            return 0
        field = _VOFFSET.unpack_from(data, self._vtable + offset)[0]
        return pos + field if field else 0

    def slots(self, pos, slot_count):
        """File positions of the fields in vtable slots 0..slot_count-1 of the table at `pos` (0
        for a field it lacks): the vtable read in one go, for the tables whose fields the hot
        paths read nearly all of (tensors, operators)."""
        data = self.data
        vtable = pos - _SOFFSET.unpack_from(data, pos)[0]
        present = min(slot_count, (_VOFFSET.unpack_from(data, vtable)[0] - 4) // 2)
        if present <= 0:
            return [0] * slot_count
        return [pos + o if o else 0 for o in _SLOT_STRUCTS[present].unpack_from(data, vtable + 4)] + \
            [0] * (slot_count - present)

    def scalar_at(self, at, accessor, default=0):
        """The scalar field `accessor` at file position `at` (0: absent, `default`)."""
        return _SCALARS[accessor].unpack_from(self.data, at)[0] if at else default

    def field_vector(self, pos, table_class, accessor, item_bytes):
        """(count, position of item 0) of a vector field; (0, 0) when absent. Refused when the
        file cannot hold that many items."""
        return self.vector_at(self.field_at(pos, table_class, accessor), accessor, item_bytes)

    def vector_at(self, at, accessor, item_bytes):
        """field_vector of the field `accessor` at file position `at` (0: absent)."""
        if not at:
            return 0, 0
        vector = at + _UOFFSET.unpack_from(self.data, at)[0]
        n = _UOFFSET.unpack_from(self.data, vector)[0]
        if n * item_bytes > len(self.data):
            raise ModelError(f"{self.where}: {accessor} claims {n} entries, more than the file holds")
        return n, vector + 4

    def field_ints(self, pos, table_class, accessor, max_items=None):
        """An int32 vector field as a tuple of ints (empty when absent), like ints()."""
        return self.ints_at(self.field_at(pos, table_class, accessor), accessor, max_items)

    def ints_at(self, at, accessor, max_items=None):
        """field_ints of the field `accessor` at file position `at` (0: absent)."""
        n, start = self.vector_at(at, accessor, 4)
        if max_items is not None and n > max_items:
            raise ModelError(f"{self.where}: {accessor} has {n} entries, at most {max_items} are allowed")
        self.spend(INT_COST * n)
        return (INT_STRUCTS[n] if n < len(INT_STRUCTS) else struct.Struct(f"<{n}i")).unpack_from(self.data, start)

    def field_tables(self, pos, table_class, accessor):
        """File positions of the tables of a vector-of-tables field of the table at `pos`."""
        n, start = self.field_vector(pos, table_class, accessor, 4)
        return [start + 4 * i + _UOFFSET.unpack_from(self.data, start + 4 * i)[0] for i in range(n)]

    def subtable_at(self, at):
        """File position of the table the table field at file position `at` points to (0: none)."""
        return at + _UOFFSET.unpack_from(self.data, at)[0] if at else 0

    def generated(self, table_class, pos):
        """The generated accessor object of the table at `pos` (for the rarely read tables)."""
        table = table_class()
        table.Init(self.data, pos)
        return table

    def string_at(self, at, accessor):
        """The string field `accessor` at file position `at` ('' when absent)."""
        n, start = self.vector_at(at, accessor, 1)
        return self.string(self.data[start:start + n])

    def length(self, obj, field, min_item_bytes):
        """obj.<field>Length(), refused when the file cannot hold that many items."""
        n = getattr(obj, field + "Length")()
        if n < 0 or n * min_item_bytes > len(self.data):
            raise ModelError(f"{self.where}: {field} claims {n} entries, more than the file holds")
        return n

    def ints(self, obj, field, item_bytes=4, max_items=None):
        """A scalar vector as a tuple of Python ints (floats for a float vector: BUCKETIZE's
        boundaries), empty when absent; more than `max_items` is refused before anything is
        converted."""
        if getattr(obj, field + "IsNone")():
            return ()
        n = self.length(obj, field, item_bytes)
        if max_items is not None and n > max_items:
            raise ModelError(f"{self.where}: {field} has {n} entries, at most {max_items} are allowed")
        self.spend(INT_COST * n)
        return tuple(getattr(obj, field + "AsNumpy")().tolist())

    def array(self, obj, field, item_bytes, copied=True):
        """A scalar vector as a zero-copy numpy view (None when absent). copied: the caller
        copies it (charged against the budget)."""
        if getattr(obj, field + "IsNone")():
            return None
        n = self.length(obj, field, item_bytes)
        self.spend(8 * n if copied else 0)
        return getattr(obj, field + "AsNumpy")()

    def string(self, raw):
        self.spend(STRING_COST + len(raw or b""))
        return raw.decode("utf-8", errors="replace") if raw else ""

    # -- model ----------------------------------------------------------------------------
    def model(self):
        root = self.root
        buffers = [self.buffer(i, pos) for i, pos in enumerate(self.field_tables(root._tab.Pos, tflite.Model, "Buffers"))]
        opcodes = [self.opcode(i) for i in range(self.length(root, "OperatorCodes", 4))]
        subgraphs = [self.subgraph(i, opcodes, buffers) for i in range(self.length(root, "Subgraphs", 4))]
        if not subgraphs:
            raise ModelError("model has no subgraphs")
        metadata = {}
        for i in range(self.length(root, "Metadata", 4)):
            self.where = f"metadata {i}"
            self.table()
            entry = root.Metadata(i)
            self.check_index(entry.Buffer(), len(buffers), "buffer")
            metadata[self.string(entry.Name())] = entry.Buffer()
        signatures = [self.signature(i, subgraphs) for i in range(self.length(root, "SignatureDefs", 4))]
        return ModelDef(subgraphs=subgraphs, buffers=buffers, version=root.Version(),
                        description=self.string(root.Description()),
                        signature_defs=signatures, metadata=metadata)

    def check_index(self, index, count, what):
        if not 0 <= index < count:
            raise ModelError(f"{self.where}: {what} index {index} out of range [0, {count})")

    def buffer(self, i, pos):
        self.where = f"buffer {i}"
        self.table()
        at = self.slots(pos, _SLOT_COUNT)
        offset, size = self.scalar_at(at[_B["Offset"]], "Offset"), self.scalar_at(at[_B["Size"]], "Size")
        if offset > 1:
            # Data stored after the flatbuffer (models over 2 GB, or written that way).
            if offset + size > len(self.data):
                raise ModelError(f"buffer {i}: offset {offset} + size {size} is beyond the file "
                                 f"({len(self.data)} bytes)")
            raw = np.frombuffer(self.data, np.uint8, size, offset)
        else:
            n, start = self.vector_at(at[_B["Data"]], "Data", 1)
            raw = np.frombuffer(self.data, np.uint8, n, start) if n else np.zeros(0, np.uint8)
        raw.flags.writeable = False
        return raw

    def opcode(self, i):
        self.where = f"operator code {i}"
        self.table()
        code = self.root.OperatorCodes(i)
        # Files from before schema v3a only fill deprecated_builtin_code (an int8, capped at 127).
        builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
        if builtin == tflite.BuiltinOperator.CUSTOM:
            name = self.string(code.CustomCode())
            if not name:
                raise ModelError(f"operator code {i}: CUSTOM without a custom_code name")
            return name, True, code.Version()
        if builtin not in schema.BUILTIN_OP_NAMES:
            raise ModelError(f"operator code {i}: unknown builtin operator code {builtin}")
        return schema.BUILTIN_OP_NAMES[builtin], False, code.Version()

    def subgraph(self, s, opcodes, buffers):
        self.where = f"subgraph {s}"
        self.table()
        sg = self.root.Subgraphs(s)
        tensors = tables.read_tensors(self, s, self.field_tables(sg._tab.Pos, tflite.SubGraph, "Tensors"), buffers)
        self.where = f"subgraph {s}"
        inputs, outputs = self.ints(sg, "Inputs"), self.ints(sg, "Outputs")
        for index in inputs + outputs:
            self.check_index(index, len(tensors), "graph input/output tensor")
        ops = tables.read_operators(self, s, self.field_tables(sg._tab.Pos, tflite.SubGraph, "Operators"),
                                    opcodes, len(tensors))
        return SubgraphDef(name=self.string(sg.Name()), tensors=tensors, inputs=inputs,
                           outputs=outputs, operators=ops)

    def tensor(self, s, t, pos, buffers):
        self.where = f"subgraph {s} tensor {t}"
        self.table()
        at = self.slots(pos, _SLOT_COUNT)
        type_code = self.scalar_at(at[_T_TYPE], "Type")
        type_name = schema.TENSOR_TYPE_NAMES.get(type_code)
        if type_name is None:
            raise ModelError(f"{self.where}: unknown tensor type {type_code}")
        shape = self.ints_at(at[_T_SHAPE], "Shape", max_items=MAX_RANK)
        signature = self.ints_at(at[_T_SIGNATURE], "ShapeSignature", max_items=MAX_RANK) or None
        self.check_shape(shape, signature)
        buffer = self.scalar_at(at[_T_BUFFER], "Buffer")
        self.check_index(buffer, max(len(buffers), 1), "buffer")
        # The sub-tables of quantized or sparse tensors: the generated accessors read them. Many
        # converters give every tensor an empty Quantization table: that one is skipped here.
        quantization = self.quantization_table(self.subtable_at(at[_T_QUANTIZATION]))
        result = TensorDef(name=self.string_at(at[_T_NAME], "Name"), shape=shape, type_name=type_name,
                           buffer=buffer, quantization=self.quantization(quantization),
                           sparsity=self.sparsity(self.subtable_at(at[_T_SPARSITY])), shape_signature=signature,
                           is_variable=bool(self.scalar_at(at[_T_IS_VARIABLE], "IsVariable")))
        self.check_buffer_size(result, buffers)
        return result

    def quantization_table(self, table):
        """The generated QuantizationParameters of the table at `table` (0: the tensor has
        none), or None when it has none or one without scales (which says nothing)."""
        if not table or not self.field_vector(table, tflite.QuantizationParameters, "Scale", 4)[0]:
            return None
        return self.generated(tflite.QuantizationParameters, table)

    def check_shape(self, shape, signature):
        if len(shape) > MAX_RANK:
            raise ModelError(f"{self.where}: rank {len(shape)} exceeds {MAX_RANK}")
        if shape and min(shape) < 0:
            raise ModelError(f"{self.where}: negative dimension in shape {list(shape)}")
        if math.prod(shape) > MAX_TENSOR_ELEMENTS:
            raise ModelError(f"{self.where}: shape {list(shape)} has more than {MAX_TENSOR_ELEMENTS} elements")
        if signature is not None and (len(signature) != len(shape) or any(d < -1 for d in signature)):
            raise ModelError(f"{self.where}: shape_signature {list(signature)} does not fit shape {list(shape)}")

    def check_buffer_size(self, tensor, buffers):
        raw = buffers[tensor.buffer] if buffers else None
        if raw is None or raw.size == 0 or tensor.dtype is None:
            return
        if tensor.sparsity is not None:
            # Stored values of a sparse tensor: any count (the metadata says which), whole items.
            if raw.size % tensor.dtype.itemsize:
                raise ModelError(f"{self.where} ({tensor.name!r}): buffer {tensor.buffer} holds {raw.size} "
                                 f"bytes, not a whole number of {tensor.type_name} values")
            return
        expected = math.prod(tensor.shape) * tensor.dtype.itemsize
        if raw.size != expected:
            raise ModelError(f"{self.where} ({tensor.name!r}): buffer {tensor.buffer} holds {raw.size} bytes, "
                             f"shape {list(tensor.shape)} of {tensor.type_name} needs {expected}")

    def quantization(self, q):
        if q is None:
            return None
        self.table()
        scales = self.array(q, "Scale", 4)
        if scales is None or scales.size == 0:
            return None
        zero_points = self.array(q, "ZeroPoint", 8)
        zero_points = np.zeros(scales.size, np.int64) if zero_points is None else zero_points.astype(np.int64)
        if zero_points.size != scales.size:
            raise ModelError(f"{self.where}: {scales.size} scales but {zero_points.size} zero points")
        if not np.all(np.isfinite(scales)):
            raise ModelError(f"{self.where}: quantization scale {scales[~np.isfinite(scales)][0]} is not finite")
        return Quantization(scales=scales.astype(np.float32), zero_points=zero_points,
                            quantized_dimension=q.QuantizedDimension(),
                            min=self.array(q, "Min", 4), max=self.array(q, "Max", 4))

    def sparsity(self, pos):
        """The Sparsity of the SparsityParameters table at `pos` (0: none)."""
        if not pos:
            return None
        self.table()
        S = tflite.SparsityParameters
        dims = []
        for meta in self.field_tables(pos, S, "DimMetadata"):
            self.table()
            at = self.slots(meta, _SLOT_COUNT)
            format_code = self.scalar_at(at[_D["Format"]], "Format")
            dims.append(DimensionMetadata(
                format=_DIM_FORMATS.get(format_code, str(format_code)),
                dense_size=self.scalar_at(at[_D["DenseSize"]], "DenseSize"),
                array_segments=self.sparse_vector(at, "ArraySegments"),
                array_indices=self.sparse_vector(at, "ArrayIndices")))
        return Sparsity(traversal_order=self.field_ints(pos, S, "TraversalOrder"),
                        block_map=self.field_ints(pos, S, "BlockMap"), dim_metadata=dims)

    def sparse_vector(self, at, field):
        """The index vector (a union of int32 / uint16 / uint8 vectors) `field` of a
        DimensionMetadata whose field positions are `at` (slots()), as int64; None when absent."""
        union_type = self.scalar_at(at[_D[field + "Type"]], field + "Type")
        table = self.subtable_at(at[_D[field]])
        if not table or union_type == 0:
            return None
        if union_type not in _SPARSE_VECTOR_TYPES:
            raise ModelError(f"{self.where}: unknown sparse index vector type {union_type}")
        vector_class, dtype = _SPARSE_VECTOR_TYPES[union_type]
        values = self.field_at(table, vector_class, "Values")
        if not values:
            return np.zeros(0, np.int32)
        n, start = self.vector_at(values, "Values", dtype.itemsize)
        self.spend(8 * n)
        return np.frombuffer(self.data, dtype, n, start).astype(np.int64)

    def operator(self, s, k, pos, opcodes, n_tensors):
        self.where = f"subgraph {s} operator {k}"
        self.table()
        at = self.slots(pos, _SLOT_COUNT)
        opcode = self.scalar_at(at[_O_OPCODE], "OpcodeIndex")
        self.check_index(opcode, len(opcodes), "opcode")
        name, custom, version = opcodes[opcode]
        inputs, outputs = self.ints_at(at[_O_INPUTS], "Inputs"), self.ints_at(at[_O_OUTPUTS], "Outputs")
        intermediates = self.ints_at(at[_O_INTERMEDIATES], "Intermediates")
        read = inputs + intermediates
        if read and (min(read) < -1 or max(read) >= n_tensors):  # -1: an omitted optional input
            for index in read:
                if index != -1:
                    self.check_index(index, n_tensors, "tensor")
        if outputs and (min(outputs) < 0 or max(outputs) >= n_tensors):
            for index in outputs:
                self.check_index(index, n_tensors, "output tensor")
        custom_options = self.custom_options(self.generated(tflite.Operator, pos)) if custom else None
        return OperatorDef(op=name, inputs=inputs, outputs=outputs, version=version, custom=custom,
                           options=self.builtin_options(at), custom_options=custom_options,
                           intermediates=intermediates)

    def custom_options(self, op):
        offset, size = op.LargeCustomOptionsOffset(), op.LargeCustomOptionsSize()
        if offset > 1:
            if offset + size > len(self.data):
                raise ModelError(f"{self.where}: custom options beyond the end of the file")
            self.spend(size)
            return self.data[offset:offset + size]
        raw = self.array(op, "CustomOptions", 1, copied=False)
        self.spend(0 if raw is None else raw.size)
        return None if raw is None else raw.tobytes()

    def builtin_options(self, at):
        """The builtin options of an operator as {snake_name: value}: every scalar, string and
        vector field of the table in its first options union, else in its second (the
        StableHLO ops'). `at`: the operator's field positions (slots())."""
        for names, type_at, table_at, accessor in (
                (schema.OPTIONS_TYPE_NAMES, _O_OPTIONS_TYPE, _O_OPTIONS, "BuiltinOptionsType"),
                (schema.OPTIONS2_TYPE_NAMES, _O_OPTIONS2_TYPE, _O_OPTIONS2, "BuiltinOptions2Type")):
            type_name = names.get(self.scalar_at(at[type_at], accessor))
            table = self.subtable_at(at[table_at])
            if type_name not in (None, "NONE") and table:
                self.table()
                return self.table_fields(table, getattr(schema.table_module(type_name), type_name))
        return {}

    def table_fields(self, pos, table_class):
        """Every scalar, string and vector field of the options table at `pos` as
        {snake_name: value}: scalars straight from its vtable (schema.options_layout), the rest
        through the generated accessors."""
        data, fields, obj = self.data, {}, None
        vtable = pos - _SOFFSET.unpack_from(data, pos)[0]
        vtable_size = _VOFFSET.unpack_from(data, vtable)[0]
        for field in schema.options_layout(table_class):
            if field.packer is not None:
                at = _VOFFSET.unpack_from(data, vtable + field.offset)[0] if field.offset < vtable_size else 0
                fields[field.name] = field.packer.unpack_from(data, pos + at)[0] if at else field.default
                continue
            obj = obj or self.generated(table_class, pos)
            if field.vector:
                if not getattr(obj, field.accessor + "IsNone")():  # absent differs from empty (RESHAPE)
                    fields[field.name] = self.ints(obj, field.accessor)
                continue
            value = getattr(obj, field.accessor)()
            if isinstance(value, bytes):
                fields[field.name] = self.string(value)
        return fields

    def signature(self, i, subgraphs):
        self.where = f"signature {i}"
        self.table()
        sig = self.root.SignatureDefs(i)
        index = sig.SubgraphIndex()
        self.check_index(index, len(subgraphs), "subgraph")
        n_tensors = len(subgraphs[index].tensors)

        def tensor_map(field):
            mapping = {}
            for j in range(self.length(sig, field, 4)):
                self.table()
                entry = getattr(sig, field)(j)
                self.check_index(entry.TensorIndex(), n_tensors, "tensor")
                mapping[self.string(entry.Name())] = entry.TensorIndex()
            return mapping
        return SignatureDef(key=self.string(sig.SignatureKey()), subgraph_index=index,
                            inputs=tensor_map("Inputs"), outputs=tensor_map("Outputs"))
