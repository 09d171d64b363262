"""The reader's hot paths walk tensors and operators without the generated accessors: every field
they read equals what the generated bindings (the independent implementation) read."""
import numpy as np
import pytest
import tflite

from gles_delegate.tflite import ModelBuilder, read_model
from gles_delegate.tflite.schema import OPTIONS_TYPE_NAMES, snake_case, table_module, vtable_offset
from gles_delegate.tools.fetch_models import MODEL_NAMES


def generated_tensor_fields(tensor):
    return (tensor.Name().decode(), tuple(tensor.ShapeAsNumpy()) if not tensor.ShapeIsNone() else (),
            tensor.Type(), tensor.Buffer(), bool(tensor.IsVariable()),
            tuple(tensor.ShapeSignatureAsNumpy()) if not tensor.ShapeSignatureIsNone() else None)


def generated_operator_fields(op):
    def ints(field):
        return () if getattr(op, field + "IsNone")() else tuple(int(v) for v in getattr(op, field + "AsNumpy")())
    return op.OpcodeIndex(), ints("Inputs"), ints("Outputs"), ints("Intermediates")


def generated_options(op):
    """The operator's builtin options through the generated accessors: every scalar, string and
    vector field, a vector only when present (absent differs from empty)."""
    type_name = OPTIONS_TYPE_NAMES.get(op.BuiltinOptionsType())
    table = op.BuiltinOptions()
    if type_name in (None, "NONE") or table is None:
        return {}
    options = getattr(table_module(type_name), type_name)()
    options.Init(table.Bytes, table.Pos)
    names = [m for m in vars(type(options)) if m[:1].isupper() and m != "Init" and not m.startswith("GetRootAs")]
    fields = {}
    for name in names:
        if name.endswith(("AsNumpy", "IsNone", "Length", "BufferHasIdentifier")):
            continue
        if name + "Length" in names:
            if not getattr(options, name + "IsNone")():
                fields[snake_case(name)] = tuple(getattr(options, name + "AsNumpy")().tolist())
            continue
        value = getattr(options, name)()
        if isinstance(value, bytes):
            value = value.decode()
        if isinstance(value, (int, float, bool, str)):
            fields[snake_case(name)] = value
    return fields


def generated_index_vector(union_type, table):
    if table is None or union_type == 0:
        return None
    vector = {1: tflite.Int32Vector, 2: tflite.Uint16Vector, 3: tflite.Uint8Vector}[union_type]()
    vector.Init(table.Bytes, table.Pos)
    return [] if vector.ValuesIsNone() else vector.ValuesAsNumpy().tolist()


def assert_sparsity_matches(ours, generated):
    assert (ours is None) == (generated is None)
    if generated is None:
        return
    assert tuple(ours.traversal_order) == tuple(generated.TraversalOrderAsNumpy().tolist())
    assert tuple(ours.block_map) == (() if generated.BlockMapIsNone() else tuple(generated.BlockMapAsNumpy().tolist()))
    assert len(ours.dim_metadata) == generated.DimMetadataLength()
    formats = {v: k for k, v in vars(tflite.DimensionType).items() if not k.startswith("_")}
    for d, meta in enumerate(ours.dim_metadata):
        theirs = generated.DimMetadata(d)
        assert (meta.format, meta.dense_size) == (formats[theirs.Format()], theirs.DenseSize())
        for field in ("ArraySegments", "ArrayIndices"):
            expected = generated_index_vector(getattr(theirs, field + "Type")(), getattr(theirs, field)())
            value = getattr(meta, {"ArraySegments": "array_segments", "ArrayIndices": "array_indices"}[field])
            assert (None if value is None else value.tolist()) == expected, (d, field)


def assert_fields_match(data):
    model = read_model(data)
    root = tflite.Model.GetRootAs(data, 0)
    for s, subgraph in enumerate(model.subgraphs):
        sg = root.Subgraphs(s)
        assert len(subgraph.tensors) == sg.TensorsLength() and len(subgraph.operators) == sg.OperatorsLength()
        for t, tensor in enumerate(subgraph.tensors):
            name, shape, type_code, buffer, variable, signature = generated_tensor_fields(sg.Tensors(t))
            assert (tensor.name, tuple(tensor.shape), tensor.buffer, tensor.is_variable) == (name, shape, buffer, variable)
            assert tensor.type_name == {v: k for k, v in vars(tflite.TensorType).items()}[type_code]
            assert (None if tensor.shape_signature is None else tuple(tensor.shape_signature)) == (signature or None)
            assert (tensor.quantization is None) == (sg.Tensors(t).Quantization() is None
                                                     or sg.Tensors(t).Quantization().ScaleLength() == 0)
            assert_sparsity_matches(tensor.sparsity, sg.Tensors(t).Sparsity())
        opcodes = [root.OperatorCodes(i) for i in range(root.OperatorCodesLength())]
        for k, op in enumerate(subgraph.operators):
            opcode, inputs, outputs, intermediates = generated_operator_fields(sg.Operators(k))
            assert (tuple(op.inputs), tuple(op.outputs), tuple(op.intermediates)) == (inputs, outputs, intermediates)
            assert op.version == opcodes[opcode].Version()
            expected = generated_options(sg.Operators(k))
            assert op.options == expected and [type(v) for v in op.options.values()] == \
                [type(v) for v in expected.values()], (k, op.op)


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_real_models_read_as_the_bindings_read_them(mediapipe_models, name):
    assert_fields_match(mediapipe_models[name].read_bytes())


def test_optional_fields_read_as_the_bindings_read_them():
    """A variable tensor, a shape signature, a quantized tensor, a custom op's options."""
    b = ModelBuilder()
    x = b.input("x", (1, 4), shape_signature=(-1, 4))
    state = b.tensor("state", (1, 4), is_variable=True)
    out = b.tensor("out", (1, 4), quantization=(0.5, 3))
    b.op("ADD", [x, state], [out], fused_activation_function=0)
    b.output(out)
    assert_fields_match(b.build())


def test_options_read_as_the_bindings_read_them():
    """Set and defaulted scalars of each width (int8 enums, int32, float, bool), present, empty
    and absent vectors."""
    b = ModelBuilder()
    x = b.input("x", (1, 2, 2, 4))
    w = b.const("w", np.ones((4, 1, 1, 4), np.float32))
    conv, flat, fc_out, act = (b.tensor(n, s) for n, s in (("conv", (1, 2, 2, 4)), ("flat", (4, 4)),
                                                             ("fc", (4, 4)), ("act", (4, 4))))
    b.op("CONV_2D", [x, w, -1], [conv], padding=1, stride_w=1, stride_h=1, dilation_w_factor=1)
    b.op("RESHAPE", [conv], [flat], new_shape=[4, 4])
    b.op("FULLY_CONNECTED", [flat, b.const("fw", np.ones((4, 4), np.float32)), -1], [fc_out], keep_num_dims=True)
    b.op("LEAKY_RELU", [fc_out], [act], alpha=0.25)
    squeezed = b.tensor("sq", (4, 4))
    b.op("SQUEEZE", [act], [squeezed], squeeze_dims=[])
    b.output(squeezed)
    model = read_model(b.build())
    options = [op.options for op in model.subgraphs[0].operators]
    assert options[0]["dilation_h_factor"] == 1 and options[0]["padding"] == 1  # default and set
    assert options[1]["new_shape"] == (4, 4) and options[2]["keep_num_dims"] is True
    assert options[3] == {"alpha": 0.25} and options[4] == {"squeeze_dims": ()}
    assert_fields_match(b.build())


def test_field_offsets_come_from_the_bindings():
    assert vtable_offset(tflite.Tensor, "Shape") == 4 and vtable_offset(tflite.Operator, "Intermediates") == 20
    with pytest.raises(LookupError):
        vtable_offset(tflite.Tensor, "Init")
