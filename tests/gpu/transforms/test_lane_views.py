"""lane_views: a channel slice, or a concatenation's input, that starts or ends mid-vec4 is read
or written in place as lanes of the other tensor's vec4s (no copy dispatch), where it fits its
own vec4s and no dispatch could mistake it for another tensor of that storage. Every case runs on
the GPU against the reference in every precision, with its dispatch count."""
import warnings

import numpy as np
import pytest

from gles_delegate import GpuDelegate, Interpreter
from gles_delegate.errors import GpuError
from gles_delegate.graph import Tensor
from gles_delegate.gpu.compiler import lane_accesses
from gles_delegate.gpu.kernels.base import Dispatch, KernelEnv
from gles_delegate.gpu.kernels.layout import LANE_VIEWS
from gles_delegate.gpu.phwc4 import Lanes
from gles_delegate.gpu.serialization import CacheWarning
from tests.gpu.gpulib import PRECISIONS, assert_gpu_matches
from tests.gpu.transforms.rulelib import (Chain, check_gpu, dispatches_without, random, rewrite_through, rule_off, statuses, why)
from tests.gpu.transforms.test_slice_views import slice_

RULE = "lane_views"


def lane_views(model):
    """{node label: ((position, offset, Lanes), ...)} of the nodes the rule made lane views of."""
    graph, _ = rewrite_through(model, RULE)
    return {n.label: n.options[LANE_VIEWS] for n in graph.nodes if LANE_VIEWS in n.options}


def channel_groups(c, x, sizes):
    """SLICEs of `x`'s channels in groups of `sizes`."""
    n, h, w, _ = c.shapes[x]
    starts = np.cumsum((0,) + tuple(sizes))
    return [slice_(c, x, (0, 0, 0, int(a)), (n, h, w, s)) for a, s in zip(starts, sizes)]


def edgenext_block(c, x, widths):
    """EdgeNeXt's split depthwise block: the channels in groups of `widths`; the first through a
    depthwise convolution, each next one added to the previous result and then convolved; the
    results and the last group concatenated back."""
    n, h, w, channels = c.shapes[x]
    parts = channel_groups(c, x, widths)
    outs, sp = [], None
    for i, part in enumerate(parts[:-1]):
        sp = c.depthwise(part if i == 0 else c.op("ADD", sp, part), 3, seed=20 + i)
        outs.append(sp)
    return c.op("CONCATENATION", *outs, parts[-1], shape=(n, h, w, channels), axis=3)


def edgenext_model(widths=(30, 30, 28)):
    c = Chain((1, 6, 7, 16))
    y = edgenext_block(c, c.conv(c.x, sum(widths), kernel=1), widths)
    return c.build(c.conv(y, 8, kernel=1, seed=5))


@pytest.mark.parametrize("precision", PRECISIONS + ("auto",))
def test_edgenext_block(precision):
    """88 channels split 30 / 30 / 28: the first group (channels 0..30, ending mid-vec4) is read
    in place by its convolution, and both convolutions write into the concatenation's storage
    (channels 0..30, and 30..60 from lane 2)."""
    model = edgenext_model()
    plane = 6 * 7
    assert list(lane_views(model).values()) == [((0, 0, Lanes(0, 30, 30)),),
                                               ((0, 0, Lanes(0, 30, 30)), (1, 7 * plane, Lanes(2, 30, 30)))]
    values = [random((1, 6, 7, 16))]
    summary, _ = check_gpu(model, values, precision)
    # convert_in, 2 convolutions, the first depthwise, the second group's copy (adding the first
    # result as its epilogue step), the second depthwise, the last group's copy into the
    # concatenation; without: + the first group's copy and the two results' copies.
    assert (summary["dispatches"], dispatches_without(RULE, model, values)) == (7, 10)


def test_edgenext_block_at_fp32_is_the_copies_bit_for_bit():
    """Only copies go: the outputs are identical at fp32."""
    model = edgenext_model((42, 42, 42, 42))
    values = [random((1, 6, 7, 16), 3)]
    with GpuDelegate() as delegate:
        [in_place] = run(model, values, delegate)
    with rule_off(RULE), GpuDelegate() as delegate:
        [copied] = run(model, values, delegate)
    assert np.array_equal(in_place, copied)


def run(model, values, delegate, preserve=False):
    interpreter = Interpreter(model_content=model, experimental_delegates=[delegate] if delegate else [],
                              experimental_preserve_all_tensors=preserve)
    interpreter.allocate_tensors()
    for detail, value in zip(interpreter.get_input_details(), values):
        interpreter.set_tensor(detail["index"], value)
    interpreter.invoke()
    if preserve:
        return interpreter
    return [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]


@pytest.mark.parametrize("precision", PRECISIONS)
def test_odd_shifts_are_read_in_place(precision):
    """Slices of the partition input from lanes 1 and 3 (3 channels, 1 channel) are read in
    place; 3 channels from lane 2 would need a third vec4 lane from the next slice, past their
    own vec4: copied."""
    c = Chain((1, 5, 6, 16))
    parts = [slice_(c, c.x, (0, 0, 0, a), (1, 5, 6, n)) for a, n in ((1, 3), (11, 1), (6, 3))]
    model = c.build(*[c.conv(p, 4, seed=k) for k, p in enumerate(parts)])
    assert list(lane_views(model).values()) == [((0, 0, Lanes(1, 3, 3)),), ((0, 2 * 30, Lanes(3, 1, 1)),)]
    graph, log = rewrite_through(model, RULE)
    assert "fits its own vec4s" in why(log, RULE, "#2 (SLICE)")
    summary, _ = check_gpu(model, [random((1, 5, 6, 16))], precision)
    assert summary["dispatches"] == 5  # convert_in, 3 convolutions, the third slice's copy


def test_odd_channels_of_a_concatenation_keep_their_copies():
    """5 + 7 + 4: the first would store lanes 4 and 5 (its last channel and its padding) as one
    word in half storage, the second from lane 1; the last is a block (concat_in_place's)."""
    c = Chain((1, 4, 5, 8))
    model = c.build(c.op("ABS", c.op("CONCATENATION", c.conv(c.x, 5), c.conv(c.x, 7, seed=5), c.conv(c.x, 4, seed=7),
                                     shape=(1, 4, 5, 16), axis=3)))
    graph, log = rewrite_through(model, RULE)
    assert statuses(log, RULE) == [("SKIPPED", "#3 (CONCATENATION)")]
    assert "input 0: its channels start or end mid-pair" in why(log, RULE, "#3 (CONCATENATION)")
    assert "input 1: its channels start or end mid-pair" in why(log, RULE, "#3 (CONCATENATION)")
    check_gpu(model, [random((1, 4, 5, 8))])


@pytest.mark.parametrize("precision", PRECISIONS)
def test_the_last_input_writes_the_padding(precision):
    """2 + 5 channels: the second input, from lane 2 to the end, stores its zero padding on the
    concatenation's (lane 3 of slice 1), which the channel mean reads; the storage it lies in
    held a 32-channel tensor before."""
    c = Chain((1, 4, 5, 8))
    before = c.conv(c.conv(c.x, 32, seed=3), 8, seed=4)  # the 32-channel tensor dies here
    cat = c.op("CONCATENATION", c.conv(before, 2, seed=5), c.conv(before, 5, seed=7), shape=(1, 4, 5, 7), axis=3)
    model = c.build(c.op("SUM", cat, c.const([3], np.int32), shape=(1, 4, 5, 1), keep_dims=True))
    assert list(lane_views(model).values()) == [((0, 0, Lanes(0, 2, 2)), (1, 0, Lanes(2, 5, 6)))]
    summary, _ = check_gpu(model, [random((1, 4, 5, 8))], precision)
    assert summary["dispatches"] == 6  # convert_in, 4 convolutions, SUM


@pytest.mark.parametrize("precision", PRECISIONS)
def test_an_input_after_a_copy_ending_in_its_first_vec4_keeps_its_copy(precision):
    """The partition input (6 channels, copied) then a convolution of it (channels 6..12, from
    lane 2): the input's copy stores zeros past its channels in slice 1 (layout_map.glsl leaves
    them to a later input's dispatch) after the convolution stored its lanes 6 and 7 there, so
    the convolution keeps its copy; the 8 channels after them are a block (concat_in_place's).
    Found by gles-fuzz-graphs (seed 1): lanes 6 and 7 of the output read 0."""
    c = Chain((1, 2, 5, 6))
    conv = c.conv(c.x, 6, seed=4)
    model = c.build(c.op("CONCATENATION", c.x, conv, c.conv(c.x, 8, seed=6), shape=(1, 2, 5, 20), axis=3))
    graph, log = rewrite_through(model, RULE)
    assert lane_views(model) == {}
    assert "input 1: input 0's copy stores zeros past its channels" in why(log, RULE, "#2 (CONCATENATION)")
    check_gpu(model, [random((1, 2, 5, 6))], precision)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_a_reader_of_the_whole_through_a_removed_layout_op_keeps_the_copy(precision):
    """Channel 1 of a squeezed input times its channels 2..5, the MUL an epilogue step of the
    second slice, which reads the input through the removed SQUEEZE: its loads of the input
    would be taken for the first slice's (a lane view of the input) by their element range, so
    the first slice keeps its copy (gles-fuzz-graphs --seed 6: 0.58 x the output's magnitude)."""
    c = Chain((1, 2, 1, 5))
    x = c.op("SQUEEZE", c.x, shape=(2, 1, 5), squeeze_dims=[-4])
    one = c.op("STRIDED_SLICE", x, c.const((0, 0, 1), np.int32), c.const((2, 1, 2), np.int32),
               c.const((1, 1, 1), np.int32), shape=(2, 1, 1), end_mask=3)
    three = c.op("STRIDED_SLICE", x, c.const((0, 0, 2), np.int32), c.const((2, 1, 5), np.int32),
                 c.const((1, 1, 1), np.int32), shape=(2, 1, 3), end_mask=2)
    model = c.build(c.op("MUL", one, three, shape=(2, 1, 3), fused_activation_function=0))
    assert lane_views(model) == {}
    assert "#2 (STRIDED_SLICE) also reads another tensor of tensor 0's storage" in why(
        rewrite_through(model, RULE)[1], RULE, "#1 (STRIDED_SLICE)")
    check_gpu(model, [random((1, 2, 1, 5), 12)], precision)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_two_views_of_one_storage_read_together(precision):
    """ADD of channels 0..2 and 2..4 of one tensor (each also read elsewhere, so the ADD stays a
    dispatch of its own): both would be lane views of its first slice, which the ADD's dispatch
    could not tell apart, so the second keeps its copy."""
    c = Chain((1, 4, 5, 6))
    a, b = channel_groups(c, c.op("EXP", c.x), (2, 2))
    model = c.build(c.op("ADD", a, b), c.op("ABS", a), c.op("NEG", b))
    assert list(lane_views(model).values()) == [((0, 0, Lanes(0, 2, 2)),)]
    assert "#3 (ADD) also reads another tensor of tensor 1's storage" in why(rewrite_through(model, RULE)[1], RULE,
                                                                            "#2 (SLICE)")
    check_gpu(model, [random((1, 4, 5, 6))], precision)


def test_at_most_two_lane_views_per_reader():
    """A convolution whose epilogue adds channels 1..4 of three tensors (residual ADDs fused into
    it): the third slice keeps its copy."""
    c = Chain((1, 4, 5, 8))
    parts = [slice_(c, c.op(op, c.x), (0, 0, 0, 1), (1, 4, 5, 3)) for op in ("EXP", "ABS", "NEG")]
    y = c.conv(c.x, 3, seed=9)
    for part in parts:
        y = c.op("ADD", y, part)
    model = c.build(y)
    assert len(lane_views(model)) == 2
    assert "reads more than 2 lane views" in why(rewrite_through(model, RULE)[1], RULE, "#5 (SLICE)")
    check_gpu(model, [random((1, 4, 5, 8))])


def test_captures_read_lane_views_as_the_model_computes_them():
    """preserve_all_tensors: a slice read in place and a concatenation input written in place
    read back as the reference computes them."""
    model = edgenext_model()
    values = [random((1, 6, 7, 16), 4)]
    with GpuDelegate() as delegate:
        ours = run(model, values, delegate, preserve=True)
        lane_tensors = list(delegate.partitions[0].plan.lane_shifts)
        reference = run(model, values, None, preserve=True)
        assert len(lane_tensors) == 3
        for index in lane_tensors:
            assert_gpu_matches(reference.get_tensor(index), ours.get_tensor(index), "fp32", what=f"tensor {index}")


def test_captures_a_whole_built_by_several_dispatches_after_the_last():
    """preserve_all_tensors: a channel GATHER runs as layout-map pieces that each store a few
    lanes, merging them into the vec4s earlier pieces stored (reading the output as they write
    it); a slice of it read in place must not make the capture take the whole after the first
    piece (it read 0 past the first piece's lanes: gles-fuzz-graphs seed 40)."""
    c = Chain((1, 4, 9, 7))
    picks = c.const(np.random.default_rng(40).integers(0, 7, 14), np.int32)
    gathered = c.op("GATHER", c.x, picks, shape=(1, 4, 9, 14), axis=3)
    model = c.build(c.depthwise(slice_(c, gathered, (0, 0, 0, 0), (1, 4, 9, 7)), 3, seed=3))
    values = [random((1, 4, 9, 7), 40)]
    with GpuDelegate() as delegate:
        ours = run(model, values, delegate, preserve=True)
        plan = delegate.partitions[0].plan
        reference = run(model, values, None, preserve=True)
    assert plan.lane_shifts and sum("GATHER" in label for label in plan.labels) > 1
    assert_gpu_matches(reference.get_tensor(gathered), ours.get_tensor(gathered), "fp32", what="the GATHER output")


def test_a_warm_start_keeps_the_lane_views(tmp_path):
    """A plan read back from the serialization cache holds its lane views (Plan.lane_shifts,
    checked by validate.py) and computes what the cold plan did."""
    from tests.gpu.test_serialization import start
    path = tmp_path / "edgenext_block.tflite"
    path.write_bytes(edgenext_model())
    _, cold, cold_outputs = start(str(path), tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)
        _, warm, warm_outputs = start(str(path), tmp_path)
    assert (cold.summary()["cache_hit"], warm.summary()["cache_hit"]) == (False, True)
    shifts = cold.partitions[0].plan.lane_shifts
    assert sorted(shifts.values()) == [0, 0, 2] and warm.partitions[0].plan.lane_shifts == shifts
    for a, b in zip(cold_outputs, warm_outputs):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("shift", [0, 2])
def test_precision_auto_reads_a_half_lane_view_into_a_float_tensor(shift):
    """Channels of a half tensor added to values past half's range: 'auto' keeps the sum in float
    storage, and the dispatch computing it reads the lane view from the half buffer and writes
    the float one (storage mode 'mixed')."""
    c = Chain((1, 6, 7, 16))
    part = slice_(c, c.conv(c.x, 10), (0, 0, 0, shift), (1, 6, 7, 2))
    big = c.op("MUL", c.conv(c.x, 2, seed=3), c.const(np.full(2, 1e5, np.float32)))
    model = c.build(c.op("MUL", c.op("ADD", big, part), c.const(np.full(2, 1e-5, np.float32))))
    values = [random((1, 6, 7, 16), 6)]
    check_gpu(model, values, "auto")
    with GpuDelegate(precision="auto") as delegate:
        run(model, values, delegate)
        plan = delegate.partitions[0].plan
    [lane_view] = plan.lane_shifts
    assert lane_view not in plan.promoted_tensors
    assert any(mode == "mixed" and "#define LANE_READS 1" in plan.sources[step[0]]
               for mode, step in zip(plan.step_storage, plan.steps))


def test_precision_auto_writes_a_float_lane_view_from_half_inputs():
    """A concatenation whose second input is past half's range: 'auto' keeps it, and so the
    first input's lane view, in float storage; the convolution computing the first reads its
    half input and stores two lanes at a time into the float buffer (storage mode 'mixed')."""
    c = Chain((1, 6, 7, 16))
    small = c.conv(c.op("ABS", c.x), 2)
    big = c.op("MUL", c.conv(c.x, 6, seed=3), c.const(np.full(6, 1e5, np.float32)))
    cat = c.op("CONCATENATION", small, big, shape=(1, 6, 7, 8), axis=3)
    model = c.build(c.op("MUL", cat, c.const(np.full(8, 1e-5, np.float32))))
    values = [random((1, 6, 7, 16), 7)]
    check_gpu(model, values, "auto")
    with GpuDelegate(precision="auto") as delegate:
        run(model, values, delegate)
        plan = delegate.partitions[0].plan
    assert len(plan.lane_shifts) == 2 and set(plan.lane_shifts) <= set(plan.promoted_tensors)
    assert any(mode == "mixed" and "#define LANE_WRITES 1" in plan.sources[step[0]]
               for mode, step in zip(plan.step_storage, plan.steps))


@pytest.mark.parametrize("precision", PRECISIONS)
def test_a_slice_of_a_lane_view(precision):
    """Channel 1 of channels 2..4 of a tensor: the outer slice is a lane view, whose storage is
    not laid out as its own, so the inner one keeps its copy."""
    c = Chain((1, 4, 5, 8))
    outer = slice_(c, c.op("EXP", c.x), (0, 0, 0, 2), (1, 4, 5, 2))
    inner = slice_(c, outer, (0, 0, 0, 1), (1, 4, 5, 1))
    model = c.build(c.conv(outer, 4), c.conv(inner, 4, seed=3))
    assert list(lane_views(model).values()) == [((0, 0, Lanes(2, 2, 2)),)]
    assert "tensor 4 is a lane view itself" in why(rewrite_through(model, RULE)[1], RULE, "#2 (SLICE)")
    check_gpu(model, [random((1, 4, 5, 8))], precision)


def test_the_compiler_refuses_a_dispatch_of_three_lane_views():
    """The rule keeps every reader to MAX_LANE_READS lane views; a dispatch past that (common.glsl
    has no third slot) is an error naming it, not a shader that reads one of them as stored."""
    env = KernelEnv("fp32", {})
    views = [Tensor(k, f"part{k}", (1, 4, 5, 3), np.dtype(np.float32)) for k in range(3)]
    for view in views:
        env.view(view, Tensor(9, "whole", (1, 4, 5, 8), np.dtype(np.float32)), 0, Lanes(1, 3, 3))
    with pytest.raises(GpuError, match=r"dispatch 'three' reads 3 lane views \(tensors \[0, 1, 2\]\), more than 2"):
        lane_accesses([Dispatch("elementwise", (1, 1, 1), reads=tuple(views), label="three")], env)
