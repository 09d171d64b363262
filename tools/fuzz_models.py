"""Fuzz the model reader, the graph, the interpreter and the GPU delegate with hostile .tflite files.

    gles-fuzz [--cases N] [--minutes M] [--seed S] [--models a,b,...] [--gpu both|on|off]
              [--cpu-backend auto|reference|...] [--timeout SECONDS] [--memory-mb MB] [--out DIR]
              [--json FILE]

Each case is a seed model (one of four MediaPipe models, or a small model built with our writer)
changed by one mutation, run through `Interpreter(model_content=...)`, `allocate_tensors()`,
`invoke()` and `get_tensor()` without a delegate and with a GpuDelegate, the CPU nodes on the
Interpreter's --cpu-backend (default auto, what users run: LiteRT's kernels for the nodes the
reference's checks accept; reference: the package's own kernels, whose guarantees
docs/reliability.md states). The contract: only
ModelError (or another ValueError) may come out; any other exception, a crash, a case that runs
past --timeout, or one that grows the process's peak memory past a small multiple of the file
size plus the tensor sizes the file declares is a finding. Findings are written to --out as
<class>-<case>.tflite with a .txt beside it (the mutation and the traceback).

Mutations (see MUTATORS):
  flip       1-8 random bytes set, or bits flipped
  truncate   the file cut at a random length (sometimes padded back with zeros)
  field      one flatbuffer field the reader reads, located by recording every access the
             generated bindings make (see field_sites), set to a boundary value for its type:
             table/vector offsets (uoffset, soffset, vtable voffset), vector lengths, shape
             dims, tensor / buffer / opcode indices, buffer offset and size, quantization,
             sparsity and options scalars, or retargeted at another table of the same kind
  semantic   one edit of the parsed model, written back with our writer: shapes, dtypes,
             operator inputs and outputs, op codes, builtin options, quantization arrays,
             sparsity metadata, custom options, buffers, graph inputs and outputs

Cases run one at a time in a worker process under RLIMIT_AS (--memory-mb), each run limited to
--timeout seconds; a worker that dies or times out is replaced and its case is recorded as
'crash' or 'timeout'; a run whose peak RSS (VmHWM, reset before each run) grows past
MEMORY_FACTOR x (file + declared tensor bytes) + MEMORY_SLACK is recorded as 'memory'. The exit
status is 1 when there are findings. The test suite runs the same mutators in-process on a
bounded number of cases (tests/reliability/test_fuzz.py); docs/reliability.md has the figures.
"""
import argparse
import collections
import contextlib
import copy
import json
import multiprocessing
import random
import resource
import struct
import sys
import time
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path

import flatbuffers.table
import numpy as np

from gles_delegate.cpu_litert import BACKENDS
from gles_delegate.errors import ModelError
from gles_delegate.tflite import ModelBuilder, read_model, write_model
from gles_delegate.tflite import schema
from gles_delegate.tflite.model import DimensionMetadata, Quantization, Sparsity
from gles_delegate.tools import common

SEED_MODELS = ("selfie_segmentation", "face_detection_short_range", "hand_recrop", "pose_detection")

# -- field sites: where the reader reads what ----------------------------------------------------


@dataclass(frozen=True)
class Site:
    """One field of a .tflite file: `size` bytes at `pos`, read with struct format `fmt`.
    kind: 'scalar' | 'uoffset' (offset to a table, vector or string) | 'vlen' (a vector's
    length) | 'voffset' (a vtable entry) | 'soffset' (a table's offset to its vtable).
    label: the generated accessor that read it ('Tensor.Shape', 'Operator.OpcodeIndex')."""
    pos: int
    size: int
    kind: str
    fmt: str
    label: str


_TABLE_FILE = flatbuffers.table.__file__


def _accessor_label():
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename in (_TABLE_FILE, __file__):
        frame = frame.f_back
    if frame is None:
        return "?"
    owner = frame.f_locals.get("self")
    return f"{type(owner).__name__}.{frame.f_code.co_name}" if owner is not None else frame.f_code.co_name


class _Recorder:
    """Patches flatbuffers.table.Table so that every field access of the bindings is recorded."""
    MAX_ELEMENTS = 32  # vector elements recorded per AsNumpy read (the first ones)

    def __init__(self, data):
        self.data = data
        self.sites = {}
        self.depth = 0

    def add(self, pos, size, kind, fmt):
        if 0 <= pos and pos + size <= len(self.data) and (pos, kind) not in self.sites:
            self.sites[(pos, kind)] = Site(pos, size, kind, fmt, _accessor_label())

    def u32(self, pos):
        return struct.unpack_from("<I", self.data, pos)[0] if 0 <= pos <= len(self.data) - 4 else None

    @contextlib.contextmanager
    def patched(self):
        table = flatbuffers.table.Table
        names = ("Offset", "Indirect", "String", "VectorLen", "Vector", "Union", "Get", "GetVectorAsNumpy")
        originals = {name: getattr(table, name) for name in names}
        recorder = self

        def wrap(name, record):
            original = originals[name]

            def method(self, *args):
                if recorder.depth == 0:
                    recorder.depth += 1
                    try:
                        record(self, *args)
                    except Exception:
                        pass
                    finally:
                        recorder.depth -= 1
                recorder.depth += 1
                try:
                    return original(self, *args)
                finally:
                    recorder.depth -= 1
            return method

        def offset(tab, vtable_offset):
            recorder.add(tab.Pos, 4, "soffset", "<i")
            vtable = tab.Pos - struct.unpack_from("<i", recorder.data, tab.Pos)[0]
            recorder.add(vtable, 2, "voffset", "<H")  # the vtable's own length
            if vtable_offset < struct.unpack_from("<H", recorder.data, vtable)[0]:
                recorder.add(vtable + vtable_offset, 2, "voffset", "<H")

        def uoffset_and_length(pos):
            recorder.add(pos, 4, "uoffset", "<I")
            rel = recorder.u32(pos)
            if rel is not None:
                recorder.add(pos + rel, 4, "vlen", "<I")

        def get(tab, flags, off):
            recorder.add(off, flags.bytewidth, "scalar", "<" + flags.packer_type.format.lstrip("<"))

        def as_numpy(tab, flags, off):
            pos = tab.Pos + off
            uoffset_and_length(pos)
            rel, = struct.unpack_from("<I", recorder.data, pos)
            n = recorder.u32(pos + rel)
            fmt = "<" + flags.packer_type.format.lstrip("<")
            for k in range(min(n or 0, self.MAX_ELEMENTS)):
                recorder.add(pos + rel + 4 + k * flags.bytewidth, flags.bytewidth, "scalar", fmt)

        records = {
            "Offset": offset,
            "Indirect": lambda tab, off: recorder.add(off, 4, "uoffset", "<I"),
            "String": lambda tab, off: uoffset_and_length(off),
            "VectorLen": lambda tab, off: uoffset_and_length(tab.Pos + off),
            "Vector": lambda tab, off: recorder.add(tab.Pos + off, 4, "uoffset", "<I"),
            "Union": lambda tab, t2, off: recorder.add(tab.Pos + off, 4, "uoffset", "<I"),
            "Get": get,
            "GetVectorAsNumpy": as_numpy,
        }
        for name in names:
            setattr(table, name, wrap(name, records[name]))
        try:
            yield self
        finally:
            for name, original in originals.items():
                setattr(table, name, original)


def field_sites(data):
    """Every field the reader reads in `data` (a valid model), as a list of Site sorted by pos."""
    recorder = _Recorder(bytes(data))
    with recorder.patched():
        read_model(bytes(data))
    return sorted(recorder.sites.values(), key=lambda s: (s.pos, s.kind))


# -- mutators ------------------------------------------------------------------------------------
_INT_LIMITS = {"b": (-128, 127), "B": (0, 255), "h": (-1 << 15, (1 << 15) - 1), "H": (0, (1 << 16) - 1),
               "i": (-1 << 31, (1 << 31) - 1), "I": (0, (1 << 32) - 1), "q": (-1 << 63, (1 << 63) - 1),
               "Q": (0, (1 << 64) - 1), "?": (0, 1)}


def _interesting_int(rng, old, low, high, data_len):
    choices = [0, 1, -1, 2, 3, 4, 7, 8, 16, 255, 256, old + 1, old - 1, old * 2, old + 4, old - 4,
               rng.randint(-8, 300), rng.randint(low, high), high, low, high - 1, low + 1, 1 << 15, 1 << 16,
               (1 << 31) - 1, 1 << 31, data_len, data_len // 4, data_len + 1, -old]
    value = rng.choice(choices)
    return min(max(value, low), high)


_INTERESTING_FLOATS = (0.0, -0.0, 1.0, -1.0, 0.5, 1e-45, -1e-45, 1e-30, 1e30, 3.4e38, -3.4e38, float("inf"),
                       float("-inf"), float("nan"), 65504.0, 2.0 ** 31)


def _mutate_site(data, site, rng, sites):
    """Set one field to a boundary value for its type (or, for an offset, retarget it)."""
    out = bytearray(data)
    fmt = site.fmt[-1]
    old = struct.unpack_from(site.fmt, data, site.pos)[0]
    if fmt in "fd":
        new = rng.choice(_INTERESTING_FLOATS + (old * 2, -old, old + 1))
    else:
        low, high = _INT_LIMITS[fmt]
        new = _interesting_int(rng, int(old), low, high, len(data))
        if site.kind == "uoffset" and rng.random() < 0.4:
            # Point at another object the same accessor reads (shares a table or vector: DAG).
            peers = [s for s in sites if s.label == site.label and s.kind == "uoffset" and s.pos != site.pos]
            if peers:
                peer = rng.choice(peers)
                target = peer.pos + struct.unpack_from("<I", data, peer.pos)[0]
                if target > site.pos:
                    new = target - site.pos
    struct.pack_into(site.fmt, out, site.pos, new)
    return bytes(out), f"field {site.label} [{site.kind} @{site.pos}] {old!r} -> {new!r}"


def mutate_flip(data, rng, sites=None):
    out = bytearray(data)
    n = rng.choice((1, 1, 2, 4, 8))
    changes = []
    for _ in range(n):
        pos = rng.randrange(len(out))
        if rng.random() < 0.5:
            out[pos] ^= 1 << rng.randrange(8)
        else:
            out[pos] = rng.choice((0, 0xFF, 0x7F, 0x80, rng.randrange(256)))
        changes.append(pos)
    return bytes(out), f"flip {n} byte(s) at {changes}"


def mutate_truncate(data, rng, sites=None):
    cut = rng.choice((rng.randrange(len(data)), rng.randrange(min(len(data), 256)),
                      len(data) - rng.randrange(1, min(len(data), 64))))
    out = data[:cut]
    if rng.random() < 0.3:
        out += bytes(len(data) - cut)
        return out, f"truncate at {cut}, zero-padded to {len(data)}"
    return out, f"truncate at {cut}"


def mutate_field(data, rng, sites):
    site = rng.choice(sites)
    return _mutate_site(data, site, rng, sites)


# Semantic edits: each takes (model, rng) and edits the ModelDef in place; returns a description.
def _pick_tensor(model, rng):
    sg = model.subgraphs[0]
    t = rng.randrange(len(sg.tensors))
    return t, sg.tensors[t]


def _pick_operator(model, rng):
    """(index, operator) of a random operator of subgraph 0, or (None, None) when it has none."""
    sg = model.subgraphs[0]
    if not sg.operators:
        return None, None
    k = rng.randrange(len(sg.operators))
    return k, sg.operators[k]


def _odd_dim(rng, old):
    return rng.choice((0, 1, 2, 3, old + 1, max(old - 1, 0), old * 2, 7, 1000, 65536, 1 << 20, -1))


def edit_shape(model, rng):
    t, tensor = _pick_tensor(model, rng)
    shape = list(tensor.shape)
    action = rng.choice(("dim", "dim", "add", "drop", "swap", "scalar"))
    if action == "dim" and shape:
        k = rng.randrange(len(shape))
        shape[k] = _odd_dim(rng, shape[k])
    elif action == "add":
        shape.insert(rng.randrange(len(shape) + 1), rng.choice((1, 2, 3)))
    elif action == "drop" and shape:
        shape.pop(rng.randrange(len(shape)))
    elif action == "swap" and len(shape) > 1:
        i, j = rng.sample(range(len(shape)), 2)
        shape[i], shape[j] = shape[j], shape[i]
    else:
        shape = []
    old = tensor.shape
    tensor.shape = tuple(shape)
    if tensor.shape_signature is not None:
        tensor.shape_signature = tuple(shape) if rng.random() < 0.5 else tuple(-1 if d else d for d in shape)
    return f"tensor {t} shape {list(old)} -> {shape}"


def edit_shape_signature(model, rng):
    t, tensor = _pick_tensor(model, rng)
    signature = [rng.choice((-1, d, d + 1, 0)) for d in tensor.shape]
    tensor.shape_signature = tuple(signature)
    return f"tensor {t} shape_signature -> {signature}"


_TYPE_NAMES = sorted(schema.TENSOR_TYPE_CODES)


def edit_dtype(model, rng):
    t, tensor = _pick_tensor(model, rng)
    old = tensor.type_name
    tensor.type_name = rng.choice(_TYPE_NAMES)
    return f"tensor {t} type {old} -> {tensor.type_name}"


def edit_operator_io(model, rng):
    k, op = _pick_operator(model, rng)
    if op is None:
        return "no operators"
    which = rng.choice(("inputs", "inputs", "outputs"))
    values = list(getattr(op, which))
    action = rng.choice(("replace", "replace", "omit", "drop", "add", "dup"))
    n = len(model.subgraphs[0].tensors)
    if action == "replace" and values:
        values[rng.randrange(len(values))] = rng.choice((rng.randrange(n), rng.randrange(n), -1, 0, n - 1))
    elif action == "omit" and values:
        values[rng.randrange(len(values))] = -1
    elif action == "drop" and values:
        values.pop(rng.randrange(len(values)))
    elif action == "add":
        values.append(rng.choice((rng.randrange(n), -1)))
    elif values:
        values.append(values[rng.randrange(len(values))])
    old = getattr(op, which)
    setattr(op, which, tuple(values))
    return f"operator {k} ({op.op}) {which} {list(old)} -> {values}"


def _known_ops():
    from gles_delegate import ops
    return sorted(ops.KERNELS)


def edit_opcode(model, rng):
    k, op = _pick_operator(model, rng)
    if op is None:
        return "no operators"
    old = op.op
    op.op = rng.choice(_known_ops())
    op.custom = op.op not in schema.BUILTIN_OP_CODES
    table = None if op.custom else schema.options_table_name(op.op)
    if table is None or rng.random() < 0.3:
        op.options = {}
    else:
        op.options = _random_options(table, rng)
    if rng.random() < 0.3:
        op.version = rng.choice((0, 2, 3, 99))
    return f"operator {k} op {old} -> {op.op} options {op.options}"


def _option_fields(table):
    cls = getattr(schema.table_module(table), table)
    fields = {}
    for name in vars(cls):
        if not name[:1].isupper() or name.startswith(("Init", "GetRootAs")) or \
                name.endswith(("AsNumpy", "IsNone", "Length", "BufferHasIdentifier")):
            continue
        fields[schema.snake_case(name)] = (name + "Length") in vars(cls)
    return fields


def _random_scalar(rng):
    return rng.choice((0, 1, -1, 2, 3, 4, 5, 6, 7, 100, 255, 65535, -(1 << 31), (1 << 31) - 1))


def _random_options(table, rng):
    options = {}
    for name, is_vector in _option_fields(table).items():
        if rng.random() < 0.7:
            options[name] = [_random_scalar(rng) for _ in range(rng.randrange(5))] if is_vector else _random_scalar(rng)
    return options


def edit_options(model, rng):
    sg = model.subgraphs[0]
    candidates = [k for k, op in enumerate(sg.operators) if not op.custom and schema.options_table_name(op.op)]
    if not candidates:
        return "no operator with options"
    k = rng.choice(candidates)
    op = sg.operators[k]
    fields = _option_fields(schema.options_table_name(op.op))
    if not fields:
        return f"operator {k} ({op.op}): its options table has no fields"
    name = rng.choice(sorted(fields))
    old = op.options.get(name)
    if fields[name]:
        op.options[name] = [_random_scalar(rng) for _ in range(rng.randrange(6))]
    elif isinstance(old, float) or rng.random() < 0.2:
        op.options[name] = rng.choice(_INTERESTING_FLOATS) if isinstance(old, float) else _random_scalar(rng)
    else:
        op.options[name] = _random_scalar(rng)
    return f"operator {k} ({op.op}) option {name} {old!r} -> {op.options[name]!r}"


def edit_quantization(model, rng):
    t, tensor = _pick_tensor(model, rng)
    q = tensor.quantization
    n = rng.choice((1, 1, 2, 3, max(tensor.shape or (1,))))
    action = rng.choice(("new", "scales", "zero_points", "dimension", "drop"))
    if action == "drop":
        tensor.quantization = None
        return f"tensor {t} quantization dropped"
    if q is None or action == "new":
        q = Quantization(scales=np.full(n, rng.choice((0.5, 1.0, 1e-3))), zero_points=np.zeros(n, np.int64))
    if action == "scales":
        q.scales = np.array([rng.choice(_INTERESTING_FLOATS) for _ in range(n)], np.float32)
    elif action == "zero_points":
        q.zero_points = np.array([rng.choice((0, 1, -1, 127, -128, 255, 1 << 40)) for _ in range(n)], np.int64)
    elif action == "dimension":
        q.quantized_dimension = rng.choice((0, 1, 3, 4, 100, -1))
    if q.zero_points.size != q.scales.size and rng.random() < 0.7:
        q.zero_points = np.zeros(q.scales.size, np.int64)
    tensor.quantization = q
    return f"tensor {t} quantization {action}: scales {q.scales[:4].tolist()} zp {q.zero_points[:4].tolist()} " \
           f"dim {q.quantized_dimension}"


def edit_sparsity(model, rng):
    sg = model.subgraphs[0]
    sparse = [k for k, t in enumerate(sg.tensors) if t.sparsity is not None]
    if not sparse or rng.random() < 0.15:
        t, tensor = _pick_tensor(model, rng)
        rank = len(tensor.shape)
        tensor.sparsity = Sparsity(traversal_order=tuple(range(rank)), block_map=(),
                                   dim_metadata=[DimensionMetadata("DENSE", d) for d in tensor.shape])
        return f"tensor {t} made sparse (all dims dense)"
    t = rng.choice(sparse)
    sp = sg.tensors[t].sparsity
    action = rng.choice(("order", "block_map", "dense_size", "segments", "indices", "format", "drop_dim"))
    if action == "order":
        order = list(sp.traversal_order)
        if order and rng.random() < 0.5:
            order[rng.randrange(len(order))] = rng.choice((0, -1, 9, len(order)))
        else:
            rng.shuffle(order)
        sp.traversal_order = tuple(order)
    elif action == "block_map":
        sp.block_map = tuple(rng.choice((0, 1, 3, -1, 9)) for _ in range(rng.randrange(3)))
    elif action == "drop_dim" and sp.dim_metadata:
        sp.dim_metadata.pop(rng.randrange(len(sp.dim_metadata)))
    elif sp.dim_metadata:
        d = sp.dim_metadata[rng.randrange(len(sp.dim_metadata))]
        if action == "dense_size":
            d.dense_size = rng.choice((0, 1, -1, d.dense_size + 1, 1 << 20, (1 << 31) - 1))
        elif action == "format":
            d.format = "SPARSE_CSR" if d.format == "DENSE" else "DENSE"
            if d.format == "SPARSE_CSR" and d.array_segments is None:
                d.array_segments = np.array([0, 1], np.int64)
                d.array_indices = np.array([0], np.int64)
        else:
            name = "array_segments" if action == "segments" else "array_indices"
            values = getattr(d, name)
            values = np.zeros(2, np.int64) if values is None else values.astype(np.int64).copy()
            if values.size and rng.random() < 0.7:
                values[rng.randrange(values.size)] = rng.choice((-1, 0, 1 << 20, values.max() + 1, (1 << 31) - 1))
            else:
                values = values[:rng.randrange(values.size + 1)]
            setattr(d, name, values)
    return f"tensor {t} sparsity {action}"


def edit_custom_options(model, rng):
    sg = model.subgraphs[0]
    custom = [k for k, op in enumerate(sg.operators) if op.custom]
    if not custom:
        k = rng.randrange(len(sg.operators)) if sg.operators else None
        if k is None:
            return "no operators"
        sg.operators[k].custom_options = bytes(rng.randrange(256) for _ in range(rng.randrange(16)))
        return f"operator {k} given custom options"
    k = rng.choice(custom)
    op = sg.operators[k]
    raw = bytearray(op.custom_options or b"")
    action = rng.choice(("flip", "truncate", "random", "empty"))
    if action == "flip" and raw:
        for _ in range(rng.randrange(1, 4)):
            raw[rng.randrange(len(raw))] = rng.randrange(256)
    elif action == "truncate":
        raw = raw[:rng.randrange(len(raw) + 1)]
    elif action == "random":
        raw = bytearray(rng.randrange(256) for _ in range(rng.randrange(1, 40)))
    else:
        raw = bytearray()
    op.custom_options = bytes(raw)
    return f"operator {k} ({op.op}) custom options {action}"


def edit_buffer(model, rng):
    sg = model.subgraphs[0]
    t, tensor = _pick_tensor(model, rng)
    action = rng.choice(("swap", "resize", "point", "nan"))
    if action == "point":
        old = tensor.buffer
        tensor.buffer = rng.randrange(len(model.buffers))
        return f"tensor {t} buffer {old} -> {tensor.buffer}"
    with_data = [k for k, t2 in enumerate(sg.tensors) if t2.buffer and model.buffers[t2.buffer].size]
    if not with_data:
        return "no constant tensors"
    t = rng.choice(with_data)
    b = sg.tensors[t].buffer
    raw = np.array(model.buffers[b], np.uint8)
    if action == "swap":
        other = rng.choice(with_data)
        sg.tensors[t].buffer, sg.tensors[other].buffer = sg.tensors[other].buffer, sg.tensors[t].buffer
        return f"tensors {t} and {other} swap buffers"
    if action == "resize":
        size = rng.choice((0, 1, raw.size - 1, raw.size + 4, raw.size * 2))
        raw = np.resize(raw, max(size, 0))
    else:
        if raw.size >= 4:
            view = raw[:raw.size // 4 * 4].view(np.int32)
            view[rng.randrange(view.size)] = rng.choice((0x7FC00000, 0x7F800000, -1, 1 << 30, 0x80000000 - 1))
    model.buffers[b] = raw
    return f"buffer {b} (tensor {t}) {action}"


def edit_graph_io(model, rng):
    sg = model.subgraphs[0]
    which = rng.choice(("inputs", "outputs"))
    values = list(getattr(sg, which))
    action = rng.choice(("replace", "drop", "add", "dup"))
    n = len(sg.tensors)
    if action == "replace" and values:
        values[rng.randrange(len(values))] = rng.randrange(n)
    elif action == "drop" and values:
        values.pop(rng.randrange(len(values)))
    elif action == "add":
        values.append(rng.randrange(n))
    elif values:
        values.append(values[0])
    setattr(sg, which, tuple(values))
    return f"graph {which} -> {values[:8]}"


def edit_variable(model, rng):
    t, tensor = _pick_tensor(model, rng)
    tensor.is_variable = not tensor.is_variable
    return f"tensor {t} is_variable -> {tensor.is_variable}"


def edit_operator_order(model, rng):
    sg = model.subgraphs[0]
    if len(sg.operators) < 2:
        return "fewer than two operators"
    i, j = rng.sample(range(len(sg.operators)), 2)
    if rng.random() < 0.5:
        sg.operators[i], sg.operators[j] = sg.operators[j], sg.operators[i]
        return f"operators {i} and {j} swapped"
    sg.operators.insert(j, copy.deepcopy(sg.operators[i]))
    return f"operator {i} duplicated at {j}"


SEMANTIC_EDITS = {
    "shape": edit_shape, "shape_signature": edit_shape_signature, "dtype": edit_dtype,
    "operator_io": edit_operator_io, "opcode": edit_opcode, "options": edit_options,
    "quantization": edit_quantization, "sparsity": edit_sparsity, "custom_options": edit_custom_options,
    "buffer": edit_buffer, "graph_io": edit_graph_io, "variable": edit_variable,
    "operator_order": edit_operator_order,
}


def mutate_semantic(data, rng, sites=None, model=None, edit=None):
    """One semantic edit of the parsed model, written back (external buffers one time in four)."""
    model = copy.deepcopy(model) if model is not None else read_model(data)
    edit = edit or rng.choice(sorted(SEMANTIC_EDITS))
    what = SEMANTIC_EDITS[edit](model, rng)
    try:
        out = write_model(model, external_buffers=rng.random() < 0.25)
    except Exception as exc:  # the writer refuses what it cannot encode: nothing to test
        return None, f"semantic {edit}: {what} (unwritable: {type(exc).__name__}: {exc})"
    return out, f"semantic {edit}: {what}"


MUTATORS = {"flip": mutate_flip, "truncate": mutate_truncate, "field": mutate_field, "semantic": mutate_semantic}
MUTATOR_WEIGHTS = {"flip": 2, "truncate": 1, "field": 4, "semantic": 5}


# -- seed models ---------------------------------------------------------------------------------
def small_models():
    """{name: bytes} of small models built with our writer, covering the op families, quantized
    tensors, a sparse (DENSIFY) constant, custom MediaPipe ops, signatures and external buffers."""
    rng = np.random.default_rng(0)
    models = {}

    def weights(*shape):
        return rng.uniform(-1, 1, shape).astype(np.float32)

    b = ModelBuilder()
    x = b.input("x", (1, 8, 8, 3))
    w = b.const("w", weights(4, 3, 3, 3))
    bias = b.const("bias", weights(4))
    c = b.tensor("conv", (1, 8, 8, 4))
    b.op("CONV_2D", [x, w, bias], [c], padding=0, stride_w=1, stride_h=1, fused_activation_function=1)
    dw_w = b.const("dw_w", weights(1, 3, 3, 4))
    d = b.tensor("dw", (1, 4, 4, 4))
    b.op("DEPTHWISE_CONV_2D", [c, dw_w, -1], [d], padding=0, stride_w=2, stride_h=2, depth_multiplier=1)
    p = b.tensor("pool", (1, 2, 2, 4))
    b.op("MAX_POOL_2D", [d], [p], padding=1, stride_w=2, stride_h=2, filter_width=2, filter_height=2)
    shape = b.const("shape", np.array([1, 16], np.int32))
    r = b.tensor("flat", (1, 16))
    b.op("RESHAPE", [p, shape], [r], new_shape=[1, 16])
    fc_w = b.const("fc_w", weights(5, 16))
    f = b.tensor("fc", (1, 5))
    b.op("FULLY_CONNECTED", [r, fc_w, -1], [f])
    s = b.tensor("softmax", (1, 5))
    b.op("SOFTMAX", [f], [s], beta=1.0)
    b.output(s)
    b.signature("serving_default", {"x": x}, {"y": s})
    models["convnet"] = b.build()

    b = ModelBuilder()
    x = b.input("x", (1, 6, 6, 4))
    y = b.input("y", (1, 1, 1, 4))
    a = b.tensor("add", (1, 6, 6, 4))
    b.op("ADD", [x, y], [a], fused_activation_function=0)
    pads = b.const("pads", np.array([[0, 0], [1, 1], [1, 1], [0, 0]], np.int32))
    pd = b.tensor("pad", (1, 8, 8, 4))
    b.op("PAD", [a, pads], [pd])
    size = b.const("size", np.array([16, 16], np.int32))
    rs = b.tensor("resize", (1, 16, 16, 4))
    b.op("RESIZE_BILINEAR", [pd, size], [rs], align_corners=False, half_pixel_centers=True)
    axes = b.const("axes", np.array([1, 2], np.int32))
    m = b.tensor("mean", (1, 1, 1, 4))
    b.op("MEAN", [rs, axes], [m], keep_dims=True)
    cat = b.tensor("concat", (1, 1, 1, 8))
    b.op("CONCATENATION", [m, y], [cat], axis=3, fused_activation_function=0)
    perm = b.const("perm", np.array([0, 3, 1, 2], np.int32))
    tr = b.tensor("transpose", (1, 8, 1, 1))
    b.op("TRANSPOSE", [cat, perm], [tr])
    begin = b.const("begin", np.array([0, 2, 0, 0], np.int32))
    end = b.const("end", np.array([1, 6, 1, 1], np.int32))
    strides = b.const("strides", np.array([1, 2, 1, 1], np.int32))
    ss = b.tensor("slice", (1, 2, 1, 1))
    b.op("STRIDED_SLICE", [tr, begin, end, strides], [ss], begin_mask=0, end_mask=0, shrink_axis_mask=0)
    b.output(ss)
    b.output(m)
    models["shapes"] = b.build()

    b = ModelBuilder()
    x = b.input("x", (1, 4, 4, 2), np.int8, quantization=(0.05, -3))
    w = b.const("w", rng.integers(-127, 128, (3, 1, 1, 2)).astype(np.int8), quantization=([0.01, 0.02, 0.03], 0))
    bias = b.const("bias", np.array([10, -20, 30], np.int32), quantization=([0.0005, 0.001, 0.0015], 0))
    c = b.tensor("conv", (1, 4, 4, 3), np.int8, quantization=(0.04, 2))
    b.op("CONV_2D", [x, w, bias], [c], padding=0, stride_w=1, stride_h=1)
    dq = b.tensor("dq", (1, 4, 4, 3))
    b.op("DEQUANTIZE", [c], [dq])
    half = b.const("half", np.full((1, 1, 1, 3), 0.5, np.float16))
    halfq = b.tensor("half32", (1, 1, 1, 3))
    b.op("DEQUANTIZE", [half], [halfq])
    mul = b.tensor("mul", (1, 4, 4, 3))
    b.op("MUL", [dq, halfq], [mul], fused_activation_function=0)
    q = b.tensor("q", (1, 4, 4, 3), np.uint8, quantization=(0.1, 128))
    b.op("QUANTIZE", [mul], [q])
    b.output(q)
    models["quantized"] = b.build()

    # A sparse constant (CSR in dimension 1 of a [4, 4] weight) densified then used by an FC.
    b = ModelBuilder()
    x = b.input("x", (2, 4))
    dense = np.array([[1, 0, 0, 2], [0, 0, 3, 0], [0, 0, 0, 0], [4, 5, 0, 6]], np.float32)
    values = dense[dense != 0]
    segments, indices = [0], []
    for row in dense:
        indices += list(np.nonzero(row)[0])
        segments.append(len(indices))
    sparsity = Sparsity(traversal_order=(0, 1), block_map=(),
                        dim_metadata=[DimensionMetadata("DENSE", 4),
                                      DimensionMetadata("SPARSE_CSR", 0, np.array(segments), np.array(indices))])
    sw = b.tensor("sparse_w", (4, 4), data=values, sparsity=sparsity)
    dw = b.tensor("dense_w", (4, 4))
    b.op("DENSIFY", [sw], [dw])
    fc = b.tensor("fc", (2, 4))
    b.op("FULLY_CONNECTED", [x, dw, -1], [fc], fused_activation_function=3)
    b.output(fc)
    models["sparse"] = b.build()

    # MediaPipe's custom transpose convolution (custom options: its TransposeConvOptions).
    b = ModelBuilder()
    x = b.input("x", (1, 4, 4, 2))
    w = b.const("w", weights(3, 2, 2, 2))
    bias = b.const("bias", weights(3))
    y = b.tensor("y", (1, 8, 8, 3))
    b.op("Convolution2DTransposeBias", [x, w, bias], [y], custom_options=struct.pack("<iiii", 1, 2, 2, 0))
    g = b.tensor("gelu", (1, 8, 8, 3))
    b.op("HARD_SWISH", [y], [g])
    b.output(g)
    models["custom"] = b.build()
    models["convnet_external"] = write_model(read_model(models["convnet"]), external_buffers=True)
    models["loop"] = _loop_model(weights)
    models["stream"] = _stream_model(weights)
    return models


def _stream_model(weights):
    """State across invokes: CALL_ONCE of an initializer assigning zeros [1, 2, 4] to resource
    variable 'ring'; each invoke reads it, concatenates input x [1, 1, 4], keeps the newest two
    frames (STRIDED_SLICE) as the new state and outputs the FULLY_CONNECTED of the three frames.
    Without a delegate it runs as the file whole on LiteRT (whole_model.py): mutations of the
    variable ops' shapes, types and handles reach LiteRT's unchecked READ_VARIABLE unless
    whole_model.refusal() keeps them node by node."""
    b = ModelBuilder()
    x = b.input("x", (1, 1, 4))
    init = b.subgraph("init")
    b.op("CALL_ONCE", [], [], init_subgraph_index=init.index)
    init_handle = init.tensor("handle", (), type_name="RESOURCE")
    init.op("VAR_HANDLE", [], [init_handle], container="", shared_name="ring")
    init.op("ASSIGN_VARIABLE", [init_handle, init.const("zeros", np.zeros((1, 2, 4), np.float32))], [])
    handle = b.tensor("handle", (), type_name="RESOURCE")
    b.op("VAR_HANDLE", [], [handle], container="", shared_name="ring")
    state, frames = b.tensor("state", (1, 2, 4)), b.tensor("frames", (1, 3, 4))
    b.op("READ_VARIABLE", [handle], [state])
    b.op("CONCATENATION", [state, x], [frames], axis=1, fused_activation_function=0)
    newest = b.tensor("newest", (1, 2, 4))
    b.op("STRIDED_SLICE", [frames, b.const("begin", np.int32([0, 1, 0])), b.const("end", np.int32([0, 3, 0])),
                           b.const("strides", np.int32([1, 1, 1]))], [newest],
         begin_mask=5, end_mask=5, ellipsis_mask=0, new_axis_mask=0, shrink_axis_mask=0, offset=False)
    b.op("ASSIGN_VARIABLE", [handle, newest], [])
    flat, y = b.tensor("flat", (1, 12)), b.tensor("y", (1, 3))
    b.op("RESHAPE", [frames, b.const("shape", np.int32([1, 12]))], [flat], new_shape=[1, 12])
    b.op("FULLY_CONNECTED", [flat, b.const("w", weights(3, 12)), b.const("b", weights(3))], [y],
         fused_activation_function=0)
    b.output(y)
    return b.build()


def _loop_model(weights):
    """Control flow: x -> TANH -> WHILE (i < 3: acc = acc * w + b, a FULLY_CONNECTED step) ->
    IF (x's first element > 0: acc + x, else acc - x). Its WHILE and IF run in a LiteRT sub-model
    under cpu_backend 'auto' (callee_subgraphs.py): mutations reach LiteRT through the copied
    subgraphs too. A mutation that keeps the loop from ending (a body output pointed at its
    input) is a 'timeout' finding of TFLite's own semantics: a WHILE has no iteration limit
    there either (docs/architecture.md, "Control flow")."""
    b = ModelBuilder()
    x = b.input("x", (1, 4))
    t = b.tensor("t", (1, 4))
    b.op("TANH", [x], [t])
    cond, body, then, other = (b.subgraph(name) for name in ("cond", "body", "then", "else"))
    i_out, acc = b.tensor("i_out", (), np.int32), b.tensor("acc", (1, 4))
    b.op("WHILE", [b.const("zero", np.array(0, np.int32)), t], [i_out, acc],
         cond_subgraph_index=cond.index, body_subgraph_index=body.index)
    ci, _ = cond.input("i", (), np.int32), cond.input("acc", (1, 4))
    less = cond.tensor("less", (), np.bool_)
    cond.op("LESS", [ci, cond.const("three", np.array(3, np.int32))], [less])
    cond.output(less)
    bi, bacc = body.input("i", (), np.int32), body.input("acc", (1, 4))
    i2, step = body.tensor("i2", (), np.int32), body.tensor("step", (1, 4))
    body.op("ADD", [bi, body.const("one", np.array(1, np.int32))], [i2], fused_activation_function=0)
    body.op("FULLY_CONNECTED", [bacc, body.const("w", weights(4, 4)), body.const("b", weights(4))], [step],
            fused_activation_function=0)
    body.output(i2)
    body.output(step)
    first, positive = b.tensor("first", (1, 1)), b.tensor("positive", (1, 1), np.bool_)
    b.op("SLICE", [x, b.const("begin", np.int32([0, 0])), b.const("size", np.int32([1, 1]))], [first])
    b.op("GREATER", [first, b.const("zero_f", np.zeros((1, 1), np.float32))], [positive])
    y = b.tensor("y", (1, 4))
    b.op("IF", [positive, acc, x], [y], then_subgraph_index=then.index, else_subgraph_index=other.index)
    b.output(y)
    for branch, op in ((then, "ADD"), (other, "SUB")):
        u, v, out = branch.input("u", (1, 4)), branch.input("v", (1, 4)), branch.tensor("out", (1, 4))
        branch.op(op, [u, v], [out], fused_activation_function=0)
        branch.output(out)
    return b.build()


def seed_corpus(names=SEED_MODELS, include_small=True):
    """{name: bytes}: the MediaPipe seed models (fetched once) and the small writer-built ones."""
    corpus = {}
    if names:
        from gles_delegate.tools.fetch_models import model_path
        for name in names:
            corpus[name] = Path(model_path(name)).read_bytes()
    if include_small:
        corpus.update(small_models())
    return corpus


class Seed:
    """A seed model with what mutators need precomputed: its bytes, parsed model and field sites."""

    def __init__(self, name, data):
        self.name = name
        self.data = data
        self.model = read_model(data)
        self.sites = field_sites(data)

    def mutate(self, rng, kind=None, edit=None):
        """(bytes or None, description, kind) of one mutation of this seed."""
        kind = kind or rng.choices(sorted(MUTATOR_WEIGHTS), [MUTATOR_WEIGHTS[k] for k in sorted(MUTATOR_WEIGHTS)])[0]
        if kind == "semantic":
            data, what = mutate_semantic(self.data, rng, model=self.model, edit=edit)
        else:
            data, what = MUTATORS[kind](self.data, rng, self.sites)
        return data, what, kind


# -- running one case ----------------------------------------------------------------------------
ALLOWED = (ModelError, ValueError)


@dataclass
class Outcome:
    """What one case did: `result` is 'ok', 'rejected' (ModelError/ValueError, `stage` says
    where) or 'bug' (any other exception; `error` holds its traceback)."""
    result: str
    stage: str
    error: str = ""
    message: str = ""


def declared_bytes(data):
    """The file size plus the bytes of every tensor the file declares (0 if it does not parse)."""
    try:
        model = read_model(data)
    except Exception:
        return len(data)
    total = len(data)
    for sg in model.subgraphs:
        for t in sg.tensors:
            if t.dtype is not None:
                total += int(np.prod(t.shape, dtype=object)) * t.dtype.itemsize
    return total


def run_case(data, delegate_factory=None, input_seed=0, max_invoke_bytes=1 << 28, cpu_backend="auto"):
    """Read, allocate, invoke and read back one (possibly hostile) model; an Outcome.

    delegate_factory: None for the CPU only, else a callable returning a delegate (closed after
    the case); cpu_backend: the Interpreter's, for the CPU nodes. max_invoke_bytes: a model whose
    tensors (as allocated) take more than this is read and allocated but not invoked ('big': a
    valid model that size would take that memory and time in any runtime)."""
    from gles_delegate import Interpreter
    stage = "read"
    delegate = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            delegates = []
            if delegate_factory is not None:
                delegate = delegate_factory()
                delegates = [delegate]
            interpreter = Interpreter(model_content=data, experimental_delegates=delegates, cpu_backend=cpu_backend)
            stage = "allocate"
            interpreter.allocate_tensors()
            stage = "invoke"
            allocated = sum(int(np.prod(d["shape"], dtype=np.int64)) * np.dtype(d["dtype"]).itemsize
                            for d in interpreter.get_tensor_details() if d["dtype"] is not None)
            if allocated > max_invoke_bytes:
                return Outcome("big", "invoke", message=f"tensors take {allocated} bytes")
            rng = np.random.default_rng(input_seed)
            for detail in interpreter.get_input_details():
                dtype, shape = np.dtype(detail["dtype"]), tuple(detail["shape"])
                if dtype.kind == "f":
                    value = rng.uniform(-1, 1, shape).astype(dtype)
                elif dtype.kind == "b":
                    value = rng.integers(0, 2, shape).astype(bool)
                elif dtype.kind in "iu":
                    value = rng.integers(0, 3, shape).astype(dtype)
                else:
                    value = np.zeros(shape, dtype)
                interpreter.set_tensor(detail["index"], value)
            interpreter.invoke()
            for detail in interpreter.get_output_details():
                interpreter.get_tensor(detail["index"])
        return Outcome("ok", "done")
    except ALLOWED as exc:
        return Outcome("rejected", stage, message=f"{type(exc).__name__}: {exc}"[:300])
    except Exception as exc:
        return Outcome("bug", stage, error=traceback.format_exc(), message=f"{type(exc).__name__}: {exc}"[:300])
    finally:
        if delegate is not None:
            try:
                delegate.close()
            except Exception:
                pass


# -- hand-made hostile files -----------------------------------------------------------------------
def _table(builder, name, **fields):
    """Build one table of the schema (`name`, e.g. "Tensor") with the given fields (AddX values)."""
    module = schema.table_module(name)
    module.Start(builder)
    for field, value in fields.items():
        getattr(module, "Add" + field)(builder, value)
    return module.End(builder)


def _repeated(builder, owner, field, item, n):
    """`owner`'s vector field `field` holding n offsets to the one table `item`."""
    getattr(schema.table_module(owner), f"Start{field}Vector")(builder, n)
    for _ in range(n):
        builder.PrependUOffsetTRelative(item)
    return builder.EndVector()


def shared_table_model(n_tensors=20000, n_subgraphs=20000):
    """A valid flatbuffer whose subgraphs vector holds `n_subgraphs` offsets to one subgraph
    whose tensors vector holds `n_tensors` offsets to one tensor: a few hundred kilobytes that
    read naively build n_subgraphs x n_tensors tensors (the DAG of shared offsets a reader must
    bound)."""
    import flatbuffers
    b = flatbuffers.Builder(1024)
    tensor = _table(b, "Tensor", Shape=b.CreateNumpyVector(np.array([1, 4], np.int32)))
    subgraph = _table(b, "SubGraph", Tensors=_repeated(b, "SubGraph", "Tensors", tensor, n_tensors))
    subgraphs = _repeated(b, "Model", "Subgraphs", subgraph, n_subgraphs)
    buffers = _repeated(b, "Model", "Buffers", _table(b, "Buffer"), 1)
    b.Finish(_table(b, "Model", Version=3, Subgraphs=subgraphs, Buffers=buffers), file_identifier=b"TFL3")
    return bytes(b.Output())


def shared_vector_model(n_operators=20000, n_inputs=250000):
    """A valid flatbuffer of one subgraph whose operators vector holds `n_operators` offsets to
    one ADD whose inputs vector holds `n_inputs` indices of its one tensor: a megabyte that read
    naively gives n_operators x n_inputs tensor indices (a shared vector, where
    shared_table_model shares tables)."""
    import flatbuffers
    b = flatbuffers.Builder(1024)
    operator = _table(b, "Operator", OpcodeIndex=0, Inputs=b.CreateNumpyVector(np.zeros(n_inputs, np.int32)),
                      Outputs=b.CreateNumpyVector(np.zeros(1, np.int32)))
    operators = _repeated(b, "SubGraph", "Operators", operator, n_operators)
    tensor = _table(b, "Tensor", Shape=b.CreateNumpyVector(np.array([1, 4], np.int32)))
    subgraph = _table(b, "SubGraph", Tensors=_repeated(b, "SubGraph", "Tensors", tensor, 1), Operators=operators)
    opcode = _table(b, "OperatorCode", DeprecatedBuiltinCode=0, BuiltinCode=0, Version=1)
    b.Finish(_table(b, "Model", Version=3, Subgraphs=_repeated(b, "Model", "Subgraphs", subgraph, 1),
                    OperatorCodes=_repeated(b, "Model", "OperatorCodes", opcode, 1),
                    Buffers=_repeated(b, "Model", "Buffers", _table(b, "Buffer"), 1)), file_identifier=b"TFL3")
    return bytes(b.Output())


# -- the long run: worker processes under RLIMIT_AS, one timeout per case ------------------------
MEMORY_FACTOR = 64          # peak RSS growth allowed per byte the file and its tensors declare
MEMORY_SLACK = 512 << 20    # plus this (GL shader compiles, numpy temporaries, caches)
RESULTS = ("ok", "rejected", "big", "bug", "timeout", "crash", "memory")


def _rss_bytes(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _reset_peak_rss():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
        return True
    except OSError:
        return False


def _quiet():
    import logging
    logging.getLogger("gles_delegate").setLevel(logging.ERROR)
    warnings.simplefilter("ignore")


def _worker(conn, memory_mb, cpu_backend):
    """Run cases sent over `conn` as (data, use_gpu, input_seed) on `cpu_backend`; answer
    (Outcome, peak growth in bytes or None, declared bytes)."""
    if memory_mb:
        limit = memory_mb << 20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    _quiet()
    from gles_delegate import GpuDelegate
    from gles_delegate.gpu.context import acquire_shared
    try:
        acquire_shared()  # keep one context for the worker's life: delegates share it
    except Exception:
        pass
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message is None:
            return
        data, use_gpu, input_seed = message
        declared = declared_bytes(data)
        resettable = _reset_peak_rss()
        before = _rss_bytes("VmRSS")
        outcome = run_case(data, GpuDelegate if use_gpu else None, input_seed, cpu_backend=cpu_backend)
        growth = _rss_bytes("VmHWM") - before if resettable else None
        conn.send((outcome, growth, declared))


class _Pool:
    """Worker processes that each run one case at a time, replaced when one dies or hangs."""

    def __init__(self, memory_mb, cpu_backend="auto"):
        self.memory_mb, self.cpu_backend = memory_mb, cpu_backend
        self.context = multiprocessing.get_context("spawn")
        self.process = self.conn = None

    def start(self):
        parent, child = self.context.Pipe()
        self.process = self.context.Process(target=_worker, args=(child, self.memory_mb, self.cpu_backend),
                                            daemon=True)
        self.process.start()
        child.close()
        self.conn = parent

    def run(self, data, use_gpu, input_seed, timeout):
        """(result, Outcome or None, peak growth, declared bytes)."""
        if self.process is None or not self.process.is_alive():
            self.start()
        self.conn.send((data, use_gpu, input_seed))
        if not self.conn.poll(timeout):
            self.stop(kill=True)
            return "timeout", None, None, None
        try:
            outcome, growth, declared = self.conn.recv()
        except (EOFError, OSError):
            code = self.process.exitcode
            self.stop(kill=True)
            return "crash", Outcome("crash", "?", message=f"worker exit code {code}"), None, None
        if growth is not None and growth > MEMORY_FACTOR * declared + MEMORY_SLACK:
            outcome.message = f"peak RSS grew {growth >> 20} MiB, the file declares {declared >> 20} MiB"
            return "memory", outcome, growth, declared
        return outcome.result, outcome, growth, declared

    def stop(self, kill=False):
        if self.process is None:
            return
        if kill:
            self.process.kill()
        else:
            try:
                self.conn.send(None)
            except OSError:
                pass
        self.process.join(10)
        self.process = self.conn = None


def fuzz(seeds, cases, minutes, seed, gpu_modes, timeout, memory_mb, out_dir, log=print, cpu_backend="auto"):
    """The long fuzz loop; returns the summary dict (also what --json writes)."""
    rng = random.Random(seed)
    pool = _Pool(memory_mb, cpu_backend)
    counts = collections.Counter()           # (mutator, mode, result[@stage]) -> n
    findings = []
    start, tried, unwritable = time.time(), 0, 0
    deadline = start + minutes * 60 if minutes else None
    try:
        while (cases is None or tried < cases) and (deadline is None or time.time() < deadline):
            seed_model = rng.choice(seeds)
            data, what, kind = seed_model.mutate(rng)
            if data is None:
                unwritable += 1
                continue
            tried += 1
            for use_gpu in gpu_modes:
                mode = "gpu" if use_gpu else "cpu"
                result, outcome, growth, declared = pool.run(data, use_gpu, tried, timeout)
                stage = f"@{outcome.stage}" if outcome is not None and result == "rejected" else ""
                counts[(kind, mode, result + stage)] += 1
                if result in ("bug", "timeout", "crash", "memory"):
                    name = f"{result}-{tried:06d}-{mode}"
                    findings.append({"case": tried, "seed": seed_model.name, "mutation": what, "mode": mode,
                                     "result": result, "message": outcome.message if outcome else "",
                                     "file": name + ".tflite"})
                    if out_dir:
                        Path(out_dir).mkdir(parents=True, exist_ok=True)
                        (Path(out_dir) / (name + ".tflite")).write_bytes(data)
                        (Path(out_dir) / (name + ".txt")).write_text(
                            f"seed: {seed_model.name}\nmutation: {what}\nmode: {mode}\nresult: {result}\n"
                            f"{outcome.message if outcome else ''}\n{outcome.error if outcome else ''}")
                    log(f"FINDING {name}: {seed_model.name}: {what}: {outcome.message if outcome else result}")
            if tried % 100 == 0:
                log(f"{tried} cases, {time.time() - start:.0f} s, {len(findings)} findings")
    finally:
        pool.stop()
    return {"cases": tried, "runs": sum(counts.values()), "unwritable_mutations": unwritable,
            "seconds": round(time.time() - start, 1), "seed": seed,
            "models": [s.name for s in seeds], "timeout_s": timeout, "memory_mb": memory_mb,
            "outcomes": _nest(counts), "findings": findings}


def _nest(counts):
    table = {}
    for (kind, mode, result), n in sorted(counts.items()):
        table.setdefault(kind, {}).setdefault(mode, {})[result] = n
    return table


def print_summary(summary, out=sys.stdout):
    print(f"{summary['cases']} cases ({summary['runs']} runs) in {summary['seconds']} s, seed {summary['seed']}, "
          f"models: {', '.join(summary['models'])}", file=out)
    results = sorted({r for kinds in summary["outcomes"].values() for modes in kinds.values() for r in modes})
    print(f"{'mutator':<10}{'mode':<6}" + "".join(f"{r:>20}" for r in results), file=out)
    for kind, modes in summary["outcomes"].items():
        for mode, row in modes.items():
            print(f"{kind:<10}{mode:<6}" + "".join(f"{row.get(r, 0):>20}" for r in results), file=out)
    print(f"findings: {len(summary['findings'])}", file=out)
    for f in summary["findings"]:
        print(f"  {f['file']}: {f['seed']}: {f['mutation']}: {f['message'][:160]}", file=out)


def seed_names(text):
    """argparse type of --models: comma-separated MediaPipe model names and/or 'small'."""
    from gles_delegate.tools.fetch_models import MODEL_NAMES
    names = [name for name in text.split(",") if name]
    unknown = [name for name in names if name != "small" and name not in MODEL_NAMES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"expected MediaPipe model names and/or 'small', got {text!r}")
    return names


def build_parser():
    parser = common.tool_parser("gles-fuzz", __doc__)
    parser.add_argument("--cases", type=common.positive_int, default=None, help="number of mutated files (default: 500 "
                        "unless --minutes is given)")
    parser.add_argument("--minutes", type=common.positive_float, default=None, help="stop after this long")
    parser.add_argument("--seed", type=common.non_negative_int, default=0,
                        help="seed of the mutations: the same seed repeats the same cases (default 0)")
    parser.add_argument("--models", type=seed_names, default=",".join(SEED_MODELS + ("small",)),
                        help="seed models: MediaPipe names and/or 'small' (the writer-built ones)")
    parser.add_argument("--gpu", choices=("both", "on", "off"), default="both",
                        help="run each case without a delegate, with the GpuDelegate, or both")
    parser.add_argument("--cpu-backend", choices=BACKENDS, default="auto",
                        help="the Interpreter's cpu_backend (default auto, as users run it; reference: the package's "
                             "own kernels only)")
    parser.add_argument("--timeout", type=common.positive_float, default=60.0, help="seconds per run")
    parser.add_argument("--memory-mb", type=common.non_negative_int, default=8192, help="RLIMIT_AS of the worker (0: none)")
    parser.add_argument("--out", type=common.output_dir, default="fuzz_findings", help="where findings are written")
    parser.add_argument("--json", type=common.output_file, help="write the summary as JSON to this file")
    return parser


def main(argv=None):
    return common.run_main(build_parser(), run, argv)


def run(args):
    cases = args.cases if args.cases is not None or args.minutes else 500
    names = args.models
    corpus = seed_corpus([n for n in names if n != "small"], include_small="small" in names)
    seeds = [Seed(name, data) for name, data in corpus.items()]
    modes = {"both": (False, True), "on": (True,), "off": (False,)}[args.gpu]
    summary = fuzz(seeds, cases, args.minutes, args.seed, modes, args.timeout, args.memory_mb, args.out,
                   log=lambda line: print(line, file=sys.stderr, flush=True), cpu_backend=args.cpu_backend)
    print_summary(summary)
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1))
    return 1 if summary["findings"] else 0


if __name__ == "__main__":
    sys.exit(main())
