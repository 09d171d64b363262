"""Write .tflite flatbuffers from a ModelDef, and build small models for tests and tools.

The writer mirrors the reader: options dicts use the same snake_case field names the reader
produces, so `write_model(read_model(b))` round-trips.
"""
import flatbuffers
import numpy as np
import tflite

from . import schema
from .model import ModelDef, OperatorDef, Quantization, SignatureDef, SubgraphDef, TensorDef

_SPARSE_VECTOR_MODULES = {1: "Int32Vector", 2: "Uint16Vector", 3: "Uint8Vector"}
_DIM_FORMAT_CODES = {name: code for code, name in schema.enum_names(tflite.DimensionType).items()}
_DATA_ALIGNMENT = 16


def write_model(model, external_buffers=False):
    """Serialize a ModelDef to .tflite bytes.

    external_buffers: store buffer contents after the flatbuffer and reference them through
    Buffer.offset/size (the layout TFLite uses for models over 2 GB).
    """
    return _Writer(model, external_buffers).build()


class _Writer:
    def __init__(self, model, external_buffers):
        self.model = model
        self.external = external_buffers
        self.b = flatbuffers.Builder(1024)
        self.opcodes = {}

    def build(self):
        model, b = self.model, self.b
        for sg in model.subgraphs:
            for op in sg.operators:
                self.opcodes.setdefault((op.op, op.custom, op.version), len(self.opcodes))
        subgraphs = [self.subgraph(sg) for sg in model.subgraphs]
        buffers, tail = self.buffers()
        opcodes = [self.opcode(*key) for key in self.opcodes]
        metadata = [self.metadata(name, index) for name, index in model.metadata.items()]
        signatures = [self.signature(sig) for sig in model.signature_defs]
        description = b.CreateString(model.description)
        vectors = {"OperatorCodes": opcodes, "Subgraphs": subgraphs, "Buffers": buffers,
                   "Metadata": metadata, "SignatureDefs": signatures}
        vectors = [(k, self.offsets("Model", k, v)) for k, v in vectors.items()]
        root = self.table("Model", ("Version", model.version), ("Description", description), *vectors)
        b.Finish(root, file_identifier=b"TFL3")
        data = bytes(b.Output())
        return self.append_tail(data, tail) if self.external else data

    # -- helpers --------------------------------------------------------------------------
    def table(self, name, *fields):
        """A `name` table of (field, value) pairs, added in the order given with mod.Add<field>;
        a field whose value is None is left out (the schema's default)."""
        b, mod = self.b, schema.table_module(name)
        mod.Start(b)
        for field, value in fields:
            if value is not None:
                getattr(mod, "Add" + field)(b, value)
        return mod.End(b)

    def offsets(self, owner, field, items):
        """A vector of table offsets for `owner`'s vector field `field`."""
        mod = schema.table_module(owner)
        getattr(mod, f"Start{field}Vector")(self.b, len(items))
        for item in reversed(items):
            self.b.PrependUOffsetTRelative(item)
        return self.b.EndVector()

    def int_vector(self, values, dtype=np.int32):
        return self.b.CreateNumpyVector(np.asarray(values, dtype).reshape(-1))

    def float_vector(self, values):
        return self.b.CreateNumpyVector(np.asarray(values, np.float32).reshape(-1))

    def bytes_vector(self, data):
        """A ubyte vector whose first byte is 16-byte aligned in the finished file."""
        b = self.b
        b.StartVector(1, len(data), _DATA_ALIGNMENT)
        b.head = b.head - len(data)
        b.Bytes[b.head:b.head + len(data)] = data
        return b.EndVector()

    # -- tables ---------------------------------------------------------------------------
    def opcode(self, op, custom, version):
        name = self.b.CreateString(op) if custom else None
        code = tflite.BuiltinOperator.CUSTOM if custom else schema.BUILTIN_OP_CODES[op]
        return self.table("OperatorCode", ("DeprecatedBuiltinCode", min(code, 127)), ("BuiltinCode", code),
                          ("Version", version), ("CustomCode", name))

    def buffers(self):
        """Buffer tables; with external buffers, also the (offset placeholder, bytes) tail list."""
        tables, tail = [], []
        for raw in self.model.buffers:
            raw = np.ascontiguousarray(raw, dtype=np.uint8).tobytes()
            if self.external and raw:
                tail.append(raw)
                # Placeholders, patched in append_tail once the flatbuffer size is known.
                tables.append(self.table("Buffer", ("Offset", 0xFFFFFFFFFFFF0000 | len(tail)), ("Size", len(raw))))
                continue
            tables.append(self.table("Buffer", ("Data", self.bytes_vector(raw) if raw else None)))
        return tables, tail

    def append_tail(self, data, tail):
        out = bytearray(data)
        for i, raw in enumerate(tail, start=1):
            out.extend(b"\0" * (-len(out) % _DATA_ALIGNMENT))
            marker = (0xFFFFFFFFFFFF0000 | i).to_bytes(8, "little")
            at = out.index(marker)
            out[at:at + 8] = len(out).to_bytes(8, "little")
            out.extend(raw)
        return bytes(out)

    def subgraph(self, sg):
        tensors = self.offsets("SubGraph", "Tensors", [self.tensor(t) for t in sg.tensors])
        operators = self.offsets("SubGraph", "Operators", [self.operator(op) for op in sg.operators])
        inputs, outputs = self.int_vector(sg.inputs), self.int_vector(sg.outputs)
        name = self.b.CreateString(sg.name)
        return self.table("SubGraph", ("Tensors", tensors), ("Inputs", inputs), ("Outputs", outputs),
                          ("Operators", operators), ("Name", name))

    def tensor(self, t):
        shape = self.int_vector(t.shape)
        signature = self.int_vector(t.shape_signature) if t.shape_signature is not None else None
        name = self.b.CreateString(t.name)
        quant = self.quantization(t.quantization) if t.quantization is not None else None
        sparsity = self.sparsity(t.sparsity) if t.sparsity is not None else None
        return self.table("Tensor", ("Shape", shape), ("Type", schema.TENSOR_TYPE_CODES[t.type_name]),
                          ("Buffer", t.buffer), ("Name", name), ("IsVariable", t.is_variable),
                          ("ShapeSignature", signature), ("Quantization", quant), ("Sparsity", sparsity))

    def quantization(self, q):
        scales = self.float_vector(q.scales)
        zero_points = self.int_vector(q.zero_points, np.int64)
        low = self.float_vector(q.min) if q.min is not None else None
        high = self.float_vector(q.max) if q.max is not None else None
        return self.table("QuantizationParameters", ("Scale", scales), ("ZeroPoint", zero_points),
                          ("QuantizedDimension", q.quantized_dimension), ("Min", low), ("Max", high))

    def sparsity(self, sp):
        dims = self.offsets("SparsityParameters", "DimMetadata", [self.dim_metadata(d) for d in sp.dim_metadata])
        order, block_map = self.int_vector(sp.traversal_order), self.int_vector(sp.block_map)
        return self.table("SparsityParameters", ("TraversalOrder", order), ("BlockMap", block_map),
                          ("DimMetadata", dims))

    def dim_metadata(self, d):
        segments = self.sparse_vector(d.array_segments)
        indices = self.sparse_vector(d.array_indices)
        unions = []  # a union field is its type code (1: Int32Vector, see sparse_vector) and its table
        for kind, value in (("ArraySegments", segments), ("ArrayIndices", indices)):
            unions += [(f"{kind}Type", 1 if value is not None else None), (kind, value)]
        return self.table("DimensionMetadata", ("Format", _DIM_FORMAT_CODES[d.format]),
                          ("DenseSize", d.dense_size), *unions)

    def sparse_vector(self, values):
        """Sparse index arrays are always written as Int32Vector (union type 1)."""
        if values is None:
            return None
        return self.table(_SPARSE_VECTOR_MODULES[1], ("Values", self.int_vector(values)))

    def operator(self, op):
        union = self.builtin_options(op)  # (type field, table field, type code, table) or None
        custom = self.bytes_vector(op.custom_options) if op.custom_options is not None else None
        inputs, outputs = self.int_vector(op.inputs), self.int_vector(op.outputs)
        intermediates = self.int_vector(op.intermediates) if op.intermediates else None
        options = () if union is None else ((union[0], union[2]), (union[1], union[3]))
        return self.table("Operator", ("OpcodeIndex", self.opcodes[(op.op, op.custom, op.version)]),
                          ("Inputs", inputs), ("Outputs", outputs), *options, ("CustomOptions", custom),
                          ("Intermediates", intermediates))

    def builtin_options(self, op):
        """(type field, table field, type code, table offset) of a builtin op's options in the
        Operator union that holds its table (schema.options_union), or None without options."""
        table_name = None if op.custom else schema.options_table_name(op.op)
        if table_name is None:
            if op.options:
                raise ValueError(f"operator {op.op} takes no builtin options, got {sorted(op.options)}")
            return None
        b, mod = self.b, schema.table_module(table_name)
        reader_class = getattr(mod, table_name)
        items = {f.accessor: f.item for f in schema.options_layout(reader_class) if f.vector}
        vectors = {}
        for field, value in op.options.items():
            camel = schema.camel_case(field)
            if not hasattr(reader_class, camel):
                raise ValueError(f"{table_name} has no field {field!r}")
            if camel in items:  # of the items' own type: int32, int64 (StableHLO's dims), float32, uint8
                vectors[camel] = self.int_vector(value, np.dtype(items[camel] or np.int32))
            elif isinstance(value, str):  # VAR_HANDLE's container and shared_name
                vectors[camel] = b.CreateString(value)
        mod.Start(b)
        for field, value in op.options.items():
            camel = schema.camel_case(field)
            getattr(mod, "Add" + camel)(b, vectors.get(camel, value))
        return (*schema.options_union(table_name), mod.End(b))

    def metadata(self, name, buffer_index):
        return self.table("Metadata", ("Name", self.b.CreateString(name)), ("Buffer", buffer_index))

    def signature(self, sig):
        maps = {field: self.offsets("SignatureDef", field,
                                    [self.tensor_map(n, i) for n, i in getattr(sig, field.lower()).items()])
                for field in ("Inputs", "Outputs")}
        key = self.b.CreateString(sig.key)
        return self.table("SignatureDef", ("Inputs", maps["Inputs"]), ("Outputs", maps["Outputs"]),
                          ("SignatureKey", key), ("SubgraphIndex", sig.subgraph_index))

    def tensor_map(self, name, index):
        return self.table("TensorMap", ("Name", self.b.CreateString(name)), ("TensorIndex", index))


class ModelBuilder:
    """Build a model by hand, for tests and tools.

        b = ModelBuilder()
        x = b.input("x", (1, 8, 8, 3))
        w = b.const("w", weights)
        y = b.tensor("y", (1, 8, 8, 4))
        b.op("CONV_2D", [x, w, -1], [y], padding=0, stride_w=1, stride_h=1)
        b.output(y)
        data = b.build()

    Tensor handles are indices; -1 marks an omitted optional input. `b.subgraph(name)` adds a
    subgraph (a builder of the same API whose `index` WHILE, IF and CALL_ONCE options name); the
    first builder's build() writes them all, sharing one buffer list.
    """

    def __init__(self, name="main", _root=None):
        self.name = name
        self.root = _root or self
        self.index = 0 if _root is None else len(_root.subgraphs)
        self.subgraphs = [self] if _root is None else None  # the root's list of every subgraph builder
        self.tensors = []
        self.buffers = self.root.buffers if _root is not None else [np.zeros(0, np.uint8)]
        self.operators = []
        self.inputs, self.outputs = [], []
        self.signatures = self.root.signatures if _root is not None else []

    def subgraph(self, name):
        """A builder for a new subgraph of this model (index: its position, after the ones before)."""
        child = ModelBuilder(name, _root=self.root)
        self.root.subgraphs.append(child)
        return child

    def tensor(self, name, shape, dtype=np.float32, quantization=None, shape_signature=None,
               data=None, sparsity=None, type_name=None, is_variable=False):
        """Add a tensor; returns its index. `dtype` is a numpy dtype (or type_name a TFLite type);
        `is_variable` marks state the kernels update in place (LSTM), as converters write it."""
        buffer = 0
        if data is not None:
            buffer = len(self.buffers)
            self.buffers.append(np.frombuffer(np.ascontiguousarray(data).tobytes(), np.uint8))
        type_name = type_name or schema.TENSOR_TYPE_NAMES[schema.DTYPE_TO_TENSOR_TYPE[np.dtype(dtype)]]
        if isinstance(quantization, tuple):
            quantization = quantize_params(*quantization)
        self.tensors.append(TensorDef(name=name, shape=tuple(int(d) for d in shape), type_name=type_name,
                                      buffer=buffer, quantization=quantization, sparsity=sparsity,
                                      shape_signature=None if shape_signature is None else tuple(shape_signature),
                                      is_variable=is_variable))
        return len(self.tensors) - 1

    def input(self, name, shape, dtype=np.float32, **kwargs):
        index = self.tensor(name, shape, dtype, **kwargs)
        self.inputs.append(index)
        return index

    def const(self, name, array, quantization=None, shape=None):
        """A constant tensor holding `array` (its dtype and shape unless shape is given)."""
        array = np.asarray(array)
        return self.tensor(name, array.shape if shape is None else shape, array.dtype,
                           quantization=quantization, data=array)

    def output(self, index):
        self.outputs.append(index)

    def op(self, op, inputs, outputs, version=1, custom_options=None, custom=False, options=None, **named):
        """Add an operator. Keyword arguments are the builtin options (reader field names);
        `options`, a dict of more, holds those named like an argument here (the `version` of
        StableHLOCompositeOptions)."""
        self.operators.append(OperatorDef(op=op, inputs=tuple(inputs), outputs=tuple(outputs), version=version,
                                          options={**(options or {}), **named},
                                          custom=custom or custom_options is not None, custom_options=custom_options))

    def signature(self, key, inputs, outputs):
        """Add a signature def of this subgraph: inputs / outputs map names to tensor indices."""
        self.signatures.append(SignatureDef(key=key, subgraph_index=self.index, inputs=inputs,
                                                 outputs=outputs))

    def subgraph_def(self):
        """This builder's subgraph as a SubgraphDef."""
        return SubgraphDef(name=self.name, tensors=self.tensors, inputs=tuple(self.inputs),
                           outputs=tuple(self.outputs), operators=self.operators)

    def model(self):
        """The ModelDef of every subgraph of this model (from any of its builders)."""
        return ModelDef(subgraphs=[b.subgraph_def() for b in self.root.subgraphs], buffers=self.buffers,
                        signature_defs=self.signatures)

    def build(self, **kwargs):
        return write_model(self.model(), **kwargs)


def quantize_params(scale, zero_point, quantized_dimension=0):
    """Quantization from scalars or per-channel sequences."""
    scales = np.atleast_1d(np.asarray(scale, np.float32))
    zero_points = np.atleast_1d(np.asarray(zero_point, np.int64))
    if zero_points.size == 1 and scales.size > 1:
        zero_points = np.repeat(zero_points, scales.size)
    return Quantization(scales=scales, zero_points=zero_points, quantized_dimension=quantized_dimension)
