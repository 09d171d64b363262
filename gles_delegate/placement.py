"""placement='fastest': a small GPU partition is timed on the GPU and on LiteRT's CPU kernels, and
the CPU takes it only when it is measurably faster.

Why: every GPU dispatch costs driver time (5-8 us each on an H200, docs/model_zoo.md), so a
partition whose whole work is a few microseconds of CPU time (a streaming keyword spotter: 31
nodes, ~10^4 multiply-adds) runs 30x faster on LiteRT's CPU kernels (XNNPACK) than on any GPU.
No kernel can close that; only placing the partition elsewhere can.

What is compared (decide()), like with like: what would run per invoke on either side.
  The whole model first, where the caller can run the model file whole on LiteRT once no GPU
  partition is left (CpuSide.whole_model): LiteRT's interpreter of the model file (set its
  inputs, invoke, read its outputs: what the Interpreter's thin path, direct_path.py, costs)
  against every GPU partition's run together with the runs of CPU nodes beside them, each as
  a LiteRT sub-model (_cpu_runs_beside: the whole invoke on either side). Where the caller asks for several threads, the
  model is timed at that count and at 1 (on the H200, XNNPACK on one thread beat 16 on the
  zoo's keyword spotters, audio models, bert_tiny and t5_encoder_tiny: waking a thread pool
  costs more than their work), and runs at the one measured faster (CpuSide.whole_threads).
  If the CPU wins, every partition moves. A model with a loop its inputs bound
  (loop_bounds.input_bound_loop) is not timed whole: on zeros it may never end; one whose loops
  run as often as its constants say (a Keras RNN over a fixed sequence) is.
  Else each partition alone (unless it is the whole model): its compiled plan's run on the GPU
  (upload, dispatches, download, the context made current) against LiteRT's interpreter of its
  nodes as one sub-model (cpu_litert.LiteRTStep, what the Interpreter's cpu_backend 'auto'
  runs). A partition no sub-model can hold (resource variables: their state lives in the
  caller's runtime) was decided by the whole model's comparison, or stays.
  The numpy reference is never measured: nodes it would run (cpu_backend 'fallback' or
  'reference', an op LiteRT cannot take from us) stay on the GPU.
The rule (compare()): after WARMUP_RUNS of each side, up to PAIRS rounds each time one run of
both, in alternating order (a change of the machine's load hits both sides of a round alike);
the CPU takes the partitions when it was faster in at least WINS_NEEDED of the PAIRS rounds: a
one-sided sign test at level ALPHA. Were both sides equally fast, each round would be a coin
toss, and the CPU would win that often with a chance of ALPHA at most: a tie stays on the GPU,
where a user of this delegate expects it, at 19 in 20 starts, whatever the model and the noise
(no margin on the times, which would be a constant fitted to one machine's noise). Rounds stop
once the outcome is certain: a GPU faster by far costs WINS_LOST + 1 rounds.
Only partitions of at most MEASURE_MAX_WORK multiply-adds are measured (work(): read from the
shapes, nothing run), so a large model pays nothing at start-up.
"""
import logging
import math
import statistics
import time
from dataclasses import dataclass, field

import numpy as np

from . import cpu_litert, ops
from .cpu_litert import LiteRTStep, WholeModelStep, lacks_kernel
from .errors import GpuError, ModelError
from .loop_bounds import input_bound_loop
from .partition import span, work

ALPHA = 0.05
PAIRS = 15
WARMUP_RUNS = 3
# 2^24 multiply-adds (work()): of docs/model_zoo.md's latency table (an H200), the models our GPU
# path ran slower than XNNPACK hold up to 1.3e7 (t5_encoder_tiny); the next ones up (bert_tiny,
# gpt2_tiny: 1.75e7) were within 1.25x of XNNPACK's best thread count, and larger ones faster on
# the GPU. Timing them would cost start-up time for no change.
MEASURE_MAX_WORK = 1 << 24
log = logging.getLogger("gles_delegate")


def wins_needed(pairs, alpha):
    """The fewest rounds of `pairs` the CPU must win for a one-sided sign test at level `alpha`:
    the smallest k with P(Binomial(pairs, 1/2) >= k) <= alpha."""
    tail = 0.0
    for k in range(pairs, -1, -1):
        tail += math.comb(pairs, k) / 2 ** pairs
        if tail > alpha:
            return k + 1
    return 0


WINS_NEEDED = wins_needed(PAIRS, ALPHA)  # 12 of 15: P = 0.018 for a tie
WINS_LOST = PAIRS - WINS_NEEDED  # rounds the GPU may win with the CPU still taking it


@dataclass
class CpuSide:
    """What runs the nodes a GPU partition leaves to the CPU, as the caller of
    GpuDelegate.partition() tells it. backend: a cpu_litert.CpuBackend (which nodes LiteRT's
    kernels run); whole_model: whether the caller runs the model file whole on LiteRT
    (cpu_litert.WholeModelStep) once no GPU partition is left; declined: the partitions
    decide() moved to the CPU, and whole_threads the LiteRT thread count to run the whole model
    at (the caller reads both)."""
    backend: cpu_litert.CpuBackend
    whole_model: bool = False
    declined: list = field(default_factory=list)
    whole_threads: int | None = None  # the thread count the whole model ran fastest at (None: the backend's)


def litert_side(graph):
    """The CpuSide of LiteRT's own Interpreter (the delegate in LiteRT, gles_delegate/litert/):
    LiteRT runs whatever the delegate does not claim, a main subgraph whole."""
    return CpuSide(cpu_litert.CpuBackend("auto"), whole_model=graph.subgraph_index == 0)


class _Scratch(dict):
    """{tensor index: array} for timing a step: the storage protocol of the Interpreter's
    (interpreter._Storage) without its deferred outputs: every output is copied."""

    def current(self, index):
        return self[index]

    def forget(self, index, owner):
        pass

    def defer_output(self, index, source, owner):
        return False


def _zeros(tensors):
    return _Scratch({t.index: np.zeros(t.shape, t.dtype) for t in tensors})


def _timed(run):
    """A function calling run() once and returning the ms it took."""
    def once():
        start = time.perf_counter()
        run()
        return (time.perf_counter() - start) * 1000.0
    return once


def gpu_timer(partition, graph):
    """A function running GpuPartition `partition` once on zeros (upload, dispatches, download)
    and returning the ms it took."""
    slots = list(partition.plan.inputs) + list(partition.plan.outputs)
    storage = _zeros(graph.tensors[s.tensor_index] for s in slots)
    return _timed(lambda: partition.run(storage))


def cpu_timer(step, graph):
    """A function running LiteRTStep `step` once on zeros (its inputs copied in, LiteRT's
    invoke, its outputs handed out) and returning the ms it took."""
    indices = [index for index, _, _ in step.inputs] + [t.index for t, _, _ in step.outputs]
    storage = _zeros(graph.tensors[i] for i in indices)
    return _timed(lambda: step.run(storage))


def whole_timer(step, graph):
    """A function running WholeModelStep `step` once as the Interpreter's thin path does
    (direct_path.py): the model's inputs set to zeros, LiteRT's invoke, the outputs some node
    writes read; returning the ms it took."""
    set_tensor, get_tensor, _ = step.calls
    inputs = [(t.index, np.zeros(t.shape, t.dtype)) for t in graph.inputs if t.dtype is not None]
    written = {id(t) for node in graph.nodes for t in node.outputs}
    outputs = [t.index for t in graph.outputs if id(t) in written]

    def run():
        for index, value in inputs:
            set_tensor(index, value)
        step.invoke()
        for index in outputs:
            get_tensor(index)
    return _timed(run)


@dataclass
class Comparison:
    """What compare() measured: the medians of both sides (ms), the rounds the CPU was faster
    in (wins) of those run (rounds), and whether that is the CPU's (wins >= WINS_NEEDED)."""
    gpu_ms: float
    cpu_ms: float
    wins: int
    rounds: int

    @property
    def cpu_faster(self):
        return self.wins >= WINS_NEEDED

    def says(self):
        """The decision in words (Measured.why)."""
        return (f"{self.cpu_ms:.3f} ms vs GPU {self.gpu_ms:.3f} ms, faster in {self.wins} of {self.rounds} paired runs "
                f"({WINS_NEEDED} of {PAIRS} needed): {'the CPU' if self.cpu_faster else 'the GPU'} runs it")


def compare(gpu_timers, cpu):
    """Time the GPU side (the timers of `gpu_timers` one after the other: one round's GPU time
    is their sum) against `cpu` (a timer) in paired rounds (see the module docstring)."""
    for _ in range(WARMUP_RUNS):
        for timer in [*gpu_timers, cpu]:
            timer()
    gpu_times, cpu_times, wins = [], [], 0
    while len(gpu_times) - wins <= WINS_LOST and wins < WINS_NEEDED:
        if len(gpu_times) % 2:
            cpu_ms = cpu()
            gpu_ms = sum(timer() for timer in gpu_timers)
        else:
            gpu_ms = sum(timer() for timer in gpu_timers)
            cpu_ms = cpu()
        gpu_times.append(gpu_ms)
        cpu_times.append(cpu_ms)
        wins += cpu_ms < gpu_ms
    return Comparison(statistics.median(gpu_times), statistics.median(cpu_times), wins, len(gpu_times))


def sub_model_refusal(nodes, graph, backend):
    """None when `backend` (a CpuBackend) runs every one of `nodes` on LiteRT's kernels,
    which can then run them as one sub-model; else why not."""
    for node in nodes:
        if not backend.on_litert(node, graph):
            return f"{node.label} would run on the numpy reference ({backend.reference_reason(node, graph)})"
        reason = ops.unsupported_reason(node)
        if reason is not None and backend.backend != "litert" and not lacks_kernel(node):
            return f"{node.label} is refused by the CPU's checks ({reason})"
    return None


@dataclass
class Measured:
    """One partition's placement: `nodes` (their span), `on` ('gpu' or 'cpu'), the medians
    measured (ms, None where not), `cpu` (what the CPU time ran: 'LiteRT sub-model' or 'LiteRT
    whole model'), `threads` (LiteRT's thread count there, None: its default), `cpu_faster_runs`
    and `paired_runs` (compare()'s wins and rounds), `why` (the decision, or why nothing was
    measured)."""
    nodes: str
    on: str
    gpu_ms: float | None = None
    cpu_ms: float | None = None
    cpu: str | None = None
    threads: int | None = None
    cpu_faster_runs: int | None = None
    paired_runs: int | None = None
    why: str = ""

    def as_dict(self):
        return dict(self.__dict__)

    def record(self, cpu, threads, comparison, whose=""):
        """Take `comparison` (what `cpu` ran at `threads` measured) as the decision."""
        self.cpu, self.threads = cpu, threads
        self.gpu_ms, self.cpu_ms = comparison.gpu_ms, comparison.cpu_ms
        self.cpu_faster_runs, self.paired_runs = comparison.wins, comparison.rounds
        self.on = "cpu" if comparison.cpu_faster else "gpu"
        self.why = f"{cpu}{_on_threads(threads)} {comparison.says()}{whose}"
        log.info("placement='fastest': %s: %s", self.nodes, self.why)


def _on_threads(threads):
    return "" if threads is None else f" ({threads} thread{'s' if threads > 1 else ''})"


NO_LITERT = "not measured: ai-edge-litert is not installed, so every partition stays on the GPU"
MEASURE_ERRORS = (ModelError, GpuError, RuntimeError, ValueError)


def decide(made, graph, side):
    """(the partitions of `made` (GpuPartitions of `graph`) that stay on the GPU, [Measured per
    partition]); those moved to the CPU are released and appended to side.declined, and
    side.whole_threads set when the whole model takes them all."""
    if cpu_litert.litert_interpreter_class() is None:
        return made, [Measured(span(p.nodes), "gpu", why=NO_LITERT) for p in made]
    records = {id(p): Measured(span(p.nodes), "gpu") for p in made}
    whole = _measure_whole(made, graph, records, side) if side.whole_model else None
    if whole is None or not whole.cpu_faster:
        for p in made:
            if whole is None or len(p.nodes) < len(graph.nodes):
                _measure_alone(p, graph, side.backend, records[id(p)], whole is not None)
    kept = [p for p in made if records[id(p)].on == "gpu"]
    for p in made:
        if records[id(p)].on == "cpu":
            side.declined.append(p.nodes)
            p.release()
    return kept, [records[id(p)] for p in made]


def _measure_whole(made, graph, records, side):
    """The Comparison of the model file whole on LiteRT (at the faster of the backend's thread
    count and 1) against every partition of `made` on the GPU, taken as each one's record, and
    side.whole_threads set when the CPU wins; None (each record saying why) where it cannot be
    timed."""
    if graph.source_model is None or graph.source_model.source_bytes is None:
        return _not_whole(made, records, "the model file is not at hand")
    if work(graph.nodes) > MEASURE_MAX_WORK:
        return _not_whole(made, records, f"over {MEASURE_MAX_WORK:,} multiply-adds (placement.MEASURE_MAX_WORK)")
    loop = input_bound_loop(graph.source_model, graph.subgraph_index)
    if loop is not None:
        return _not_whole(made, records, f"a loop runs as often as its inputs say ({loop}): its time on zero inputs "
                                         "is no measure, and may never end (loop_bounds.py)")
    try:
        threads, cpu = _fastest_threads(graph, side.backend.num_threads)
        beside = _cpu_runs_beside(made, graph, side.backend)
        comparison = compare([gpu_timer(p, graph) for p in made] + [cpu_timer(step, graph) for step in beside], cpu)
    except MEASURE_ERRORS as exc:
        return _not_whole(made, records, str(exc))
    whose = f" (the GPU time of all {len(made)} partitions)" if len(made) > 1 else ""
    if beside:
        whose += f" (with the {sum(len(step.nodes) for step in beside)} CPU nodes beside them, as LiteRT sub-models)"
    for p in made:
        records[id(p)].record("LiteRT whole model", threads, comparison, whose)
    if comparison.cpu_faster:
        side.whole_threads = threads
    return comparison


def _cpu_runs_beside(made, graph, backend):
    """LiteRTSteps of the runs of nodes of `graph` no partition of `made` holds: what runs on
    the CPU beside the partitions per invoke, so that the GPU side of the whole model's
    comparison is the whole invoke too (a Keras GRU's RESHAPE partition alone took 0.04 ms, its
    loop beside it 0.18). A run LiteRT cannot take as a sub-model is left out (unmeasured, as
    before: the comparison then favours the GPU)."""
    held = {id(n) for p in made for n in p.nodes}
    runs, run = [], []
    for node in graph.nodes + [None]:
        if node is not None and id(node) not in held:
            run.append(node)
        elif run:
            runs.append(run)
            run = []
    steps = []
    for run in runs:
        if sub_model_refusal(run, graph, backend) is None:
            try:
                steps.append(LiteRTStep(graph, run, backend.num_threads))
            except ModelError:  # refused at allocate (a node of dynamic shapes): left out
                continue
    return steps


def _not_whole(made, records, why):
    for p in made:
        records[id(p)].why = f"not measured whole: {why}"
    return None


def _fastest_threads(graph, num_threads):
    """(thread count, whole_timer) of the model file on LiteRT: at `num_threads`, or at 1 where
    compare() finds one thread faster than the num_threads > 1 asked for."""
    asked = whole_timer(WholeModelStep(graph, num_threads), graph)
    if num_threads is None or num_threads == 1:
        return num_threads, asked
    one = whole_timer(WholeModelStep(graph, 1), graph)
    # The same rule, the asked count in the GPU's place: one thread must be measurably faster.
    return (1, one) if compare([asked], one).cpu_faster else (num_threads, asked)


def _measure_alone(partition, graph, backend, record, whole_measured):
    """Decide `partition` against its nodes as one LiteRT sub-model (record updated); where
    none can hold them, the whole model's comparison stands (`whole_measured`), or nothing was
    measured."""
    if work(partition.nodes) > MEASURE_MAX_WORK:
        record.why = f"not measured: over {MEASURE_MAX_WORK:,} multiply-adds (placement.MEASURE_MAX_WORK)"
        return
    refusal = sub_model_refusal(partition.nodes, graph, backend)
    if refusal is not None:
        if not whole_measured:
            record.why = "; ".join(filter(None, [f"not measured: LiteRT cannot run it as a sub-model: {refusal}",
                                                 record.why]))
        return
    try:
        step = LiteRTStep(graph, partition.nodes, backend.num_threads)
        comparison = compare([gpu_timer(partition, graph)], cpu_timer(step, graph))
    except MEASURE_ERRORS as exc:
        record.why = "; ".join(filter(None, [record.why, f"not measured alone: {exc}"]))
        return
    record.record("LiteRT sub-model", backend.num_threads, comparison)
