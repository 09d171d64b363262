"""cpu_backend='auto' (the default): every CPU node LiteRT can take runs through LiteRT, each run
of consecutive ones as one sub-model; the reference runs the rest, and everything without
ai-edge-litert (gles_delegate/cpu_litert.py). With the GPU delegate: tests/gpu/test_cpu_litert.py."""
import threading
import time
import warnings
import weakref

import numpy as np
import pytest

from gles_delegate import Interpreter, ModelError, callee_subgraphs, cpu_litert, ops
from gles_delegate.tflite import ModelBuilder
from tests.control_flow_models import growing_loop, loop_between
from tests.cpu_litert_models import ClaimsNothing, int16_conv_model, random_input, run, segment_model
from tests.litert import LiteRTInterpreter
from tests.oplib import In, assert_close, single_op_model
from tests.refcount import collector_disabled
from tests.test_quant import two_op_model
from tests.threads import run_in_threads

NONE, SAME = 0, 0  # fused_activation_function, padding
INT64 = 4  # the schema's TensorType


def conv_net(shape=(1, 6, 6, 3), signature=None):
    """x -> CONV_2D 3x3 (RELU) -> DEPTHWISE_CONV_2D 3x3 -> ADD x' -> L2_NORMALIZATION -> MEAN over
    H, W -> FULLY_CONNECTED -> SOFTMAX: ops the reference runs, 7 nodes. `signature`: x's
    shape_signature (resizable)."""
    rng = np.random.default_rng(0)
    b = ModelBuilder()
    channels = shape[-1]
    x = b.input("x", shape, shape_signature=signature)
    conv = _node(b, "CONV_2D", "conv", [x, _const(b, rng, "w", (4, 3, 3, channels)), _const(b, rng, "b", (4,))],
                 shape[:-1] + (4,), padding=SAME, stride_w=1, stride_h=1, dilation_w_factor=1,
                 dilation_h_factor=1, fused_activation_function=1)
    depthwise = _node(b, "DEPTHWISE_CONV_2D", "dw", [conv, _const(b, rng, "dw_w", (1, 3, 3, 4)),
                                                      _const(b, rng, "dw_b", (4,))],
                      shape[:-1] + (4,), padding=SAME, stride_w=1, stride_h=1, dilation_w_factor=1,
                      dilation_h_factor=1, depth_multiplier=1, fused_activation_function=NONE)
    added = _node(b, "ADD", "added", [conv, depthwise], shape[:-1] + (4,), fused_activation_function=NONE)
    normal = _node(b, "L2_NORMALIZATION", "normal", [added], shape[:-1] + (4,), fused_activation_function=NONE)
    mean = _node(b, "MEAN", "mean", [normal, b.const("axes", np.array([1, 2], np.int32))], (shape[0], 4),
                 keep_dims=False)
    logits = _node(b, "FULLY_CONNECTED", "logits", [mean, _const(b, rng, "fc_w", (5, 4)), -1], (shape[0], 5),
                   fused_activation_function=NONE)
    b.output(_node(b, "SOFTMAX", "probs", [logits], (shape[0], 5), beta=1.0))
    return b.build()


def _const(b, rng, name, shape):
    return b.const(name, rng.uniform(-0.5, 0.5, shape).astype(np.float32))


def _node(b, op, name, inputs, shape, dtype=np.float32, **options):
    out = b.tensor(name, shape, dtype)
    b.op(op, inputs, [out], **options)
    return out


def litert_run(model, inputs, **kwargs):
    """LiteRT's own Interpreter (its default resolver, as our sub-models have) on `model`."""
    interpreter = LiteRTInterpreter(model_content=model, **kwargs)
    interpreter.allocate_tensors()
    for detail, value in zip(interpreter.get_input_details(), inputs):
        interpreter.set_tensor(detail["index"], value)
    interpreter.invoke()
    return [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]


CONV_LABELS = ["#0 (CONV_2D)", "#1 (DEPTHWISE_CONV_2D)", "#2 (ADD)", "#3 (L2_NORMALIZATION)", "#4 (MEAN)",
               "#5 (FULLY_CONNECTED)", "#6 (SOFTMAX)"]


def test_auto_runs_the_whole_model_as_one_litert_sub_model():
    x = random_input((1, 6, 6, 3))
    (ours,), summary = run(conv_net(), [x])
    assert summary["cpu_backend"] == "auto" and summary["litert"]
    assert summary["litert_partitions"] == [CONV_LABELS] and summary["reference_nodes"] == []
    (theirs,) = litert_run(conv_net(), [x])
    assert_close(ours, theirs)
    (reference,), reference_summary = run(conv_net(), [x], cpu_backend="fallback")
    assert reference_summary["reference_nodes"] == CONV_LABELS and reference_summary["litert_nodes"] == []
    np.testing.assert_allclose(reference, theirs, rtol=1e-5, atol=1e-6)


def test_a_loop_runs_in_the_litert_sub_model_of_its_run():
    """A WHILE between two runs of float nodes: one LiteRT sub-model holding the loop, its cond
    and body copied in (callee_subgraphs.py), LiteRT's outputs."""
    model = loop_between((2, 3), np.full((2, 3), 0.25, np.float32))
    n, x = np.array(3, np.int32), random_input((2, 3))
    ours, summary = run(model, [n, x])
    assert summary["litert_partitions"] == [["#0 (MUL)", "#1 (TANH)", "#2 (WHILE)", "#3 (ADD)", "#4 (LOGISTIC)"]]
    assert summary["reference_nodes"] == []
    for mine, theirs in zip(ours, litert_run(model, [n, x])):
        assert_close(mine, theirs)


def test_a_node_litert_cannot_take_splits_the_run_and_says_why(monkeypatch):
    """The same WHILE with callees over CALLEE_WORK_MAX, beside a delegate (without one the
    file would run whole on LiteRT): two LiteRT sub-models, the WHILE on the reference (its
    body's nodes through LiteRT too), the reason given, LiteRT's outputs."""
    monkeypatch.setattr(callee_subgraphs, "CALLEE_WORK_MAX", -1)
    model = loop_between((2, 3), np.full((2, 3), 0.25, np.float32))
    n, x = np.array(3, np.int32), random_input((2, 3))
    ours, summary = run(model, [n, x], experimental_delegates=[ClaimsNothing()])
    assert summary["litert_partitions"] == [["#0 (MUL)", "#1 (TANH)"], ["#3 (ADD)", "#4 (LOGISTIC)"]]
    assert list(summary["reference_reasons"]) == ["#2 (WHILE)"]
    assert "multiply-adds a call" in summary["reference_reasons"]["#2 (WHILE)"]
    for mine, theirs in zip(ours, litert_run(model, [n, x])):
        assert_close(mine, theirs)


def test_without_litert_everything_runs_on_the_reference(monkeypatch):
    monkeypatch.setattr(cpu_litert, "litert_interpreter_class", lambda: None)
    x = random_input((1, 6, 6, 3))
    (ours,), summary = run(conv_net(), [x])
    assert summary["litert"] is None and summary["litert_nodes"] == []
    assert summary["reference_reasons"] == {label: "ai-edge-litert is not installed" for label in CONV_LABELS}
    (reference,), _ = run(conv_net(), [x], cpu_backend="reference")
    np.testing.assert_array_equal(ours, reference)
    with pytest.raises(ModelError, match=r"#2 \(SEGMENT_SUM\) cannot run on the CPU: .*installing ai-edge-litert"):
        Interpreter(model_content=segment_model()).allocate_tensors()


def _version_99_model():
    """x [2, 3] -> MUL x -> ABS (version 99: LiteRT's resolver has no such version, the
    reference runs any) -> TANH -> y."""
    b = ModelBuilder()
    x = b.input("x", (2, 3))
    squared = _node(b, "MUL", "squared", [x, x], (2, 3), fused_activation_function=NONE)
    magnitude = _node(b, "ABS", "magnitude", [squared], (2, 3), version=99)
    b.output(_node(b, "TANH", "y", [magnitude], (2, 3)))
    return b.build()


def test_a_node_litert_refuses_at_allocate_runs_on_the_reference_with_one_warning():
    x = random_input((2, 3))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (ours,), summary = run(_version_99_model(), [x])
    lines = [str(w.message) for w in caught if "LiteRT refused" in str(w.message)]
    assert len(lines) == 1 and lines[0].startswith("LiteRT refused #1 (ABS), which runs on the numpy reference")
    assert "'ABS' version '99'" in lines[0] and "\n" not in lines[0]
    assert summary["litert_partitions"] == [["#0 (MUL)"], ["#2 (TANH)"]]
    assert summary["reference_reasons"]["#1 (ABS)"].startswith("LiteRT refused it: Didn't find op for builtin "
                                                              "opcode 'ABS' version '99'")
    np.testing.assert_allclose(ours, np.tanh(x * x), rtol=1e-6)


def test_a_refused_node_leaves_no_frame_holding_the_interpreters_graph():
    """LiteRT's refusals are kept as messages: an error kept in a local held, through its
    traceback, the frame that kept it (and with it the graph), a cycle that only the cyclic
    collector freed after the interpreter was dropped."""
    with collector_disabled():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "LiteRT refused #1 (ABS)": the test above
            interpreter = Interpreter(model_content=_version_99_model())
            interpreter.allocate_tensors()
        assert interpreter.cpu_summary()["reference_reasons"]["#1 (ABS)"].startswith("LiteRT refused it")
        gone = weakref.ref(interpreter._main.graph)
        del interpreter
        assert gone() is None


def test_a_node_neither_litert_nor_the_reference_runs_is_a_model_error_naming_it():
    with pytest.raises(ModelError, match=r"operator #2 \(SEGMENT_SUM\) cannot run through LiteRT: Didn't find op "
                                         r"for builtin opcode 'SEGMENT_SUM' version '99'"):
        Interpreter(model_content=segment_model(version=99)).allocate_tensors()


class ReshapeOnTheReference:
    """A delegate taking every RESHAPE and running it on the reference kernels: the CPU nodes
    around it become two runs."""

    def can_run(self, node):
        return node.op == "RESHAPE"

    def partition(self, graph, candidates):
        return [_ReferenceStep(n) for n in candidates if n.op == "RESHAPE"]


class _ReferenceStep:
    def __init__(self, node):
        self.nodes = [node]

    def run(self, storage, capture=None):
        ops.run_into(self.nodes[0], storage)


@pytest.mark.parametrize("float_io", [False, True], ids=["int8 io", "float io"])
def test_quantized_sub_models_give_litert_s_integers(float_io):
    """[QUANTIZE ->] CONV_2D -> RESHAPE (a delegate's) -> FULLY_CONNECTED [-> DEQUANTIZE], int8
    inside: the two LiteRT sub-models around the RESHAPE give exactly what LiteRT's own
    Interpreter gives for the whole model."""
    for seed in range(3):
        model, feed = two_op_model(np.random.default_rng(seed), float_io)
        (ours,), summary = run(model, [feed], experimental_delegates=[ReshapeOnTheReference()])
        assert len(summary["litert_partitions"]) == 2 and summary["reference_nodes"] == []
        (theirs,) = litert_run(model, [feed])
        assert ours.dtype == theirs.dtype and np.array_equal(ours, theirs), f"seed {seed}"


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_8_bit_pooling_is_litert_s(dtype):
    rng = np.random.default_rng(2)
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max + 1, (1, 7, 7, 3)).astype(dtype)
    quant = (0.05, 3 if dtype == np.uint8 else -3)
    model = single_op_model("AVERAGE_POOL_2D", [In(x, quant=quant)],
                            {"padding": SAME, "stride_w": 2, "stride_h": 2, "filter_width": 3, "filter_height": 3,
                             "fused_activation_function": NONE}, output_quant=[quant])
    (ours,), summary = run(model, [x])
    assert summary["litert_nodes"] == ["#0 (AVERAGE_POOL_2D)"]
    np.testing.assert_array_equal(ours, litert_run(model, [x])[0])


def test_int16_activations_are_litert_s():
    model, x = int16_conv_model()
    (ours,), summary = run(model, [x])
    assert summary["litert_nodes"] == ["#0 (CONV_2D)"]
    np.testing.assert_array_equal(ours, litert_run(model, [x])[0])


def _typed_model():
    """x [4] float -> LESS 0 (bool) -> SELECT_V2 (x, -x) ; ARG_MAX of x over axis 0 (int64);
    x cast to int32, + 7 (int32): bool, int32 and int64 tensors through LiteRT."""
    b = ModelBuilder()
    x = b.input("x", (4,))
    negative = _node(b, "LESS", "negative", [x, b.const("zero", np.float32(0))], (4,), np.bool_)
    flipped = _node(b, "NEG", "flipped", [x], (4,))
    b.output(_node(b, "SELECT_V2", "magnitude", [negative, flipped, x], (4,)))
    b.output(_node(b, "ARG_MAX", "largest", [x, b.const("axis", np.array([0], np.int32))], (), np.int64,
                   output_type=INT64))
    whole = _node(b, "CAST", "whole", [x], (4,), np.int32)
    b.output(_node(b, "ADD", "shifted", [whole, b.const("seven", np.int32(7))], (4,), np.int32,
                   fused_activation_function=NONE))
    b.output(negative)
    return b.build()


def test_bool_int32_and_int64_tensors_through_litert():
    x = np.float32([1.5, -2.0, 3.25, -0.5])
    ours, summary = run(_typed_model(), [x])
    assert summary["reference_nodes"] == [] and len(summary["litert_partitions"]) == 1
    theirs = litert_run(_typed_model(), [x])
    assert [a.dtype for a in ours] == [np.float32, np.int64, np.int32, np.bool_]
    for mine, litert in zip(ours, theirs):
        assert mine.dtype == litert.dtype and np.array_equal(mine, litert)


def test_an_empty_batch_gives_empty_outputs():
    """LiteRT's own Interpreter fails on this resize (XNNPACK's reshape of a 0 batch); the
    sub-model, whose shapes are all declared, runs."""
    (ours,), summary = run(conv_net(signature=(-1, -1, -1, 3)), [np.zeros((0, 6, 6, 3), np.float32)],
                           shape=(0, 6, 6, 3))
    assert ours.shape == (0, 5) and summary["litert_partitions"] == [CONV_LABELS]


@pytest.mark.parametrize("shape", [(2, 9, 9, 3), (1, 4, 5, 3)])
def test_resize_remakes_the_sub_model(shape):
    model = conv_net(signature=(-1, -1, -1, 3))
    x = random_input(shape, seed=shape[1])
    (ours,), summary = run(model, [x], shape=shape)
    assert summary["litert_partitions"] == [CONV_LABELS]
    interpreter = LiteRTInterpreter(model_content=model)
    interpreter.resize_tensor_input(0, shape)
    interpreter.allocate_tensors()
    interpreter.set_tensor(0, x)
    interpreter.invoke()
    assert_close(ours, interpreter.get_tensor(interpreter.get_output_details()[0]["index"]), what=str(shape))


def test_a_loop_planned_again_in_invoke_keeps_its_nodes_on_the_reference(monkeypatch):
    """growing_loop's body sees other shapes at every iteration: planned again during the
    invoke, its CPU nodes run as 'fallback' places them (no LiteRT interpreter per iteration);
    planned once, at allocate, they run through LiteRT. (A loop LiteRT runs whole otherwise; so
    does the file without a delegate.)"""
    monkeypatch.setattr(callee_subgraphs, "CALLEE_WORK_MAX", -1)
    interpreter = Interpreter(model_content=growing_loop(2), experimental_delegates=[ClaimsNothing()])
    interpreter.allocate_tensors()
    body = interpreter._executor(2)
    assert [s.backend for s in body.steps] == ["litert"]
    interpreter.set_tensor(0, np.array(3, np.int32))
    interpreter.set_tensor(1, np.float32([1, 2]))
    interpreter.invoke()
    assert [s.backend for s in body.steps] == ["reference", "reference"]
    assert [s.why for s in body.steps] == ["cpu_backend='fallback'"] * 2
    np.testing.assert_array_equal(interpreter.get_tensor(interpreter.get_output_details()[1]["index"]),
                                  np.tile(np.float32([1, 2]), 8))


def test_num_threads_reaches_every_sub_model(monkeypatch):
    made = []
    real = cpu_litert.litert_interpreter_class()

    def recording(**kwargs):
        made.append(kwargs["num_threads"])
        return real(**kwargs)
    monkeypatch.setattr(cpu_litert, "litert_interpreter_class", lambda: recording)
    model = loop_between((2, 3), np.full((2, 3), 0.25, np.float32))
    run(model, [np.array(2, np.int32), random_input((2, 3))], num_threads=3)
    assert len(made) >= 3 and set(made) == {3}  # the two runs of the main subgraph, the body's


@pytest.mark.filterwarnings("ignore:Warning. Enabling `experimental_preserve_all_tensors`")
def test_preserve_all_tensors_reads_every_intermediate_of_the_sub_model():
    x = random_input((1, 6, 6, 3), seed=4)
    interpreter = Interpreter(model_content=conv_net(), experimental_preserve_all_tensors=True)
    interpreter.allocate_tensors()
    interpreter.set_tensor(0, x)
    interpreter.invoke()
    assert interpreter.cpu_summary()["litert_partitions"] == [CONV_LABELS]
    theirs = LiteRTInterpreter(model_content=conv_net(), experimental_preserve_all_tensors=True)
    theirs.allocate_tensors()
    theirs.set_tensor(0, x)
    theirs.invoke()
    names = {"conv", "dw", "added", "normal", "mean", "logits"}
    details = [d for d in theirs.get_tensor_details() if d["name"] in names]
    assert len(details) == len(names)
    for detail in details:
        assert_close(interpreter.get_tensor(detail["index"]), theirs.get_tensor(detail["index"]),
                     what=detail["name"])


class Signalling:
    """A delegate taking every ABS: its step runs it on the reference, sets `started` and
    lingers 50 ms, so that another thread acts while the invoke is under way."""

    def __init__(self):
        self.started = threading.Event()

    def can_run(self, node):
        return node.op == "ABS"

    def partition(self, graph, candidates):
        return [_SignallingStep(n, self.started) for n in candidates if n.op == "ABS"]


class _SignallingStep(_ReferenceStep):
    def __init__(self, node, started):
        super().__init__(node)
        self.started = started

    def run(self, storage, capture=None):
        super().run(storage, capture)
        self.started.set()
        time.sleep(0.05)


def test_get_tensor_during_an_invoke_reads_its_outputs():
    """get_tensor() called while another thread's invoke runs waits for it (LiteRT's output
    buffer, which the storage holds, is not read while LiteRT writes it), and tensor() too."""
    b = ModelBuilder()
    x = b.input("x", (2, 3))
    magnitude = _node(b, "ABS", "magnitude", [x], (2, 3))
    b.output(_node(b, "TANH", "y", [magnitude], (2, 3)))
    delegate = Signalling()
    interpreter = Interpreter(model_content=b.build(), experimental_delegates=[delegate])
    interpreter.allocate_tensors()
    assert interpreter.cpu_summary()["litert_nodes"] == ["#1 (TANH)"]
    output = interpreter.get_output_details()[0]["index"]
    for seed, read in enumerate([lambda: interpreter.get_tensor(output), lambda: interpreter.tensor(output)().copy()]):
        x = random_input((2, 3), seed=seed)
        interpreter.set_tensor(0, np.zeros((2, 3), np.float32))
        interpreter.invoke()
        interpreter.set_tensor(0, x)
        delegate.started.clear()
        invoking = threading.Thread(target=interpreter.invoke)
        invoking.start()
        assert delegate.started.wait(30)
        value = read()
        invoking.join()
        np.testing.assert_allclose(value, np.tanh(np.abs(x)), rtol=1e-6)


def test_two_interpreters_invoked_and_read_at_once():
    """Two interpreters of the model, each invoked from one thread and read from another
    (get_tensor of the output LiteRT's buffer holds), all at once: LiteRT's outputs each time,
    and no invoke refused for a view a reader holds."""
    model = conv_net()
    inputs = [random_input((1, 6, 6, 3), seed=k) for k in range(2)]
    expected = [litert_run(model, [x])[0] for x in inputs]
    interpreters = [Interpreter(model_content=model) for _ in inputs]
    for interpreter, x in zip(interpreters, inputs):
        interpreter.allocate_tensors()
        interpreter.set_tensor(0, x)
        interpreter.invoke()
    output = interpreters[0].get_output_details()[0]["index"]

    def invoking(k):
        for _ in range(30):
            interpreters[k].invoke()

    def reading(k):
        for _ in range(30):
            assert_close(interpreters[k].get_tensor(output), expected[k], what=f"interpreter {k}")
    run_in_threads([lambda k=k, work=work: work(k) for k in range(2) for work in (invoking, reading)])


def test_outputs_stay_right_when_the_user_holds_a_view():
    """A view from tensor() held across invokes sees every invoke's output (the storage copies
    LiteRT's output into itself then, rather than keeping LiteRT's buffer)."""
    interpreter = Interpreter(model_content=conv_net())
    interpreter.allocate_tensors()
    output = interpreter.tensor(interpreter.get_output_details()[0]["index"])
    view = output()
    for seed in range(2):
        x = random_input((1, 6, 6, 3), seed=seed)
        interpreter.set_tensor(0, x)
        interpreter.invoke()
        assert_close(view.copy(), litert_run(conv_net(), [x])[0], what=f"seed {seed}")
    del view
    interpreter.allocate_tensors()  # no view left: allowed


def test_litert_version_is_none_without_litert(monkeypatch):
    assert cpu_litert.litert_version() is not None
    monkeypatch.setattr(cpu_litert, "litert_interpreter_class", lambda: None)
    assert cpu_litert.litert_version() is None
