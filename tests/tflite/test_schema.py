"""The op -> options table mapping the writer uses (schema.options_table_name), over every
builtin operator and every table of the schema's two options unions (BuiltinOptions, and
BuiltinOptions2: the StableHLO ops', DILATE's, REDUCE_WINDOW's)."""
import numpy as np
import pytest

from gles_delegate.tflite import ModelBuilder, read_model, schema

TABLES = sorted(name for name in (*schema.OPTIONS_TYPE_CODES, *schema.OPTIONS2_TYPE_CODES) if name != "NONE")


@pytest.mark.parametrize("op", sorted(schema.BUILTIN_OP_CODES))
def test_every_op_names_an_existing_options_table_or_none(op):
    table = schema.options_table_name(op)
    assert table is None or table in schema.OPTIONS_TYPE_CODES or table in schema.OPTIONS2_TYPE_CODES, (op, table)
    if table is not None:
        assert hasattr(schema.table_module(table), table)


@pytest.mark.parametrize("table", TABLES)
def test_every_options_table_is_some_ops(table):
    """A table no op maps to is a mapping that lost an op (CONV_3D once derived 'Conv3dOptions':
    its options could not be written)."""
    assert any(schema.options_table_name(op) == table for op in schema.BUILTIN_OP_CODES), table


@pytest.mark.parametrize("table", TABLES)
def test_an_op_named_after_a_table_uses_it(table):
    """CONV_3D -> Conv3DOptions, BATCH_TO_SPACE_ND -> BatchToSpaceNDOptions: names equal up to
    case and underscores."""
    key = table[:-len("Options")].lower()
    for op in schema.BUILTIN_OP_CODES:
        if op.replace("_", "").lower() == key:
            assert schema.options_table_name(op) == table, op


@pytest.mark.parametrize("op, table", [("CONV_3D", "Conv3DOptions"), ("CONV_3D_TRANSPOSE", "Conv3DOptions"),
                                       ("RANDOM_UNIFORM", "RandomOptions"),
                                       ("RANDOM_STANDARD_NORMAL", "RandomOptions"), ("MULTINOMIAL", "RandomOptions"),
                                       ("SVDF", "SVDFOptions"), ("LSH_PROJECTION", "LSHProjectionOptions"),
                                       ("ATAN2", "ATan2Options"), ("AVERAGE_POOL_2D", "Pool2DOptions"),
                                       ("L2_NORMALIZATION", "L2NormOptions"), ("ABS", "AbsOptions"),
                                       ("RELU", None), ("CUSTOM", None)])
def test_options_tables_that_share_or_abbreviate_names(op, table):
    """TFLite's flatbuffer_conversions.cc reads these ops' options from these tables."""
    assert schema.options_table_name(op) == table


def _non_default_options(table):
    """{field: value} setting every scalar field of an options table to a value other than its
    default, and every numeric vector to (1, 2) (bools: (True, False)), in its items' type (the StableHLO tables' int64
    dimension lists, a composite's uint8 attributes); strings and sub-tables left out."""
    values = {}
    for field in schema.options_layout(getattr(schema.table_module(table), table)):
        if field.packer is not None:
            kind = field.packer.format[-1]
            values[field.name] = {"?": not field.default, "f": field.default + 0.5}.get(kind, field.default + 1)
        elif field.vector and field.item is not None:
            values[field.name] = (True, False) if field.item == "bool" else (1, 2)
    return values


@pytest.mark.parametrize("op", sorted(op for op in schema.BUILTIN_OP_CODES if schema.options_table_name(op)))
def test_every_ops_options_write_and_read_back(op):
    options = _non_default_options(schema.options_table_name(op))
    b = ModelBuilder()
    x, y = b.input("x", (1,)), b.tensor("y", (1,))
    b.op(op, [x], [y], options=options)
    b.output(y)
    read = read_model(b.build()).subgraphs[0].operators[0]
    assert read.op == op
    for key, value in options.items():
        assert np.asarray(read.options[key]) == pytest.approx(np.asarray(value)), key
