"""mixed_depthwise: channel groups of one tensor, each through a DEPTHWISE_CONV_2D of its own
kernel size, concatenated back in order (MixNet's MixedConv2d), run as one DEPTHWISE_CONV_2D
whose filter holds each group's kernel where its padding puts it. Every case runs on the GPU
against the reference in every precision, with the dispatches it saves."""
import numpy as np
import pytest

from gles_delegate import GpuDelegate
from gles_delegate.gpu import kernels
from gles_delegate.gpu.kernels import depthwise
from gles_delegate.gpu.kernels.depthwise import TAP_WINDOWS
from tests.gpu.gpulib import PRECISIONS
from tests.gpu.transforms.rulelib import (Chain, check_gpu, check_skipped, dispatches_without, random, rewrite_through, rule_off, statuses)
from tests.gpu.transforms.test_slice_views import slice_, split_v
from tests.oplib import SAME, VALID, run_ours

RULE = "mixed_depthwise"


def groups_of(c, x, sizes, how="SLICE"):
    """`x`'s channels in groups of `sizes`: SLICE nodes (what litert-torch writes for
    torch.split), or one SPLIT_V."""
    if how == "SPLIT_V":
        return split_v(c, x, sizes)
    n, h, w, _ = c.shapes[x]
    starts = np.cumsum((0,) + tuple(sizes))
    return [slice_(c, x, (0, 0, 0, int(a)), (n, h, w, s)) for a, s in zip(starts, sizes)]


def padded_depthwise(c, x, kernel, stride, seed):
    """PyTorch's symmetric padding as litert-torch writes it for a stride of 2: a PAD of
    (kernel - 1) / 2 on each side, then a VALID convolution (merge_padding makes it the node's
    explicit padding)."""
    n, h, w, ch = c.shapes[x]
    p = (kernel - 1) // 2
    padded = c.op("PAD", x, c.const([[0, 0], [p, p], [p, p], [0, 0]], np.int32), shape=(n, h + 2 * p, w + 2 * p, ch))
    return c.depthwise(padded, kernel, padding=VALID, stride=stride, seed=seed)


def mixed_block(c, x, sizes, kernels, stride=1, how="SLICE", torch_padding=False, **concat_options):
    """The groups of `x`, one depthwise convolution each, concatenated along the channels."""
    parts = groups_of(c, x, sizes, how)
    outs = [padded_depthwise(c, p, k, stride, 10 + k) if torch_padding
            else c.depthwise(p, k, stride=stride, seed=10 + k) for p, k in zip(parts, kernels)]
    n, h, w, _ = c.shapes[outs[0]]
    return c.op("CONCATENATION", *outs, shape=(n, h, w, sum(sizes)), axis=3, **concat_options)


def batch_norm_swish(c, x):
    """What follows MixNet's concatenation: its batch norm (MUL, ADD per channel) and swish."""
    channels = c.shapes[x][3]
    y = c.op("ADD", c.op("MUL", x, c.const(random(channels, 7))), c.const(random(channels, 8)))
    return c.op("MUL", y, c.op("LOGISTIC", y))


def fused_windows(model):
    """The TAP_WINDOWS of each depthwise convolution after the rules up to this one."""
    graph, _ = rewrite_through(model, RULE)
    return [n.options.get(TAP_WINDOWS) for n in graph.nodes if n.op == "DEPTHWISE_CONV_2D"]


@pytest.mark.parametrize("precision", PRECISIONS)
def test_mixnet_block(precision):
    """MixNet's last blocks: 270 channels in groups of 90 (from channels 90 and 180: mid-vec4)
    through 3x3, 5x5 and 7x7 kernels, then batch norm and swish: one 7x7 convolution, which then
    takes the batch norm into its weights and the swish into its epilogue."""
    shape = (1, 12, 12, 16)
    c = Chain(shape)
    y = batch_norm_swish(c, mixed_block(c, c.conv(c.x, 270, kernel=1), (90, 90, 90), (3, 5, 7)))
    model = c.build(c.conv(y, 8, kernel=1, seed=9))
    assert fused_windows(model) == [((90, 2, 2, 3, 3), (180, 1, 1, 5, 5), (270, 0, 0, 7, 7))]
    values = [random(shape)]
    summary, _ = check_gpu(model, values, precision)
    assert summary["dispatches"] == 4  # convert_in, 2 convolutions, the depthwise one
    # Without: 3 convolutions reading their groups in place and writing them into the
    # concatenation's storage (slice_views, concat_in_place, lane_views), each with its part of
    # the batch norm and swish (elementwise_before_concat).
    assert dispatches_without(RULE, model, values) == 6


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("size", [10, 11])
def test_same_padding_that_differs_by_kernel(precision, size):
    """Stride 2 SAME on an even input pads 0, 1, 2, 3 rows before for kernels 3, 5, 7, 9 (on an
    odd one 1, 2, 3, 4); four groups of 10 channels (mid-vec4 at 10 and 30), split by SPLIT_V."""
    shape = (1, size, size + 2, 40)
    c = Chain(shape)
    model = c.build(mixed_block(c, c.op("EXP", c.x), (10, 10, 10, 10), (3, 5, 7, 9), stride=2, how="SPLIT_V"))
    [windows] = fused_windows(model)
    assert [w[1:] for w in windows] == [(3, 3, 3, 3), (2, 2, 5, 5), (1, 1, 7, 7), (0, 0, 9, 9)]
    values = [random(shape, scale=0.5)]
    summary, _ = check_gpu(model, values, precision)
    # convert_in, EXP, the convolution (storing the output); without: 4 convolutions (reading
    # and writing lane views), convert_out.
    assert (summary["dispatches"], dispatches_without(RULE, model, values)) == (3, 7)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_merged_pads(precision):
    """PyTorch's symmetric padding of a stride-2 block, PADs merged into each convolution's
    explicit padding (1, 2, 3 pixels): the fused one pads 3 before, and its output keeps its size."""
    shape = (1, 14, 9, 24)
    c = Chain(shape)
    model = c.build(mixed_block(c, c.op("EXP", c.x), (6, 8, 10), (3, 5, 7), stride=2, torch_padding=True))
    assert [w[1:] for w in fused_windows(model)[0]] == [(2, 2, 3, 3), (1, 1, 5, 5), (0, 0, 7, 7)]
    values = [random(shape, scale=0.5)]
    summary, _ = check_gpu(model, values, precision)
    # Without: 3 convolutions, convert_out, the copies of channels 6..14 (from lane 2, 8
    # channels need 3 vec4s: no lane view) out of the slice and into the concatenation, and the
    # copy of the last input into it (it starts in the vec4 where that copy ends: lane_views).
    assert (summary["dispatches"], dispatches_without(RULE, model, values)) == (3, 9)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_even_kernels_and_dilation(precision):
    """SAME padding of 2x2 and 4x4 kernels is uneven (more after than before), with dilation 2:
    the groups' first taps are whole dilated taps apart."""
    shape = (1, 9, 10, 12)
    c = Chain(shape)
    x = c.op("EXP", c.x)
    parts = groups_of(c, x, (6, 6))
    n, h, w, _ = c.shapes[x]
    outs = []
    for part, kernel in zip(parts, (2, 4)):
        weights, bias = c.const(random((1, kernel, kernel, 6), kernel, 0.5)), c.const(random(6, kernel + 1))
        outs.append(c.op("DEPTHWISE_CONV_2D", part, weights, bias, shape=(n, h, w, 6), padding=SAME, stride_w=1,
                         stride_h=1, dilation_w_factor=2, dilation_h_factor=2, depth_multiplier=1,
                         fused_activation_function=1))
    model = c.build(c.op("CONCATENATION", *outs, shape=(n, h, w, 12), axis=3))
    assert [w[1:] for w in fused_windows(model)[0]] == [(1, 1, 2, 2), (0, 0, 4, 4)]
    values = [random(shape, scale=0.5)]
    summary, _ = check_gpu(model, values, precision)
    assert (summary["dispatches"], dispatches_without(RULE, model, values)) == (3, 5)  # 2 convolutions, convert_out


# (depthwise.SKIP_TAPS_MIN_INVOCATIONS, PRELOAD_TAPS_MAX): the kernel's variants, whichever the
# grids of these small tests would pick: patch pixels no lane uses skipped or loaded, weights in
# registers first or loaded per tap.
KERNEL_VARIANTS = [(0, 0), (0, 81), (2**31, 0), (2**31, 81)]


@pytest.fixture(params=KERNEL_VARIANTS, ids=lambda v: f"skip{int(v[0] == 0)}-preload{int(v[1] > 0)}")
def kernel_variant(request, monkeypatch):
    monkeypatch.setattr(depthwise, "SKIP_TAPS_MIN_INVOCATIONS", request.param[0])
    monkeypatch.setattr(depthwise, "PRELOAD_TAPS_MAX", request.param[1])


@pytest.mark.parametrize("precision", PRECISIONS)
def test_an_infinite_input_reaches_only_the_taps_of_each_group(precision, kernel_variant):
    """An Inf in the input: a 3x3 group's outputs two pixels from it stay finite, as the group's
    own convolution left them, though the fused 7x7 filter spans it (zero weight times Inf would
    be NaN there), in every variant of the kernel."""
    shape = (1, 9, 9, 12)
    c = Chain(shape)
    model = c.build(mixed_block(c, c.x, (6, 6), (3, 7)))
    x = random(shape)
    x[0, 4, 4, :] = np.inf
    reference = run_ours(model, [x])[0]
    overflow = np.abs(reference[0, 4, 1]) == np.finfo(np.float32).max  # TFLite clamps an Inf to FLT_MAX
    assert not overflow[:6].any() and overflow[6:].all()
    summary, _ = check_gpu(model, [x], precision)
    assert summary["dispatches"] == 2


def test_only_copies_go_bit_identical(kernel_variant):
    """Without a batch norm to fold, the fused convolution sums each output's taps in its group's
    order (the skipped taps add exact zeros): at fp32 the output is the groups' bit for bit, in
    every variant of the kernel."""
    shape = (1, 8, 8, 16)
    c = Chain(shape)
    model = c.build(c.op("ABS", mixed_block(c, c.op("EXP", c.x), (2, 6, 8), (5, 3, 5))))
    values = [random(shape)]
    with GpuDelegate() as delegate:
        [fused] = run_ours(model, values, experimental_delegates=[delegate])
    with rule_off(RULE), GpuDelegate() as delegate:
        [separate] = run_ours(model, values, experimental_delegates=[delegate])
    assert np.array_equal(fused, separate)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_the_slicing_node_stays_for_its_other_readers(precision):
    """A SPLIT_V whose last output is also read by an ABS: the fused convolution reads the
    source, the split stays for the ABS (its output a view: slice_views)."""
    shape = (1, 6, 6, 8)
    c = Chain(shape)
    parts = split_v(c, c.op("EXP", c.x), (4, 4))
    outs = [c.depthwise(p, k, seed=k) for p, k in zip(parts, (3, 5))]
    model = c.build(c.op("CONCATENATION", *outs, shape=shape, axis=3), c.op("ABS", parts[1]))
    graph, log = rewrite_through(model, RULE)
    assert [status for status, _ in statuses(log, RULE)] == ["APPLIED"]
    assert [n.op for n in graph.nodes] == ["EXP", "SPLIT_V", "DEPTHWISE_CONV_2D", "ABS"]
    summary, _ = check_gpu(model, [random(shape)], precision)
    assert summary["dispatches"] == 4  # convert_in, EXP, the convolution, ABS


def test_a_group_read_elsewhere():
    shape = (1, 6, 6, 8)
    c = Chain(shape)
    parts = groups_of(c, c.op("EXP", c.x), (4, 4))
    outs = [c.depthwise(p, k, seed=k) for p, k in zip(parts, (3, 5))]
    model = c.build(c.op("CONCATENATION", *outs, shape=shape, axis=3), c.op("ABS", outs[0]))
    check_skipped(model, RULE, "CONCATENATION", "input 0: the output of #3 (DEPTHWISE_CONV_2D) is also read elsewhere",
                  [random(shape)])


@pytest.mark.parametrize("sizes, order, reason", [
    ((4, 4, 4), (0, 1), "the groups cover channels 0..8 of tensor"),
    ((4, 4), (1, 0), "input 0: the input of #3 (DEPTHWISE_CONV_2D) is not channels 0.. of a tensor"),
])
def test_groups_that_do_not_tile_the_tensor(sizes, order, reason):
    """Groups covering part of the channels, or out of order, keep their nodes."""
    shape = (1, 6, 6, sum(sizes))
    c = Chain(shape)
    parts = groups_of(c, c.op("EXP", c.x), sizes)
    outs = [c.depthwise(parts[j], 3 + 2 * j, seed=j) for j in order]
    model = c.build(c.op("CONCATENATION", *outs, shape=(1, 6, 6, 8), axis=3))
    check_skipped(model, RULE, "CONCATENATION", reason, [random(shape)])


def test_groups_of_different_dilations():
    shape = (1, 8, 8, 8)
    c = Chain(shape)
    parts = groups_of(c, c.op("EXP", c.x), (4, 4))
    outs = []
    for part, dilation in zip(parts, (1, 2)):
        weights, bias = c.const(random((1, 3, 3, 4), dilation)), c.const(random(4, 5))
        outs.append(c.op("DEPTHWISE_CONV_2D", part, weights, bias, shape=(1, 8, 8, 4), padding=SAME, stride_w=1,
                         stride_h=1, dilation_w_factor=dilation, dilation_h_factor=dilation, depth_multiplier=1,
                         fused_activation_function=0))
    model = c.build(c.op("CONCATENATION", *outs, shape=shape, axis=3))
    check_skipped(model, RULE, "CONCATENATION", "differ in stride or dilation", [random(shape)])


def test_different_activations():
    """A RELU6 on one group and none on the other (the concatenation's activation could only
    apply to both)."""
    shape = (1, 6, 6, 8)
    c = Chain(shape)
    parts = groups_of(c, c.op("EXP", c.x), (4, 4))
    outs = [c.depthwise(p, 3, seed=k, activation=3 * k) for k, p in enumerate(parts)]
    model = c.build(c.op("CONCATENATION", *outs, shape=shape, axis=3))
    check_skipped(model, RULE, "CONCATENATION", "apply different activations", [random(shape)])


@pytest.mark.parametrize("precision", PRECISIONS)
def test_the_concatenations_activation(precision):
    """The concatenation's RELU6 becomes the fused convolution's."""
    shape = (1, 6, 6, 8)
    c = Chain(shape)
    model = c.build(mixed_block(c, c.op("EXP", c.x), (3, 5), (3, 5), fused_activation_function=3))
    values = [random(shape)]
    summary, log = check_gpu(model, values, precision)
    assert ("APPLIED", "#5 (CONCATENATION)") in statuses(log, RULE)
    assert summary["dispatches"] == 3


def test_a_fused_window_larger_than_the_unpadded_input():
    """PyTorch-padded 3x3 and 5x5 groups at stride 2 on a 4x4 plane (padded 1 and 2 pixels; SAME
    over 5x5 would pad 1 before): the fused 5x5 VALID convolution with explicit padding is
    refused by TFLite's check of the unpadded input (the window does not fit it), so the groups
    stay."""
    shape = (1, 4, 4, 8)
    c = Chain(shape)
    model = c.build(mixed_block(c, c.op("EXP", c.x), (4, 4), (3, 5), stride=2, torch_padding=True))
    check_skipped(model, RULE, "CONCATENATION", "the fused convolution cannot run: output size", [random(shape)])


@pytest.mark.parametrize("windows, what", [
    (((4, 0, 0, 3, 3),), "do not tile the 8 channels"),
    (((4, 0, 0, 3, 3), (8, 1, 1, 3, 3)), "do not tile the 8 channels of a 3x3 filter"),
    (((8, 0, 0, 3, 3), (4, 0, 0, 3, 3)), "do not tile"),
])
def test_the_kernel_refuses_windows_that_do_not_tile_the_filter(windows, what):
    """TAP_WINDOWS must cover the channels in order, each window inside the filter."""
    shape = (1, 6, 6, 8)
    c = Chain(shape)
    model = c.build(c.depthwise(c.op("EXP", c.x), 3))
    graph, _ = rewrite_through(model, RULE)
    [node] = [n for n in graph.nodes if n.op == "DEPTHWISE_CONV_2D"]
    assert kernels.unsupported_reason(node) is None
    node.options[TAP_WINDOWS] = windows
    assert what in kernels.unsupported_reason(node)
