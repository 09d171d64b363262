"""gles-fuzz-graphs on quantized graphs (tools/fuzz_quant_bounds.py): the bound on what another
rounding of near-ties grows to covers such roundings emulated through the float view, takes the
findings of seed 106 at fp16_fp32acc (one step of a requantization grown to two by a TANH or a
SOFTMAX after it), and still reports a quantized output off by more."""
import numpy as np
import pytest

from gles_delegate import Interpreter, quant
from gles_delegate.tools import fuzz_graphs as fg
from gles_delegate.tools import fuzz_quant_bounds as qb

pytest.importorskip("ai_edge_litert.interpreter")

ALL_FAMILIES = ("float", "int32", "quant", "state", "signal", "resize", "edge")  # as seed 106's run drew them
GROWN = (291, 400, 447)  # seed 106, fp16_fp32acc: int8 / uint8 outputs 2 steps off, the bound was 1


def quiet(*args, **kwargs):
    pass


def case_of(seed, case, families=("quant",)):
    """(model bytes, the fuzzer's invokes) of one generated case."""
    spec = fg.generate(seed, case, families=families)
    data, _ = spec.build()
    details = fg._input_details(data)
    assert details is not None, spec.text()
    return spec, data, fg.case_inputs(spec, seed, case, details)


def nudged(monkeypatch, rng):
    """Make run_on_reference round as another kernel might: every fake-quant step's and boundary
    QUANTIZE's input moved by up to TIE_STEPS steps of its grid, which flips the rounding of the
    values that near a boundary (a tie rounded the other way)."""
    run_node, to_integers = quant.ops.run_node, quant.quantize_to_integers

    def moved(x, tensor):
        step = qb._step(tensor, np.ndim(x))
        return (np.asarray(x, np.float64) + rng.uniform(-1, 1, np.shape(x)) * 0.999 * qb.TIE_STEPS * step
                ).astype(np.float32)

    def node_runner(node, args, **kwargs):
        if node.op == quant.FAKE_QUANT and quant.REQUANTIZE_FROM not in node.options:
            args = [moved(args[0], node.outputs[0])] + list(args[1:])
        return run_node(node, args, **kwargs)
    monkeypatch.setattr(quant.ops, "run_node", node_runner)
    monkeypatch.setattr(quant, "quantize_to_integers", lambda x, tensor, *a: to_integers(moved(x, tensor), tensor, *a))


@pytest.mark.parametrize("seed", (1, 2, 3))
def test_the_bound_covers_other_roundings_of_near_ties(seed, monkeypatch):
    """Every tensor of 6 random quantized graphs (their float views): |run with every rounding's
    input nudged within TIE_STEPS - run as is| within the propagated bound, element by element
    (plus float32 noise: 16 ulps of the tensor's largest value)."""
    checked = flipped = 0
    for case in range(6):
        _, data, steps = case_of(seed, case)
        interpreter = Interpreter(model_content=data, cpu_backend="reference")
        interpreter.allocate_tensors()
        graph = interpreter._main.graph
        view = quant.float_view(graph.nodes, graph.inputs, graph.outputs, next_index=len(graph.tensors))
        inputs = {t.index: np.asarray(x) for t, x in zip(view.inputs, steps[0])}
        base = {**inputs, **quant.run_on_reference(view, inputs, every_tensor=True)}
        bounds = qb.view_bounds(view, base)
        with monkeypatch.context() as patch:
            nudged(patch, np.random.default_rng([seed, case]))
            other = quant.run_on_reference(view, inputs, every_tensor=True)
        for index, value in other.items():
            moved = np.abs(value.astype(np.float64) - base[index].astype(np.float64))
            noise = 16 * float(np.finfo(np.float32).eps) * float(np.abs(base[index]).max(initial=0))
            bound = bounds[index]
            known = np.isfinite(bound)
            assert np.all(moved[known] <= bound[known] * (1 + 1e-6) + noise), (seed, case, index)
            checked += int(known.sum())
            flipped += int((moved > noise).sum())
    assert checked > 500 and flipped > 0  # some roundings did flip, and their growth stayed bounded


@pytest.mark.parametrize("case", GROWN)
def test_a_step_grown_by_the_op_after_it_is_no_finding(case, tmp_path):
    """Seed 106's three: a requantization's step, grown by a TANH / SOFTMAX of a finer grid, is
    within the bound now, which is wider than the one step it was."""
    summary = fg.fuzz(106, paths="ac", only_case=case, minimize_findings=False, out_dir=tmp_path, log=quiet,
                      families=ALL_FAMILIES, precision="fp16_fp32acc")
    assert summary["compared"] == 1 and summary["findings"] == [], summary["findings"]
    _, data, steps = case_of(106, case, ALL_FAMILIES)
    assert max(qb.output_steps(data, steps, "fp16_fp32acc")) >= 2


def test_a_quantized_output_past_its_bound_is_a_finding(monkeypatch, tmp_path):
    """The GPU path's first int8 / uint8 output moved by its bound plus one step: a finding whose
    tolerance is that bound."""
    case = GROWN[-1]
    spec, data, steps = case_of(106, case, ALL_FAMILIES)
    bounds = qb.output_steps(data, steps, "fp16_fp32acc")
    original = fg.run_path

    def run_path(which, *args, **kwargs):
        outputs = original(which, *args, **kwargs)
        if which != "c":
            return outputs
        k = next(k for k, o in enumerate(outputs) if o.dtype in (np.int8, np.uint8))
        wrong = outputs[k].astype(np.int64)
        info = np.iinfo(outputs[k].dtype)
        middle = wrong.size // 2
        shift = int(bounds[k]) + 1
        wrong.flat[middle] += shift if wrong.flat[middle] + shift <= info.max else -shift
        return outputs[:k] + [wrong.astype(outputs[k].dtype)] + outputs[k + 1:]
    monkeypatch.setattr(fg, "run_path", run_path)
    summary = fg.fuzz(106, paths="ac", only_case=case, minimize_findings=False, out_dir=tmp_path, log=quiet,
                      families=ALL_FAMILIES, precision="fp16_fp32acc")
    finding, = summary["findings"]
    assert finding["kind"] == "tolerance" and finding["tolerance"] >= 2 and finding["max_abs"] > finding["tolerance"]
