"""Name tables over the generated TFLite schema bindings (the `tflite` package).

Everything here is derived from the bindings, so it follows the schema version they were
generated from instead of a hand-written copy of it.
"""
import dataclasses
import functools
import importlib
import re

import numpy as np
import tflite

BUILTIN_OP_NAMES = {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}
BUILTIN_OP_CODES = {name: code for code, name in BUILTIN_OP_NAMES.items()}
OPTIONS_TYPE_NAMES = {v: k for k, v in vars(tflite.BuiltinOptions).items() if not k.startswith("_")}
OPTIONS_TYPE_CODES = {name: code for code, name in OPTIONS_TYPE_NAMES.items()}
# The second options union (Operator.builtin_options_2): the StableHLO ops' tables, and DILATE's,
# REDUCE_WINDOW's, STABLEHLO_COMPOSITE's. An operator fills one union or the other.
OPTIONS2_TYPE_NAMES = {v: k for k, v in vars(tflite.BuiltinOptions2).items() if not k.startswith("_")}
OPTIONS2_TYPE_CODES = {name: code for code, name in OPTIONS2_TYPE_NAMES.items()}

TENSOR_TYPE_NAMES = {v: k for k, v in vars(tflite.TensorType).items() if not k.startswith("_")}
TENSOR_TYPE_CODES = {name: code for code, name in TENSOR_TYPE_NAMES.items()}
# TFLite tensor type -> numpy dtype, for the types whose bytes numpy can view directly.
NUMPY_DTYPES = {
    "FLOAT32": np.float32, "FLOAT16": np.float16, "FLOAT64": np.float64,
    "INT8": np.int8, "UINT8": np.uint8, "INT16": np.int16, "UINT16": np.uint16,
    "INT32": np.int32, "UINT32": np.uint32, "INT64": np.int64, "UINT64": np.uint64,
    "BOOL": np.bool_, "COMPLEX64": np.complex64, "COMPLEX128": np.complex128,
}
DTYPE_TO_TENSOR_TYPE = {np.dtype(v): TENSOR_TYPE_CODES[k] for k, v in NUMPY_DTYPES.items()}

# Ops whose options table is not named after the op: tables several ops share (TFLite's
# flatbuffer_conversions.cc reads CONV_3D_TRANSPOSE's options from Conv3DOptions, MULTINOMIAL's
# from RandomOptions) and abbreviated names. Every other op's table is the union member whose
# name, without "Options", is the op's name up to case and underscores (CONV_3D: Conv3DOptions,
# BATCH_TO_SPACE_ND: BatchToSpaceNDOptions); tests/tflite/test_schema.py checks that every
# table of the BuiltinOptions union is some op's.
_OPTIONS_OVERRIDES = {
    "AVERAGE_POOL_2D": "Pool2DOptions", "MAX_POOL_2D": "Pool2DOptions", "L2_POOL_2D": "Pool2DOptions",
    "MEAN": "ReducerOptions", "SUM": "ReducerOptions", "REDUCE_MAX": "ReducerOptions",
    "REDUCE_MIN": "ReducerOptions", "REDUCE_PROD": "ReducerOptions", "REDUCE_ANY": "ReducerOptions",
    "REDUCE_ALL": "ReducerOptions", "MAXIMUM": "MaximumMinimumOptions", "MINIMUM": "MaximumMinimumOptions",
    "CONV_3D_TRANSPOSE": "Conv3DOptions", "RANDOM_UNIFORM": "RandomOptions",
    "RANDOM_STANDARD_NORMAL": "RandomOptions", "MULTINOMIAL": "RandomOptions",
    "UNIDIRECTIONAL_SEQUENCE_RNN": "SequenceRNNOptions", "L2_NORMALIZATION": "L2NormOptions",
}


def _name_key(name):
    """'CONV_3D' and 'Conv3D' -> 'conv3d': names compared up to case and underscores."""
    return name.replace("_", "").lower()


# {_name_key(table name without "Options"): table name} over both options unions.
_OPTIONS_BY_KEY = {_name_key(name[:-len("Options")]): name for name in (*OPTIONS_TYPE_CODES, *OPTIONS2_TYPE_CODES)
                   if name.endswith("Options")}


def options_union(table_name):
    """(type field, table field, type code) of the Operator union that holds `table_name`:
    BuiltinOptions, or BuiltinOptions2 for the tables only it has."""
    if table_name in OPTIONS2_TYPE_CODES:
        return "BuiltinOptions2Type", "BuiltinOptions2", OPTIONS2_TYPE_CODES[table_name]
    return "BuiltinOptionsType", "BuiltinOptions", OPTIONS_TYPE_CODES[table_name]


def options_table_name(op_name):
    """The schema's options table name for a builtin op name, or None if it has none."""
    if op_name in _OPTIONS_OVERRIDES:
        return _OPTIONS_OVERRIDES[op_name]
    return _OPTIONS_BY_KEY.get(_name_key(op_name))


def table_module(table_name):
    """The generated module for a schema table (holds its reader class and builder functions)."""
    return importlib.import_module(f"tflite.{table_name}")


@functools.lru_cache(maxsize=None)
def snake_case(camel):
    """'StrideW' -> 'stride_w', 'DilationHFactor' -> 'dilation_h_factor'."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", camel).lower()


def camel_case(snake):
    """'stride_w' -> 'StrideW'."""
    return "".join(part[:1].upper() + part[1:] for part in snake.split("_"))


def enum_names(enum_class):
    """{value: NAME} of a generated enum class."""
    return {v: k for k, v in vars(enum_class).items() if not k.startswith("_")}


class _FieldOffset(Exception):
    def __init__(self, offset):
        super().__init__(offset)
        self.offset = offset


class _Probe:
    """Stands in for a generated table's flatbuffers.Table: the first vtable lookup an accessor
    makes is the offset of its field."""

    def Offset(self, offset):
        raise _FieldOffset(offset)


@functools.lru_cache(maxsize=None)
def field_offsets(table_class):
    """{accessor name: vtable offset of its field} for every accessor of a generated table class
    (the n of its `self._tab.Offset(n)`), found by calling each accessor on a probe: for readers
    that walk the flatbuffer without the accessor objects."""
    offsets = {}
    for name in vars(table_class):
        if not name[:1].isupper() or name == "Init" or name.startswith("GetRootAs") or name.endswith("BufferHasIdentifier"):
            continue
        table = table_class.__new__(table_class)
        table._tab = _Probe()
        for args in ((), (0,)):
            try:
                getattr(table, name)(*args)
            except _FieldOffset as found:
                offsets[name] = found.offset
                break
            except TypeError:  # an accessor of a vector item takes its index
                continue
    return offsets


def vtable_offset(table_class, accessor):
    """The vtable offset of one field (field_offsets); LookupError for a name that reads none."""
    try:
        return field_offsets(table_class)[accessor]
    except KeyError:
        raise LookupError(f"{table_class.__name__}.{accessor} reads no table field") from None


class _FieldType(Exception):
    def __init__(self, flags):
        super().__init__(flags)
        self.flags = flags


class _ScalarProbe:
    """A present field at position 0: a scalar accessor reads it through Get(flags, ...),
    which names its flatbuffers number type."""
    Pos = 0

    def Offset(self, offset):
        return 4

    def Get(self, flags, position):
        raise _FieldType(flags)


class _AbsentProbe:
    """Every field absent: an accessor returns its default."""
    Pos = 0

    def Offset(self, offset):
        return 0


class _VectorProbe:
    """A present vector field: its AsNumpy accessor names the item's number type through
    GetVectorAsNumpy(flags, ...)."""
    Pos = 0

    def Offset(self, offset):
        return 4

    def GetVectorAsNumpy(self, flags, offset):
        raise _FieldType(flags)


@dataclasses.dataclass(frozen=True)
class OptionsField:
    """One field of a generated options table: its snake_case name and accessor; for a scalar
    its vtable offset, the struct that reads it and its default (packer None: a vector, a
    string or a table, read through the generated accessor); for a vector its items' numpy
    dtype name (int64 for the StableHLO tables' dimension lists, uint8 for bytes)."""
    name: str
    accessor: str
    offset: int
    packer: object = None
    default: object = None
    vector: bool = False
    item: str = None


def _vector_item(table_class, name):
    """The numpy dtype name of the items of vector field `name` (its AsNumpy accessor's type)."""
    table = table_class.__new__(table_class)
    table._tab = _VectorProbe()
    try:
        getattr(table, name + "AsNumpy")()
    except _FieldType as found:
        return found.flags.name
    return None  # a vector of tables or strings: no numpy view


@functools.lru_cache(maxsize=None)
def options_layout(table_class):
    """The OptionsFields of a generated options table class, in its accessor order (the reader
    reads scalars straight from the vtable with them: the accessor objects cost a few
    microseconds of Python a field, on every operator of a model)."""
    offsets = field_offsets(table_class)
    names = [m for m in vars(table_class) if m in offsets]
    fields = []
    for name in names:
        if name.endswith(("AsNumpy", "IsNone", "Length")):
            continue
        vector = name + "Length" in offsets
        packer = default = None
        if not vector:
            table = table_class.__new__(table_class)
            table._tab = _ScalarProbe()
            try:
                getattr(table, name)()
            except _FieldType as found:
                packer = found.flags.packer_type
                table._tab = _AbsentProbe()
                default = getattr(table, name)()
            except (AttributeError, TypeError):  # a string or a table: no Get
                pass
        item = _vector_item(table_class, name) if vector else None
        fields.append(OptionsField(snake_case(name), name, offsets[name], packer, default, vector, item))
    return tuple(fields)
