"""placement='fastest': a small GPU partition is timed on the GPU and on LiteRT's CPU kernels, and
the CPU takes it only when it is clearly faster.

Why: every GPU dispatch costs driver time (5-8 us each on an H200, docs/model_zoo.md), so a
partition whose whole work is a few microseconds of CPU time (a streaming keyword spotter: 31
nodes, ~10^4 multiply-adds) runs 30x faster on LiteRT's CPU kernels (XNNPACK) than on any GPU.
No kernel can close that; only placing the partition elsewhere can.

What is compared, per partition a GpuDelegate.partition() call made (decide()):
  GPU: its compiled plan's run (upload, dispatches, download, the context made current), on
       zeros, the median of TIMED_RUNS after WARMUP_RUNS (gpu_ms);
  CPU: what would run its nodes instead: LiteRT's interpreter of them as one sub-model
       (cpu_litert.LiteRTStep, what our Interpreter's cpu_backend 'auto' runs), same inputs and
       runs (cpu_ms). Where LiteRT cannot run them as a sub-model (resource variables: their
       state lives in the caller's runtime), LiteRT's interpreter of the whole model file, when
       the caller can run the model whole on it (CpuSide.whole_model): its time bounds the CPU
       time of every partition from above, so the partitions move together, and only when
       MARGIN x that time is less than all their GPU times together.
  The numpy reference is never measured: nodes it would run (cpu_backend 'fallback' or
  'reference', an op LiteRT cannot take from us) stay on the GPU.
The CPU takes a partition when MARGIN x its CPU time is below its GPU time (module constant).
Only partitions of at most MEASURE_MAX_WORK multiply-adds are measured (work(): read from the
shapes, nothing run), so a large model pays nothing at start-up.
"""
import logging
import statistics
import time
from dataclasses import dataclass, field

import numpy as np

from . import cpu_litert, ops
from .cpu_litert import LiteRTStep, WholeModelStep, lacks_kernel
from .errors import GpuError, ModelError
from .partition import span

# The CPU must be this many times faster. Times are noisy: 15 repeats of both timings of one
# tiny partition on the 2-core development VM (llvmpipe, other work running) gave GPU/CPU ratios
# of 8.3 to 13.8 around a median of 10.4 (-20% / +32%). A partition measured 1.25x faster on
# the CPU is then at worst about as fast there, so a wrong move costs a few percent, while a
# near-tie stays on the GPU, where a user of this delegate expects it.
MARGIN = 1.25
WARMUP_RUNS, TIMED_RUNS = 3, 7
# 2^24 multiply-adds (work()): of docs/model_zoo.md's latency table (an H200), the models our GPU
# path ran slower than XNNPACK hold up to 1.3e7 (t5_encoder_tiny); the next ones up (bert_tiny,
# gpt2_tiny: 1.75e7) were within MARGIN of XNNPACK's best thread count, and larger ones faster on
# the GPU. Timing them (10 runs a side) would cost start-up time for no change.
MEASURE_MAX_WORK = 1 << 24
log = logging.getLogger("gles_delegate")


@dataclass
class CpuSide:
    """What runs the nodes a GPU partition leaves to the CPU, as the caller of
    GpuDelegate.partition() tells it. backend: a cpu_litert.CpuBackend (which nodes LiteRT's
    kernels run); whole_model: whether the caller runs the model file whole on LiteRT
    (cpu_litert.WholeModelStep) once no GPU partition is left; declined: the partitions
    decide() moved to the CPU (the caller reads it)."""
    backend: cpu_litert.CpuBackend
    whole_model: bool = False
    declined: list = field(default_factory=list)


def litert_side(graph):
    """The CpuSide of LiteRT's own Interpreter (the delegate in LiteRT, gles_delegate/litert/):
    LiteRT runs whatever the delegate does not claim, a main subgraph whole."""
    return CpuSide(cpu_litert.CpuBackend("auto"), whole_model=graph.subgraph_index == 0)


def work(nodes):
    """Roughly the multiply-adds `nodes` compute: per node its output elements times the
    elements of its largest constant input per output channel (a convolution's or fully
    connected layer's kernel size), at least the elements it reads and writes."""
    total = 0
    for node in nodes:
        outputs = [t for t in node.outputs if t is not None]
        written = sum(t.size for t in outputs)
        weights = max((t.size for t in node.inputs if t is not None and t.is_const), default=0)
        channels = int(outputs[0].shape[-1]) if outputs and len(outputs[0].shape) else 1
        read = sum(t.size for t in node.inputs if t is not None)
        total += max(written * max(weights // max(channels, 1), 1), read + written)
    return total


def median_ms(run):
    """The median of TIMED_RUNS calls of run(), after WARMUP_RUNS, in ms."""
    for _ in range(WARMUP_RUNS):
        run()
    times = []
    for _ in range(TIMED_RUNS):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000.0


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


def gpu_ms(partition, graph):
    """GpuPartition `partition`'s run on zeros (median_ms): upload, dispatches, download."""
    slots = list(partition.plan.inputs) + list(partition.plan.outputs)
    storage = _zeros(graph.tensors[s.tensor_index] for s in slots)
    return median_ms(lambda: partition.run(storage))


def cpu_ms(step, graph):
    """A LiteRTStep's run on zeros (median_ms): its inputs copied in, LiteRT's invoke, its
    outputs copied out."""
    indices = [index for index, _, _ in step.inputs] + [t.index for t, _, _ in step.outputs]
    storage = _zeros(graph.tensors[i] for i in indices)
    return median_ms(lambda: step.run(storage))


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
    """One partition's placement: `nodes` (their span), `on` ('gpu' or 'cpu'), the times
    measured (ms, None where not), `cpu` (what the CPU time ran: 'LiteRT sub-model' or 'LiteRT
    whole model'), `why` (the decision, or why nothing was measured)."""
    nodes: str
    on: str
    gpu_ms: float | None = None
    cpu_ms: float | None = None
    cpu: str | None = None
    why: str = ""

    def as_dict(self):
        return dict(self.__dict__)


def decide(made, graph, side):
    """(the partitions of `made` (GpuPartitions of `graph`) that stay on the GPU, [Measured per
    partition]); those moved to the CPU are released and appended to side.declined."""
    if cpu_litert.litert_interpreter_class() is None:
        return made, [Measured(span(p.nodes), "gpu", why=NO_LITERT) for p in made]
    records, whole = {}, []
    for p in made:
        records[id(p)], needs_whole = _measure_alone(p, graph, side.backend)
        if needs_whole:
            whole.append(p)
    if whole and side.whole_model:
        _measure_whole(made, whole, graph, records, side.backend.num_threads)
    kept = [p for p in made if records[id(p)].on == "gpu"]
    for p in made:
        if records[id(p)].on == "cpu":
            side.declined.append(p.nodes)
            p.release()
    return kept, [records[id(p)] for p in made]


NO_LITERT = "not measured: ai-edge-litert is not installed, so every partition stays on the GPU"


def _measure_alone(partition, graph, backend):
    """(the Measured of `partition` against its nodes as one LiteRT sub-model, whether only the
    whole model could be measured instead)."""
    record = Measured(span(partition.nodes), "gpu")
    if work(partition.nodes) > MEASURE_MAX_WORK:
        record.why = f"not measured: over {MEASURE_MAX_WORK:,} multiply-adds (placement.MEASURE_MAX_WORK)"
        return record, False
    refusal = sub_model_refusal(partition.nodes, graph, backend)
    if refusal is not None:
        record.why = f"not measured: LiteRT cannot run it as a sub-model: {refusal}"
        return record, True
    try:
        step = LiteRTStep(graph, partition.nodes, backend.num_threads)
        record.gpu_ms, record.cpu_ms = gpu_ms(partition, graph), cpu_ms(step, graph)
    except (ModelError, GpuError, RuntimeError, ValueError) as exc:
        record.why = f"not measured: {exc}"
        return record, False
    record.cpu = "LiteRT sub-model"
    _judge(record, record.gpu_ms, record.cpu_ms)
    return record, False


def _measure_whole(made, whole, graph, records, num_threads):
    """Time the whole model on LiteRT against every partition of `made` on the GPU: where it
    wins by MARGIN over their sum, all of them move to the CPU; else the partitions `whole` (no
    sub-model could time them) stay, and the others keep their own decisions (records updated)."""
    if graph.source_model is None or graph.source_model.source_bytes is None:
        return
    if work(graph.nodes) > MEASURE_MAX_WORK:
        for p in whole:
            records[id(p)].why += f"; nor the whole model: over {MEASURE_MAX_WORK:,} multiply-adds"
        return
    try:
        whole_ms = cpu_ms(WholeModelStep(graph, num_threads), graph)
        gpu = {id(p): records[id(p)].gpu_ms if records[id(p)].gpu_ms is not None else gpu_ms(p, graph)
               for p in made}
    except (ModelError, GpuError, RuntimeError, ValueError) as exc:
        for p in whole:
            records[id(p)].why += f"; nor the whole model: {exc}"
        return
    total, others = sum(gpu.values()), f" (the GPU time of all {len(made)} partitions)" if len(made) > 1 else ""
    moved = whole_ms * MARGIN < total
    for p in made if moved else whole:
        record = records[id(p)]
        record.gpu_ms, record.cpu_ms, record.cpu = gpu[id(p)], whole_ms, "LiteRT whole model"
        _judge(record, total, whole_ms, others)


def _judge(record, gpu, cpu, whose=""):
    """Set record.on and record.why from the GPU and CPU times (ms)."""
    faster = cpu * MARGIN < gpu
    record.on = "cpu" if faster else "gpu"
    record.why = (f"{record.cpu} {cpu:.3f} ms x {MARGIN} {'<' if faster else '>='} GPU {gpu:.3f} ms{whose}: "
                  f"{'the CPU' if faster else 'the GPU'} runs it")
    log.info("placement='fastest': %s: %s", record.nodes, record.why)
