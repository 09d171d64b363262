"""read_through_layout: layout ops read a value-moving reshape's input in its place (same
row-major order), and layout ops whose map comes off the reference read through any such op
(their maps composed), so the removed op costs no dispatch; anything else keeps it."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gles_delegate.graph import Graph
from gles_delegate.gpu.kernels.layout import READ_THROUGH
from gles_delegate.tflite import ModelBuilder, read_model
from gles_delegate.gpu.transforms import RULES, read_through_layout, rewrite_partition
from tests.gpu.transforms.rulelib import Chain, check_gpu, dispatches, ops_of, random, rewrite, statuses, why

RULE = "read_through_layout"


def reshape(c, x, shape):
    return c.op("RESHAPE", x, c.const(shape, np.int32), shape=shape)


def detection_heads(c):
    """A detector's heads: two convolutions, each reshaped to [1, anchors, values] (which moves
    values between PHWC4 slices), concatenated along the anchors."""
    small = c.op("AVERAGE_POOL_2D", c.x, shape=(1, 4, 4, 8), padding=1, stride_w=2, stride_h=2, filter_width=2,
                 filter_height=2, fused_activation_function=0)
    a = reshape(c, c.conv(c.x, 12, kernel=1), (1, 8 * 8 * 2, 6))
    b = reshape(c, c.conv(small, 24, kernel=1, seed=5), (1, 4 * 4 * 4, 6))
    return c.op("CONCATENATION", a, b, shape=(1, 8 * 8 * 2 + 4 * 4 * 4, 6), axis=1, fused_activation_function=0)


def rewrite_with_aliases(model):
    """The rule, then alias_reshape, as the delegate runs them."""
    graph = Graph.from_model(read_model(model))
    rules = tuple((name, apply) for name, apply in RULES if name in ("alias_reshape", RULE))
    return rewrite_partition(graph.nodes, graph.inputs, graph.outputs, rules)


@pytest.mark.parametrize("precision", ["fp32", "fp16_fp32acc"])
def test_a_concatenation_reads_the_heads_through_their_reshapes(precision):
    c = Chain((1, 8, 8, 8))
    model = c.build(detection_heads(c))
    graph, log = rewrite_with_aliases(model)
    assert ops_of(graph) == ["AVERAGE_POOL_2D", "CONV_2D", "CONV_2D", "CONCATENATION"]
    assert len(graph.nodes[-1].options[READ_THROUGH]) == 2
    assert [s for s, _ in statuses(log, RULE)] == ["APPLIED", "APPLIED"]
    summary, _ = check_gpu(model, [random((1, 8, 8, 8), 3)], precision)
    # convert in, pool, 2 convs, the concatenation's 2 copies storing the output: no reshape copies
    assert summary["dispatches"] == 6


def test_a_reshape_of_a_reshape_is_read_through_twice():
    c = Chain((1, 6, 6, 8))
    twice = reshape(c, reshape(c, c.op("ABS", c.x), (1, 36, 4, 2)), (1, 12, 24))
    model = c.build(c.op("TRANSPOSE", twice, c.const((0, 2, 1), np.int32), shape=(1, 24, 12)))
    graph, log = rewrite_with_aliases(model)
    assert ops_of(graph) == ["ABS", "TRANSPOSE"]
    [(shown, source, through)] = graph.nodes[1].options[READ_THROUGH]
    assert source is graph.nodes[0].outputs[0] and through is None  # the ABS output, in its own order
    summary, _ = check_gpu(model, [random((1, 6, 6, 8), 4)])
    assert summary["dispatches"] == 3


def test_a_reshape_read_by_a_computing_op_stays():
    c = Chain((1, 4, 4, 8))
    model = c.build(c.op("NEG", reshape(c, c.op("ABS", c.x), (1, 8, 16))))
    graph, log = rewrite(model, RULE)
    assert "RESHAPE" in ops_of(graph) and "not a layout op" in why(log, RULE, "#1 (RESHAPE)")
    check_gpu(model, [random((1, 4, 4, 8))])


def test_a_reshape_leaving_the_partition_stays():
    c = Chain((1, 4, 4, 8))
    r = reshape(c, c.op("ABS", c.x), (1, 8, 16))
    model = c.build(r, c.op("CONCATENATION", r, r, shape=(1, 16, 16), axis=1, fused_activation_function=0))
    graph, log = rewrite(model, RULE)
    assert "leaves the partition" in why(log, RULE, "#1 (RESHAPE)")
    check_gpu(model, [random((1, 4, 4, 8), 2)])


def test_a_free_reshape_read_by_a_computing_op_is_left_to_alias_reshape():
    """(Read by a layout op, it would be read through: no dispatch either way.)"""
    c = Chain((1, 4, 5, 8))
    model = c.build(c.op("NEG", reshape(c, c.op("ABS", c.x), (1, 20, 8))))
    graph, log = rewrite_with_aliases(model)
    assert "RESHAPE" in ops_of(graph) and graph.nodes[1].options.get("alias_input")
    assert statuses(log, RULE) == [("SKIPPED", "#1 (RESHAPE)")]
    check_gpu(model, [random((1, 4, 5, 8), 5)])


def channel_shuffle(c, x, groups):
    """torchvision's channel_shuffle as litert-torch writes it for an NHWC tensor: to NCHW,
    view as [N, groups, C / groups, H, W], swap those two dims, view as [N, C, H, W], back to
    NHWC."""
    n, h, w, ch = c.shapes[x]
    nchw = c.op("TRANSPOSE", x, c.const((0, 3, 1, 2), np.int32), shape=(n, ch, h, w))
    split = reshape(c, nchw, (n, groups, ch // groups, h, w))
    swapped = c.op("TRANSPOSE", split, c.const((0, 2, 1, 3, 4), np.int32), shape=(n, ch // groups, groups, h, w))
    return c.op("TRANSPOSE", reshape(c, swapped, (n, ch, h, w)), c.const((0, 2, 3, 1), np.int32), shape=(n, h, w, ch))


def slice_channels(c, x, begin, size):
    n, h, w, _ = c.shapes[x]
    return c.op("SLICE", x, c.const((0, 0, 0, begin), np.int32), c.const((n, h, w, size), np.int32),
                shape=(n, h, w, size))


@pytest.mark.parametrize("precision", ["fp32", "fp16_fp32acc"])
def test_a_channel_shuffle_is_read_through_by_the_slices_after_it(precision, monkeypatch):
    """ShuffleNet v2's unit: concatenate two branches, shuffle the channels, split them in two.
    The three transposes and two reshapes go: the slices read the concatenation, each through
    the composed map (channel c of the first half reads source channel (c % 2) * 12 + c // 2:
    digits (radix 6, stride 1) and (radix 2, stride 12) of the channel axis)."""
    c = Chain((1, 6, 5, 12))
    both = c.op("CONCATENATION", c.op("ABS", c.x), c.op("NEG", c.x), shape=(1, 6, 5, 24), axis=3,
                fused_activation_function=0)
    shuffled = channel_shuffle(c, both, 2)
    model = c.build(c.op("RELU", slice_channels(c, shuffled, 0, 12)), slice_channels(c, shuffled, 12, 12))
    graph, log = rewrite_with_aliases(model)
    assert ops_of(graph) == ["ABS", "NEG", "CONCATENATION", "SLICE", "RELU", "SLICE"]
    assert [s for s, _ in statuses(log, RULE)] == ["APPLIED"] * 5 + ["SKIPPED", "SKIPPED"]
    values = [random((1, 6, 5, 12), 6)]
    summary, _ = check_gpu(model, values, precision)
    monkeypatch.setattr(read_through_layout, "ENABLED", False)
    assert summary["dispatches"] + 5 == dispatches(model, values, precision=precision)  # 3 transposes, 2 reshapes


@pytest.mark.parametrize("precision", ["fp32", "fp16_fp32acc"])
def test_a_concatenation_and_a_pad_read_through_a_transpose(precision, monkeypatch):
    """Ops that copy their input box by box (CONCATENATION, PAD) take the transpose's strides in
    place of their input's own."""
    c = Chain((1, 4, 6, 8))
    t = c.op("TRANSPOSE", c.op("ABS", c.x), c.const((0, 2, 1, 3), np.int32), shape=(1, 6, 4, 8))
    padded = c.op("PAD", t, c.const([[0, 0], [1, 0], [0, 2], [0, 0]], np.int32), shape=(1, 7, 6, 8))
    model = c.build(c.op("CONCATENATION", t, t, shape=(1, 6, 4, 16), axis=3, fused_activation_function=0), padded)
    graph, log = rewrite_with_aliases(model)
    assert ops_of(graph) == ["ABS", "PAD", "CONCATENATION"]
    values = [random((1, 4, 6, 8), 7)]
    summary, _ = check_gpu(model, values, precision)
    monkeypatch.setattr(read_through_layout, "ENABLED", False)
    assert summary["dispatches"] + 1 == dispatches(model, values, precision=precision)


@pytest.mark.parametrize("precision", ["fp32", "fp16_fp32acc"])
def test_a_pad_of_the_channels_reads_through_a_slice_of_fewer_channels(precision):
    """Channels 0..3 of 5, padded with a zero channel: the PAD reads the slice's source, whose
    lane 3 holds channel 3, not the zero padding a source of 3 channels would hold there, so
    the pad's vec4 is built channel by channel (gles-fuzz-graphs, seed 1: the padded channel
    read channel 3)."""
    c = Chain((1, 2, 3, 5))
    part = c.op("SLICE", c.op("ABS", c.x), c.const((0, 0, 0, 0), np.int32), c.const((1, 2, 3, 3), np.int32),
                shape=(1, 2, 3, 3))
    model = c.build(c.op("PAD", part, c.const([[0, 0], [0, 0], [0, 0], [0, 1]], np.int32), shape=(1, 2, 3, 4)))
    graph, _ = rewrite_with_aliases(model)
    assert ops_of(graph) == ["ABS", "PAD"]
    check_gpu(model, [random((1, 2, 3, 5), 8)], precision)


def test_a_gather_whose_runs_are_no_box_through_a_reshape_keeps_it():
    """A GATHER of rows of a RESHAPE merging the last two dims of a TRANSPOSE: read through the
    reshape (and so the transpose), each run of its indices would need two digits along the
    channels, which a run's box has not: the reshape stays (the rule's check raised TypeError,
    in both interpreters: gles-fuzz-graphs --seed 5)."""
    c = Chain((2, 2, 12, 5))
    t = c.op("TRANSPOSE", c.x, c.const((0, 2, 1, 3), np.int32), shape=(2, 12, 2, 5))
    r = reshape(c, t, (2, 12, 10))
    model = c.build(c.op("GATHER", r, c.const([6, 5, 10, 7, 4, 2], np.int32), shape=(2, 6, 10), axis=-2))
    graph, log = rewrite_with_aliases(model)
    assert ops_of(graph) == ["RESHAPE", "GATHER"]
    assert "the composed index map is not a strided view" in why(log, RULE, "#1 (RESHAPE)")
    check_gpu(model, [random((2, 2, 12, 5), 9)])


def test_a_reshape_leaving_the_partition_keeps_its_source_when_another_node_reads_it():
    """A row of x scaled (one output) and, through EXPAND_DIMS and RESHAPE, unchanged (another):
    the RESHAPE, reading the slice through the removed EXPAND_DIMS, copies it unchanged, but the
    slice cannot write the model's output in its place, since the MUL reads it too (it was
    renamed, and the MUL read a tensor nothing wrote: gles-fuzz-graphs --seed 5)."""
    c = Chain((4, 10))
    row = c.op("SLICE", c.x, c.const((3, 0), np.int32), c.const((1, 10), np.int32), shape=(1, 10))
    scaled = c.op("MUL", row, c.const(np.float32(0.85)), fused_activation_function=0)
    same = reshape(c, c.op("EXPAND_DIMS", row, c.const(-3, np.int32), shape=(1, 1, 10)), (1, 10))
    model = c.build(scaled, same)
    graph, log = rewrite_with_aliases(model)
    assert why(log, RULE, "#3 (RESHAPE)") == "its output leaves the partition"
    assert ops_of(graph) == ["SLICE", "MUL", "RESHAPE"]
    check_gpu(model, [random((4, 10), 10)])


def test_a_reshape_leaving_the_partition_keeps_its_source_when_another_node_reads_through_to_it():
    """PAD -> EXPAND_DIMS, read by a SQUEEZE back (a model output) and a SPLIT_V: both read the
    pad's output through the removed EXPAND_DIMS, and the SQUEEZE copies it unchanged; renaming
    the pad's output to the model's would leave the SPLIT_V reading a tensor nothing wrote
    (gles-fuzz-graphs --seed 6)."""
    c = Chain((2, 2, 3))
    padded = c.op("PAD", c.x, c.const([[0, 0], [1, 2], [0, 1]], np.int32), shape=(2, 5, 4))
    wide = c.op("EXPAND_DIMS", padded, c.const(2, np.int32), shape=(2, 5, 1, 4))
    back = c.op("SQUEEZE", wide, shape=(2, 5, 4), squeeze_dims=[2])
    parts = c.b.tensor("first", (2, 5, 1, 2)), c.b.tensor("second", (2, 5, 1, 1)), c.b.tensor("third", (2, 5, 1, 1))
    c.b.op("SPLIT_V", [wide, c.const((2, 1, 1), np.int32), c.const(3, np.int32)], list(parts), num_splits=3)
    model = c.build(parts[0], back)
    graph, log = rewrite_with_aliases(model)
    assert why(log, RULE, "#2 (SQUEEZE)") == "its output leaves the partition"
    check_gpu(model, [random((2, 2, 3), 11)])


def test_a_transpose_read_by_a_depth_to_space_stays():
    """DEPTH_TO_SPACE builds its map from its input's own shape: it reads through reshapes only."""
    c = Chain((1, 4, 4, 8))
    t = c.op("TRANSPOSE", c.op("ABS", c.x), c.const((0, 2, 1, 3), np.int32), shape=(1, 4, 4, 8))
    model = c.build(c.op("DEPTH_TO_SPACE", t, shape=(1, 8, 8, 2), block_size=2))
    graph, log = rewrite_with_aliases(model)
    assert "TRANSPOSE" in ops_of(graph)
    assert "row-major order only" in why(log, RULE, "#1 (TRANSPOSE)")
    check_gpu(model, [random((1, 4, 4, 8), 7)])


def test_a_composed_map_of_too_many_digits_keeps_the_op():
    """Reversing the four bits of a 16-channel index needs 4 digits of the channel axis, one more
    than the gather template has: the transpose stays (the reshapes around it go)."""
    c = Chain((1, 1, 1, 16))
    bits = reshape(c, c.op("ABS", c.x), (2, 2, 2, 2))
    reversed_bits = c.op("TRANSPOSE", bits, c.const((3, 2, 1, 0), np.int32), shape=(2, 2, 2, 2))
    back = reshape(c, reversed_bits, (1, 1, 1, 16))
    model = c.build(slice_channels(c, back, 0, 16))
    graph, log = rewrite_with_aliases(model)
    assert ops_of(graph) == ["ABS", "TRANSPOSE", "SLICE"]
    assert "not a strided view" in why(log, RULE, "#2 (TRANSPOSE)")
    check_gpu(model, [random((1, 1, 1, 16), 8)])


@pytest.mark.parametrize("precision", ["fp32", "fp16_fp32acc"])
def test_a_reshape_feeding_a_fused_operand_stays(precision):
    """ConvNeXt's LayerNorm2d as litert-torch writes it: MUL(x, a) then ADD(that, RESHAPE(b)).
    fuse_residual_add makes the ADD a step of the MUL's epilogue that reads the reshape's output;
    that read must keep the reshape (once it was removed as unread, and the epilogue read
    storage nothing wrote: errors as large as the outputs)."""
    b = ModelBuilder()
    x, a, bias = b.input("x", (1, 12, 5)), b.input("a", (1, 12, 1)), b.input("b", (12,))
    scaled, shaped, out = b.tensor("scaled", (1, 12, 5)), b.tensor("shaped", (1, 12, 1)), b.tensor("out", (1, 12, 5))
    b.op("MUL", [x, a], [scaled], fused_activation_function=0)
    b.op("RESHAPE", [bias, b.const("shape", np.array([1, 12, 1], np.int32))], [shaped], new_shape=[1, 12, 1])
    b.op("ADD", [scaled, shaped], [out], fused_activation_function=0)
    b.output(out)
    values = [random((1, 12, 5), 1), random((1, 12, 1), 2), random((12,), 3)]
    _, log = check_gpu(b.build(), values, precision)
    assert [r.status for r in log if r.rule == "fuse_residual_add" and "ADD" in r.node] == ["APPLIED"]
    assert [r.status for r in log if r.rule == RULE] == ["SKIPPED"]


def test_a_reshape_read_by_a_gather_of_runtime_indices_stays():
    """A GATHER of indices computed at run time runs gather.glsl, which reads its params as
    stored: it cannot read through the reshape (which moves values between slices here; read
    through, the gather read storage nothing wrote: errors as large as the values)."""
    b = ModelBuilder()
    x, picks = b.input("x", (1, 3, 2, 6)), b.input("picks", (3,), np.int32)
    shown, rows, out = b.tensor("abs", (1, 3, 2, 6)), b.tensor("rows", (6, 6)), b.tensor("out", (3, 6))
    b.op("ABS", [x], [shown])
    b.op("RESHAPE", [shown, b.const("shape", np.array([6, 6], np.int32))], [rows], new_shape=[6, 6])
    b.op("GATHER", [rows, picks], [out], axis=0)
    b.output(out)
    model = b.build()
    graph, log = rewrite_with_aliases(model)
    assert ops_of(graph) == ["ABS", "RESHAPE", "GATHER"]
    assert "runs another kernel" in why(log, RULE, "#1 (RESHAPE)")
    check_gpu(model, [random((1, 3, 2, 6), 9), np.array([5, 0, 3], np.int32)])


def test_a_reshape_back_to_the_source_s_shape_goes():
    """RESHAPE to [24] and back to [1, 6, 4] (iris_landmark's, pose_landmark_full's): the first is
    read through by the second, which then copies its source unchanged; its reader, a computing
    op, reads the source itself."""
    c = Chain((1, 6, 4))
    back = reshape(c, reshape(c, c.op("ABS", c.x), (24,)), (1, 6, 4))
    model = c.build(c.op("NEG", back))
    graph, log = rewrite_with_aliases(model)
    assert ops_of(graph) == ["ABS", "NEG"]
    assert "unchanged" in why(log, RULE, "#2 (RESHAPE)")
    check_gpu(model, [random((1, 6, 4), 10)])


def random_chain(c, x, rng, steps):
    """`steps` random TRANSPOSEs and RESHAPEs (to a random factorization of the size, rank 1-5)."""
    for _ in range(steps):
        shape = c.shapes[x]
        if rng.random() < 0.5 and len(shape) > 1:
            perm = tuple(int(p) for p in rng.permutation(len(shape)))
            x = c.op("TRANSPOSE", x, c.const(perm, np.int32), shape=tuple(shape[p] for p in perm))
        else:
            size, target = int(np.prod(shape)), []
            while size > 1 and len(target) < 4:
                d = int(rng.choice([f for f in range(2, size + 1) if size % f == 0]))
                target.append(d)
                size //= d
            x = reshape(c, x, tuple(target) or (1,))
    return x


@settings(max_examples=12, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=2, max_size=4), st.integers(0, 2 ** 31), st.integers(2, 5))
def test_random_layout_chains_read_through(shape, seed, steps):
    """Chains of transposes and reshapes ending in a SLICE (a layout reader) and a NEG: whatever
    the rule removes, the values are the reference's."""
    rng = np.random.default_rng(seed)
    c = Chain(tuple(shape))
    x = random_chain(c, c.op("ABS", c.x), rng, steps)
    end = c.shapes[x]
    sliced = c.op("SLICE", x, c.const((0,) * len(end), np.int32), c.const(tuple(max(1, d - 1) for d in end), np.int32),
                  shape=tuple(max(1, d - 1) for d in end))
    model = c.build(c.op("NEG", sliced))
    check_gpu(model, [random(tuple(shape), seed % 1000)])


def squeezed_sum_read_twice():
    """ADD(x, x) read by another ADD (an output) and, through a SQUEEZE, by a SLICE (an output):
    once the SQUEEZE goes, the SLICE reads the first ADD's output in its place."""
    c = Chain((1, 10, 5))
    doubled = c.op("ADD", c.x, c.x)
    tripled = c.op("ADD", doubled, c.x)
    squeezed = c.op("SQUEEZE", doubled, shape=(10, 5), squeeze_dims=[0])
    row = c.op("SLICE", squeezed, c.const([3, 0], np.int32), c.const([1, 5], np.int32), shape=(1, 5))
    return c.build(tripled, row), doubled


def test_a_node_reading_through_is_among_the_readers_of_the_source():
    """The graph's reader index counts a tensor read in place of a removed layout op's output:
    a rule asking who reads the first ADD's output must see the SLICE (fuse_pointwise_dag took it
    for read by the second ADD alone and stored it nowhere: the SLICE read 0.73 x the output
    off, gles-fuzz-graphs --families quant, seed 21 case 69)."""
    model, doubled = squeezed_sum_read_twice()
    graph, log = rewrite(model, RULE)
    assert ops_of(graph) == ["ADD", "ADD", "SLICE"]
    source = next(t for t in graph.tensors if t.index == doubled)
    assert [n.op for n in graph.readers_of(source)] == ["ADD", "SLICE"]


@pytest.mark.parametrize("precision", ["fp32", "fp16_fp32acc"])
def test_a_fused_group_keeps_a_tensor_read_through_a_removed_op(precision):
    """Every rule on: the two ADDs may run as one dispatch, but the first one's output is stored
    for the SLICE reading it through the removed SQUEEZE."""
    model, _ = squeezed_sum_read_twice()
    check_gpu(model, [random((1, 10, 5), 69)], precision)
