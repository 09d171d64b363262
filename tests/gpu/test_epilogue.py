"""Epilogues (kernels_glsl/epilogue.glsl): every kernel that applies one runs a chain of steps of
every operand kind (none, scalar, per-channel constant on either side, a runtime tensor, a
constant slope) in every precision, as one dispatch, and matches the reference of the unfused
nodes."""
import numpy as np
import pytest

from gles_delegate.gpu import kernels, shader
from gles_delegate.gpu.kernels import epilogue
from tests.gpu.gpulib import PRECISIONS
from tests.gpu.transforms import rulelib
from tests.gpu.transforms.rulelib import Chain, check_gpu, random

SHAPE = (1, 6, 7, 5)


def producer(c, kind):
    """A node of `kind` computing a SHAPE tensor from the model input."""
    n, h, w, ch = SHAPE
    if kind == "CONV_2D":
        return c.conv(c.x, ch)
    if kind == "DEPTHWISE_CONV_2D":
        return c.depthwise(c.x)
    if kind == "FULLY_CONNECTED":
        return c.op(kind, c.x, c.const(random((ch, ch), 4)), c.const(random(ch, 5)), keep_num_dims=True)
    if kind == "TRANSPOSE_CONV":
        return c.op(kind, c.const(SHAPE, np.int32), c.const(random((ch, 3, 3, ch), 4)), c.x, padding=0,
                    stride_w=1, stride_h=1)
    if kind in ("AVERAGE_POOL_2D", "MAX_POOL_2D"):
        return c.op(kind, c.x, padding=0, stride_w=1, stride_h=1, filter_width=3, filter_height=2)
    if kind.startswith("RESIZE"):
        small = c.op("AVERAGE_POOL_2D", c.x, shape=(1, 3, 4, ch), padding=0, stride_w=2, stride_h=2,
                     filter_width=2, filter_height=2)
        return c.op(kind, small, c.const([h, w], np.int32), shape=SHAPE)
    if kind == "ADD":
        return c.op(kind, c.x, c.const(random((1, 1, w, ch), 6)))
    if kind == "BATCH_MATMUL":  # [1, 6, 7, 5] x [1, 6, 5, 5]: rows on the W axis, batches on H
        return c.op(kind, c.x, c.const(random((n, h, ch, ch), 9)), adj_x=False, adj_y=False)
    if kind == "SELECT_V2":
        return c.op(kind, c.const(random((w, ch), 9) > 0, np.bool_), c.x, c.const(random(SHAPE, 10)))
    return c.op(kind, c.x)


def chain(c, value, residual):
    """HARD_SWISH, + residual, constant * value, scalar - value, PRELU, LOGISTIC, MAXIMUM."""
    value = c.op("HARD_SWISH", value)
    value = c.op("ADD", value, residual, fused_activation_function=3)
    value = c.op("MUL", c.const(random(SHAPE[-1], 7)), value)
    value = c.op("SUB", c.const(np.float32(0.25)), value)
    value = c.op("PRELU", value, c.const(random((1, 1, SHAPE[-1]), 8, 0.3)))
    return c.op("TANH", value)


KINDS = ["CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV", "AVERAGE_POOL_2D", "MAX_POOL_2D",
         "RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR", "ADD", "NEG", "BATCH_MATMUL", "SELECT_V2", "L2_NORMALIZATION"]


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("kind", KINDS)
def test_a_chain_of_every_operand_kind_fuses_and_matches(kind, precision):
    c = Chain(SHAPE)
    residual = c.b.input("residual", SHAPE)
    c.shapes[residual] = SHAPE
    model = c.build(chain(c, producer(c, kind), residual))
    values = [random(SHAPE, 1, 2.0), random(SHAPE, 2)]
    summary, log = check_gpu(model, values, precision)
    fused = 2 if kind.startswith("RESIZE") else 1  # the resize reads a pool's output
    assert summary["dispatches"] == 2 + fused, [r for r in log if r.status == "SKIPPED"]


def _i32(c, values):
    return c.const(np.array(values, np.int32), np.int32)


# Remaps (layout_map.glsl) reaching SHAPE from an input of their own shape: (input shape, node).
REMAPS = {
    "TRANSPOSE": ((1, 7, 6, 5), lambda c, x: c.op("TRANSPOSE", x, _i32(c, [0, 2, 1, 3]), shape=SHAPE)),
    "RESHAPE": ((1, 6, 5, 7), lambda c, x: c.op("RESHAPE", x, _i32(c, SHAPE), shape=SHAPE)),
    "SLICE": ((1, 8, 9, 6), lambda c, x: c.op("SLICE", x, _i32(c, [0, 1, 2, 1]), _i32(c, SHAPE), shape=SHAPE)),
    "STRIDED_SLICE": ((1, 12, 7, 5), lambda c, x: c.op("STRIDED_SLICE", x, _i32(c, [0, 1, 0, 0]), _i32(c, [1, 12, 7, 5]),
                                                       _i32(c, [1, 2, 1, 1]), shape=SHAPE)),
    "GATHER": ((1, 6, 7, 8), lambda c, x: c.op("GATHER", x, _i32(c, [7, 6, 5, 4, 3]), shape=SHAPE, axis=3)),
    "REVERSE_V2": (SHAPE, lambda c, x: c.op("REVERSE_V2", x, _i32(c, [2]), shape=SHAPE)),
    "SQUEEZE": ((1, 6, 1, 7, 5), lambda c, x: c.op("SQUEEZE", x, shape=SHAPE, squeeze_dims=[2])),
    "BROADCAST_TO": ((1, 6, 1, 5), lambda c, x: c.op("BROADCAST_TO", x, _i32(c, SHAPE), shape=SHAPE, version=2)),
}


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("op", REMAPS)
def test_a_remap_applies_the_chain_as_it_moves_values(op, precision):
    """The chain fuses into the gather that moves x's values to SHAPE: one layout_map dispatch
    (an attention's scale MUL after the reshape laying out its query)."""
    in_shape, build = REMAPS[op]
    c = Chain(in_shape)
    residual = c.b.input("residual", SHAPE)
    c.shapes[residual] = SHAPE
    model = c.build(chain(c, build(c, c.x), residual))
    summary, log = check_gpu(model, [random(in_shape, 1, 2.0), random(SHAPE, 2)], precision)
    assert summary["dispatches"] == 3, [r for r in log if r.status == "SKIPPED"]  # convert_in x2, the remap


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("op, batch", [("SUM", 3), ("SUM", 20), ("MEAN", 20), ("REDUCE_MAX", 3), ("REDUCE_MIN", 20),
                                       ("REDUCE_PROD", 3)])
def test_a_reduction_applies_the_chain_to_its_result(op, batch, precision):
    """The chain fuses into a reduction over the batch: one reduce dispatch, a loop per output
    (3 values) or a workgroup per output (20: the parallel variant)."""
    in_shape = (batch,) + SHAPE[1:]
    c = Chain(in_shape)
    residual = c.b.input("residual", SHAPE)
    c.shapes[residual] = SHAPE
    reduced = c.op(op, c.x, _i32(c, [0]), shape=SHAPE, keep_dims=True)
    model = c.build(chain(c, reduced, residual))
    summary, log = check_gpu(model, [random(in_shape, 1, 1.0), random(SHAPE, 2)], precision)
    assert summary["dispatches"] == 3, [r for r in log if r.status == "SKIPPED"]  # convert_in x2, the reduction


def test_a_remap_of_several_outputs_or_an_alias_takes_no_epilogue():
    """SPLIT's outputs would share one epilogue; a reshape made an alias (rule alias_reshape)
    runs no dispatch to apply steps, and a reshape with steps is not made one."""
    c = Chain((1, 4, 4, 8))
    halves = c.b.tensor("a", (1, 4, 4, 4)), c.b.tensor("b", (1, 4, 4, 4))
    c.b.op("SPLIT", [_i32(c, 3), c.x], list(halves), num_splits=2)
    graph = rulelib.rewrite_through(c.build(*halves), "remove_dead")[0]
    assert "2 outputs" in kernels.epilogue_reason(graph.nodes[0])
    c = Chain((1, 4, 4, 8))
    model = c.build(c.op("SOFTMAX", c.op("RESHAPE", c.x, _i32(c, [1, 16, 8]), shape=(1, 16, 8)), beta=1.0))
    graph = rulelib.rewrite_through(model, "alias_reshape")[0]
    assert "alias" in kernels.epilogue_reason(graph.nodes[0])
    c = Chain((1, 4, 4, 8))
    model = c.build(c.op("NEG", c.op("RESHAPE", c.op("ABS", c.x), _i32(c, [1, 16, 8]), shape=(1, 16, 8))))
    graph, log = rulelib.rewrite_through(model, "alias_reshape")
    assert "epilogue steps" in rulelib.why(log, "alias_reshape", "#1 (RESHAPE)")
    summary, _ = check_gpu(model, [random((1, 4, 4, 8), 3)])
    assert summary["dispatches"] == 3  # convert_in, ABS, the reshape's copy applying the NEG


def test_every_kernel_with_an_epilogue_is_covered():
    """A case above per kernel with an epilogue; the elementwise kernel's ops share NEG's case.
    The fused ops have theirs beside their rules: SE_GATE, whose output is one pixel, in
    tests/gpu/transforms/test_se_gate.py, LAYER_NORM in test_fuse_layer_norm.py."""
    with_epilogue = {op for module in kernels.MODULES for op in getattr(module, "EPILOGUE", {})}
    elementwise_ops = set(epilogue.UNARY_OPS) | set(epilogue.BINARY_CODES)
    # SELECT: SELECT_V2's kernel; SE_GATE, LAYER_NORM (fused ops): tests/gpu/transforms/;
    # SPLIT, SPLIT_V, UNPACK (several outputs) and EXPAND_DIMS (an alias or a SQUEEZE's mirror):
    # the remap kernel's refusals and SQUEEZE's case; COMPLEX_ABS, REAL, IMAG (complex64 inputs):
    # tests/gpu/test_spectral.py; CONV_3D, CONV_3D_TRANSPOSE (rank-5 tensors): tests/gpu/test_conv3d.py
    reductions = {"SUM", "MEAN", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD"}  # the case above
    assert with_epilogue - set(KINDS) - set(REMAPS) - reductions - elementwise_ops <= {
        "Convolution2DTransposeBias", "SELECT", "SE_GATE", "LAYER_NORM", "SPLIT", "SPLIT_V", "UNPACK", "EXPAND_DIMS",
        "COMPLEX_ABS", "REAL", "IMAG", "CONV_3D", "CONV_3D_TRANSPOSE"}
    assert elementwise_ops <= with_epilogue


def test_every_step_op_has_its_line_in_the_template():
    """epilogue.glsl computes each op of epilogue.py's tables under its named constant (a code
    without one would fall through and return its input unchanged)."""
    text = shader.template("epilogue")
    for op in [*epilogue.UNARY_CODES, *epilogue.BINARY_CODES]:
        if op != "PRELU":  # LEAKY_RELU's code
            assert f"if (op == EP_OP_{op})" in text, op
        assert f"#define EP_OP_{op} " in epilogue.glsl_defines(), op



def test_no_two_step_ops_share_a_code():
    """Op codes are assigned by hand in blocks (float math, the float view): a code reused by two
    ops would run one op's line for the other. PRELU is LEAKY_RELU with a tensor slope."""
    for codes in (epilogue.UNARY_CODES, epilogue.BINARY_CODES):
        owners = {}
        for op, code in codes.items():
            owners.setdefault(code, []).append(op)
        shared = {code: ops for code, ops in owners.items() if len(ops) > 1 and set(ops) != {"LEAKY_RELU", "PRELU"}}
        assert not shared, shared
    assert max(epilogue.UNARY_CODES.values()) < epilogue.BINARY_BASE
