"""GpuDelegate: typed options, the GL context, and the compiled partitions of a model."""
import logging
import os
import re
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Self, get_args

import numpy as np

from . import __version__
from . import partition as partitioning
from . import placement as placing
from . import quant
from .gpu import complex_view, half_overflow, index_view, kernels
from .gpu.compiler import PlanLimitError, compile_plan
from .errors import GpuError
from .graph import Graph, Node
from .gpu.context import GL_APIS, acquire_shared, default_gl_api, devices as probe_devices, release_shared
from .gpu.driver_cache import point_driver_cache
from .gpu.egl import SOFTWARE_RENDERERS
from .gpu.memory import STRATEGIES
from .gpu.runtime import GpuPartition
from .gpu.serialization import Package, PlanCache
from .gpu.serialization.calibration import default_calibration_cache_dir
from .gpu.workgroup_tuner import WorkgroupTuner
from .gpu.transforms import RULES, Record, rewrite_partition
from .gpu import variable_sync
from .gpu.variables import bind as bind_variables

Precision = Literal["fp32", "fp16", "fp16_fp32acc", "auto"]
Preference = Literal["fast_single_answer", "sustained_speed", "balanced"]
Priority = Literal["auto", "max_precision", "min_latency", "min_memory_usage"]
ObjectType = Literal["auto", "buffer"]
Placement = Literal["gpu", "fastest"]
PRECISIONS, PREFERENCES, PRIORITIES, OBJECT_TYPES, PLACEMENTS = (
    get_args(t) for t in (Precision, Preference, Priority, ObjectType, Placement))
MAX_LOG_CHARS = 4000  # of a driver's compile log quoted in a warning
_NODE_LABEL = re.compile(r"#(\d+) \(")  # how a dispatch label names its node (Node.label)
log = logging.getLogger("gles_delegate")


def _float_view(graph, spec):
    """The float view of a partition (quant.py): a quantized partition as float nodes with
    fake-quant steps, complex64 tensors as pairs of floats (gpu/complex_view.py) and int64
    tensors that hold int32 values (ARG_MAX's indices) as int32 (gpu/index_view.py); what a cold
    start compiles, and what maps captured values back to the model's integers."""
    view = quant.float_view(spec.nodes, spec.inputs, spec.outputs, next_index=len(graph.tensors))
    return index_view.index_view(complex_view.complex_view(view, len(graph.tensors)))


def _gpu_reason(node):
    """None if a GPU kernel runs `node`, through its complex view where it has complex64 tensors
    and its index view where its int64 tensors hold int32 values (ARG_MAX's indices)."""
    return index_view.unsupported_reason(
        node, lambda view: complex_view.unsupported_reason(view, kernels.unsupported_reason))


def _loaded_view(graph, nodes):
    """The float view a partition loaded from the serialization cache keeps (it is no part of
    the entry), None for a float partition (its view maps nothing back: a warm start skips it)."""
    if not any(quant.touches_quantized(n) for n in nodes):
        return None
    return _float_view(graph, partitioning.boundary(graph, nodes))


# What the serialization cache needs from above gpu/ (it imports nothing there).
CACHE_PACKAGE = Package(version=__version__, root=os.path.dirname(os.path.abspath(__file__)),
                        record_type=Record, float_view=_loaded_view)


# The options as GpuDelegateOptions and GpuDelegate document them: help() of either lists them.
_OPTIONS_DOC = """
    Options (names as in TFLite's TfLiteGpuDelegateOptionsV2; a wrong value raises ValueError
    naming the option and what it takes). Each: type, default; meaning.

    is_precision_loss_allowed: bool, False. True selects FP16 unless `precision` is set
        (TFLite's switch); False selects FP32.
    precision: 'fp32' | 'fp16' | 'fp16_fp32acc' | 'auto' | None, None. 'fp32': float storage and
        math; 'fp16': half storage and half math; 'fp16_fp32acc': half storage, float accumulation
        in conv, depthwise, fully connected, transpose conv and reductions; 'auto': as
        'fp16_fp32acc', then a calibration run compares every tensor with an FP32 run of the same
        plan and stores as float (with float weights) the tensors that keep the outputs within
        auto_tolerance of FP32, overflow first (summary()['promoted_tensors'] says which and
        why; calibrate.py). Overrides is_precision_loss_allowed and the priorities; None derives
        it from them.
    auto_tolerance: float > 0, 1e-2. precision='auto': the bound on every output of a GPU
        partition, max |x - x_fp32| / max |x_fp32|; calibration aims at a quarter of it on its
        inputs (calibrate.MARGIN), for inputs it did not see.
    calibration_inputs: a sequence of arrays (one per model input, in input order), or a
        sequence of such samples, or None, None. precision='auto' calibrates on these; None:
        seeded random inputs (floats over the range the model states, else U(-1, 1); quantized
        integers over their range). A sample holding NaN or infinities, or whose every input
        holds one value throughout (all zeros), measures no error: ValueError naming it. Always
        the model's inputs: a partition inside a loop body calibrates on what the body
        receives when the model runs on them (calibrate.graph_samples).
    inference_preference: 'fast_single_answer' | 'sustained_speed' | 'balanced',
        'fast_single_answer'. 'sustained_speed' turns tune_workgroups on and compiles every
        dispatch's params into a program of its own (a longer init, about twice the programs to
        compile, for faster invokes); the others change nothing.
    inference_priority1: 'auto' | 'max_precision' | 'min_latency' | 'min_memory_usage', 'auto'.
        'max_precision' forces FP32 when precision is None; the others change nothing.
    inference_priority2: as inference_priority1, 'auto'. Accepted for TFLite's sake; no effect.
    inference_priority3: as inference_priority1, 'auto'. Accepted for TFLite's sake; no effect.
    enable_quantized_inference: bool, True. True: int8 / uint8 nodes run on the GPU through their
        float view (dequantized constants, fake-quant steps, integer inputs and outputs);
        False: they stay on the CPU.
    max_delegated_partitions: int >= 0, 1. Keep the N largest GPU partitions (in nodes), the rest
        runs on the CPU; 0: keep them all.
    serialization_dir: str | None, None. A directory where compiled partitions (plans, packed
        constants, program binaries) are stored and loaded from on a later start
        (summary()['cache_hit'] says which happened); None: compile at every start.
    model_token: str | None, None. The model's key in serialization_dir; None: a hash of the
        model's bytes.
    calibration_cache_dir: str | None, $GLES_DELEGATE_CALIBRATION_CACHE (empty: None) else
        $XDG_CACHE_HOME/gles_delegate/calibration (~/.cache/...). precision='auto': where what
        calibration chose is kept (a few KB per model), so that a later start of the same model,
        options and GPU skips calibrating (summary()['calibration'][k]['cached']); None: calibrate
        at every start (unless serialization_dir holds the plans).
    object_type: 'auto' | 'buffer', 'auto'. The GPU object type; tensors live in SSBO buffers
        (PHWC4 layout) either way.
    memory_strategy: 'naive' | 'greedy_in_order' | 'greedy_by_size' | 'greedy_by_breadth' |
        'greedy_by_lifetime' | 'best', 'best'. How the intermediates are placed in one GPU
        buffer: 'naive' one region per tensor, the greedy ones first-fit in that order, 'best'
        the smallest plan found (summary()['intermediate_bytes'] is the result).
    device_index: int >= 0 | None, None. The EGL device to run on (its 'index' in
        CompatibilityList.devices()); None: the first hardware GPU, else Mesa's software
        device, else the surfaceless or default EGL display.
    gl_api: 'auto' | 'gles' | 'gl', $GLES_DELEGATE_GL_API else 'auto'. 'gles': an OpenGL ES 3.1+
        context; 'gl': desktop OpenGL 4.3+ core; 'auto': the former, else the latter.
    rewrite_rules: bool, True. Apply the graph rewrite rules (fusions, dropped no-ops) to each
        partition; False compiles it as the model states it, one kernel per node (for parity
        checks).
    tune_workgroups: bool, False. Time candidate workgroup sizes of every dispatch on this GPU at
        compile time and keep the fastest (needs a GPU timer query, else it logs why and keeps
        the heuristic's); also on with inference_preference='sustained_speed'.
    debug_nonfinite: bool, False. Run the GPU partitions dispatch by dispatch, reading back every
        tensor each dispatch writes, and report the first NaN or Inf (the node, the tensor) with
        a warning and in summary()['first_nonfinite']. Slow: for debugging a model that gives
        NaN on the GPU.
    placement: 'gpu' | 'fastest', 'gpu'. 'gpu': every partition the GPU can run runs there, so
        the delegate shows op by op what this GPU does with the model. 'fastest': at
        allocate_tensors() each small partition is also timed on the GPU and on LiteRT's CPU
        kernels (what runs it otherwise: the model file whole where every partition moves), in
        paired runs, and the CPU takes it where it was faster in enough of them to exclude a
        tie (a sign test at placement.ALPHA; a tiny model: a GPU dispatch costs microseconds of
        driver time); summary()['placements'] says what was measured. Needs ai-edge-litert (without it every
        partition stays on the GPU, and the log and summary say so); the numpy reference is
        never chosen for speed. See gles_delegate/placement.py.
"""


@dataclass
class GpuDelegateOptions:
    __doc__ = "The options of a GpuDelegate, checked when made.\n" + _OPTIONS_DOC

    is_precision_loss_allowed: bool = False
    precision: Precision | None = None
    auto_tolerance: float = 1e-2
    calibration_inputs: Any = None
    inference_preference: Preference = "fast_single_answer"
    inference_priority1: Priority = "auto"
    inference_priority2: Priority = "auto"
    inference_priority3: Priority = "auto"
    enable_quantized_inference: bool = True
    max_delegated_partitions: int = 1
    serialization_dir: str | None = None
    model_token: str | None = None
    calibration_cache_dir: str | None = field(default_factory=default_calibration_cache_dir)
    object_type: ObjectType = "auto"
    memory_strategy: str = "best"
    device_index: int | None = None
    gl_api: str = field(default_factory=default_gl_api)
    rewrite_rules: bool = True
    tune_workgroups: bool = False
    debug_nonfinite: bool = False
    placement: Placement = "gpu"

    def __post_init__(self) -> None:
        _check_choice("precision", self.precision, PRECISIONS, allow_none=True)
        _check_choice("inference_preference", self.inference_preference, PREFERENCES)
        for k in (1, 2, 3):
            _check_choice(f"inference_priority{k}", getattr(self, f"inference_priority{k}"), PRIORITIES)
        _check_choice("object_type", self.object_type, OBJECT_TYPES)
        _check_choice("placement", self.placement, PLACEMENTS)
        _check_choice("memory_strategy", self.memory_strategy, STRATEGIES)
        _check_choice("gl_api", self.gl_api, GL_APIS)
        if self.device_index is not None and (isinstance(self.device_index, bool)
                                              or not isinstance(self.device_index, int) or self.device_index < 0):
            raise ValueError("GpuDelegateOptions.device_index must be an int >= 0 or None, "
                             f"got {self.device_index!r}")
        for name in ("is_precision_loss_allowed", "enable_quantized_inference", "rewrite_rules", "tune_workgroups",
                     "debug_nonfinite"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"GpuDelegateOptions.{name} must be a bool, got {getattr(self, name)!r}")
        if isinstance(self.max_delegated_partitions, bool) or not isinstance(self.max_delegated_partitions, int) \
                or self.max_delegated_partitions < 0:
            raise ValueError("GpuDelegateOptions.max_delegated_partitions must be an int >= 0, "
                             f"got {self.max_delegated_partitions!r}")
        if isinstance(self.auto_tolerance, bool) or not isinstance(self.auto_tolerance, (int, float)) \
                or not 0 < self.auto_tolerance < float("inf"):
            raise ValueError(f"GpuDelegateOptions.auto_tolerance must be a finite number > 0, got {self.auto_tolerance!r}")
        for name in ("serialization_dir", "model_token", "calibration_cache_dir"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise ValueError(f"GpuDelegateOptions.{name} must be a str or None, got {value!r}")
        _check_calibration_inputs(self.calibration_inputs)

    @property
    def resolved_precision(self) -> Precision:
        """The precision actually used: `precision`, else from the priorities and
        is_precision_loss_allowed as TFLite derives it."""
        if self.precision is not None:
            return self.precision
        if self.inference_priority1 == "max_precision" or not self.is_precision_loss_allowed:
            return "fp32"
        return "fp16"

    @property
    def resolved_tune_workgroups(self) -> bool:
        """Whether compilation times workgroup candidates: asked for, or implied by a
        sustained-speed preference (a longer init pays off over many invokes)."""
        return self.tune_workgroups or self.inference_preference == "sustained_speed"

    @property
    def resolved_bake_params(self) -> str | None:
        """Which dispatches' params compile into their programs (compiler.compile_plan's `bake`):
        every one with a sustained-speed preference (a program per dispatch, about twice the
        programs to compile, for a bind less per dispatch), else the compiler's default."""
        return "all" if self.inference_preference == "sustained_speed" else None


class _HeldLogs(logging.Filter):
    """Context manager: records this thread logs on the 'gles_delegate' logger meanwhile are
    held back (from every handler, the serialization cache's recorder included); replay() logs
    them. Other threads' records pass."""

    def __init__(self):
        super().__init__()
        self.records = []
        self.thread = threading.get_ident()

    def filter(self, record):
        if record.thread != self.thread:
            return True
        self.records.append(record)
        return False

    def __enter__(self):
        log.addFilter(self)
        return self

    def __exit__(self, *exc):
        log.removeFilter(self)
        return False

    def replay(self):
        for record in self.records:
            log.handle(record)


def _first_line(exc):
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _log_summary(exc):
    """The driver's first error line of a compile GpuError ('...failed to compile on X:\n<log>')."""
    lines = [line.strip() for line in str(exc).splitlines()[1:] if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or [_first_line(exc)])[0]


def _check_calibration_inputs(value):
    """calibration_inputs: None or a non-empty sequence (of arrays, or of samples of arrays): an
    empty one would calibrate on nothing and report no error, a str or a number is no sample
    (calibrate.sample_inputs checks the arrays against the model's inputs)."""
    if value is None:
        return
    if isinstance(value, (str, bytes)) or not isinstance(value, (Sequence, np.ndarray)) or len(value) == 0:
        raise ValueError("GpuDelegateOptions.calibration_inputs must be None or a non-empty list (of arrays, one per "
                         f"model input, or of such samples), got {type(value).__name__} {_brief(value)}")


def _brief(value):
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_choice(name, value, choices, allow_none=False):
    if value is None and allow_none:
        return
    if value not in choices:
        raise ValueError(f"GpuDelegateOptions.{name} must be one of {list(choices)}, got {value!r}")


class GpuDelegate:
    __doc__ = """Runs every node it can on the GPU through OpenGL ES 3.1 compute shaders.

        interp = Interpreter("model.tflite", experimental_delegates=[GpuDelegate()])

    Pass a GpuDelegateOptions, or its options as keyword arguments (GpuDelegate(precision="fp16")),
    not both. It holds a share of the process's EGL
    context until close() (or the end of a `with` block); summary() says what it did with the
    last model it was given.
""" + _OPTIONS_DOC

    def __init__(self, options: GpuDelegateOptions | None = None, **kwargs: Any) -> None:
        if options is not None and kwargs:
            raise ValueError("pass either a GpuDelegateOptions or keyword options, not both")
        if options is not None and not isinstance(options, GpuDelegateOptions):
            raise TypeError(f"options must be a GpuDelegateOptions, got {type(options).__name__}")
        self.options = options or GpuDelegateOptions(**kwargs)
        if self.options.serialization_dir:
            point_driver_cache(self.options.serialization_dir)  # before the first display, or never
        self.context = acquire_shared(self.options.device_index, self.options.gl_api)
        self.partitions: list[GpuPartition] = []  # every live partition this delegate compiled, for close()
        self.rewrite_log: list[Record] = []  # transforms.Record of the last partition() call, for the inspector
        # {node label: why} of the nodes the last partition() call moved back to the CPU because
        # their kernel did not compile or a partition exceeded a device limit.
        self.fallbacks: dict[str, str] = {}
        # placement='fastest': {node label: why} of the nodes the last partition() call left to
        # the CPU because it ran them faster, and what was measured per partition (Measured).
        self.declined: dict[str, str] = {}
        self.placements: list[placing.Measured] = []
        self._litert_missing_said = False
        self._nonfinite = {"first_nonfinite": None}  # filled by partitions under debug_nonfinite
        self._overflow = half_overflow.new_record()  # counted by partitions whose half storage overflows
        self._summary: dict[str, Any] = {}

    # -- the interpreter's side -----------------------------------------------------------
    @property
    def wants_model_digest(self) -> bool:
        """Whether partition() will need the model's sha256 (the serialization cache keys
        entries by it): the Interpreter then hashes the file in a thread while it parses."""
        return bool(self.options.serialization_dir)

    @property
    def wants_cpu_side(self) -> bool:
        """Whether partition() takes a `cpu` (placement.CpuSide) to time partitions against:
        placement='fastest'."""
        return self.options.placement == "fastest"

    def can_run(self, node: Node) -> bool:
        """True if a GPU kernel can run this exact node."""
        return self.unsupported_reason(node) is None

    def unsupported_reason(self, node: Node) -> str | None:
        """None if the GPU runs `node` (a quantized node through its float view, quant.py, a
        complex64 one through its complex view), else why not (what the partitioner logs)."""
        if quant.touches_quantized(node):
            if not self.options.enable_quantized_inference:
                return "quantized inference is disabled (enable_quantized_inference=False)"
            return quant.unsupported_reason(node, _gpu_reason)
        return _gpu_reason(node)

    def partition(self, graph: Graph, candidates: list[Node],
                  cpu: placing.CpuSide | None = None) -> list[GpuPartition]:
        """Claim partitions of `graph` among `candidates`; returns the compiled partitions.
        cpu: what runs the nodes left to the CPU (placement.CpuSide); with placement='fastest',
        the partitions it runs clearly faster are left to it (placement.decide). None: nothing
        is measured (a LiteRT kernel compiled again after a resize cannot give nodes back)."""
        start = time.perf_counter()
        self._require_open()
        self.partitions = [p for p in self.partitions if not p.released]
        precision = self.options.resolved_precision
        cache = PlanCache(self.options, self.context, graph, candidates, CACHE_PACKAGE)  # inert without serialization_dir
        loaded = cache.load()
        self.fallbacks = {}
        if loaded is not None:
            made, self.rewrite_log = loaded
        else:
            with cache.recording():  # the partitioner's log lines, repeated on a cache hit
                made = self._build(graph, candidates, precision)
            cache.store(made, self.rewrite_log)
        made = self._place(graph, made, cpu)
        variable_sync.attach(made, graph)  # the resource variables each holds between invokes
        self._nonfinite = {"first_nonfinite": None}
        self._overflow = half_overflow.new_record()
        for p in made:
            p.nonfinite = self._nonfinite if self.options.debug_nonfinite else None
            p.overflow = self._overflow
            p.float_twin = self._float_twin(graph, p) if precision == "auto" else None
        self.partitions += made
        self._summarize(graph, made, precision, (time.perf_counter() - start) * 1000, loaded is not None)
        return made

    def _float_twin(self, graph, partition):
        """Precision 'auto': a callable compiling `partition`'s nodes again at fp32 into a
        GpuPartition (None where that fails), which gpu/half_overflow.py runs on an invoke whose
        half storage overflowed into the outputs; None for a partition holding state (resource
        variables, variable tensors), which a second run would advance twice."""
        spec = partitioning.boundary(graph, partition.nodes)
        if partition.variables is not None or any(t.is_variable for t in spec.inputs):
            return None

        def make():
            compiled, _ = self._compile_partition(graph, spec, "fp32")
            return None if compiled is None else GpuPartition(self.context, compiled[0], spec.nodes, view=compiled[1])
        return make

    def _place(self, graph, made, cpu):
        """The partitions of `made` that stay on the GPU: all of them unless placement='fastest'
        and the caller says what runs the others (`cpu`); declined and placements record why."""
        self.declined, self.placements = {}, []
        if self.options.placement != "fastest" or cpu is None or not made:
            return made
        kept, self.placements = placing.decide(made, graph, cpu)
        if self.placements[0].why == placing.NO_LITERT and not self._litert_missing_said:
            log.warning("placement='fastest': ai-edge-litert is not installed, so there is no CPU to compare with; "
                        "every partition stays on the GPU")
            self._litert_missing_said = True
        for p, record in zip(made, self.placements):
            if record.on == "cpu":
                self.declined.update((node.label, f"placement='fastest': {record.why}") for node in p.nodes)
        return kept

    def _build(self, graph, candidates, precision):
        """Find, rewrite, compile and load the partitions (what a serialization cache hit skips).

        A node whose kernel does not compile or link on this driver, or a partition that exceeds
        a device limit (compiler.check_limits), is moved to the CPU with a warning and the graph
        partitioned again, so its neighbours stay on the GPU: rejected {id(node): why} is what
        the reason function then consults. Each round moves at least one node, so this ends.
        The partitioner's log lines of the rounds that were redone are dropped."""
        rejected = {}

        def reason(node):
            return rejected.get(id(node)) or self.unsupported_reason(node)

        limit = self.options.max_delegated_partitions
        while True:
            with _HeldLogs() as held:
                specs = partitioning.find_partitions(graph, candidates, reason, limit)
            compiled, moved = [], {}
            for spec in specs:
                result, failed = self._compile_partition(graph, spec, precision)
                moved.update(failed)
                compiled.append(result)
            if not moved:
                break
            rejected.update(moved)
        held.replay()
        made, records = [], []
        try:  # the GL buffers, once every program of every partition compiled
            for spec, (plan, view, rewritten, rewrite_log) in zip(specs, compiled):
                computed = {t.index for n in rewritten.nodes for t in n.outputs}
                fused_away = {t.index for n in spec.nodes for t in n.outputs} - computed
                made.append(GpuPartition(self.context, plan, spec.nodes, view=view, fused_away=fused_away))
                records += rewrite_log
        except BaseException:  # out of GPU memory: free what the earlier partitions hold
            for partition in made:
                partition.release()
            raise
        if rejected:
            self.fallbacks = {node.label: rejected[id(node)] for node in graph.nodes if id(node) in rejected}
            with _HeldLogs():  # counting the runs: its log lines are dropped
                runs = len(partitioning.find_partitions(graph, candidates, reason, 0))
            if limit and runs > limit:
                log.warning("moving %d node(s) to the CPU left %d runs of GPU nodes; max_delegated_partitions=%d "
                            "keeps the largest %d (0 keeps them all)", len(rejected), runs, limit, limit)
        self.rewrite_log = records
        if precision == "auto":
            from .calibrate import calibrate
            made = calibrate(self, graph, specs, compiled, made, CACHE_PACKAGE)
        return made

    def _compile_partition(self, graph, spec, precision):
        """((Plan, float view, rewritten graph, rewrite log), {}) for one partition, its
        programs compiled; or (None, {id(node): why}) naming the nodes to move to the CPU: a
        program that does not compile or link (the nodes whose dispatches use it), or a plan
        over a device limit."""
        # Quantized nodes run as float nodes with fake-quant steps; float nodes are unchanged.
        view = _float_view(graph, spec)
        # Resource variables: READ_VARIABLE / ASSIGN_VARIABLE use storage of the partition's own.
        bound = bind_variables(view.nodes, view.inputs, view.outputs, max(len(graph.tensors), view.next_index))
        rewritten, rewrite_log = rewrite_partition(*bound, RULES if self.options.rewrite_rules else (),
                                                   len(graph.tensors))
        tuner = WorkgroupTuner(self.context) if self.options.resolved_tune_workgroups else None
        try:
            try:
                plan = compile_plan(rewritten.nodes, rewritten.inputs, rewritten.outputs, precision,
                                    self.context.limits, self.options.memory_strategy, tuner,
                                    bake=self.options.resolved_bake_params)
            except PlanLimitError:
                raise
            except GpuError as exc:
                if tuner is None:
                    raise
                # A candidate workgroup's program failed while tuning: compile the heuristic's
                # programs, whose failures are found (and their nodes moved) below.
                log.warning("workgroup tuning failed (%s); keeping the heuristic workgroups", _first_line(exc))
                plan = compile_plan(rewritten.nodes, rewritten.inputs, rewritten.outputs, precision,
                                    self.context.limits, self.options.memory_strategy, None,
                                    bake=self.options.resolved_bake_params)
        except PlanLimitError as exc:
            nodes = self._nodes_of(spec, exc.labels) or spec.nodes
            why = f"the GPU cannot run it here: {exc}"
            log.warning("GPU partition of %d node(s) (%s .. %s): %s; %s", len(spec.nodes),
                        spec.nodes[0].label, spec.nodes[-1].label, exc,
                        "its nodes run on the CPU" if nodes is spec.nodes
                        else "moving " + ", ".join(n.label for n in nodes) + " to the CPU")
            return None, {id(n): why for n in nodes}
        failed = {}
        with self.context.current():
            self.context.start_programs(plan.sources)  # compiled at once where the driver can
            for k, source in enumerate(plan.sources):
                try:
                    self.context.program(source)
                except GpuError as exc:
                    steps = [i for i, step in enumerate(plan.steps) if step[0] == k]
                    labels = [plan.labels[i] for i in steps]
                    templates = sorted({plan.templates[i] for i in steps})
                    nodes = self._nodes_of(spec, labels) or spec.nodes
                    driver_log = str(exc)
                    if len(driver_log) > MAX_LOG_CHARS:
                        driver_log = driver_log[:MAX_LOG_CHARS] + " [...]"
                    log.warning("GPU kernel %s of %s failed to compile; %s on the CPU. %s",
                                "/".join(repr(t) for t in templates), ", ".join(labels[:4])
                                + (f" and {len(labels) - 4} more dispatches" if len(labels) > 4 else ""),
                                ("running " + ", ".join(n.label for n in nodes)) if nodes is not spec.nodes
                                else f"running the whole partition ({len(spec.nodes)} nodes)", driver_log)
                    log.debug("the program that failed (the log's line numbers count in it):\n%s", source)
                    why = (f"its GPU kernel ({'/'.join(templates)}) failed to compile on {self.context.renderer}: "
                           f"{_log_summary(exc)}")
                    for node in nodes:
                        failed.setdefault(id(node), why)
            if failed:
                self.context.clear_errors()  # a failed compile may leave an error behind on some drivers
        if failed:
            return None, failed
        return (plan, view, rewritten, rewrite_log), {}

    @staticmethod
    def _nodes_of(spec, labels):
        """The nodes of `spec` that dispatch labels name ('#<index> (<OP>)...', Node.label)."""
        indices = {int(m.group(1)) for label in labels for m in [_NODE_LABEL.match(label)] if m}
        return [n for n in spec.nodes if n.index in indices]

    def _require_open(self):
        if self.context is None:
            raise ValueError("the GpuDelegate is closed")

    def _summarize(self, graph, made, precision, init_ms, cache_hit):
        plans = [p.plan for p in made]
        gpu_nodes = sum(len(p.nodes) for p in made)
        self._summary = {
            "renderer": self.context.renderer, "gl_version": self.context.version,
            "gl_api": self.context.gl_api, "egl_platform": self.context.egl_platform, "precision": precision,
            "gpu_nodes": gpu_nodes, "cpu_nodes": len(graph.nodes) - gpu_nodes,
            "partitions": len(plans), "dispatches": sum(len(p.steps) for p in plans),
            "programs": len({s for p in plans for s in p.sources}),
            "intermediate_bytes": sum(p.arena_elements * p.element_bytes for p in plans),
            "intermediate_lower_bound_bytes": sum(p.arena_lower_bound * p.element_bytes for p in plans),
            "intermediate_naive_bytes": sum(p.arena_naive * p.element_bytes for p in plans),
            "constant_bytes": sum(p.buffer_bytes()["constants"] for p in plans),
            "float_bytes": sum(p.buffer_bytes().get("float", 0) for p in plans),
            # Precision 'auto': what the calibration stored as float, and why.
            "promoted_tensors": {index: why for p in plans for index, why in p.promoted_tensors.items()},
            "promoted_nodes": {label: why for p in plans for label, why in p.promoted_nodes.items()},
            "calibration": [p.calibration for p in plans if p.calibration],
            "init_ms": init_ms, "cache_hit": cache_hit,
            # Nodes moved to the CPU at compile time (a kernel that did not compile, a device limit).
            "fallbacks": dict(self.fallbacks),
            "placement": self.options.placement,
            "placements": [record.as_dict() for record in self.placements],
        }

    # -- the user's side ------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        """What the delegate did with the last model it was given: {} before any, else a dict

        renderer: the GL context's GL_RENDERER string (the GPU, or llvmpipe for Mesa's software one).
        gl_version: its GL_VERSION string.
        gl_api: 'gles' (OpenGL ES) or 'gl' (desktop OpenGL core).
        egl_platform: the EGL display it runs on: 'device', 'surfaceless' or 'default'.
        precision: the precision used, 'fp32', 'fp16', 'fp16_fp32acc' or 'auto' (options.resolved_precision).
        gpu_nodes: nodes of the executed graph (after constant folding) that run on the GPU.
        cpu_nodes: nodes of that graph that run on the CPU.
        partitions: GPU partitions (runs of GPU nodes, each one compiled plan).
        dispatches: compute dispatches per invoke, over all partitions.
        programs: distinct compiled shader programs.
        intermediate_bytes: GPU memory of the intermediate tensors (the planned arena), bytes.
        intermediate_lower_bound_bytes: the most intermediate memory alive at any one dispatch,
            bytes: no plan can use less.
        intermediate_naive_bytes: the intermediates' memory with one buffer per tensor, bytes.
        constant_bytes: GPU memory of the weights and other constants, bytes.
        float_bytes: precision 'auto': the float buffer of the promoted tensors and weights, bytes
            (0 otherwise).
        promoted_tensors: precision 'auto': {tensor index: why} of the tensors stored as float.
        promoted_nodes: precision 'auto': {node label: why} of the nodes whose weights are float.
        calibration: precision 'auto': per partition {'rounds', 'output_error', 'target',
            'samples', 'unmeasured', 'held_out', 'held_out_error', 'disproved_by_held_out',
            'demoted', 'cached'}: the calibration runs made (promotion, search and demotion), the
            worst output error (relative to max |FP32|) of the chosen plan on the samples chosen
            on (None when no sample could measure it: the partition keeps half storage), the
            error it aimed at (auto_tolerance / calibrate.MARGIN), the samples measured on and
            those left out (FP32 outputs without a finite value), the held-out ones left and their
            error, the held-out error that made the choice go on over more samples (else None),
            the promotions the demotion pass took back, and whether the choice came from the
            calibration cache (calibration_cache_dir: no run made); a serialization cache hit
            repeats the stored ones.
        init_ms: partitioning + rewriting + compiling (or loading from serialization_dir), ms.
        cache_hit: whether the plan and programs came from serialization_dir.
        fallbacks: {node label: why} of the nodes moved to the CPU because the driver refused
            their kernel or a partition exceeded a device limit.
        placement: the option, 'gpu' or 'fastest'.
        placements: placement='fastest': per partition found, {'nodes' (their span), 'on' ('gpu'
            or 'cpu'), 'gpu_ms', 'cpu_ms' (the medians measured, None where not), 'cpu' (what the
            CPU time ran: 'LiteRT sub-model', 'LiteRT whole model'), 'threads' (LiteRT's thread
            count there, None: its default), 'cpu_faster_runs' and 'paired_runs' (the rounds the
            CPU was faster in, of those timed), 'why'}; [] with 'gpu'.
        first_nonfinite: None, or (with debug_nonfinite) where the first NaN / Inf of the
            invokes since the model was given appeared: {'node', 'tensor', 'index', 'dispatch',
            'step', 'nan', 'inf', 'element'} (the node's label, the tensor's name and index, the
            dispatch label and step that wrote it, None for a partition input, the counts of
            NaN and Inf, the index of the first non-finite element).
        half_overflow: invokes since the model was given in which half storage rounded a finite
            value beyond 65504 to inf (gpu/half_overflow.py): {'invokes' (any partition's),
            'reached_outputs' (those in which it reached a partition output: a float one inf
            or NaN, or any integer or bool one; each warned of with a HalfOverflowWarning),
            'recomputed' (those of them precision 'auto' computed again with float32 storage),
            'first' (None, or where the first of those was: {'nodes': the partition's first and
            last node, 'outputs': [{'index', 'tensor', 'how'}]})}.
        """
        out = dict(self._summary)
        if out:
            out["first_nonfinite"] = self._nonfinite["first_nonfinite"]
            out["half_overflow"] = dict(self._overflow)
        return out

    def _get_native_delegate_pointer(self) -> int:
        """A TfLiteDelegate* for LiteRT's Interpreter (ai_edge_litert, tflite_runtime, tf.lite),
        which calls this for each of its experimental_delegates: one per interpreter, claiming
        the nodes this package's Interpreter would put on the GPU (gles_delegate/litert/)."""
        from .litert import native_delegate_pointer  # ctypes glue, loaded only when LiteRT asks
        self._require_open()
        return native_delegate_pointer(self)

    def close(self) -> None:
        """Release the partitions' GL objects and this delegate's hold on the shared context.
        Interpreters using it can no longer invoke (a LiteRT interpreter's invoke() raises
        RuntimeError; its callbacks into this package stay valid). Closing twice is harmless."""
        if self.context is None:
            return
        for p in self.partitions:
            p.release()
        self.partitions = []
        release_shared(self.context)
        self.context = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: GL may already be gone
            pass


# -- TFLite-style plugin loading --------------------------------------------------------------
_PREFERENCE_CODES = dict(enumerate(PREFERENCES))          # TfLiteGpuInferenceUsage
_PRIORITY_CODES = {0: "auto", 1: "max_precision", 2: "min_latency", 3: "min_memory_usage"}
LIBRARY_NAMES = ("gles", "gles_delegate", "gpu")


def _parse_bool(key, text):
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"delegate option {key!r}: expected a boolean (0/1/true/false), got {text!r}")


def _parse_int(key, text):
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError(f"delegate option {key!r}: expected an integer, got {text!r}") from None


def _parse_float(key, text):
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"delegate option {key!r}: expected a number, got {text!r}") from None


def _parse_enum(codes):
    def parse(key, text):
        value = text.strip().lower()
        if value.lstrip("-").isdigit():
            if int(value) not in codes:
                raise ValueError(f"delegate option {key!r}: code {value} is not one of {sorted(codes)}")
            return codes[int(value)]
        return value
    return parse


_PARSERS = {
    "is_precision_loss_allowed": _parse_bool, "enable_quantized_inference": _parse_bool,
    "precision": lambda key, text: text.strip().lower(),
    "inference_preference": _parse_enum(_PREFERENCE_CODES),
    "inference_priority1": _parse_enum(_PRIORITY_CODES), "inference_priority2": _parse_enum(_PRIORITY_CODES),
    "inference_priority3": _parse_enum(_PRIORITY_CODES),
    "max_delegated_partitions": _parse_int, "device_index": _parse_int,
    "serialization_dir": lambda key, text: text, "model_token": lambda key, text: text,
    "calibration_cache_dir": lambda key, text: text or None,
    "object_type": lambda key, text: text.strip().lower(),
    "memory_strategy": lambda key, text: text.strip().lower(),
    "gl_api": lambda key, text: text.strip().lower(),
    "rewrite_rules": _parse_bool, "tune_workgroups": _parse_bool, "debug_nonfinite": _parse_bool,
    "auto_tolerance": _parse_float, "placement": lambda key, text: text.strip().lower(),
}


def parse_plugin_options(options):
    """GpuDelegateOptions from TFLite-style string options {key: str}. Each key maps to the field
    of the same name (TFLite's own GPU plugin parser maps most keys to the wrong field); enums
    take a name or TFLite's integer code. Unknown keys: ValueError."""
    if options is not None and not isinstance(options, Mapping):
        raise TypeError(f"GPU delegate options are a dict of {{name: str}}, not {type(options).__name__}")
    fields = {}
    for key, value in (options or {}).items():
        if key not in _PARSERS:
            raise ValueError(f"unknown GPU delegate option {key!r}; known: {sorted(_PARSERS)}")
        fields[key] = _PARSERS[key](key, value if isinstance(value, str) else str(value))
    return GpuDelegateOptions(**fields)


def load_delegate(library: str, options: Mapping[str, object] | None = None) -> GpuDelegate:
    """TFLite's load_delegate() for this package: load_delegate('gles', {'is_precision_loss_allowed': '1'})."""
    if library not in LIBRARY_NAMES:
        raise ValueError(f"load_delegate: this package provides the GPU delegate as one of {LIBRARY_NAMES}, "
                         f"not {library!r}")
    return GpuDelegate(parse_plugin_options(options))


class CompatibilityList:
    """Whether this device can run the delegate, and the options that suit it best."""

    def __init__(self, device_index: int | None = None, gl_api: str | None = None) -> None:
        self.device_index = device_index
        self.gl_api = gl_api
        self.reason: str | None = None  # why no context could be made
        self.device: dict[str, Any] | None = None  # GlContext.describe() of the context made
        try:
            context = acquire_shared(device_index, gl_api)
        except GpuError as exc:
            self.reason = str(exc)
            return
        try:
            self.device = context.describe()
        finally:
            release_shared(context)

    @staticmethod
    def devices() -> list[dict[str, Any]]:
        """Every EGL display found, probed with a small context per API: a list of dicts
        {index (the device_index to pass, None off the device platform), platform ('device' |
        'surfaceless' | 'default'), renderer, vendor, software, egl_device (DRM node or name),
        egl_vendor, egl_version, apis {'gles' | 'gl': GL_VERSION}, errors {what: why}}."""
        return probe_devices()

    def is_delegate_supported_on_this_device(self) -> bool:
        """True when an EGL context with GL ES 3.1 / GL 4.3 compute shaders can be made."""
        return self.device is not None

    def best_options_for_this_device(self) -> GpuDelegateOptions:
        """FP32 on a software renderer (halves gain nothing there); half storage with FP32
        accumulation on a hardware GPU (half the memory traffic, accumulations stay exact)."""
        if self.device is None:
            raise GpuError(f"the GPU delegate cannot run here: {self.reason}")
        software = any(name in self.device["renderer"].lower() for name in SOFTWARE_RENDERERS)
        return GpuDelegateOptions(precision="fp32" if software else "fp16_fp32acc", device_index=self.device_index,
                                  **({"gl_api": self.gl_api} if self.gl_api is not None else {}))
