"""Precision 'auto' (calibrate.py, gpu/storage.py): on small models built to overflow or to lose
precision in half storage, it promotes what it must (and only that) and its outputs match FP32."""
import numpy as np
import pytest

from gles_delegate import GpuDelegate, Interpreter
from gles_delegate import calibrate, callee_subgraphs
from gles_delegate.calibrate import error
from gles_delegate.gpu import storage
from gles_delegate.gpu.kernels.base import ConstRef, Dispatch
from gles_delegate.gpu.storage import HALF_MAX
from gles_delegate.graph import Graph, Tensor
from gles_delegate.interpreter import trace_subgraph
from gles_delegate.tflite import ModelBuilder, read_model
from tests.control_flow_models import invoke_resized, keras_rnn_loop, rnn_case
from tests.gpu.test_compiler import compiled
from tests.gpu.transforms.rulelib import SAME, Chain, random
from tests.oplib import run_ours

SHAPE = (1, 6, 5, 7)  # 7 channels: two PHWC4 slices, the second padded


def chain_model(steps):
    """x -> OP(t, const c) for each (OP, c) of steps -> y; returns (model bytes, the names of
    the intermediate tensors)."""
    b = ModelBuilder()
    t = b.input("x", SHAPE)
    names = []
    for k, (op, value) in enumerate(steps):
        out = b.tensor(f"t{k}", SHAPE)
        b.op(op, [t, b.const(f"c{k}", np.full(SHAPE[-1], value, np.float32))], [out])
        names.append(f"t{k}")
        t = out
    b.output(t)
    return b.build(), names


def run(model, precision, x, **options):
    """(output, delegate summary, {tensor name: index}); x: the input, or a tuple of one per input."""
    outputs, summary, names = run_each(model, precision, [x], **options)
    return outputs[0], summary, names


def run_each(model, precision, xs, **options):
    """run() of each input of `xs` on one interpreter: ([output per input], summary, names)."""
    delegate = GpuDelegate(precision=precision, rewrite_rules=False, **options)
    interpreter = Interpreter(model_content=model, experimental_delegates=[delegate])
    interpreter.allocate_tensors()
    outputs = []
    for x in xs:
        for detail, value in zip(interpreter.get_input_details(), x if isinstance(x, tuple) else (x,)):
            interpreter.set_tensor(detail["index"], value)
        interpreter.invoke()
        outputs.append(interpreter.get_tensor(interpreter.get_output_details()[0]["index"]).copy())
    names = {d["name"]: d["index"] for d in interpreter.get_tensor_details()}
    summary = delegate.summary()
    del interpreter
    delegate.close()
    return outputs, summary, names


def inputs(seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, SHAPE).astype(np.float32)


def test_overflow_is_promoted_at_once():
    # x * 1e5 exceeds a half (and so does the weight 1e5); * 1e-3 brings it back to <= 100.
    model, names = chain_model([("MUL", 1e5), ("MUL", 1e-3)])
    x = inputs()
    reference, _, _ = run(model, "fp32", x)
    half, _, _ = run(model, "fp16_fp32acc", x)
    assert (~np.isfinite(half) | (np.abs(half) > HALF_MAX)).any()  # the model overflows half storage
    out, summary, index = run(model, "auto", x)
    assert error(out, reference) <= 1e-2
    promoted = summary["promoted_tensors"]
    assert promoted[index["t0"]].startswith("overflow")
    assert index["t1"] not in promoted  # the output fits a half
    assert any("weight of magnitude" in why for why in summary["promoted_nodes"].values())
    assert summary["calibration"][0]["output_error"] <= 1e-2 and summary["float_bytes"] > 0


def test_cancellation_promotes_the_tensor_that_loses_precision():
    # (x + 1000) - 1000: a half holds x + 1000 to 0.5, so x keeps one bit; FP32 keeps 2^-14.
    model, names = chain_model([("ADD", 1000.0), ("SUB", 1000.0), ("MUL", 2.0)])
    x = inputs(1)
    reference, _, _ = run(model, "fp32", x)
    half, _, _ = run(model, "fp16_fp32acc", x)
    assert error(half, reference) > 1e-2
    out, summary, index = run(model, "auto", x, calibration_inputs=[[x], [inputs(4)]])
    assert error(out, reference) <= 1e-2
    # The smallest set: only the sum, read by the SUB whose error grows; not the SUB's weight
    # (1000 is a half: float would change nothing).
    assert set(summary["promoted_tensors"]) == {index["t0"]}
    assert "SUB" in summary["promoted_tensors"][index["t0"]]
    assert summary["promoted_nodes"] == {}
    assert summary["calibration"][0]["held_out"] == 1
    assert summary["calibration"][0]["held_out_error"] <= summary["calibration"][0]["target"]


def test_one_user_sample_holds_nothing_out_and_demotes_nothing():
    model, _ = chain_model([("ADD", 1000.1), ("SUB", 1000.1), ("MUL", 2.0)])  # 1000.1: no half
    x = inputs(1)
    _, summary, _ = run(model, "auto", x, calibration_inputs=[x])
    calibration = summary["calibration"][0]
    assert calibration["held_out"] == 0 and calibration["held_out_error"] is None
    assert calibration["demoted"] == 0 and summary["promoted_nodes"]  # the SUB's weights stay float


def test_a_held_out_sample_over_the_bound_extends_the_choice_to_every_sample():
    # On small integers the sum x + 1000 is exact in half: a choice made on them alone promotes nothing.
    model, _ = chain_model([("ADD", 1000.0), ("SUB", 1000.0), ("MUL", 2.0)])
    x = inputs(5)
    reference, _, _ = run(model, "fp32", x)
    integers = np.random.default_rng(3).integers(-2, 3, SHAPE).astype(np.float32)
    out, summary, index = run(model, "auto", x, calibration_inputs=[[integers], [inputs(4)]])
    calibration = summary["calibration"][0]
    assert calibration["disproved_by_held_out"] > calibration["target"]
    assert calibration["held_out"] == 0 and calibration["demoted"] == 0  # nothing left to check a demotion
    assert index["t0"] in summary["promoted_tensors"]
    assert error(out, reference) <= 1e-2


def two_input_cancellation_model():
    """y = ((x + 1000) - (z + 1000)) * 2: the SUB's error grows from its inputs, so promotion
    stores both sums as float. With z = 0 (z + 1000 exactly 1000, a half) only x's sum needs it."""
    b = ModelBuilder()
    x, z = b.input("x", SHAPE), b.input("z", SHAPE)
    t = {name: b.tensor(name, SHAPE) for name in ("t0", "t1", "t2", "y")}
    thousand = b.const("c0", np.full(SHAPE[-1], 1000.0, np.float32))
    b.op("ADD", [x, thousand], [t["t0"]])
    b.op("ADD", [z, thousand], [t["t1"]])
    b.op("SUB", [t["t0"], t["t1"]], [t["t2"]])
    b.op("MUL", [t["t2"], b.const("c1", np.full(SHAPE[-1], 2.0, np.float32))], [t["y"]])
    b.output(t["y"])
    return b.build()


def test_a_demotion_the_held_out_sample_disproves_is_undone():
    model = two_input_cancellation_model()
    x, zero, z = inputs(0), np.zeros(SHAPE, np.float32), inputs(5)
    # Chosen on z = 0, demoting z's sum looks free; a held-out z = 0 agrees, a random z does not.
    _, agreed, index = run(model, "auto", (x, zero), calibration_inputs=[[x, zero], [inputs(6), zero]])
    assert set(agreed["promoted_tensors"]) == {index["t0"]} and agreed["calibration"][0]["demoted"] >= 1
    out, disproved, index = run(model, "auto", (x, z), calibration_inputs=[[x, zero], [inputs(6), z]])
    assert {index["t0"], index["t1"]} <= set(disproved["promoted_tensors"])
    assert disproved["calibration"][0]["demoted"] == 0
    assert error(out, two_input_reference(x, z)) <= 1e-2


def two_input_reference(x, z):
    return (((x.astype(np.float64) + 1000) - (z.astype(np.float64) + 1000)) * 2).astype(np.float32)
    assert max(abs(float(np.max(np.abs(x))) + 1000), 0) < HALF_MAX


def two_sided_cancellation_model():
    """x -> t0 = x + 1000; t2 = x * 0 + 1000 (exactly 1000: a half holds it); y = (t0 - t2) * 2.
    The SUB's error grows from its inputs, so promotion stores both its inputs as float; only t0
    needs it."""
    b = ModelBuilder()
    x = b.input("x", SHAPE)
    t = {name: b.tensor(name, SHAPE) for name in ("t0", "t1", "t2", "t3", "y")}

    def const(name, value):
        return b.const(name, np.full(SHAPE[-1], value, np.float32))
    b.op("ADD", [x, const("c0", 1000.0)], [t["t0"]])
    b.op("MUL", [x, const("c1", 0.0)], [t["t1"]])
    b.op("ADD", [t["t1"], const("c2", 1000.0)], [t["t2"]])
    b.op("SUB", [t["t0"], t["t2"]], [t["t3"]])
    b.op("MUL", [t["t3"], const("c3", 2.0)], [t["y"]])
    b.output(t["y"])
    return b.build()


def test_demotion_keeps_the_needed_promotion_and_drops_the_unneeded_one(monkeypatch):
    # Calibration's own seeded samples: the first chooses, the second is held out.
    model = two_sided_cancellation_model()
    monkeypatch.setattr(calibrate, "MAX_DEMOTION_RUNS", 0)
    _, promoted, index = run(model, "auto", inputs())
    assert {index["t0"], index["t2"]} <= set(promoted["promoted_tensors"])
    monkeypatch.setattr(calibrate, "MAX_DEMOTION_RUNS", 8)  # the default
    x = inputs(3)  # not the calibration's inputs
    reference, _, _ = run(model, "fp32", x)
    out, summary, index = run(model, "auto", x)
    assert set(summary["promoted_tensors"]) == {index["t0"]}
    assert summary["calibration"][0]["demoted"] >= 1
    # The runs: choosing, the held-out check, demoting, the held-out check of the demotion.
    assert summary["calibration"][0]["rounds"] <= calibrate.MAX_ROUNDS + 1 + calibrate.MAX_DEMOTION_RUNS + 1
    assert error(out, reference) <= 1e-2


# x + 32 holds x to 2^-6 in half storage; each subtraction cancels 2-3x of it (none 4x: no
# culprit, calibrate.GROWTH), so the error spreads over the 6 tensors that bring it back to
# [-1, 1], the first ones carrying most of it (half an ulp at 32, 16, 8, ...).
CANCELLING = [("ADD", 32.0), ("SUB", 16.0), ("SUB", 8.0), ("SUB", 4.0), ("SUB", 2.0), ("SUB", 2.0)]
EXACT = [("MUL", 2.0), ("MUL", 0.5)] * 20  # 40 tensors a half holds exactly (once x is a half)


def test_an_error_spread_along_a_chain_promotes_the_few_tensors_that_carry_it():
    # Everything upstream of the output was promoted (87 tensors), and the demotion pass's 8
    # runs, halves of it in graph order, left 33 (every quarter held a tensor of the 6).
    model, names = chain_model(EXACT + CANCELLING + EXACT)
    unseen = [inputs(seed) for seed in (11, 12, 13, 14)]  # not calibration's samples
    references, _, _ = run_each(model, "fp32", unseen)
    half, _, _ = run_each(model, "fp16_fp32acc", unseen)
    assert min(error(h, r) for h, r in zip(half, references)) > 1e-2
    outputs, summary, index = run_each(model, "auto", unseen)
    promoted = summary["promoted_tensors"]
    assert index[names[len(EXACT)]] in promoted  # x + 32: the largest rounding
    assert len(promoted) <= len(names) // 8
    assert max(error(o, r) for o, r in zip(outputs, references)) <= 1e-2


def count_calibrations(monkeypatch):
    """A list that gets an item per calibration (its FP32 reference run) from now on."""
    calls, reference_run = [], calibrate._reference_run
    monkeypatch.setattr(calibrate, "_reference_run", lambda *args: calls.append(1) or reference_run(*args))
    return calls


def test_a_warm_start_from_serialization_dir_does_not_calibrate(tmp_path, monkeypatch):
    calls = count_calibrations(monkeypatch)
    model, _ = chain_model([("ADD", 1000.0), ("SUB", 1000.0), ("MUL", 2.0)])
    cold, cold_summary, _ = run(model, "auto", inputs(), serialization_dir=str(tmp_path))
    warm, warm_summary, _ = run(model, "auto", inputs(), serialization_dir=str(tmp_path))
    assert len(calls) == 1 and warm_summary["cache_hit"]
    np.testing.assert_array_equal(cold, warm)
    assert warm_summary["promoted_tensors"] == cold_summary["promoted_tensors"] != {}


def test_random_calibration_generalizes_and_a_tighter_bound_promotes_more():
    model, _ = chain_model([("ADD", 30.0), ("SUB", 30.0), ("ADD", 4.0), ("SUB", 4.0)])
    x = inputs(2)  # not the calibration's inputs (seeded U(-1, 1), seed 0)
    reference, _, _ = run(model, "fp32", x)
    loose, loose_summary, _ = run(model, "auto", x, auto_tolerance=0.1)
    tight, tight_summary, _ = run(model, "auto", x, auto_tolerance=1e-4)
    assert error(tight, reference) <= 1e-4
    assert len(tight_summary["promoted_tensors"]) > len(loose_summary["promoted_tensors"])


def conv_chain_model(weights_in_half):
    """Three 3x3 convolutions, 8 channels; weights_in_half: weights and biases a half holds
    exactly (as a float16 model's dequantized ones)."""
    c = Chain((1, 8, 8, 8))
    x = c.x
    for k in range(3):
        weights, bias = random((8, 3, 3, 8), k, 0.5), random(8, k + 10)
        if weights_in_half:
            weights, bias = weights.astype(np.float16).astype(np.float32), bias.astype(np.float16).astype(np.float32)
        x = c.op("CONV_2D", x, c.const(weights), c.const(bias), padding=SAME, stride_w=1, stride_h=1,
                 fused_activation_function=0)
    return c.build(x)


@pytest.mark.parametrize("weights_in_half", [True, False], ids=["float16-weights", "float32-weights"])
def test_weights_a_half_holds_exactly_are_never_promoted(weights_in_half):
    # A bound no half storage meets: calibration promotes every tensor, and the weights only
    # where a half would round them.
    model = conv_chain_model(weights_in_half)
    x = random((1, 8, 8, 8), 7)
    reference, _ = compiled(model, [x], precision="fp32")
    out, plan = compiled(model, [x], precision="auto", auto_tolerance=1e-6)
    assert error(out[0], reference[0]) <= 1e-6
    conv_modes = {mode for mode, label in zip(plan.step_storage, plan.labels) if "CONV_2D" in label}
    # (The last convolution stores the output straight to the I/O buffer: demotion leaves its
    # unread arena copy in half storage, so it runs mixed.)
    if weights_in_half:  # float tensors, the weights read from the half constants buffer
        assert plan.promoted_nodes == {} and len(plan.float_constants) <= 1
        assert "float_tensors" in conv_modes and "float" not in conv_modes
    else:
        assert plan.promoted_nodes and "float" in conv_modes and "float_tensors" not in conv_modes


@pytest.mark.parametrize("float_reads, float_weights, mode", [
    ((False, False), (False,), "plain"), ((True, True), (True,), "float"), ((True, True), (), "float"),
    ((True, True), (False,), "float_tensors"), ((True, False), (True,), "mixed"),
    ((True, True), (True, False), "mixed"), ((False, False), (True,), "mixed")])
def test_storage_mode_of_a_dispatch(float_reads, float_weights, mode):
    x, y = Tensor(0, "x", SHAPE, np.dtype(np.float32)), Tensor(1, "y", SHAPE, np.dtype(np.float32))
    weights = {f"w{k}": ConstRef(k) for k in range(len(float_weights))}
    dispatch = Dispatch("elementwise", (1, 1, 1), params=weights, reads=(x,), writes=(y,))
    layout = storage.Layout({}, [], None, None, None, float_tensors={id(t) for t, f in zip((x, y), float_reads) if f},
                            float_consts={k for k, f in enumerate(float_weights) if f})
    assert layout.mode(dispatch) == mode


def test_exact_in_half():
    assert storage.exact_in_half(np.array([1.0, 0.5, -1000.0, 6.103515625e-05, 0.0], np.float32))
    assert not storage.exact_in_half(np.array([1000.1], np.float32))
    assert not storage.exact_in_half(np.array([1e5], np.float32))  # beyond a half: inf
    assert not storage.exact_in_half(np.array([np.nan], np.float32))


def test_a_warm_start_keeps_float_tensors_with_half_weights(tmp_path):
    model, x = conv_chain_model(True), random((1, 8, 8, 8), 7)
    starts = []
    for _ in range(2):
        with GpuDelegate(precision="auto", auto_tolerance=1e-6, serialization_dir=str(tmp_path)) as delegate:
            outputs = run_ours(model, [x], experimental_delegates=[delegate])
            starts.append((outputs[0], delegate.partitions[0].plan.step_storage, delegate.summary()["cache_hit"]))
    (cold, cold_modes, cold_hit), (warm, warm_modes, warm_hit) = starts
    assert not cold_hit and warm_hit
    assert "float_tensors" in warm_modes and warm_modes == cold_modes
    np.testing.assert_array_equal(warm, cold)


def test_nothing_to_promote_is_plain_half_storage():
    model, _ = chain_model([("ADD", 1.0), ("MUL", 0.5)])
    x = inputs()
    out, summary, _ = run(model, "auto", x)
    half, half_summary, _ = run(model, "fp16_fp32acc", x)
    np.testing.assert_array_equal(out, half)
    assert summary["promoted_tensors"] == {} and summary["float_bytes"] == 0
    assert summary["programs"] == half_summary["programs"]


def test_the_serialization_cache_keeps_the_promotions(tmp_path):
    model, _ = chain_model([("MUL", 1e5), ("MUL", 1e-3)])
    x = inputs()
    cold, cold_summary, _ = run(model, "auto", x, serialization_dir=str(tmp_path))
    warm, warm_summary, _ = run(model, "auto", x, serialization_dir=str(tmp_path))
    assert not cold_summary["cache_hit"] and warm_summary["cache_hit"]
    np.testing.assert_array_equal(cold, warm)
    for key in ("promoted_tensors", "promoted_nodes", "calibration", "float_bytes"):
        assert warm_summary[key] == cold_summary[key]


def test_calibration_inputs_are_checked():
    model, _ = chain_model([("ADD", 1.0)])
    with pytest.raises(ValueError, match="shape"):
        run(model, "auto", inputs(), calibration_inputs=[np.zeros((1, 2), np.float32)])
    with pytest.raises(ValueError, match="auto_tolerance"):
        GpuDelegate(precision="auto", auto_tolerance=0)
    # Nothing to calibrate on (an empty list calibrated on 0 samples and reported no error), and
    # values that are no samples: a ValueError naming the option, at construction.
    for value in ([], 5, "abc"):
        with pytest.raises(ValueError, match="calibration_inputs must be None or a non-empty list"):
            GpuDelegate(precision="auto", calibration_inputs=value)


@pytest.mark.parametrize("bad, why", [
    (np.zeros(SHAPE, np.float32), r"every input holds one value throughout \('x' all 0.0\)"),
    (np.full(SHAPE, 0.5, np.float32), r"every input holds one value throughout \('x' all 0.5\)"),
    (np.where(inputs(7) > 0.9, np.nan, inputs(7)).astype(np.float32), r"input 'x' holds \d+ NaN or infinite"),
    (np.full(SHAPE, np.inf, np.float32), r"input 'x' holds 210 NaN or infinite")],
    ids=["zeros", "constant", "some-nan", "inf"])
def test_samples_that_cannot_measure_an_error_are_refused(bad, why):
    # They reported output_error 0.0 (NaN against NaN counts as equal) or 1e-10 (zeros), and the
    # choice made on them left other inputs beyond the bound (selfie_segmentation: 2.3e-2).
    model, _ = chain_model([("ADD", 1000.0), ("SUB", 1000.0), ("MUL", 2.0)])
    with pytest.raises(ValueError, match=r"calibration_inputs sample 1 cannot measure the error of half storage: "
                                         + why):
        run(model, "auto", inputs(), calibration_inputs=[[inputs(1)], [bad]])


def test_a_model_input_of_one_value_beside_a_varied_one_is_a_sample():
    # A state input of zeros (the first frame of a streaming model) is what the model meets in use.
    model = two_input_cancellation_model()
    x, zero = inputs(0), np.zeros(SHAPE, np.float32)
    _, summary, _ = run(model, "auto", (x, zero), calibration_inputs=[[x, zero]])
    assert summary["calibration"][0]["output_error"] <= summary["calibration"][0]["target"]


def test_drawn_samples_are_never_degenerate():
    # Two booleans drawn 0/1 hold one value in half the draws; a drawn sample always holds two.
    b = ModelBuilder()
    flags = b.input("flags", (2,), np.bool_)
    out = b.tensor("out", (2,), np.bool_)
    b.op("LOGICAL_NOT", [flags], [out])
    b.output(out)
    graph = Graph.from_model(read_model(b.build()))
    for seed in range(16):
        for sample in calibrate.sample_inputs(graph, seed=seed, count=2):
            value = sample[graph.inputs[0].index]
            assert value[0] != value[1], (seed, value)


def sqrt_model():
    """y = SQRT(x - 2): NaN for every x below 2 (every drawn or given x in [-1, 1])."""
    b = ModelBuilder()
    x = b.input("x", SHAPE)
    shifted, y = b.tensor("shifted", SHAPE), b.tensor("y", SHAPE)
    b.op("SUB", [x, b.const("two", np.full(SHAPE[-1], 2.0, np.float32))], [shifted])
    b.op("SQRT", [shifted], [y])
    b.output(y)
    return b.build()


def test_outputs_without_a_finite_value_measure_nothing(caplog):
    # Every FP32 output NaN: calibration reported output_error 0.0, as if within the bound.
    _, summary, _ = run(sqrt_model(), "auto", inputs())
    calibration = summary["calibration"][0]
    assert calibration["output_error"] is None and calibration["samples"] == 0
    assert calibration["unmeasured"] == calibrate.DRAWN_SAMPLES and summary["promoted_tensors"] == {}
    assert "calibration sample 0 cannot measure the error" in caplog.text
    assert "no calibration sample measures the error of the GPU partition" in caplog.text


def test_a_subgraph_is_traced_at_runs_spread_over_the_loop():
    case = rnn_case(4, 2, n_in=3, n_hidden=8)
    model = read_model(keras_rnn_loop(*case[:4], 4, 2))
    runs = trace_subgraph(model, case[4], 2, limit=2)  # subgraph 2: the body, run 4 times
    body = Graph.from_model(model, 2)
    assert [number for number, _ in runs] == [0, 2]
    assert [int(tensors[body.inputs[0].index]) for _, tensors in runs] == [0, 2]  # the loop counter


@pytest.mark.parametrize("given", [False, True], ids=["drawn", "given"])
def test_a_loop_body_calibrates_on_what_the_model_gives_it(given, monkeypatch):
    monkeypatch.setattr(callee_subgraphs, "CALLEE_WORK_MAX", -1)  # the loop ours, its body on the GPU
    # Drawn values for the loop counter indexed the sequence out of range ('gather index out of
    # range'), and calibration_inputs were checked against the body's 4 inputs, not the model's 2.
    case = rnn_case(4, 2, n_in=3, n_hidden=8)
    model = keras_rnn_loop(*case[:4], 4, 2)
    options = {"calibration_inputs": [case[4], rnn_case(4, 2, 3, 8, seed=1)[4]]} if given else {}
    outputs = {}
    for precision in ("fp32", "auto"):
        with GpuDelegate(precision=precision, max_delegated_partitions=0, **options) as delegate:
            outputs[precision] = invoke_resized(Interpreter(model_content=model, experimental_delegates=[delegate]),
                                                case[4])
            body = [p.plan.calibration for p in delegate.partitions if "GATHER" in {n.op for n in p.nodes}]
    assert len(body) == 1 and body[0]["output_error"] <= body[0]["target"]
    # The body's 4 runs of each model sample: with the user's two samples those of the second are
    # held out, with drawn ones those of all but one (calibrate.DRAWN_SAMPLES).
    count = 2 if given else calibrate.DRAWN_SAMPLES
    assert body[0]["samples"] == 4 * count and body[0]["held_out"] == 4 * (count - 1)
    for ours, reference in zip(outputs["auto"], outputs["fp32"]):
        assert error(ours, reference) <= 1e-2
