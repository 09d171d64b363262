"""concat_in_place: a CONCATENATION input whose PHWC4 storage is a contiguous block of the
output's is written there by its producer (no copy dispatch); any other input keeps its copy.
Every case runs on the GPU against the reference in every precision, with its dispatch count."""
import numpy as np
import pytest

from gles_delegate import GpuDelegate
from gles_delegate.tflite import ModelBuilder
from gles_delegate.gpu.kernels.layout import IN_PLACE_INPUTS
from tests.gpu.gpulib import PRECISIONS
from tests.gpu.test_quantized_models import assert_within_one_step
from tests.gpu.transforms.rulelib import (Chain, check_gpu, dispatches_without, random, rewrite_through, statuses, why)
from tests.litert import run_litert
from tests.oplib import SAME, run_ours

RULE = "concat_in_place"
SHAPE = (1, 4, 5, 8)


def concat(c, inputs, axis=3):
    shape = list(c.shapes[inputs[0]])
    shape[axis] = sum(c.shapes[t][axis] for t in inputs)
    return c.op("CONCATENATION", *inputs, shape=shape, axis=axis)


def in_place(model):
    """{CONCATENATION label: ((input position, offset), ...)} after the rules up to this one."""
    graph, _ = rewrite_through(model, RULE)
    return {n.label: n.options.get(IN_PLACE_INPUTS, ()) for n in graph.nodes if n.op == "CONCATENATION"}


@pytest.mark.parametrize("precision", PRECISIONS)
def test_producers_write_into_their_place(precision):
    """Two convolutions of 8 and 12 channels: both in place, at slices 0 and 2 (40 vec4s in)."""
    c = Chain(SHAPE)
    model = c.build(c.conv(concat(c, [c.conv(c.x, 8), c.conv(c.x, 12, seed=5)]), 4))
    assert list(in_place(model).values()) == [((0, 0), (1, 2 * 4 * 5))]
    summary, _ = check_gpu(model, [random(SHAPE)], precision)
    assert summary["dispatches"] == 4  # convert_in, three convolutions: no copy
    assert dispatches_without(RULE, model, [random(SHAPE)]) == 6


@pytest.mark.parametrize("precision", PRECISIONS)
def test_a_pack_s_slabs_along_its_first_axis_are_written_in_place(precision):
    """PACK of two convolutions' [1, 4, 5, 8] outputs along axis 0 (tf.stack's default): each is
    one batch of the [2, 1, 4, 5, 8] output (its view merges the leading dims), written there by
    its convolution (no copy); along the last axis their channels interleave, so both keep their
    copies."""
    c = Chain(SHAPE)
    stacked = c.op("PACK", c.conv(c.x, 8), c.conv(c.x, 8, seed=5), shape=(2,) + SHAPE, axis=0, values_count=2)
    model = c.build(c.op("ABS", stacked))
    graph, _ = rewrite_through(model, RULE)
    [pack] = [n for n in graph.nodes if n.op == "PACK"]
    assert pack.options.get(IN_PLACE_INPUTS) == ((0, 0), (1, 2 * 4 * 5))
    summary, _ = check_gpu(model, [random(SHAPE)], precision)
    assert summary["dispatches"] == dispatches_without(RULE, model, [random(SHAPE)]) - 2
    c = Chain(SHAPE)
    across = c.op("PACK", c.conv(c.x, 8), c.conv(c.x, 8, seed=5), shape=SHAPE + (2,), axis=-1, values_count=2)
    model = c.build(c.op("ABS", across))
    graph, _ = rewrite_through(model, RULE)
    assert not [n for n in graph.nodes if n.op == "PACK" and n.options.get(IN_PLACE_INPUTS)]
    check_gpu(model, [random(SHAPE)], precision)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_odd_channel_counts_keep_their_copies(precision):
    """5 + 7 + 4 channels: the first would put its padded lanes on the second's channels, the
    second starts mid-slice; only the last (from channel 12, to the end) is in place."""
    c = Chain(SHAPE)
    parts = [c.conv(c.x, 5), c.conv(c.x, 7, seed=5), c.conv(c.x, 4, seed=7)]
    model = c.build(c.op("ABS", concat(c, parts)))
    [(label, kept)] = in_place(model).items()
    assert kept == ((2, 3 * 4 * 5),)
    graph, log = rewrite_through(model, RULE)
    assert "input 0: it is no contiguous block" in why(log, RULE, label)
    summary, _ = check_gpu(model, [random(SHAPE)], precision)
    assert summary["dispatches"] == 7  # convert_in, 3 convolutions, 2 copies, ABS


@pytest.mark.parametrize("precision", PRECISIONS)
def test_an_input_read_elsewhere_is_read_in_its_place(precision):
    """The first convolution's output is also read by a second convolution and an ABS (an
    elementwise op that could not overwrite it in place): both read it in the concatenation."""
    c = Chain(SHAPE)
    a = c.conv(c.x, 8)
    cat = concat(c, [a, c.conv(a, 8, seed=5)])
    model = c.build(c.conv(cat, 4, seed=9), c.op("ABS", a))
    assert list(in_place(model).values()) == [((0, 0), (1, 40))]
    summary, _ = check_gpu(model, [random(SHAPE)], precision)
    assert summary["dispatches"] == 5  # convert_in, 3 convolutions, ABS


@pytest.mark.parametrize("precision", PRECISIONS)
def test_a_graph_input_and_a_constant(precision):
    """The partition input is converted straight into its place; a constant keeps its copy."""
    c = Chain(SHAPE)
    constant = c.const(random((1, 4, 5, 4), 3))
    c.shapes[constant] = (1, 4, 5, 4)
    cat = concat(c, [c.x, c.conv(c.x, 4), constant])
    model = c.build(c.conv(cat, 4, seed=9))
    [(label, kept)] = in_place(model).items()
    assert kept == ((0, 0), (1, 40))
    assert "a constant is no arena storage" in why(rewrite_through(model, RULE)[1], RULE, label)
    summary, _ = check_gpu(model, [random(SHAPE)], precision)
    assert summary["dispatches"] == 4  # convert_in, 2 convolutions, the constant's copy


@pytest.mark.parametrize("precision", PRECISIONS)
def test_nested_concatenations(precision):
    """A concatenation of a concatenation: the inner one lies in the outer one's storage, its
    inputs in its own."""
    c = Chain(SHAPE)
    inner = concat(c, [c.conv(c.x, 4), c.conv(c.x, 8, seed=5)])
    model = c.build(c.conv(concat(c, [c.conv(c.x, 4, seed=7), inner]), 4, seed=9))
    assert sorted(in_place(model).values()) == [((0, 0), (1, 20)), ((0, 0), (1, 20))]
    summary, _ = check_gpu(model, [random(SHAPE)], precision)
    assert summary["dispatches"] == 5  # convert_in, 4 convolutions


def test_a_tensor_concatenated_twice_is_in_place_once():
    c = Chain(SHAPE)
    a = c.conv(c.x, 8)
    model = c.build(c.conv(concat(c, [a, a]), 4))
    [(label, kept)] = in_place(model).items()
    assert kept == ((0, 0),)
    assert "concatenated twice" in why(rewrite_through(model, RULE)[1], RULE, label)
    summary, _ = check_gpu(model, [random(SHAPE)])
    assert summary["dispatches"] == 4  # convert_in, 2 convolutions, the second input's copy


def test_an_input_of_two_concatenations_is_in_place_in_the_first():
    c = Chain(SHAPE)
    a = c.conv(c.x, 8)
    first, second = concat(c, [a, c.conv(c.x, 4, seed=5)]), concat(c, [c.conv(c.x, 4, seed=7), a])
    model = c.build(c.conv(first, 4, seed=9), c.conv(second, 4, seed=11))
    [(first_label, first_kept), (second_label, second_kept)] = in_place(model).items()
    assert (first_kept, second_kept) == (((0, 0), (1, 40)), ((0, 0),))
    assert "already a view" in why(rewrite_through(model, RULE)[1], RULE, second_label)
    check_gpu(model, [random(SHAPE)])


@pytest.mark.parametrize("precision", PRECISIONS)
def test_concatenation_along_the_batch(precision):
    """Along the outermost dim every input is a block, whatever its channels (3 here)."""
    c = Chain((1, 4, 5, 3))
    model = c.build(c.op("ABS", concat(c, [c.op("EXP", c.x), c.op("NEG", c.x)], axis=0)))
    assert list(in_place(model).values()) == [((0, 0), (1, 20))]
    check_gpu(model, [random((1, 4, 5, 3))], precision)


def test_a_fused_activation_keeps_the_copies():
    c = Chain(SHAPE)
    cat = c.op("CONCATENATION", c.conv(c.x, 8), c.conv(c.x, 8, seed=5), shape=(1, 4, 5, 16), axis=3,
               fused_activation_function=1)
    model = c.build(c.conv(cat, 4))
    graph, log = rewrite_through(model, RULE)
    assert statuses(log, RULE) == [("SKIPPED", "#2 (CONCATENATION)")]
    assert "fused activation" in why(log, RULE, "#2 (CONCATENATION)")
    check_gpu(model, [random(SHAPE)])


def quantized_pools_model():
    """int8: MAX_POOL_2D and AVERAGE_POOL_2D of one input (TFLite's pools keep its grid),
    concatenated along the channels on that grid (LiteRT's int8 kernel wants one): the float
    view has no step between, so both pools write in place."""
    b = ModelBuilder()
    grid = (0.02, -3)
    x = b.input("x", (1, 6, 7, 8), np.int8, quantization=grid)
    pools = []
    for op in ("MAX_POOL_2D", "AVERAGE_POOL_2D"):
        pools.append(b.tensor(op.lower(), (1, 6, 7, 8), np.int8, quantization=grid))
        b.op(op, [x], [pools[-1]], padding=SAME, stride_w=1, stride_h=1, filter_width=3, filter_height=2,
             fused_activation_function=0)
    out = b.tensor("concatenation", (1, 6, 7, 16), np.int8, quantization=grid)
    b.op("CONCATENATION", pools, [out], axis=3, fused_activation_function=0)
    b.output(out)
    return b.build()


@pytest.mark.parametrize("precision", PRECISIONS)
def test_quantized_concatenation(precision):
    model = quantized_pools_model()
    feed = np.random.default_rng(4).integers(-128, 128, (1, 6, 7, 8)).astype(np.int8)
    with GpuDelegate(precision=precision) as delegate:
        [ours] = run_ours(model, [feed], experimental_delegates=[delegate])
        log, summary = list(delegate.rewrite_log), delegate.summary()
    assert ("APPLIED", "#2 (CONCATENATION)") in statuses(log, RULE) and summary["cpu_nodes"] == 0
    [theirs] = run_litert(model, [feed], resolver="builtin")
    assert_within_one_step(ours, theirs, 1)
    assert dispatches_without(RULE, model, [feed]) == summary["dispatches"] + 2
