"""unflatten_dense: Keras' Dense on a rank-3 / rank-4 input (RESHAPE to [rows, C] ->
FULLY_CONNECTED -> RESHAPE back) becomes one FULLY_CONNECTED that keeps the input's dims; what
does not restore the same leading dims, or shares the flattened tensor, keeps its nodes."""
import numpy as np
import pytest

from gles_delegate.gpu.transforms import unflatten_dense
from tests.gpu.gpulib import PRECISIONS
from tests.gpu.transforms.rulelib import (Chain, check_gpu, dispatches, ops_of, random, rewrite, rewrite_through,
                                         statuses, why)

RULE = "unflatten_dense"


def dense_model(shape=(1, 6, 8), units=12, restored=None, share_flat=False):
    """x -> RESHAPE [rows, C] -> FULLY_CONNECTED (no bias) -> RESHAPE to `restored` (x's leading
    dims + units unless given) -> ADD bias -> GELU, as Keras 3 writes a Dense with a gelu."""
    c = Chain(shape)
    rows, channels = int(np.prod(shape[:-1])), shape[-1]
    flat = c.op("RESHAPE", c.x, c.const([rows, channels], np.int32), shape=(rows, channels))
    dense = c.op("FULLY_CONNECTED", flat, c.const(random((units, channels), 3, 0.5)), -1, shape=(rows, units),
                 fused_activation_function=0, keep_num_dims=False)
    restored = restored or tuple(shape[:-1]) + (units,)
    y = c.op("RESHAPE", dense, c.const(list(restored), np.int32), shape=restored)
    out = c.op("GELU", c.op("ADD", y, c.const(random(units, 4))))
    return c.build(out, *([flat] if share_flat else []))


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("shape", [(1, 6, 8), (1, 4, 5, 8), (2, 3, 7)])
def test_a_dense_on_a_higher_rank_input_is_one_dispatch(shape, precision):
    model = dense_model(shape)
    graph, log = rewrite(model, RULE)
    assert ops_of(graph) == ["FULLY_CONNECTED", "ADD", "GELU"]
    assert graph.nodes[0].options["keep_num_dims"] and graph.nodes[0].inputs[0] is graph.inputs[0]
    assert [s for s, _ in statuses(log, RULE)] == ["APPLIED"]
    summary, _ = check_gpu(model, [random(shape, 1)], precision)
    assert summary["dispatches"] == 2  # convert_in, the FULLY_CONNECTED with its bias and GELU


def test_a_reshape_to_other_leading_dims_stays():
    model = dense_model((1, 6, 8), restored=(2, 3, 12))
    graph, log = rewrite(model, RULE)
    assert ops_of(graph)[:3] == ["RESHAPE", "FULLY_CONNECTED", "RESHAPE"]
    assert "does not restore the leading dims [1, 6]" in why(log, RULE, "#1 (FULLY_CONNECTED)")
    check_gpu(model, [random((1, 6, 8), 2)])


def test_a_flattened_tensor_read_elsewhere_stays():
    model = dense_model((1, 6, 8), share_flat=True)
    graph, log = rewrite_through(model, RULE)
    assert "FULLY_CONNECTED" in ops_of(graph) and ops_of(graph).count("RESHAPE") == 2
    assert "also read elsewhere" in why(log, RULE, "#1 (FULLY_CONNECTED)")
    check_gpu(model, [random((1, 6, 8), 3)])


def test_the_switch_turns_the_rule_off(monkeypatch):
    monkeypatch.setattr(unflatten_dense, "ENABLED", False)
    graph, log = rewrite(dense_model(), RULE)
    assert ops_of(graph).count("RESHAPE") == 2 and not statuses(log, RULE)


def residual_model(other_shape=(1, 5, 6)):
    """A transformer's MLP as litert-torch writes it: the residual stream h [1, 5, 6] feeds a
    FULLY_CONNECTED without keep_num_dims ([5, 6] out) and the ADD that broadcasts that back onto
    h (h has two readers: no epilogue of its producer can take the ADD)."""
    c = Chain((1, 5, 12))
    h = c.op("ABS", c.op("FULLY_CONNECTED", c.x, c.const(random((6, 12), 5, 0.5)), -1, shape=(1, 5, 6),
                         fused_activation_function=0, keep_num_dims=True))
    dense = c.op("FULLY_CONNECTED", h, c.const(random((6, 6), 6, 0.5)), -1, shape=(5, 6),
                 fused_activation_function=0, keep_num_dims=False)
    if other_shape != (1, 5, 6):
        h = c.op("RESHAPE", h, c.const(list(other_shape), np.int32), shape=other_shape)
    return c.build(c.op("ADD", h, dense, shape=(1, 5, 6) if other_shape == (1, 5, 6) else other_shape))


@pytest.mark.parametrize("precision", ["fp32", "fp16_fp32acc"])
def test_a_dense_read_by_a_broadcasting_residual_add_keeps_its_dims(precision, monkeypatch):
    """With the dims kept both operands are [1, 5, 6] and the ADD joins the dense's epilogue."""
    model = residual_model()
    graph, log = rewrite(model, RULE)
    assert statuses(log, RULE)[-1] == ("APPLIED", "#2 (FULLY_CONNECTED)")
    dense = next(n for n in graph.nodes if n.op == "FULLY_CONNECTED" and n.index == 2)
    assert dense.options["keep_num_dims"] and tuple(dense.outputs[0].shape) == (1, 5, 6)
    values = [random((1, 5, 12), 7)]
    summary, _ = check_gpu(model, values, precision)
    monkeypatch.setattr(unflatten_dense, "ENABLED", False)
    assert summary["dispatches"] + 1 == dispatches(model, values, precision=precision)


def test_a_dense_whose_reader_does_not_broadcast_it_stays():
    model = residual_model(other_shape=(5, 6))
    graph, log = rewrite(model, RULE)
    assert "does not broadcast it" in why(log, RULE, "#2 (FULLY_CONNECTED)")
    check_gpu(model, [random((1, 5, 12), 8)])
