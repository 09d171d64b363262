"""tables.read_tensors and read_operators, the tables read in numpy batches, against
_Reader.tensor and _Reader.operator one table at a time (the definition): the same TensorDefs
and OperatorDefs, the same reading budget charged, and on a corrupted file the same result or
the same error."""
import dataclasses
import random

import numpy as np
import pytest
import tflite

from gles_delegate.tflite import ModelBuilder, tables
from gles_delegate.tflite.model import DimensionMetadata, Sparsity
from gles_delegate.tflite.reader import _Reader
from gles_delegate.tools import fuzz_models
from gles_delegate.tools.fetch_models import MODEL_NAMES


def same(x, y):
    """Deep equality of TensorDefs (arrays by dtype and values, tuples as tuples)."""
    if dataclasses.is_dataclass(x):
        return type(x) is type(y) and all(same(getattr(x, f.name), getattr(y, f.name)) for f in dataclasses.fields(x))
    if isinstance(x, (list, tuple)):
        return type(x) is type(y) and len(x) == len(y) and all(map(same, x, y))
    if isinstance(x, np.ndarray):
        return isinstance(y, np.ndarray) and x.dtype == y.dtype and np.array_equal(x, y)
    return type(x) is type(y) and x == y


class Tables:
    """A model's reader, buffers, operator codes and the table positions of each subgraph."""

    def __init__(self, data):
        self.reader = reader = _Reader(data)
        self.buffers = [reader.buffer(i, pos) for i, pos in
                        enumerate(reader.field_tables(reader.root._tab.Pos, tflite.Model, "Buffers"))]
        self.opcodes = [reader.opcode(i) for i in range(reader.root.OperatorCodesLength())]
        subgraphs = [reader.root.Subgraphs(s)._tab.Pos for s in range(reader.root.SubgraphsLength())]
        self.tensors = [reader.field_tables(pos, tflite.SubGraph, "Tensors") for pos in subgraphs]
        self.operators = [reader.field_tables(pos, tflite.SubGraph, "Operators") for pos in subgraphs]

    def reads(self, s):
        """[(scalar read, batched read, fallback-wrapped read)] of subgraph s's two tables."""
        r, n_tensors = self.reader, len(self.tensors[s])
        return [(lambda: [r.tensor(s, t, pos, self.buffers) for t, pos in enumerate(self.tensors[s])],
                 lambda: tables._tensors(r, s, self.tensors[s], self.buffers),
                 lambda: tables.read_tensors(r, s, self.tensors[s], self.buffers)),
                (lambda: [r.operator(s, k, pos, self.opcodes, n_tensors) for k, pos in enumerate(self.operators[s])],
                 lambda: tables._operators(r, s, self.operators[s], self.opcodes, n_tensors),
                 lambda: tables.read_operators(r, s, self.operators[s], self.opcodes, n_tensors))]


def charged(reader, read):
    """(outcome of read(), the budget it charged); the reader's budget is left as it was."""
    budget = reader.budget
    result = outcome(read)
    spent, reader.budget = budget - reader.budget, budget
    return result, spent


def outcome(read):
    """('ok', value) or ('error', type, message) of read()."""
    try:
        return "ok", read()
    except Exception as exc:  # what the scalar path raises on a corrupted file is the reference
        return "error", type(exc), str(exc)


def assert_batched_as_scalar(data):
    """The batched reads cover every table of `data` (no fallback: an error would show) and
    equal the scalar ones, budget included."""
    model = Tables(data)
    for s in range(len(model.tensors)):
        for scalar, batched, _ in model.reads(s):
            expected, found = charged(model.reader, scalar), charged(model.reader, batched)
            assert expected[0][0] == "ok" and found[0][0] == "ok", found
            assert same(found[0][1], expected[0][1]) and found[1] == expected[1]


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_real_models_read_in_batches_as_one_by_one(mediapipe_models, name):
    assert_batched_as_scalar(mediapipe_models[name].read_bytes())


def sparse_weights():
    """A 4x4 CSR sparsity and its 5 stored values."""
    dims = [DimensionMetadata("DENSE", 4), DimensionMetadata("SPARSE_CSR", 0, np.array([0, 2, 3, 3, 5]),
                                                            np.array([0, 3, 1, 0, 2]))]
    return Sparsity((0, 1), (), dims), np.arange(5, dtype=np.float32)


def varied_model():
    """Tensors of every kind the table holds: per-tensor and per-channel quantization, a sparse
    constant, a shape signature, a variable, a scalar, an empty constant, a string, int64 data;
    operators with options (scalars, a vector, none), an omitted input, a custom op."""
    b = ModelBuilder()
    x = b.input("x", (1, 4), shape_signature=(-1, 4))
    state = b.tensor("state", (1, 4), is_variable=True)
    b.tensor("q", (1, 4), np.int8, quantization=(0.5, 3))
    b.const("w", np.ones((2, 1, 1, 4), np.int8), quantization=([0.1, 0.2], [0, 0]))
    sparsity, values = sparse_weights()
    b.tensor("sparse", (4, 4), data=values, sparsity=sparsity)
    b.const("scalar", np.float32(2.0), shape=())
    b.const("empty", np.zeros(0, np.int32))
    b.const("wide", np.arange(3, dtype=np.int64))
    b.tensor("text", (2,), type_name="STRING")
    b.tensor("ünïcode name", (3, 0, 2))
    out, flat, act, custom = (b.tensor(n, s) for n, s in (("out", (1, 4)), ("flat", (4,)), ("act", (4,)),
                                                           ("custom", (4,))))
    b.op("ADD", [x, state], [out], fused_activation_function=0)
    b.op("RESHAPE", [out], [flat], new_shape=[4])
    b.op("RELU", [flat], [act])
    b.op("MyCustomOp", [act, -1], [custom], custom_options=b"\x01\x02")
    b.output(custom)
    return b.build()


def test_every_kind_of_table_reads_in_batches_as_one_by_one():
    assert_batched_as_scalar(varied_model())


def compare_mutants(mutants):
    """For each mutated model's bytes in `mutants`: read_tensors and read_operators give what the
    one-by-one reads give, value (and budget charged) or error. Returns (tables compared, of
    which tensor tables large enough to batch)."""
    compared = batched = 0
    for data in mutants:
        try:
            model = Tables(data)
            reads = model.reads(0)
        except Exception:
            continue  # broken before the tables: not this module's concern
        batched += len(model.tensors[0]) >= tables.BATCH_MIN_TABLES
        for scalar, _, wrapped in reads:
            expected, found = charged(model.reader, scalar), charged(model.reader, wrapped)
            if expected[0][0] == "ok":
                assert found[0][0] == "ok" and same(found[0][1], expected[0][1]) and found[1] == expected[1]
            else:
                assert found[0] == expected[0]
            compared += 1
    return compared, batched


def test_a_corrupted_table_reads_or_fails_as_one_by_one(monkeypatch):
    """Bytes of the model flipped at random (seeded): read_tensors and read_operators give what
    reading the tables one by one gives, value or error, and charge the same budget."""
    monkeypatch.setattr(tables, "BATCH_MIN_TABLES", 1)  # batch this small model's tables too
    data = varied_model()
    rng = random.Random(0)

    def corrupted():
        for _ in range(800):
            mutant = bytearray(data)
            for _ in range(rng.randint(1, 3)):
                mutant[rng.randrange(8, len(mutant))] = rng.randrange(256)
            yield bytes(mutant)
    assert compare_mutants(corrupted())[0] > 800


def test_a_mutated_real_model_reads_or_fails_as_one_by_one(mediapipe_models):
    """gles-fuzz's reader mutations (bytes set, truncation, a field the reader reads set to a
    boundary value) of a real model, whose tables are batched (>= BATCH_MIN_TABLES entries)."""
    data = mediapipe_models["face_detection_short_range"].read_bytes()
    sites = fuzz_models.field_sites(data)
    rng = random.Random(1)
    mutators = [fuzz_models.mutate_flip, fuzz_models.mutate_field, fuzz_models.mutate_field,
                fuzz_models.mutate_truncate]
    compared, batched = compare_mutants(rng.choice(mutators)(data, rng, sites)[0] for _ in range(150))
    assert compared > 150 and batched > 60
