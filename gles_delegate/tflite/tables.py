"""A subgraph's tensor and operator tables read in a few numpy passes over the file, instead
of twenty-odd Python calls a table (the reader's `_Reader.tensor` and `_Reader.operator`, which
stay the definition).

Every table's vtable, its scalar fields and the positions and lengths of its vectors (a
tensor's shape, signature and name, an operator's tensor lists) are gathered at once and
bounds-checked as arrays; the Python left per table is making its object, decoding a name and
reading an operator's options. A tensor with a quantization scale or a sparsity table, a custom
operator and one with options in the second union (the StableHLO ops') are read by the scalar
path on their own. Anything unusual (a position or
value out of range, a bad shape, a buffer of the wrong size, the file's reading budget running
out) makes the whole table go through the scalar path one table at a time, which gives the
same result or names what is wrong and where: nothing here raises an error of its own.
tests/tflite/test_tables.py checks that both paths agree, on real models and corrupted ones.
"""
import numpy as np
import tflite

from . import schema
from .limits import INT_COST, MAX_RANK, MAX_TENSOR_ELEMENTS, STRING_COST, TABLE_COST
from .model import OperatorDef, TensorDef

BATCH_MIN_TABLES = 128  # fewer are read one by one: the numpy passes' fixed cost outweighs their savings there
# The fields read, by vtable slot (slot k at byte 4 + 2k of the vtable).
_TENSOR_SLOTS = {name: (schema.vtable_offset(tflite.Tensor, name) - 4) // 2 for name in
                 ("Shape", "Type", "Buffer", "Name", "Quantization", "IsVariable", "Sparsity", "ShapeSignature")}
_SCALE_SLOT = (schema.vtable_offset(tflite.QuantizationParameters, "Scale") - 4) // 2
_OPERATOR_SLOTS = {name: (schema.vtable_offset(tflite.Operator, name) - 4) // 2 for name in
                   ("OpcodeIndex", "Inputs", "Outputs", "BuiltinOptionsType", "BuiltinOptions", "Intermediates",
                    "BuiltinOptions2")}
_OPTIONS_CLASSES = {}  # options type code -> generated class (None: no options), filled on first use
# Bytes an item of each tensor type code takes (0: a type numpy cannot hold, as TensorDef.dtype says).
_ITEMSIZES = np.array([np.dtype(schema.NUMPY_DTYPES[name]).itemsize if name in schema.NUMPY_DTYPES else 0
                       for name in map(schema.TENSOR_TYPE_NAMES.get, range(max(schema.TENSOR_TYPE_NAMES) + 1))],
                      np.int64)


class _Unusual(Exception):
    """Something the batched read does not cover: the tables are read one by one."""


class _Gather:
    """Little-endian integers of one file at arrays of positions, every position checked."""

    def __init__(self, data):
        self.bytes = np.frombuffer(data, np.uint8)
        self.size = len(data)

    def ints(self, positions, width, signed=False):
        """The `width`-byte integers at `positions` (int64 array); _Unusual if any lies outside."""
        if positions.size and (positions.min() < 0 or positions.max() > self.size - width):
            raise _Unusual
        values = self.bytes[positions].astype(np.int64)
        for k in range(1, width):
            values |= self.bytes[positions + k].astype(np.int64) << (8 * k)
        if signed:
            top = 1 << (8 * width - 1)
            values = (values ^ top) - top
        return values

    def where(self, positions, width, default=0, signed=False):
        """ints() at the nonzero `positions` (a field's file position, 0 where absent), else `default`."""
        present = positions != 0
        return np.where(present, self.ints(np.where(present, positions, 0), width, signed), default)

    def vectors(self, fields, item_bytes):
        """(start of item 0, item count) of the vector fields at `fields` (0: absent; count 0,
        start 0), each vector checked to lie in the file."""
        present = fields != 0
        vector = np.where(present, fields + self.where(fields, 4), 0)
        count = self.where(vector, 4)
        start = np.where(present, vector + 4, 0)
        if present.any() and (start + count * item_bytes > self.size).any():
            raise _Unusual
        return start, count


def _field_positions(gather, tables, slots):
    """{field: file positions of that field of every table at `tables`} (0 where absent):
    each table's vtable read as arrays (what _Reader.slots does for one table)."""
    vtables = tables - gather.ints(tables, 4, signed=True)
    sizes = gather.ints(vtables, 2)
    if (sizes < 4).any() or (vtables + sizes > gather.size).any():
        raise _Unusual
    out = {}
    for name, slot in slots.items():
        present = sizes >= 4 + 2 * slot + 2
        offsets = np.where(present, gather.ints(np.where(present, vtables + 4 + 2 * slot, 0), 2), 0)
        out[name] = np.where(offsets != 0, tables + offsets, 0)
    return out


def read_tensors(reader, s, positions, buffers):
    """The TensorDefs of the tables at `positions` (subgraph `s`), as [reader.tensor(s, t, pos,
    buffers) for each] gives them (with the same reading budget charged), read in batches."""
    return _batched_or_one_by_one(reader, len(positions), lambda: _tensors(reader, s, positions, buffers),
                                  lambda: [reader.tensor(s, t, pos, buffers) for t, pos in enumerate(positions)])


def read_operators(reader, s, positions, opcodes, n_tensors):
    """The OperatorDefs of the tables at `positions` (subgraph `s` of `n_tensors` tensors), as
    [reader.operator(s, k, pos, opcodes, n_tensors) for each] gives them, read in batches."""
    return _batched_or_one_by_one(reader, len(positions), lambda: _operators(reader, s, positions, opcodes, n_tensors),
                                  lambda: [reader.operator(s, k, pos, opcodes, n_tensors)
                                           for k, pos in enumerate(positions)])


def _batched_or_one_by_one(reader, count, batched, one_by_one):
    if count < BATCH_MIN_TABLES:
        return one_by_one()
    budget = reader.budget
    try:
        return batched()
    except Exception:  # noqa: BLE001 (anything: the scalar path gives the result, or the error to raise)
        reader.budget = budget
    return one_by_one()


def _tensors(reader, s, positions, buffers):
    data, gather = reader.data, _Gather(reader.data)
    tables = np.asarray(positions, np.int64)
    at = _field_positions(gather, tables, _TENSOR_SLOTS)
    type_codes = gather.where(at["Type"], 1, signed=True)
    type_names = [schema.TENSOR_TYPE_NAMES.get(code) for code in type_codes.tolist()]
    if None in type_names:
        raise _Unusual
    buffer_indices = gather.where(at["Buffer"], 4)
    if buffer_indices.size and buffer_indices.max() >= max(len(buffers), 1):
        raise _Unusual
    variables = gather.where(at["IsVariable"], 1) != 0
    shape_spans, signature_spans = _spans(gather, at["Shape"]), _spans(gather, at["ShapeSignature"])
    ranks, signature_ranks = shape_spans[1], signature_spans[1]
    _check_affordable(reader, ranks, signature_ranks)
    shapes, elements = _int_vectors(gather, *shape_spans)
    signatures, _ = _int_vectors(gather, *signature_spans, minimum=-1, products=False)
    if (elements > MAX_TENSOR_ELEMENTS).any() or ((signature_ranks != ranks) & (signature_ranks != 0)).any():
        raise _Unusual
    special = (at["Sparsity"] != 0) | _has_scales(gather, at["Quantization"])
    plain = ~special
    _check_buffer_sizes(type_codes[plain], buffer_indices[plain], elements[plain], buffers)
    name_starts, name_lengths = gather.vectors(at["Name"], 1)
    reader.spend(int((TABLE_COST + STRING_COST) * plain.sum()
                     + ((INT_COST * (ranks + signature_ranks) + name_lengths) * plain).sum()))
    tensors = []
    for t, (pos, type_name, buffer, variable, shape, signature, name_at, name_end, is_special) in enumerate(zip(
            positions, type_names, buffer_indices.tolist(), variables.tolist(), shapes, signatures,
            name_starts.tolist(), (name_starts + name_lengths).tolist(), special.tolist())):
        if is_special:
            tensors.append(reader.tensor(s, t, pos, buffers))
            continue
        raw = data[name_at:name_end]
        tensors.append(TensorDef(raw.decode("utf-8", errors="replace") if raw else "", shape, type_name, buffer,
                                 None, None, signature or None, variable))
    return tensors


def _spans(gather, fields, max_count=MAX_RANK):
    """(start of item 0, item count) of the int32 vector fields at `fields` (0: absent, count
    0), every count at most `max_count` (None: any), else _Unusual."""
    starts, counts = gather.vectors(fields, 4)
    if max_count is not None and counts.size and counts.max() > max_count:
        raise _Unusual
    return starts, counts


def _check_affordable(reader, *counts):
    """_Unusual unless the items of vectors of these counts fit in what is left of the reading
    budget: checked before they are gathered, since one vector many tables share (a DAG) is
    gathered once per table."""
    if INT_COST * sum(int(c.sum()) for c in counts) > reader.budget:
        raise _Unusual


def _int_vectors(gather, starts, counts, minimum=0, maximum=None, products=True):
    """(list of the int32 vectors of _spans() as tuples, the float64 product of each or None):
    shapes and shape signatures, operators' tensor lists. Every item in [minimum, maximum), else
    _Unusual."""
    ends = np.cumsum(counts)
    firsts = ends - counts
    items = np.repeat(starts - 4 * firsts, counts) + 4 * np.arange(int(ends[-1]) if ends.size else 0)
    values = gather.ints(items, 4, signed=True)
    if values.size and (values.min() < minimum or (maximum is not None and values.max() >= maximum)):
        raise _Unusual
    flat = values.tolist()
    vectors = [tuple(flat[a:b]) for a, b in zip(firsts.tolist(), ends.tolist())]
    if not products:
        return vectors, None
    product = np.ones(counts.size)
    np.multiply.at(product, np.repeat(np.arange(counts.size), counts), values.astype(np.float64))
    return vectors, product


def _operators(reader, s, positions, opcodes, n_tensors):
    gather = _Gather(reader.data)
    at = _field_positions(gather, np.asarray(positions, np.int64), _OPERATOR_SLOTS)
    opcode_indices = gather.where(at["OpcodeIndex"], 4)
    if opcode_indices.size and opcode_indices.max() >= len(opcodes):
        raise _Unusual
    spans = [_spans(gather, at[field], None) for field in ("Inputs", "Outputs", "Intermediates")]
    input_counts, output_counts, intermediate_counts = (counts for _, counts in spans)
    _check_affordable(reader, input_counts, output_counts, intermediate_counts)
    (inputs, _), (outputs, _), (intermediates, _) = (
        _int_vectors(gather, *span, minimum, n_tensors, products=False) for span, minimum in zip(spans, (-1, 0, -1)))
    option_types = gather.where(at["BuiltinOptionsType"], 1).tolist()
    option_tables = np.where(at["BuiltinOptions"] != 0, at["BuiltinOptions"] + gather.where(at["BuiltinOptions"], 4), 0)
    codes = [opcodes[k] for k in opcode_indices.tolist()]
    # a custom op, and one with options in the second union (StableHLO's), are read by _Reader.operator
    scalar_path = [custom or bool(options2) for (_, custom, _), options2 in zip(codes, at["BuiltinOptions2"].tolist())]
    builtin = ~np.array(scalar_path, bool)
    reader.spend(int(TABLE_COST * builtin.sum() + INT_COST * ((input_counts + output_counts + intermediate_counts)
                                                               * builtin).sum()))
    operators = []
    for k, (pos, (name, custom, version), ins, outs, inters, option_type, table, scalar) in enumerate(zip(
            positions, codes, inputs, outputs, intermediates, option_types, option_tables.tolist(), scalar_path)):
        if scalar:
            operators.append(reader.operator(s, k, pos, opcodes, n_tensors))
            continue
        options_class = _options_class(option_type)
        if options_class is None or not table:
            options = {}
        else:
            reader.table()
            options = reader.table_fields(table, options_class)
        operators.append(OperatorDef(name, ins, outs, version, options, False, None, inters))
    return operators


def _options_class(code):
    """The generated class of the builtin options table of type `code`; None for NONE or an unknown code."""
    if code not in _OPTIONS_CLASSES:
        name = schema.OPTIONS_TYPE_NAMES.get(code)
        _OPTIONS_CLASSES[code] = None if name in (None, "NONE") else getattr(schema.table_module(name), name)
    return _OPTIONS_CLASSES[code]


def _check_buffer_sizes(type_codes, buffer_indices, elements, buffers):
    """_Unusual unless every tensor whose buffer holds bytes holds its shape's worth (tensors of
    types numpy cannot hold are left alone, as _Reader.check_buffer_size leaves them). The
    type codes are known ones."""
    if not buffers:
        return
    stored = np.array([b.size for b in buffers], np.int64)[buffer_indices]
    itemsize = _ITEMSIZES[type_codes]
    known = (stored > 0) & (itemsize > 0)
    if (stored[known] != elements[known] * itemsize[known]).any():
        raise _Unusual


def _has_scales(gather, fields):
    """Whether each Quantization field at `fields` (0: absent) points to a table with a Scale
    vector: those tensors are read by _Reader.tensor (an empty table, which many converters give
    every tensor, says nothing)."""
    present = fields != 0
    tables = np.where(present, fields + gather.where(fields, 4), 0)
    if not present.any():
        return present
    safe = np.where(present, tables, tables[present][0])
    scale = _field_positions(gather, safe, {"Scale": _SCALE_SLOT})["Scale"]
    return present & (scale != 0)
