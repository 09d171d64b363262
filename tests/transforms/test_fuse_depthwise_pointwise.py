"""fuse_depthwise_pointwise: a depthwise convolution read only by a pointwise one runs inside the
pointwise kernel, in every geometry the depthwise kernel has, and gives what the two kernels give."""
import numpy as np
import pytest

from gles_delegate import GpuDelegate
from gles_delegate.gpu.kernels.conv import DEPTHWISE_PROLOGUE
from gles_delegate.graph import Graph
from gles_delegate.tflite import read_model
from gles_delegate.transforms import RULES, fuse_depthwise_pointwise, rewrite_partition
from tests.oplib import SAME, VALID, run_ours
from tests.transforms.rulelib import Chain, check_gpu, ops_of, random, rewrite, statuses, why

RULE = "fuse_depthwise_pointwise"


def block(shape=(1, 8, 8, 12), out_channels=10, stride=1, padding=SAME, dw_activation=3, pw_activation=0,
          extra_reader=False, kernel=3):
    """x -> DEPTHWISE_CONV_2D -> 1x1 CONV_2D (the depthwise output optionally also an output)."""
    c = Chain(shape)
    dw = c.depthwise(c.x, kernel=kernel, stride=stride, padding=padding, activation=dw_activation)
    pw = c.conv(dw, out_channels, kernel=1, activation=pw_activation)
    return c.build(pw, *([dw] if extra_reader else []))


CASES = [  # input shape, output channels, stride, padding, depthwise activation, kernel
    ((1, 8, 8, 12), 10, 1, SAME, 3, 3),     # MobileNet's block: relu6 between
    ((2, 9, 7, 5), 7, 2, SAME, 1, 3),       # batch 2, stride 2, odd sizes, channels not a multiple of 4
    ((1, 11, 11, 8), 16, 1, VALID, 0, 5),   # VALID 5x5 (no padding read), no activation
    ((1, 4, 4, 256), 32, 1, SAME, 2, 3),    # deep input on a small plane: the pointwise kernel splits K
]


@pytest.mark.parametrize("precision", ["fp32", "fp16_fp32acc", "fp16"])
@pytest.mark.parametrize("case", CASES)
def test_depthwise_runs_inside_the_pointwise_kernel(case, precision):
    shape, out_channels, stride, padding, activation, kernel = case
    model = block(shape, out_channels, stride, padding, activation, pw_activation=1, kernel=kernel)
    graph, log = rewrite(model, RULE)
    assert ops_of(graph) == ["CONV_2D"]
    assert graph.nodes[0].options[DEPTHWISE_PROLOGUE].op == "DEPTHWISE_CONV_2D"
    assert statuses(log, RULE) == [("APPLIED", "#1 (CONV_2D)")]
    summary, _ = check_gpu(model, [random(shape, 2, 2.0)], precision)
    assert summary["dispatches"] == 3  # convert in, the fused convolution, convert out


@pytest.mark.parametrize("precision", ["fp32", "fp16_fp32acc"])
def test_fused_results_equal_the_two_kernels(precision, monkeypatch):
    """In half storage the kernel rounds each depthwise value to half, as storing it did, so fusion
    changes no value: the same model with the fusion priced out gives the same bytes."""
    model, values = block((1, 10, 10, 24), 20), [random((1, 10, 10, 24), 4, 3.0)]
    with GpuDelegate(precision=precision) as delegate:
        fused = run_ours(model, values, experimental_delegates=[delegate])[0]
        assert delegate.summary()["dispatches"] == 3
    monkeypatch.setattr(fuse_depthwise_pointwise, "MAX_RECOMPUTE_MACS", 0)
    with GpuDelegate(precision=precision) as delegate:
        separate = run_ours(model, values, experimental_delegates=[delegate])[0]
        assert delegate.summary()["dispatches"] == 4
    np.testing.assert_allclose(fused, separate, rtol=1e-6, atol=1e-6 * np.abs(separate).max())


def test_a_depthwise_output_read_elsewhere_stays():
    model = block(extra_reader=True)
    graph, log = rewrite(model, RULE)
    assert ops_of(graph) == ["DEPTHWISE_CONV_2D", "CONV_2D"]
    assert "also read elsewhere" in why(log, RULE, "#1 (CONV_2D)")
    check_gpu(model, [random((1, 8, 8, 12), 1)])


def test_a_channel_multiplier_stays():
    c = Chain((1, 6, 6, 4))
    weights = c.const(random((1, 3, 3, 8), 3, 0.5))
    dw = c.op("DEPTHWISE_CONV_2D", c.x, weights, c.const(random(8, 4)), shape=(1, 6, 6, 8), padding=1,
              stride_w=1, stride_h=1, depth_multiplier=2, fused_activation_function=0)
    model = c.build(c.conv(dw, 4, kernel=1))
    graph, log = rewrite(model, RULE)
    assert ops_of(graph) == ["DEPTHWISE_CONV_2D", "CONV_2D"] and "multiplier" in why(log, RULE, "#1 (CONV_2D)")


def test_a_depthwise_with_an_epilogue_stays():
    """HARD_SWISH after the depthwise becomes its epilogue (fuse_activation); the prologue
    computes only the fused activation codes."""
    c = Chain((1, 6, 6, 8))
    act = c.op("HARD_SWISH", c.depthwise(c.x))
    model = c.build(c.conv(act, 4, kernel=1))
    graph = Graph.from_model(read_model(model))
    rules = tuple((name, apply) for name, apply in RULES if name in ("fuse_activation", RULE))
    graph, log = rewrite_partition(graph.nodes, graph.inputs, graph.outputs, rules)
    assert ops_of(graph) == ["DEPTHWISE_CONV_2D", "CONV_2D"] and "epilogue" in why(log, RULE, "#2 (CONV_2D)")
    summary, _ = check_gpu(model, [random((1, 6, 6, 8), 5, 3.0)])
    assert summary["dispatches"] == 4


def test_too_much_recomputation_stays(monkeypatch):
    model = block((1, 16, 16, 32), 64)
    monkeypatch.setattr(fuse_depthwise_pointwise, "MAX_RECOMPUTE_MACS", 16 * 16 * 9 * 32 * 8 - 1)
    graph, log = rewrite(model, RULE)
    assert ops_of(graph) == ["DEPTHWISE_CONV_2D", "CONV_2D"]
    assert "589,824 multiply-adds" in why(log, RULE, "#1 (CONV_2D)")  # 16 x 16 pixels x 9 taps x 32 x 8 groups


def test_a_strided_or_wider_second_conv_is_not_considered():
    c = Chain((1, 8, 8, 8))
    model = c.build(c.conv(c.depthwise(c.x), 4, kernel=3))
    graph, log = rewrite(model, RULE)
    assert ops_of(graph) == ["DEPTHWISE_CONV_2D", "CONV_2D"] and not statuses(log, RULE)
