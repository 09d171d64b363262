"""unflatten_dense: Keras' Dense on a rank-3 / rank-4 input (RESHAPE to [rows, C] ->
FULLY_CONNECTED -> RESHAPE back) becomes one FULLY_CONNECTED that keeps the input's dims; what
does not restore the same leading dims, or shares the flattened tensor, keeps its nodes."""
import numpy as np
import pytest

from gles_delegate.gpu.transforms import unflatten_dense
from tests.gpu.gpulib import PRECISIONS
from tests.gpu.transforms.rulelib import Chain, check_gpu, ops_of, random, rewrite, rewrite_through, statuses, why

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
