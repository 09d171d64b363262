"""global_pool_to_mean: an AVERAGE_POOL_2D whose one window covers the input becomes a MEAN."""
import pytest

from tests.gpu.transforms.rulelib import VALID, Chain, check_gpu, ops_of, random, rewrite, statuses, why

RULE = "global_pool_to_mean"


def global_pool(activation=0, padding=VALID):
    c = Chain((2, 9, 7, 12))
    return c.build(c.op("AVERAGE_POOL_2D", c.x, shape=(2, 1, 1, 12), padding=padding, stride_w=7, stride_h=9,
                        filter_width=7, filter_height=9, fused_activation_function=activation))


@pytest.mark.parametrize("padding", [0, 1])
def test_global_average_pool_becomes_mean(padding):
    model = global_pool(padding=padding)
    graph, log = rewrite(model, RULE)
    assert ops_of(graph) == ["MEAN"]
    assert graph.nodes[0].inputs[1].data.tolist() == [1, 2] and graph.nodes[0].options["keep_dims"]
    assert statuses(log, RULE) == [("APPLIED", "#0 (AVERAGE_POOL_2D)")]
    check_gpu(model, [random((2, 9, 7, 12))])
    check_gpu(model, [random((2, 9, 7, 12))], "fp16")


def test_a_pool_with_an_activation_stays():
    model = global_pool(activation=1)
    graph, log = rewrite(model, RULE)
    assert ops_of(graph) == ["AVERAGE_POOL_2D"]
    assert "fused activation" in why(log, RULE, "#0 (AVERAGE_POOL_2D)")
    check_gpu(model, [random((2, 9, 7, 12))])


def test_a_windowed_pool_is_not_considered():
    c = Chain((1, 8, 8, 4))
    model = c.build(c.op("AVERAGE_POOL_2D", c.x, shape=(1, 4, 4, 4), padding=VALID, stride_w=2, stride_h=2,
                         filter_width=2, filter_height=2))
    graph, log = rewrite(model, RULE)
    assert ops_of(graph) == ["AVERAGE_POOL_2D"] and not log
