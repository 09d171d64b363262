"""merge_padding: a PAD of H and W with zeros becomes the explicit padding of the convolution or
pool reading it, exactly (also for pools of negative values); other PADs stay."""
import numpy as np
import pytest

from gles_delegate.gpu.kernels.conv import EXPLICIT_PADDING
from tests.gpu.transforms.rulelib import SAME, VALID, Chain, check_gpu, ops_of, random, rewrite, statuses, why

RULE = "merge_padding"


def padded(c, x, pads, value=None):
    """PAD (or PADV2 with `value`) of x by pads [[before, after]] * 4."""
    n, h, w, ch = c.shapes[x]
    shape = [d + sum(p) for d, p in zip((n, h, w, ch), pads)]
    if value is None:
        return c.op("PAD", x, c.const(pads, np.int32), shape=shape)
    return c.op("PADV2", x, c.const(pads, np.int32), c.const([value]), shape=shape)


HW = [[0, 0], [1, 2], [2, 1], [0, 0]]


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("consumer,padding,stride", [("CONV_2D", VALID, 1), ("CONV_2D", SAME, 2),
                                                     ("DEPTHWISE_CONV_2D", VALID, 2), ("DEPTHWISE_CONV_2D", SAME, 1),
                                                     ("MAX_POOL_2D", VALID, 2), ("AVERAGE_POOL_2D", SAME, 2),
                                                     ("AVERAGE_POOL_2D", VALID, 1)])
def test_pad_merges_into_its_consumer(consumer, padding, stride, precision):
    """Pools see the PAD's zeros exactly as before: the input is negative, so a max pool whose
    window reaches the padding must return 0 there, and an average must count the zeros."""
    c = Chain((1, 7, 8, 5))
    p = padded(c, c.x, HW)
    if consumer == "CONV_2D":
        y = c.conv(p, 6, padding=padding, stride=stride)
    elif consumer == "DEPTHWISE_CONV_2D":
        y = c.depthwise(p, padding=padding, stride=stride)
    else:
        _, h, w, ch = c.shapes[p]
        out = [(d + stride - 1) // stride if padding == SAME else (d - 3) // stride + 1 for d in (h, w)]
        y = c.op(consumer, p, shape=(1, *out, ch), padding=padding, stride_w=stride, stride_h=stride,
                 filter_width=3, filter_height=3)
    model = c.build(y)
    graph, log = rewrite(model, RULE)
    assert ops_of(graph) == [consumer]
    assert graph.nodes[0].options[EXPLICIT_PADDING] == (1, 2, 2, 1)
    assert statuses(log, RULE) == [("APPLIED", "#0 (PAD)")]
    x = -np.abs(random((1, 7, 8, 5), 3)) - 0.5  # negative everywhere: a max over padding is 0
    summary, _ = check_gpu(model, [x], precision)
    assert summary["dispatches"] == 2


def test_two_pads_in_a_row_add_up():
    c = Chain((1, 6, 6, 4))
    model = c.build(c.conv(padded(c, padded(c, c.x, HW), [[0, 0], [1, 0], [0, 1], [0, 0]]), 4, padding=VALID))
    graph, log = rewrite(model, RULE)
    assert ops_of(graph) == ["CONV_2D"] and graph.nodes[0].options[EXPLICIT_PADDING] == (2, 2, 2, 2)
    check_gpu(model, [random((1, 6, 6, 4))])


@pytest.mark.parametrize("case,reason", [("channels", "batch or the channels"), ("value", "other than zero"),
                                         ("two_readers", "read elsewhere"), ("add", "no padding to merge")])
def test_pads_it_cannot_merge_stay(case, reason):
    c = Chain((1, 6, 6, 4))
    if case == "channels":
        p = padded(c, c.x, [[0, 0], [1, 1], [1, 1], [0, 4]])
        outputs = [c.conv(p, 4, padding=VALID)]
    elif case == "value":
        p = padded(c, c.x, HW, value=1.5)
        outputs = [c.conv(p, 4, padding=VALID)]
    elif case == "two_readers":
        p = padded(c, c.x, HW)
        outputs = [c.conv(p, 4, padding=VALID), c.op("ABS", p)]
    else:
        p = padded(c, c.x, HW)
        outputs = [c.op("ADD", p, c.const(random(4, 9)))]
    model = c.build(*outputs)
    graph, log = rewrite(model, RULE)
    assert ops_of(graph)[0] in ("PAD", "PADV2")
    assert reason in why(log, RULE, graph.nodes[0].label)
    check_gpu(model, [random((1, 6, 6, 4))])
