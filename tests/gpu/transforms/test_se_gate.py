"""se_gate: a squeeze-excite block's gate (MEAN over H and W, one or two FULLY_CONNECTED layers
with their activations and epilogues) becomes one SE_GATE node, one dispatch; with channel_gate
the whole block is the convolution before it, that dispatch, and the convolution after it."""
import numpy as np
import pytest

from gles_delegate import GpuDelegate
from gles_delegate.graph import Node, Tensor
from gles_delegate.gpu import kernels
from gles_delegate.gpu.kernels import squeeze_excite
from gles_delegate.gpu.kernels.epilogue import Step
from gles_delegate.gpu.transforms import channel_gate, se_gate
from tests.gpu.gpulib import PRECISIONS
from tests.gpu.transforms.rulelib import (VALID, Chain, check_gpu, dispatches, ops_of, random, rewrite_through,
                                          statuses, why)
from tests.oplib import run_ours

RULE = "se_gate"
FORMS = ("mediapipe", "converter", "dense", "keras")


def pooled_of(c, x, form):
    """The global average of x: MediaPipe's AVERAGE_POOL_2D, the TF converter's MEAN (keep_dims),
    Keras' MEAN to [N, C] (then a Dense layer: 'dense'), or that MEAN reshaped to [N, 1, 1, C]
    for a 1x1 Conv2D (Keras' EfficientNet: 'keras')."""
    n, h, w, ch = c.shapes[x]
    if form == "mediapipe":
        return c.op("AVERAGE_POOL_2D", x, shape=(n, 1, 1, ch), padding=VALID, stride_w=w, stride_h=h,
                    filter_width=w, filter_height=h)
    keep = form == "converter"
    pooled = c.op("MEAN", x, c.const([1, 2], np.int32), shape=(n, 1, 1, ch) if keep else (n, ch), keep_dims=keep)
    if form == "keras":
        return c.op("RESHAPE", pooled, c.const([n, 1, 1, ch], np.int32), shape=(n, 1, 1, ch))
    return pooled


def layer(c, x, units, activation=0, seed=5):
    """A 1x1 CONV_2D of a pooled [N, 1, 1, C] tensor, or a FULLY_CONNECTED of an [N, C] one."""
    if len(c.shapes[x]) == 4:
        return c.conv(x, units, kernel=1, activation=activation, seed=seed)
    n, ch = c.shapes[x]
    weights, bias = c.const(random((units, ch), seed, 0.5)), c.const(random(units, seed + 1))
    return c.op("FULLY_CONNECTED", x, weights, bias, shape=(n, units), fused_activation_function=activation)


def se_block(shape=(1, 8, 8, 16), form="mediapipe", hidden=4, gate="LOGISTIC", hidden_op=None, outputs=()):
    """depthwise (RELU) -> global average -> layer (RELU) [-> hidden_op] -> layer -> gate ->
    MUL(depthwise, gate) -> 1x1 CONV_2D. gate: LOGISTIC or 'hard_sigmoid' (relu6(x + 3) / 6).
    outputs: extra model outputs among 'pooled'."""
    c = Chain(shape)
    n, _, _, ch = shape
    x = c.depthwise(c.x, activation=1)
    pooled = pooled_of(c, x, form)
    z = layer(c, pooled, hidden, activation=1)
    if hidden_op:
        z = c.op(hidden_op, z)
    z = layer(c, z, ch, seed=7)
    if gate == "LOGISTIC":
        z = c.op("LOGISTIC", z)
    else:
        z = c.op("MUL", c.op("RELU6", c.op("ADD", z, c.const(3.0))), c.const(1 / 6))
    if form == "dense":
        z = c.op("RESHAPE", z, c.const([n, 1, 1, ch], np.int32), shape=(n, 1, 1, ch))
    out = c.conv(c.op("MUL", x, z), 8, kernel=1, seed=9)
    return c.build(out, *([pooled] if "pooled" in outputs else []))


def gate_node(graph):
    return next(n for n in graph.nodes if n.op == squeeze_excite.OP)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("form", FORMS)
def test_a_squeeze_excite_block_takes_one_dispatch_between_its_convolutions(form, precision):
    model = se_block(form=form)
    graph, log = rewrite_through(model, "channel_gate")
    # The gate's [N, C] -> [N, 1, 1, C]: an alias, no dispatch; the pooled one goes with the MEAN.
    reshape = ["RESHAPE"] if form == "dense" else []
    assert ops_of(graph) == ["DEPTHWISE_CONV_2D", "SE_GATE"] + reshape + ["CONV_2D"]
    assert [s for s, _ in statuses(log, RULE)] == ["APPLIED"]
    assert len(gate_node(graph).inputs) == 5
    summary, _ = check_gpu(model, [random((1, 8, 8, 16), 2)], precision)
    assert summary["dispatches"] == 4  # convert_in, depthwise, SE_GATE, conv storing the output
    assert dispatches(model, [random((1, 8, 8, 16), 2)], rewrite_rules=False) == 8 + (form in ("dense", "keras"))


@pytest.mark.parametrize("precision", ["fp32", "fp16_fp32acc"])
def test_fusion_changes_no_value(precision):
    """The gate sums in the unfused kernels' order (16 channels: the MEAN's 128-lane tree, the FC's
    split of K) and rounds the mean and the hidden layer to half where the unfused graph stored
    them, so the fused block computes the unfused one's values: all equal on llvmpipe (at least
    98%, the rest one half ulp apart, where a compiler contracts two programs differently)."""
    model, values = se_block(shape=(2, 8, 8, 16)), [random((2, 8, 8, 16), 4)]
    results = []
    for enabled in (False, True):
        se_gate.ENABLED = channel_gate.ENABLED = enabled
        try:
            with GpuDelegate(precision=precision) as delegate:
                results.append(run_ours(model, values, experimental_delegates=[delegate])[0])
                assert delegate.summary()["dispatches"] == (4 if enabled else 7)
        finally:
            se_gate.ENABLED = channel_gate.ENABLED = True
    unfused, fused = results
    assert np.mean(unfused == fused) >= 0.98
    assert np.all(np.abs(unfused - fused) <= 2.0 ** -10 * np.abs(unfused) + 1e-7)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_a_hard_sigmoid_gate_and_a_hidden_epilogue_join_the_gate(precision):
    """MobileNetV3's gate relu6(x + 3) / 6 is the last layer's output stage (the + 3 folded into
    its bias, RELU6 its activation, the / 6 an epilogue step), a HARD_SWISH after the first layer
    its (operand-free) hidden epilogue; odd channel counts and two batch items."""
    model = se_block(shape=(2, 5, 7, 10), hidden=3, gate="hard_sigmoid", hidden_op="HARD_SWISH")
    graph, _ = rewrite_through(model, RULE)
    node = gate_node(graph)
    assert [s.op for s in node.options[squeeze_excite.HIDDEN_EPILOGUE]] == ["HARD_SWISH"]
    assert node.options["fused_activation_function"] == 3  # RELU6
    assert [s.op for s in node.options["epilogue"]] == ["MUL"]
    check_gpu(model, [random((2, 5, 7, 10), 3, 2.0)], precision)


@pytest.mark.parametrize("form", ["mediapipe", "keras"])
def test_a_large_mean_keeps_its_dispatch_and_the_layers_merge(monkeypatch, form):
    """The gate reads the MEAN's output, or Keras' reshape of it (an alias)."""
    monkeypatch.setattr(se_gate, "MAX_FUSED_MEAN_ELEMENTS", 8 * 8 * 4 - 1)
    model = se_block(shape=(1, 8, 8, 16), form=form)
    graph, log = rewrite_through(model, RULE)
    reshape = ["RESHAPE"] if form == "keras" else []
    assert ops_of(graph)[:3 + len(reshape)] == ["DEPTHWISE_CONV_2D", "MEAN"] + reshape + ["SE_GATE"]
    assert gate_node(graph).inputs[0] is graph.nodes[1 + len(reshape)].outputs[0]
    assert "keeps its own dispatch" in why(log, RULE, "#1 (MEAN)")
    for precision in ("fp32", "fp16"):
        check_gpu(model, [random((1, 8, 8, 16), 5)], precision)


def test_a_mean_read_elsewhere_stays_and_the_layers_merge():
    model = se_block(form="converter", outputs=("pooled",))
    graph, log = rewrite_through(model, RULE)
    assert ops_of(graph)[:3] == ["DEPTHWISE_CONV_2D", "MEAN", "SE_GATE"]
    assert "read elsewhere" in why(log, RULE, "#1 (MEAN)")
    check_gpu(model, [random((1, 8, 8, 16), 6)])


def test_a_mean_read_elsewhere_before_one_layer_stays():
    """One layer after a mean that must stay: nothing would merge."""
    c = Chain((1, 6, 6, 8))
    pooled = pooled_of(c, c.x, "converter")
    model = c.build(c.op("LOGISTIC", layer(c, pooled, 8)), pooled)
    graph, log = rewrite_through(model, RULE)
    assert "MEAN" in ops_of(graph) and "SE_GATE" not in ops_of(graph)
    assert "nothing merges" in why(log, RULE, "#0 (MEAN)")


def test_a_mean_not_read_by_a_layer_stays():
    c = Chain((1, 6, 6, 8))
    pooled = pooled_of(c, c.x, "converter")
    model = c.build(c.op("SOFTMAX", pooled, beta=1.0))  # (an ADD would be the MEAN's epilogue step)
    graph, log = rewrite_through(model, RULE)
    assert "SE_GATE" not in ops_of(graph)
    assert "not read by one FULLY_CONNECTED" in why(log, RULE, "#0 (MEAN)")


def test_a_first_layer_whose_epilogue_reads_a_tensor_ends_the_gate():
    """The hidden layer's epilogue holds only scalar operands: a tensor operand leaves that
    layer the last one of the gate (whose epilogue may read anything)."""
    operand = Tensor(9, "slope", (4,), np.dtype(np.float32), data=np.ones(4, np.float32))
    assert "reads a tensor" in squeeze_excite.hidden_reason(0, (Step("PRELU", operand, stored=True),))
    assert squeeze_excite.hidden_reason(0, (Step("LEAKY_RELU", 0.2, stored=True), Step("ADD", 1.0))) is None
    assert "more than" in squeeze_excite.hidden_reason(0, (Step("ABS"),) * 5)


def _gate(channels, hidden, custom=False):
    x = Tensor(0, "x", (1, 4, 4, channels), np.dtype(np.float32))
    w1 = Tensor(1, "w1", (hidden, channels), np.dtype(np.float32), data=np.zeros((hidden, channels), np.float32))
    w2 = Tensor(2, "w2", (channels, hidden), np.dtype(np.float32), data=np.zeros((channels, hidden), np.float32))
    out = Tensor(3, "gate", (1, 1, 1, channels), np.dtype(np.float32))
    return Node(0, squeeze_excite.OP, [x, w1, None, w2, None], [out], custom=custom)


def test_the_kernel_refuses_what_does_not_fit_and_custom_ops_of_its_name():
    assert kernels.unsupported_reason(_gate(64, 16)) is None
    assert "shared memory" in kernels.unsupported_reason(_gate(4096, 16))
    assert "custom op" in kernels.unsupported_reason(_gate(64, 16, custom=True))


def test_the_switch_turns_the_rule_off(monkeypatch):
    monkeypatch.setattr(se_gate, "ENABLED", False)
    graph, log = rewrite_through(se_block(), RULE)
    assert "SE_GATE" not in ops_of(graph) and not statuses(log, RULE)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_the_last_layer_applies_an_epilogue_of_every_operand_kind(precision):
    """The gate's epilogue as any kernel's (tests/gpu/test_epilogue.py): a runtime residual
    [B, 1, 1, C], a per-channel constant, a scalar on the left, a PRELU slope, unary steps."""
    shape, c = (2, 6, 6, 8), Chain((2, 6, 6, 8))
    residual = c.b.input("residual", (2, 1, 1, 8))
    c.shapes[residual] = (2, 1, 1, 8)
    value = layer(c, layer(c, pooled_of(c, c.x, "converter"), 4, activation=1), 8, seed=7)
    value = c.op("ADD", c.op("HARD_SWISH", value), residual, fused_activation_function=3)
    value = c.op("SUB", c.const(np.float32(0.25)), c.op("MUL", c.const(random(8, 7)), value))
    model = c.build(c.op("TANH", c.op("PRELU", value, c.const(random((1, 1, 8), 8, 0.3)))))
    graph, _ = rewrite_through(model, RULE)
    assert ops_of(graph) == ["SE_GATE"] and len(gate_node(graph).options["epilogue"]) == 7
    summary, _ = check_gpu(model, [random(shape, 1, 2.0), random((2, 1, 1, 8), 2)], precision)
    assert summary["dispatches"] == 3  # two inputs in, the gate storing the output


def test_a_large_layer_stays_a_fully_connected_of_its_own(monkeypatch):
    """A classifier head (MEAN -> FC 1280 x 1000) in one workgroup was 12x slower than MEAN + FC
    on an H200: past MAX_FUSED_WEIGHTS weights the rule leaves the layer alone."""
    monkeypatch.setattr(se_gate, "MAX_FUSED_WEIGHTS", 8 * 4 - 1)
    c = Chain((1, 6, 6, 8))
    pooled = c.op("MEAN", c.x, c.const([1, 2], np.int32), shape=(1, 8), keep_dims=False)
    out = c.op("FULLY_CONNECTED", pooled, c.const(random((4, 8), 3)), c.const(random(4, 4)), shape=(1, 4),
               fused_activation_function=0)
    graph, log = rewrite_through(c.build(out), "se_gate")
    assert "SE_GATE" not in ops_of(graph) and "FULLY_CONNECTED" in ops_of(graph)
    monkeypatch.setattr(se_gate, "MAX_FUSED_WEIGHTS", 8 * 4)
    assert "SE_GATE" in ops_of(rewrite_through(c.build(out), "se_gate")[0])


@pytest.mark.parametrize("hidden", [4, None])
@pytest.mark.parametrize("precision", ["fp32", "fp16_fp32acc"])
def test_output_groups_share_the_last_layer_and_change_no_value(monkeypatch, hidden, precision):
    """With the last layer's output slices spread over workgroups (squeeze_excite.OUTPUT_GROUPS:
    here 3 groups for 40 channels, 10 slices, the last group short), each workgroup sums the same
    mean and first layer as one alone did: the gate's values are the one-group kernel's (to the
    last place), for two layers and for one."""
    shape = (2, 6, 6, 40)
    if hidden is None:
        c = Chain(shape)
        x = c.depthwise(c.x, activation=1)
        gate = c.op("LOGISTIC", layer(c, pooled_of(c, x, "mediapipe"), 40, seed=7))
        model = c.build(c.conv(c.op("MUL", x, gate), 8, kernel=1, seed=9))
    else:
        model = se_block(shape=shape, hidden=hidden)
    values, results = [random(shape, 6)], []
    for groups in (1, 3):
        monkeypatch.setattr(squeeze_excite, "MAX_OUTPUT_GROUPS", groups)
        monkeypatch.setattr(squeeze_excite, "OUTPUT_SLICES_PER_GROUP", 3)
        summary, log = check_gpu(model, values, precision)
        assert [r.status for r in log if r.rule == RULE] == ["APPLIED"]
        with GpuDelegate(precision=precision) as delegate:
            results.append(run_ours(model, values, experimental_delegates=[delegate])[0])
    # The same sums in the same order; two programs may still contract a multiply-add apart
    # (test_fusion_changes_no_value): within one unit in the last place of the stored values.
    one, grouped = results
    stored = np.float16 if precision == "fp16_fp32acc" else np.float32
    assert np.all(np.abs(one - grouped) <= np.spacing(np.abs(one).astype(stored)).astype(np.float32))
