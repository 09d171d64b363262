"""Precision 'auto': which tensors of a half-storage plan must be float for its outputs to stay
within a bound of an FP32 run.

For each GPU partition, in graph order, on calibration inputs (GpuDelegateOptions.
calibration_inputs, else DRAWN_SAMPLES seeded random ones in the ranges the model states: see
input_ranges), the choice made on the first (of the user's: all but the last) and checked on
the others (held out):
  1. run the partition's plan compiled in 'fp32' on every sample, reading back every tensor (the
     reference); promote every tensor whose reference exceeds the largest half (65504): overflow;
  2. run the half-storage plan on every sample: where its error varies between them by more
     than MARGIN (the variation the margin below is for), which tensors matter depends on the
     input, and no measured choice (step 4's search, step 6) is made (_steady);
  3. run the plan in half storage with the promotions so far (gpu/storage.py) on the samples
     chosen on, reading back every tensor; stop when every partition output is within
     auto_tolerance / MARGIN x max |reference| (a margin for inputs calibration did not see);
  4. else promote, in this order: tensors that became non-finite or exceed a half where the
     reference does not (overflow); else the inputs and weights (those a half does not hold
     exactly) of every node upstream of a bad output whose error grows GROWTH times or more from
     its inputs to its outputs (the error of a tensor is max |x - reference| / max |reference|),
     and go back to 3 (MAX_ROUNDS runs at most); else the error is spread along the graph: the
     spread search (_Spread) measures groups of what is upstream of the bad outputs alone in half
     storage and promotes the heaviest, checked by a run; without it (step 2, or nothing to find
     there: _searchable), everything upstream at once, and back to 3.
  5. run the choice on the held-out samples: those over auto_tolerance itself (inputs the
     choice did not see: the bound the option promises) join the samples chosen on and steps
     3-4 go on over them, everything upstream promoted at once where the error is spread (a
     measured choice that failed an unseen input is not measured again); until every held-out
     sample is within, or none is left.
  6. As promotion overshoots (a culprit's every input and weight; the search's groups; or
     everything upstream), demote where held-out samples are left: try the promotions back in
     half storage, in graph order, by bisection: all of them, then each half of a group that
     failed, then each quarter ... (breadth first, at most MAX_DEMOTION_RUNS runs); keep a
     demotion when every output stays within the bound. Overflow promotions are never tried.
     The demoted plan is then run on the held-out samples and kept only when it is within the
     bound there too (or no worse than the plan before demotion): a demotion fitted to one
     sample can be far off on the next.
The promotions are part of the plan (the serialization cache keeps them) and
Plan.promoted_tensors / promoted_nodes say why each was made.

Inputs of a partition that CPU nodes compute come from the numpy reference kernels run on the
calibration inputs (or, where one cannot run, seeded U(-1, 1)). A partition inside a subgraph
that control flow runs (a loop body) calibrates on the values that subgraph receives when the
model runs on the CPU on the calibration inputs (graph_samples). Samples that cannot measure an
error are refused when given (NaN, infinities, one value throughout: sample_inputs), never drawn,
and left out when their FP32 outputs hold no finite value (_measuring).
"""
import logging
import math

import numpy as np

from . import ops
from .errors import GpuError, ModelError
from .gpu import memory
from .gpu.compiler import build_dispatches, compile_plan
from .gpu.complex_view import as_floats
from .gpu.kernels.base import KernelEnv
from .gpu.runtime import GpuPartition
from .gpu.serialization.calibration import CalibrationCache
from .gpu.storage import HALF_MAX, Promotion, exact_in_half
from .graph import Graph
from .interpreter import trace_subgraph
from .subgraphs import Subgraphs
from .tflite import metadata

MAX_ROUNDS = 8      # calibration runs at most, after the FP32 one
# Runs of the demotion pass at most (the whole set, its halves, quarters, eighths: 8); 0 turns it
# off. Without the held-out check it overfit: on an H200 the demoted plan of
# selfie_segmentation_landscape (3.1e-4 of FP32 on its calibration inputs) was 2.3e-2 of FP32 on
# unseen ones, where the undemoted plan was exact (docs/performance.md).
MAX_DEMOTION_RUNS = 8
# Runs of the search for what to promote when the error is spread along the graph (_Spread) that
# measure groups of candidates, at most (6 splits); checking its choice takes one run, or a
# bisection over the groups where that is over the bound (3 more for 7 groups).
SEARCH_RUNS = 12
GROWTH = 4.0        # a node whose error grows this much from its inputs to its outputs is a culprit
# Calibration aims at auto_tolerance / MARGIN: on seeded random inputs the output error of one
# plan varies about 3x from input to input (mobilenet_v2 at fp16_fp32acc: 4.2e-3 on seed 0,
# 1.5e-2 on seed 1), and the bound is meant for inputs calibration did not see.
MARGIN = 4.0
HALF_EPS = 2.0 ** -11  # a half's relative rounding error: the floor of a tensor's error
MIN_SCALE = 1e-6    # below this max |reference| a tensor counts as all-zero
SEED = 0
# Samples drawn when the user gives none: the choice is made on the first and checked on the
# others (selfie_segmentation at fp16_fp32acc ranges from 0 to 6.6e-2 of max |FP32| over 8
# seeded samples: one held-out sample says little; the first drawn measures 2.1e-4).
DRAWN_SAMPLES = 4
# Runs of a subgraph (a loop body's iterations) each model sample contributes at most, spread over
# its runs: every run costs each calibration round a GPU run of the partitions inside it.
SUBGRAPH_RUNS = 4
log = logging.getLogger("gles_delegate")


def sample_inputs(graph, given=None, seed=SEED, count=1, resizable=False):
    """[{tensor index: array}] the calibration samples: `given` (one sample, a sequence of arrays
    in the order of the graph's inputs, or a sequence of such samples), else `count` seeded
    random samples: floats uniform over input_ranges(graph), quantized integer inputs over their
    type's range, other integers over [0, 10], booleans 0/1; never degenerate (see degenerate).
    ValueError naming the sample and the input when a given array does not fit (its shape: the
    input's, or with `resizable` any its shape signature allows) or the sample is degenerate."""
    inputs = graph.inputs
    if given is None:
        rng = np.random.default_rng(seed)
        ranges = input_ranges(graph)
        return [_drawn(inputs, rng, ranges) for _ in range(count)]
    out = []
    for k, sample in enumerate(_as_samples(given)):
        if len(sample) != len(inputs):
            raise ValueError(f"calibration_inputs sample {k} has {len(sample)} arrays; the model has "
                             f"{len(inputs)} inputs")
        values = {}
        for t, value in zip(inputs, sample):
            value = np.asarray(value)
            if not _fits(t, value.shape, resizable):
                raise ValueError(f"calibration_inputs sample {k}: input {t.name!r} has shape {list(t.shape)}, "
                                 f"got {list(value.shape)}")
            values[t.index] = value.astype(t.dtype)
        why = degenerate(values, inputs)
        if why is not None:
            raise ValueError(f"calibration_inputs sample {k} cannot measure the error of half storage: {why}; "
                             "give inputs the model meets in use")
        out.append(values)
    return out


def _as_samples(given):
    """calibration_inputs as a list of samples: one sample (a sequence of arrays) or a sequence
    of such samples."""
    samples = list(given)
    return [samples] if samples and not isinstance(samples[0], (list, tuple)) else samples


def _for_resized_inputs(graph, given):
    """Whether the calibration samples `given` (as sample_inputs takes them) fit the shape
    signatures of `graph`'s inputs but not their shapes now: samples for a dynamic input (-1)
    given while LiteRT's Interpreter has the delegate plan the declared placeholder shapes, before
    the user's resize_tensor_input."""
    pairs = [(t, np.shape(value)) for sample in _as_samples(given) if len(sample) == len(graph.inputs)
             for t, value in zip(graph.inputs, sample)]
    return bool(pairs) and all(_fits(t, shape, True) for t, shape in pairs) and \
        not all(_fits(t, shape, False) for t, shape in pairs)


def _fits(tensor, shape, resizable):
    """Whether an array of `shape` fits input `tensor`: its shape, or with `resizable` one its
    shape signature allows (-1: any size)."""
    if tuple(shape) == tuple(tensor.shape):
        return True
    signature = tensor.shape_signature
    return resizable and signature is not None and len(signature) == len(shape) and \
        all(d == -1 or d == s for d, s in zip(signature, shape))


def degenerate(sample, inputs):
    """Why the sample {tensor index: array} of the tensors `inputs` cannot measure the error of
    a half-storage plan, or None: a NaN or infinity in an input (the FP32 outputs are then
    NaN or infinite where it reaches, and error() counts NaN against NaN as equal: such a sample
    reported 0.0), or every input of two or more elements holding one value throughout (all
    zeros: selfie_segmentation calibrated on zeros measured 1.2e-10 and left other inputs
    2.3e-2 of max |FP32| off, beyond the 1e-2 bound)."""
    for t in inputs:
        value = sample[t.index]
        if value.dtype.kind in "fc":
            bad = int(np.count_nonzero(~np.isfinite(value)))
            if bad:
                return (f"input {t.name!r} holds {bad} NaN or infinite value(s), so the FP32 outputs are NaN or "
                        "infinite where they reach, which measures no error")
    varied = [t for t in inputs if np.size(sample[t.index]) > 1]
    if varied and all(_constant(sample[t.index]) for t in varied):
        held = ", ".join(f"{t.name!r} all {sample[t.index].flat[0].item()!r}" for t in varied)
        return (f"every input holds one value throughout ({held}), which exercises the model on one value only: "
                "its error there says nothing of other inputs")
    return None


def _constant(value):
    """Whether every element of `value` equals its first."""
    return bool(np.all(value == value.flat[0]))


def _drawn(inputs, rng, ranges):
    """{tensor index: array}: one random sample of `inputs` (see sample_inputs), made to hold two
    values where it happened to hold one (a drawn sample is never degenerate)."""
    sample = {t.index: _random(t, rng, ranges[t.index][:2]) for t in inputs}
    varied = [t for t in inputs if np.size(sample[t.index]) > 1]
    if varied and all(_constant(sample[t.index]) for t in varied):  # 2 booleans, say: 1 in 2
        value = sample[varied[0].index].reshape(-1)
        value[0] = value[1] == 0
    return sample


def input_ranges(graph):
    """{input tensor index: (low, high, where from)} of the graph's inputs: the range the model's
    metadata states (tflite/metadata.py), else the float range recorded in the input's
    quantization (min / max), else the range of the integer grid of a QUANTIZE that reads it,
    else (-1, 1)."""
    stated = []
    if graph.source_model is not None and graph.subgraph_index is not None:
        stated = metadata.input_ranges(graph.source_model, graph.subgraph_index)
    out = {}
    for k, t in enumerate(graph.inputs):
        found = stated[k] if k < len(stated) and stated[k] is not None else None
        if found is not None:
            out[t.index] = (*found, "metadata")
            continue
        found = _recorded_range(t.quantization)
        if found is not None:
            out[t.index] = (*found, "quantization min/max")
            continue
        for node in graph.readers_of(t):
            found = _grid_range(node.outputs[0]) if node.op == "QUANTIZE" else None
            if found is not None:
                out[t.index] = (*found, f"the grid of {node.label}")
                break
        else:
            out[t.index] = (-1.0, 1.0, "default")
    return out


def _recorded_range(q):
    """(low, high) of a Quantization's recorded min / max, or None."""
    if q is None or q.min is None or q.max is None or not np.size(q.min) or not np.size(q.max):
        return None
    low, high = float(np.min(q.min)), float(np.max(q.max))
    return (low, high) if np.isfinite(low) and np.isfinite(high) and low < high else None


def _grid_range(tensor):
    """(low, high): the real values an integer tensor's per-tensor quantization can represent, or None."""
    q, dtype = tensor.quantization, np.dtype(tensor.dtype)
    if q is None or q.scales.size != 1 or dtype.kind not in "iu":
        return None
    info, scale, zero = np.iinfo(dtype), float(q.scales[0]), float(q.zero_points[0]) if q.zero_points.size else 0.0
    low, high = scale * (info.min - zero), scale * (info.max - zero)
    return (low, high) if np.isfinite(low) and np.isfinite(high) and low < high else None


def _random(tensor, rng, float_range=(-1.0, 1.0)):
    """A random array of `tensor`'s shape and type (see sample_inputs); floats (complex numbers:
    both parts) within its dtype's finite range."""
    dtype, shape = np.dtype(tensor.dtype), tuple(tensor.shape)
    if dtype.kind in "fc":
        largest = float(np.finfo(dtype).max)
        low, high = (min(max(v, -largest), largest) for v in float_range)
    if dtype.kind == "f":
        return rng.uniform(low, high, shape).astype(dtype)
    if dtype.kind == "c":  # both parts over the range
        return (rng.uniform(low, high, shape) + 1j * rng.uniform(low, high, shape)).astype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    quantized = tensor.quantization is not None and tensor.quantization.scales.size > 0
    info = np.iinfo(dtype)
    low, high = (info.min, info.max) if quantized else (0, 10)
    return rng.integers(low, high + 1, shape).astype(dtype)


def calibrate(delegate, graph, specs, compiled, made, package):
    """The partitions of `made` (compiled in 'auto' with no promotion) replaced by calibrated
    ones; specs / compiled: what GpuDelegate._build found and compiled for each; package: the
    serialization Package (the calibration cache's key holds its version and sources). A choice
    the calibration cache holds (gpu/serialization/calibration.py) is built without calibrating."""
    cache = CalibrationCache(delegate.options, delegate.context, graph, specs, package, settings())
    stored = cache.load()
    if stored is not None:
        return [_stored(delegate, spec, c, half, promotion, calibration)
                for spec, c, half, (promotion, calibration) in zip(specs, compiled, made, stored)]
    chosen = _calibrate_graph(delegate, graph, specs, compiled, made)
    if all(promotion is not None for _, promotion in chosen):  # a calibration that failed is not kept
        cache.store([(promotion, partition.plan.calibration) for partition, promotion in chosen])
    return [partition for partition, _ in chosen]


def settings():
    """This module's settings, which decide what calibration chooses (the calibration cache's key)."""
    return {"MAX_ROUNDS": MAX_ROUNDS, "MAX_DEMOTION_RUNS": MAX_DEMOTION_RUNS, "SEARCH_RUNS": SEARCH_RUNS,
            "GROWTH": GROWTH, "MARGIN": MARGIN, "HALF_EPS": HALF_EPS,
            "MIN_SCALE": MIN_SCALE, "SEED": SEED, "DRAWN_SAMPLES": DRAWN_SAMPLES, "SUBGRAPH_RUNS": SUBGRAPH_RUNS}


def _stored(delegate, spec, compiled, half, promotion, calibration):
    """The served partition of a choice the calibration cache held (`half` released)."""
    partition = _served(delegate, _Runner(delegate, spec, compiled, []), promotion, [half])
    partition.plan.calibration = {**calibration, "cached": True}
    return partition


def _calibrate_graph(delegate, graph, specs, compiled, made):
    """[(calibrated GpuPartition, its Promotion, or None where calibration failed)] of each
    partition: the graph run on the calibration samples, partitions calibrated in graph order,
    the CPU nodes between them run on the reference kernels."""
    chosen_on, held_out, labels = graph_samples(graph, delegate.options.calibration_inputs)
    order = {id(n): k for k, spec in enumerate(specs) for n in spec.nodes}
    values = [dict(sample) for sample in chosen_on + held_out]
    done, out = set(), [(partition, None) for partition in made]
    for node in graph.nodes:
        k = order.get(id(node))
        if k is None:
            for sample in values:
                _run_cpu(node, sample)
        elif k not in done:
            done.add(k)
            boundary = [_boundary(specs[k].inputs, v) for v in values]
            out[k] = _calibrate_partition(delegate, specs[k], compiled[k], made[k], boundary, values,
                                          len(chosen_on), labels)
            if len(done) == len(specs):
                break
    return out


def graph_samples(graph, given):
    """(samples to choose on, held-out samples, a label per sample): {tensor index: array} of
    `graph`'s tensors. The model's samples (`given`: calibration_inputs, always the model's
    inputs; else drawn) are split by held_out_split. A subgraph that control flow runs (a loop's
    body or condition, a branch) gets what it really receives: the model run on the CPU on
    each model sample, its tensors at up to SUBGRAPH_RUNS of its runs there (interpreter.
    trace_subgraph; a loop counter takes the values it counts through, random ones indexed
    out of range); the runs of a held-out model sample are held out. A subgraph the model does
    not run (a signature's own) is calibrated on samples drawn for its own inputs."""
    model, index = graph.source_model, graph.subgraph_index
    if model is None or not index:
        if given is not None and _for_resized_inputs(graph, given):
            log.info("precision 'auto': calibration_inputs fit the inputs' shape signatures, not the shapes the "
                     "model is planned at now (LiteRT's declared placeholders): drawn samples calibrate this plan, "
                     "yours the one made once the inputs are resized to their shapes")
            given = None
        chosen, held = held_out_split(sample_inputs(graph, given, count=DRAWN_SAMPLES), given is None)
        return chosen, held, [f"sample {k}" for k in range(len(chosen) + len(held))]
    if not Subgraphs(model, None, []).reaches(0, index):
        chosen, held = held_out_split(sample_inputs(graph, None, count=DRAWN_SAMPLES), True)
        return chosen, held, [f"drawn sample {k} of subgraph {index}" for k in range(len(chosen) + len(held))]
    main = Graph.from_model(model, 0)
    chosen, held = held_out_split(sample_inputs(main, given, count=DRAWN_SAMPLES, resizable=True), given is None)
    traced = [_runs_of(graph, main, sample, k, given is not None)
              for k, sample in enumerate(chosen + held)]
    flat = [(run, label) for runs in traced for run, label in runs]
    count = sum(len(runs) for runs in traced[:len(chosen)])
    return [run for run, _ in flat[:count]], [run for run, _ in flat[count:]], [label for _, label in flat]


def _runs_of(graph, main, sample, k, given):
    """[({tensor index: array} of `graph`'s tensors, label)] at its runs when the model runs from
    its main graph `main` on model sample `k` (see graph_samples), those of the shapes `graph`
    is planned for. A model that fails on the sample: ValueError for a sample the user `given`,
    else a warning and no run."""
    index = graph.subgraph_index
    try:
        runs = trace_subgraph(graph.source_model, [sample[t.index] for t in main.inputs], index, SUBGRAPH_RUNS)
    except ModelError as exc:
        if given:
            raise ValueError(f"calibration_inputs sample {k}: the model fails on it: {exc}") from None
        log.warning("precision 'auto': the model fails on drawn calibration sample %d (%s): it calibrates "
                    "nothing in subgraph %d", k, exc, index)
        return []
    planned = [(t.index, tuple(t.shape)) for t in graph.inputs]
    return [(run, f"sample {k}, run {r} of subgraph {index}") for r, run in runs
            if all(np.shape(run[i]) == shape for i, shape in planned)]


def held_out_split(samples, drawn):
    """(samples the promotions are chosen on, held-out samples that check the choice): a
    `drawn` set (DRAWN_SAMPLES of them) is chosen on one and checks on the others; of those the
    user gave, the last is held out when there are two or more; a single sample the user gave is
    both, and with nothing held out the demotion pass does not run."""
    if len(samples) < 2:
        return samples, []
    chosen = 1 if drawn else len(samples) - 1
    return samples[:chosen], samples[chosen:]


def _run_cpu(node, values):
    """Run a CPU node on the reference kernels into `values` where its inputs are known; never a
    node that calls back into the interpreter (ops.RUNTIME_OPS: calibrating must not run an init
    subgraph or assign a resource variable)."""
    if node.op in ops.RUNTIME_OPS:
        return
    inputs = []
    for t in node.inputs:
        if t is None:
            inputs.append(None)
        elif t.is_const:
            inputs.append(t.data)
        elif t.index in values:
            inputs.append(values[t.index])
        else:
            return
    try:
        outputs = ops.run_node(node, [None if x is None else np.array(x, copy=True) for x in inputs])
    except Exception:  # an op the reference lacks (LiteRT runs it): its consumers get random inputs
        return
    for t, v in zip(node.outputs, outputs):
        if t is not None:
            values[t.index] = v


def _boundary(tensors, values):
    """{index: array} of a partition's inputs from `values`, seeded U(-1, 1) where unknown."""
    rng = np.random.default_rng(SEED)
    return {t.index: np.asarray(values[t.index]) if t.index in values else _random(t, rng) for t in tensors}


class _Runner:
    """Builds and runs one partition's plan under a precision and a Promotion."""

    def __init__(self, delegate, spec, compiled, samples):
        self.delegate, self.spec, self.samples = delegate, spec, samples
        _, self.view, self.rewritten, _ = compiled

    def build(self, precision, promotion=None, tuner=None, bake="none"):
        """A GpuPartition of the plan under `precision` and `promotion`. bake: compile_plan's;
        'none' for the trials (their sources then differ only in their params blocks and compile
        once, where baked ones would compile per trial: 94 programs against 52 for
        face_detection_short_range), None (the delegate's choice) for the plan that serves."""
        r = self.rewritten
        plan = compile_plan(r.nodes, r.inputs, r.outputs, precision, self.delegate.context.limits,
                            self.delegate.options.memory_strategy, tuner, promotion, bake)
        computed = {t.index for n in r.nodes for t in n.outputs}
        fused_away = {t.index for n in self.spec.nodes for t in n.outputs} - computed
        return GpuPartition(self.delegate.context, plan, self.spec.nodes, view=self.view, fused_away=fused_away)

    def run(self, partition, capture=True):
        """Per sample: ({output index: array}, {tensor index: array} of every tensor it wrote,
        or {} without `capture`)."""
        results = []
        # The model's tensors: a complex64 one is of the shape of its slot (its pairs) but the last axis.
        kinds = {t.index: (t.shape, t.dtype) for t in self.spec.outputs}
        for sample in self.samples:
            storage = dict(sample)
            for slot in partition.plan.outputs:
                storage[slot.tensor_index] = np.zeros(*kinds.get(slot.tensor_index, (slot.shape, np.float32)))
            unread = np.empty(0)  # replaced by what the capture reads back
            captured = {index: unread for written in partition.plan.writes for index, _, _ in written} \
                if capture else None
            partition.run(storage, captured)
            outputs = {slot.tensor_index: storage[slot.tensor_index] for slot in partition.plan.outputs}
            results.append((outputs, {k: v for k, v in (captured or {}).items() if v is not unread}))
        return results


def error(value, reference):
    """max |value - reference| / max |reference| (MIN_SCALE at least); inf where the value is
    NaN or infinite and the reference is not."""
    # complex64 outputs as their pairs (gpu/complex_view.py)
    a, b = (np.asarray(as_floats(np.ascontiguousarray(x)), np.float64) for x in (value, reference))
    if a.shape != b.shape or a.size == 0:
        return 0.0 if a.shape == b.shape else math.inf
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    diff = np.where(same, 0.0, np.abs(a - b))
    diff = np.where(np.isnan(diff), np.inf, diff)
    finite = np.abs(b[np.isfinite(b)])
    return float(diff.max() / max(float(finite.max(initial=0.0)), MIN_SCALE))


def _calibrate_partition(delegate, spec, compiled, half, samples, values, chosen, labels):
    """(The calibrated GpuPartition of one partition, its Promotion; None where calibration
    failed): promotions chosen on samples[:chosen] and checked on samples[chosen:] (held out;
    module docstring). Its outputs on the fp32 reference run go into `values` for the partitions
    after it. A sample whose FP32 outputs cannot measure an error is left out (_measuring); with
    none left, the partition keeps half storage, its output_error None (unmeasured, never within
    the bound)."""
    bound = delegate.options.auto_tolerance / MARGIN
    try:
        every_reference = _reference_run(delegate, spec, compiled, samples, values)
        kept = _measuring(every_reference, labels, spec)
        calibration = {"rounds": 0, "output_error": None, "target": bound, "samples": len(kept),
                       "unmeasured": len(samples) - len(kept), "held_out": 0, "held_out_error": None,
                       "disproved_by_held_out": None, "demoted": 0, "cached": False}
        if not kept:
            log.warning("precision 'auto': no calibration sample measures the error of the GPU partition of %s .. %s "
                        "(%d sample(s) reach it): it keeps half storage, unmeasured", spec.nodes[0].label,
                        spec.nodes[-1].label, len(samples))
            half.plan.calibration = calibration
            return half, Promotion()
        chosen = sum(k < chosen for k in kept) or len(kept)  # none left to choose on: choose on the held-out
        samples, every_reference = [samples[k] for k in kept], [every_reference[k] for k in kept]
        return _calibrated(delegate, spec, compiled, half, samples, every_reference, chosen, calibration)
    except GpuError as exc:
        log.warning("precision 'auto': calibration failed (%s); the partition keeps half storage", exc)
        return half, None


def _reference_run(delegate, spec, compiled, samples, values):
    """[({output index: array}, {tensor index: array})] per sample: the partition's plan compiled
    in 'fp32', every tensor read back; its outputs also go into `values` (one dict per sample)."""
    every = _Runner(delegate, spec, compiled, samples)
    partition = every.build("fp32")
    try:
        result = every.run(partition)
    finally:
        partition.release()
    for sample, (outputs, _) in zip(values, result):
        sample.update(outputs)
    return result


def _measuring(reference, labels, spec):
    """Positions of the samples whose FP32 outputs (`reference`, per sample) can measure an
    error: every output holds a finite value (NaN against NaN counts as no error, so an output
    all NaN or infinite would measure 0.0). The others are named in a warning."""
    names = {t.index: t.name for t in spec.outputs}
    kept = []
    for k, (outputs, _) in enumerate(reference):
        blind = [i for i, value in outputs.items() if np.size(value) and not np.isfinite(value).any()]
        if blind:
            log.warning("precision 'auto': calibration %s cannot measure the error of the GPU partition of %s .. %s: "
                        "its FP32 output tensor %d (%r) holds no finite value; calibrating without it", labels[k],
                        spec.nodes[0].label, spec.nodes[-1].label, blind[0], names.get(blind[0]))
        else:
            kept.append(k)
    return kept


def _calibrated(delegate, spec, compiled, half, samples, every_reference, chosen, calibration):
    """_calibrate_partition on samples that measure (their FP32 outputs: every_reference);
    `calibration`: the summary entry so far, completed here."""
    bound = calibration["target"]
    every = _Runner(delegate, spec, compiled, samples)
    r = every.rewritten
    flow = Dataflow(r.nodes, r.inputs, r.outputs, delegate.context.limits)
    promotion = Promotion(_overflowed(every_reference, None, {}), {})
    partition = every.build("auto", promotion) if promotion.tensors else half
    # One run on every sample, every tensor read back: whether the error is steady (step 2), the
    # first run of the choice, and the held-out check of a choice that promotes nothing more.
    first, measured = every.run(partition), partition
    errors = _sample_errors(first, every_reference)
    steady = _steady(errors)
    choice, held = list(range(chosen)), list(range(chosen, len(samples)))
    runs, held_error, disproved, hopeless = 1, None, None, False
    while True:
        runner, reference = _subset(delegate, spec, compiled, samples, every_reference, choice)
        known = [first[k] for k in choice] if partition is measured else None
        partition, promotion, worst, more, spread_out = _choose(runner, flow, reference, bound, half, promotion,
                                                                partition, steady and disproved is None, known)
        runs, hopeless = runs + more, hopeless or spread_out
        if not held or worst > bound:
            break
        check, held_reference = _subset(delegate, spec, compiled, samples, every_reference, held)
        if partition is measured:
            held_errors = [errors[k] for k in held]
        else:
            held_errors, runs = _sample_errors(check.run(partition, capture=False), held_reference), runs + 1
        held_error, over = max(held_errors), _over(held, held_errors, delegate.options.auto_tolerance)
        if not over:
            break
        disproved = held_error if disproved is None else disproved
        choice, held = choice + over, [k for k in held if k not in over]
    demoted = 0
    if worst <= bound and held and steady and not hopeless:  # the held-out samples agree: demotion, checked on them
        promotion, partition, worst, demoted, more, held_error = _demote_checked(
            runner, check, flow, reference, held_reference, bound, promotion, partition, worst, held_error)
        runs += more
    calibration.update({"rounds": runs, "output_error": worst, "held_out_error": held_error, "held_out": len(held),
                        "disproved_by_held_out": disproved, "demoted": demoted})
    partition = _served(delegate, runner, promotion, {id(p): p for p in (partition, half)}.values())
    partition.plan.calibration = calibration
    if worst > bound:
        log.warning("precision 'auto': the outputs of the GPU partition of %s .. %s are %.3g of max |FP32| "
                    "from FP32 after calibration (bound %g)", spec.nodes[0].label, spec.nodes[-1].label,
                    worst, bound)
    return partition, promotion


def _over(held, errors, tolerance):
    """The held-out samples (positions `held`, their `errors`) over `tolerance` itself: inputs
    the choice did not see are held to the bound the option promises, not to the target."""
    over = [k for k, err in zip(held, errors) if err > tolerance]
    if over:
        log.info("precision 'auto': %d held-out sample(s) up to %.3g of max |FP32| from FP32 (auto_tolerance %g): "
                 "choosing on them too", len(over), max(errors), tolerance)
    return over


def _steady(errors):
    """Whether the per-sample errors of the half-storage plan vary within MARGIN, the variation
    the bound leaves room for. Where they vary more (selfie_segmentation: 0 to 6.6e-2 of max
    |FP32| over 8 seeded samples, its output in the logistic's tail on most), which tensors
    matter depends on the input, and a choice measured on a few samples does not hold on the
    next (the spread search's choice for selfie_segmentation_landscape, within the bound on
    its 4 samples, was 1.2e-2 from FP32 on one of 8 others): no spread search then, and no
    demotion either (a choice of the same kind)."""
    return max(errors, default=0.0) <= MARGIN * min(errors, default=0.0)


def _subset(delegate, spec, compiled, samples, every_reference, positions):
    """(_Runner of the samples at `positions`, their FP32 results)."""
    return (_Runner(delegate, spec, compiled, [samples[k] for k in positions]),
            [every_reference[k] for k in positions])


def _choose(runner, flow, reference, bound, half, promotion, partition, search, known=None):
    """(partition, promotion, worst output error, runs, spread_out) after promoting from
    `promotion` (built as `partition`) until the outputs on runner's samples are within `bound`,
    nothing is left to promote, or MAX_ROUNDS rounds (module docstring, steps 3-4); the
    partitions it replaces are released (`half` never). An error spread along the graph is left
    to the search (_Spread) with `search`, else everything upstream of the bad outputs is
    promoted at once; spread_out: whether that was because the error was spread too evenly to
    leave anything in half storage (_searchable). known: the result of `partition` on runner's
    samples, already run (the first round makes no run)."""
    runs, spread_out = 0, False
    for rounds in range(1, MAX_ROUNDS + 1):
        if known is None:
            result, runs = runner.run(partition), runs + 1
        else:
            result, known = known, None
        errors = _output_errors(result, reference)
        worst = max(errors.values(), default=0.0)
        if worst <= bound or rounds == MAX_ROUNDS:
            return partition, promotion, worst, runs, spread_out
        following = _promote(flow, result, reference, errors, bound, promotion)
        if following is None:  # no overflow and no culprit: the error is spread along the graph
            units = _upstream_units(flow, errors, bound, promotion)
            if not units:
                return partition, promotion, worst, runs, spread_out
            spread_out = spread_out or not _searchable(units, bound, worst)
            if search and not spread_out:
                spread = _Spread(runner, reference, bound, promotion, units)
                chosen, built, worst = spread.search(_sample_errors(result, reference))
                if partition is not half:
                    partition.release()
                return built, chosen, worst, runs + spread.runs, False
            following = _with(promotion, units)
        if partition is not half:
            partition.release()
        promotion = following
        partition = runner.build("auto", promotion)


def _searchable(units, bound, worst):
    """Whether the spread search (or the demotion pass) may find candidates to leave in half
    storage: an error spread evenly over n of them leaves n (bound / error)^2 in half storage;
    below one there is nothing to find (pose_landmark_full: 105 candidates at 88 times the
    bound, 0.014; its demotion pass spent 18 runs on 2 samples, 5 s on llvmpipe, demoting none)."""
    return len(units) * (bound / worst) ** 2 >= 1


def _demote_checked(runner, check, flow, reference, held_reference, bound, promotion, partition, worst, held_error):
    """(promotion, partition, worst, promotions demoted, runs, held-out error) after the demotion
    pass, whose result is kept only if the held-out samples (`check`) are within the bound with
    it too, or no worse than before it. The partition returned is the last one built, for
    _served to release (it builds the chosen plan anew)."""
    trial_promotion, trial, trial_worst, count, runs = _demote(runner, flow, reference, bound, promotion,
                                                               partition, worst)
    if count:
        demoted_error = _worst_error(check.run(trial, capture=False), held_reference)
        runs += 1
        if demoted_error <= max(bound, held_error):  # the held-out sample agrees: keep it
            return trial_promotion, trial, trial_worst, count, runs, demoted_error
        log.info("precision 'auto': demoting %d promotions left a held-out sample %.3g of max |FP32| "
                 "from FP32 (bound %g): kept them all", count, demoted_error, bound)
    return promotion, trial, worst, 0, runs, held_error


def _served(delegate, runner, promotion, calibrated):
    """The partition that serves invokes: the chosen plan built anew (tuned when the delegate
    tunes workgroups), in buffers no capture mapped for reading (a driver may keep such a buffer
    in host memory), and the `calibrated` partitions released. (A 3-5x slower first measurement
    of a calibrated plan on an H200, once put down to those buffers, was the GPU's clocks:
    calibration leaves the GPU mostly idle for seconds; docs/performance.md, "GPU clocks".)"""
    tuner = None
    if delegate.options.resolved_tune_workgroups:
        from .gpu.workgroup_tuner import WorkgroupTuner
        tuner = WorkgroupTuner(delegate.context)
    served = runner.build("auto", promotion, tuner, delegate.options.resolved_bake_params)
    for partition in calibrated:
        partition.release()
    return served


def _demote(runner, flow, reference, bound, promotion, partition, worst):
    """(Promotion, its GpuPartition, its worst output error, promotions demoted, runs made) after
    the demotion pass (module docstring, step 5) from a `promotion` whose `partition` is within
    `bound` (its error: worst); the partitions it does not return are released, `partition` too
    when it is replaced."""
    queue, demoted, runs = [_units(flow, promotion)], 0, 0
    while queue and queue[0] and runs < MAX_DEMOTION_RUNS:
        group = queue.pop(0)
        trial_promotion = _without(promotion, group)
        trial = runner.build("auto", trial_promotion)
        runs += 1
        err = _worst_error(runner.run(trial, capture=False), reference)
        if err <= bound:
            partition.release()
            partition, promotion, worst, demoted = trial, trial_promotion, err, demoted + len(group)
        else:
            trial.release()
            if len(group) > 1:
                queue += [group[:len(group) // 2], group[len(group) // 2:]]
    return promotion, partition, worst, demoted, runs


def _units(flow, promotion):
    """The promotions demotion may undo, in graph order (by producer; the partition's inputs
    first): ('tensor', index) and ('node', position); overflow promotions are kept."""
    units = [("tensor", i) for i, why in promotion.tensors.items() if not why.startswith("overflow")]
    units += [("node", k) for k in promotion.nodes]
    return sorted(units, key=lambda unit: _graph_position(flow, unit))


def _with(promotion, units):
    """`promotion` plus the [((kind, key), why)] of `units` (module docstring, _units)."""
    tensors, nodes = dict(promotion.tensors), dict(promotion.nodes)
    for (kind, key), why in units:
        (tensors if kind == "tensor" else nodes).setdefault(key, why)
    return Promotion(tensors, nodes)


class _Spread:
    """What to promote when neither overflow nor a culprit explains the error: it accumulates
    along the graph, from many tensors a little each, and promoting every candidate (everything
    upstream of the bad outputs) overshoots. The roundings of different tensors are independent,
    so their effects on an output add about in quadrature (selfie_segmentation: three tensors
    alone in half storage 1.2e-3, 6.5e-4 and 2e-5 of max |FP32| from FP32, the three together
    1.3e-3), and how much each tensor contributes varies 100-fold and follows neither its size,
    its values nor its depth: it must be measured. The candidates, in graph order, are measured
    as groups, each alone in half storage (the others float), starting from all of them at once:
    while SEARCH_RUNS allow, the largest group the estimate would promote is split in two and
    both halves measured; then the heaviest groups are promoted until the quadrature sum of the
    others is within the bound on every sample (_estimate), and that choice is checked by a run;
    where it is over, the fewest groups that are within are found by bisection (all of them,
    everything upstream, are within)."""

    def __init__(self, runner, reference, bound, promotion, units):
        self.runner, self.reference, self.bound = runner, reference, bound
        self.base, self.units = promotion, units
        self.everything = _with(promotion, units)
        self.runs, self.root = 0, None

    def search(self, root):
        """(Promotion, its GpuPartition, its worst output error); root: the per-sample errors
        with every candidate in half storage."""
        self.root = root
        order = _heaviest_first(self._groups())
        log.debug("precision 'auto': groups of candidates (size, error alone in half storage), heaviest first: %s",
                  ", ".join(f"({len(units)}, {max(errors):.3g})" for units, errors in order))
        k = low = self._estimate(order)  # the quadrature's guess first, then bisection
        high, best = len(order), None  # promoting every group is within
        while low < high:
            promotion = self._promoting(order[:k])
            partition, worst = self._checked(promotion)
            if worst <= self.bound:
                if best is not None:
                    best[1].release()
                best, high = (promotion, partition, worst), k
            else:
                partition.release()
                low = k + 1
            k = (low + high) // 2
        if best is not None:
            return best
        return (self.everything, *self._checked(self.everything))

    def _groups(self):
        """[(units, per-sample errors alone in half storage)]: the candidates, split while the
        runs allow: the largest of the groups the quadrature would promote first (a group it
        leaves in half storage needs no split; a small one frees few units at best)."""
        groups = [(self.units, self.root)]
        while self.runs + 2 <= SEARCH_RUNS:
            order = _heaviest_first(groups)
            promoted = [group for group in order[:self._estimate(order)] if len(group[0]) > 1]
            if not promoted:
                break
            largest = max(promoted, key=lambda group: len(group[0]))
            groups.remove(largest)
            units = largest[0]
            for half in (units[:len(units) // 2], units[len(units) // 2:]):
                groups.append((half, self._alone(half)))
        return groups

    def _alone(self, units):
        """Per-sample errors with `units` in half storage, every other candidate float."""
        trial = self.runner.build("auto", _without(self.everything, [unit for unit, _ in units]))
        try:
            self.runs += 1
            return _sample_errors(self.runner.run(trial, capture=False), self.reference)
        finally:
            trial.release()

    def _estimate(self, order):
        """The fewest of the heaviest groups to promote for the others' quadrature sum to be
        within the bound on every sample, scaled by how much the error of every candidate at
        once (root) exceeds the quadrature sum of all the groups' (roundings that are not
        independent add up faster: hand_landmark_lite's 7 groups 2.7e-3 in quadrature, 5.2e-3
        together)."""
        bound2, squares = self.bound ** 2, [[e ** 2 for e in errors] for _, errors in order]
        scale = [max(1.0, r ** 2 / total) if total else 1.0 for r, total in zip(self.root, map(sum, zip(*squares)))]
        for k in range(len(order) + 1):
            if all(c * sum(rest) <= bound2 for c, rest in zip(scale, zip(*squares[k:]))):
                return k
        return len(order)

    def _promoting(self, groups):
        """The Promotion of the base promotions and every unit of `groups`, each saying what
        its group alone in half storage measured."""
        return _with(self.base, [(unit, f"{why}; {len(units)} such alone in half storage move the outputs "
                                        f"{max(errors):.3g} of max |x|")
                                 for units, errors in groups for unit, why in units])

    def _checked(self, promotion):
        """(GpuPartition of `promotion`, its worst output error on the samples): one run."""
        partition = self.runner.build("auto", promotion)
        self.runs += 1
        return partition, _worst_error(self.runner.run(partition, capture=False), self.reference)


def _without(promotion, group):
    """`promotion` less the ('tensor', index) and ('node', position) units of `group`."""
    group = set(group)
    return Promotion({i: why for i, why in promotion.tensors.items() if ("tensor", i) not in group},
                     {k: why for k, why in promotion.nodes.items() if ("node", k) not in group})


def _output_errors(result, reference):
    """{output index: worst error over the samples}."""
    out = {}
    for (outputs, _), (ref_outputs, _) in zip(result, reference):
        for index, value in outputs.items():
            out[index] = max(out.get(index, 0.0), error(value, ref_outputs[index]))
    return out


def _heaviest_first(groups):
    """Groups (units, per-sample errors) by their worst error, largest first."""
    return sorted(groups, key=lambda group: -max(group[1]))


def _sample_errors(result, reference):
    """[the worst output error] per sample."""
    return [_worst_error([outputs], [ref]) for outputs, ref in zip(result, reference)]


def _worst_error(result, reference):
    return max(_output_errors(result, reference).values(), default=0.0)


def _tensor_errors(result, reference):
    """{tensor index: worst error over the samples} of every captured tensor."""
    out = {}
    for (_, captured), (_, ref_captured) in zip(result, reference):
        for index, value in captured.items():
            if index in ref_captured:
                out[index] = max(out.get(index, 0.0), error(value, ref_captured[index]))
    return out


def _overflowed(reference, result, promoted):
    """{tensor index: why} of the tensors not yet promoted whose reference exceeds a half's range,
    or (with a result) that hold a non-finite value or one beyond a half where the reference does not."""
    out = {}
    for k, (_, ref_captured) in enumerate(reference):
        for index, ref in ref_captured.items():
            if index in promoted or index in out or not np.size(ref):
                continue
            ref_max = float(np.abs(ref[np.isfinite(ref)]).max(initial=0.0))
            if result is None:
                if ref_max > HALF_MAX:
                    out[index] = f"overflow: max |x| = {ref_max:.4g} > {HALF_MAX:g} (the largest half)"
                continue
            value = result[k][1].get(index)
            if value is None or not np.size(value):
                continue
            bad = (~np.isfinite(value) & np.isfinite(ref)) | (np.abs(value) > HALF_MAX)
            if bad.any():
                out[index] = f"overflow: {int(bad.sum())} value(s) non-finite or beyond {HALF_MAX:g} in half storage"
    return out


class Dataflow:
    """Which arena tensors each node of a partition reads and writes, as its dispatches state
    them (an epilogue operand a rewrite fused in included), and whether it has weights a half
    does not hold exactly (those of a float16 model gain nothing in float: never promoted); a
    free reshape's tensor counts as written by its source's producer, a view (KernelEnv.view)
    as read and written by the node that made it. Nodes by position."""

    def __init__(self, nodes, inputs, outputs, limits):
        env = KernelEnv("fp32", limits)
        dispatches = build_dispatches(nodes, inputs, outputs, env)[0]
        position = {id(n): k for k, n in enumerate(nodes)}
        self.labels = [n.label for n in nodes]
        self.reads = [set() for _ in nodes]
        self.writes = [set() for _ in nodes]
        for d in dispatches:
            if d.node is not None:
                k = position[id(d.node)]
                self.writes[k] |= {t.index for t in d.writes}
                self.reads[k] |= {t.index for t in d.reads}
        for tensor, whole, _, node in env.views:  # a view's node moves values without a dispatch
            k = position[id(node)]
            written, read = (tensor, whole) if any(t is tensor for t in node.outputs) else (whole, tensor)
            self.writes[k].add(written.index)
            self.reads[k].add(read.index)
        self.weights = [False] * len(nodes)
        for node, rows in zip(env.constant_nodes, env.constants):
            if node is not None and not exact_in_half(rows):
                self.weights[position[id(node)]] = True
        self.producer = {i: k for k, written in enumerate(self.writes) for i in written}
        groups = memory.alias_groups(env.aliases)
        for members in groups.values():
            known = [self.producer[t.index] for t in members if t.index in self.producer]
            for t in members:
                if known:
                    self.producer.setdefault(t.index, known[0])
        for k in range(len(nodes)):
            self.reads[k] -= self.writes[k]

    def upstream(self, indices):
        """Positions of the nodes the tensors `indices` depend on (their producers included)."""
        seen, stack = set(), [self.producer[i] for i in indices if i in self.producer]
        while stack:
            k = stack.pop()
            if k not in seen:
                seen.add(k)
                stack += [self.producer[i] for i in self.reads[k] if i in self.producer]
        return sorted(seen)


def _promote(flow, result, reference, errors, bound, promotion):
    """The next Promotion: overflow first, else the culprits (nodes whose error grows GROWTH
    times from their inputs: their inputs and lossy weights); None when there is neither (see
    the module docstring)."""
    tensors, weights = dict(promotion.tensors), dict(promotion.nodes)
    overflow = _overflowed(reference, result, tensors)
    if overflow:
        tensors.update(overflow)
        return Promotion(tensors, weights)
    e = _tensor_errors(result, reference)
    bad = [i for i, err in errors.items() if err > bound]
    culprits = [item for item in (_growth(flow, k, e, tensors, weights) for k in flow.upstream(bad))
                if item is not None and item[0] >= GROWTH]
    for growth, k, todo, has_weights, out_error in culprits:
        why = f"read by {flow.labels[k]}, whose error grows {growth:.3g}x from its inputs (to {out_error:.3g} of max |x|)"
        for index in todo:
            tensors.setdefault(index, why)
        if has_weights:
            weights.setdefault(k, f"its error grows {growth:.3g}x from its inputs (to {out_error:.3g} of max |x|)")
    if tensors == promotion.tensors and weights == promotion.nodes:
        return None
    return Promotion(tensors, weights)


def _upstream_units(flow, errors, bound, promotion):
    """[(unit, why)] in graph order: what is left in half storage upstream of the outputs over
    `bound` (('tensor', index): the tensors the nodes there read, and the bad outputs themselves,
    whose own rounding may be what the bound does not allow; ('node', position): their weights a
    half rounds), the candidates of the spread search."""
    worst = max(errors.values())
    bad = [i for i, err in errors.items() if err > bound]
    upstream = flow.upstream(bad)
    found = {}
    for index in bad:
        found[("tensor", index)] = f"an output {errors[index]:.3g} of max |x| from FP32"
    for k in upstream:
        for index in flow.reads[k]:
            found.setdefault(("tensor", index), f"upstream of an output {worst:.3g} of max |x| from FP32")
        if flow.weights[k]:
            found[("node", k)] = f"upstream of an output {worst:.3g} of max |x| from FP32"
    found = {unit: why for unit, why in found.items() if unit[1] not in
             (promotion.tensors if unit[0] == "tensor" else promotion.nodes)}
    return sorted(found.items(), key=lambda item: _graph_position(flow, item[0]))


def _graph_position(flow, unit):
    """Where a ('tensor', index) or ('node', position) unit sits in graph order (by producer; the
    partition's inputs first; a node's weights after the tensors it writes)."""
    kind, key = unit
    return (flow.producer.get(key, -1), 0) if kind == "tensor" else (key, 1)


def _growth(flow, k, e, tensors, weights):
    """(growth of the error from node k's inputs to its outputs, k, its inputs not yet promoted,
    whether it has weights not yet promoted, its output error), or None when it has nothing
    left to promote or no output was read back."""
    outs = [e[i] for i in flow.writes[k] if i in e]
    todo = sorted(i for i in flow.reads[k] if i not in tensors)
    has_weights = flow.weights[k] and k not in weights
    if not outs or not (todo or has_weights):
        return None
    growth = max(outs) / max(max((e[i] for i in flow.reads[k] if i in e), default=0.0), HALF_EPS)
    return growth, k, todo, has_weights, max(outs)
