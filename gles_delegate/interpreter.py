"""The TFLite-compatible Interpreter: tensors, details dicts, set/get/invoke, resize, signatures.

It builds the graph IR, folds constant subgraphs, lets each delegate claim runs of nodes, and
runs the rest on the CPU: through LiteRT's kernels when ai-edge-litert is installed, else on the
numpy reference kernels (cpu_backend, cpu_litert.py).
"""
import os
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol, Self

import numpy as np

from . import cpu_litert, ops, resource_variables, tensor_memory
from .cpu_litert import (CpuBackend, WholeModelStep, checked_at_invoke, litert_version, reads_dynamic,
                         whole_model_failure)
from .direct_path import DirectPath
from .errors import ModelError, ResizeError, StateError
from .gc_pause import gc_paused
from .graph import Graph, Node
from .partition import boundary
from .placement import CpuSide
from .raw_memory import RawMemory
from .shape_propagation import check_declared_shapes, dynamic_tensors, propagate_shapes
from .subgraphs import Subgraphs
from .tflite import read_model
from .tflite.model import SignatureDef
from .fold_constants import densify_sparse_reads, fold_constants, fold_shapes
from .whole_model import carried_whole


class _Storage(dict):
    """{tensor index: array}. A constant whose value is still Deferred (a folded fp16 weight) is
    computed on its first access: the CPU kernels and get_tensor() see it, a GPU partition loaded
    from the serialization cache never asks."""

    def __init__(self):
        super().__init__()
        self.deferred = {}  # tensor index -> Tensor
        # Every array view() hands out is based on this raw_memory.RawMemory of the block, so its
        # reference count says whether the user still holds one (LiteRT counts references to its
        # wrapper the same way).
        self.exposed = None
        self.block = None  # the uint8 array the non-constant tensors are views of
        self.offsets = {}  # tensor index -> byte offset in the block
        # Indices of the tensors that share memory (tensor_memory.py): a deferred copy into one
        # could land after a later tensor took that memory.
        self.shared = set()
        # tensor index -> (float32 array, its owner): a GPU partition output not yet copied in
        # (defer_output); the copy is made when the tensor's array is asked for.
        self.pending = {}

    def __missing__(self, index):
        tensor = self.deferred.pop(index)  # KeyError, as for any unknown index
        self[index] = value = tensor.data
        return value

    def __getitem__(self, index):
        if self.pending:
            self.settle(index)
        return super().__getitem__(index)

    def __setitem__(self, index, value):
        self.pending.pop(index, None)
        super().__setitem__(index, value)

    def defer_output(self, index, source, owner):
        """Take `source` (a GPU partition's mapped output, which `owner` may unmap; a view of a
        LiteRT sub-model's output buffer) as tensor `index`'s value without copying it yet:
        get_tensor() copies it out once instead of twice, current() hands it to the next step to
        copy from, any other access copies it in first. False (copy it now) where the tensor is
        not of its dtype and shape, shares memory (tensor_memory.py: a late copy in could land on
        a later tensor), or the user holds a view of the storage (Interpreter.tensor: a view must
        see every invoke's outputs)."""
        target = super().__getitem__(index)
        if target.dtype != source.dtype or target.shape != source.shape or self.referenced() or index in self.shared:
            return False
        self.pending[index] = (source, owner)
        return True

    def current(self, index):
        """Tensor `index`'s value, a deferred output's source as it is (not copied in): for a
        step that copies it once into memory of its own (a GPU upload, a LiteRT input)."""
        entry = self.pending.get(index)
        return entry[0] if entry is not None else self[index]

    def forget(self, index, owner):
        """Drop `owner`'s deferred output of tensor `index` without copying it in: `owner` is
        about to write the tensor again."""
        entry = self.pending.get(index)
        if entry is not None and entry[1] is owner:
            del self.pending[index]

    def settle(self, index=None, owner=None):
        """Copy deferred outputs in: tensor `index`'s (when asked for), or all of `owner`'s
        (before it unmaps them)."""
        for key in [index] if index is not None else list(self.pending):
            entry = self.pending.get(key)
            if entry is not None and (owner is None or entry[1] is owner):
                del self.pending[key]
                np.copyto(super().__getitem__(key), entry[0])

    def output_copy(self, index):
        """A copy of tensor `index`'s value (get_tensor), straight from a deferred output."""
        entry = self.pending.get(index)
        return np.array(entry[0] if entry is not None else self[index], copy=True)

    def place(self, block, offsets):
        """Hold the tensors placed in `block` (uint8) at {tensor index: (shape, dtype, byte offset)}."""
        self.block = block
        self.exposed = RawMemory(block.ctypes.data, block.size, owner=block)
        for index, (shape, dtype, offset) in offsets.items():
            self[index] = np.ndarray(shape, dtype, block, offset)
            self.offsets[index] = offset

    def view(self, index):
        """The array the user writes into for tensor `index` (Interpreter.tensor). Read-only where
        the tensor is not in the block: a constant (the model's data, read again by every
        allocate_tensors()), or an intermediate a preserve_all_tensors capture replaced."""
        value = self[index]
        if value.base is self.block and index in self.offsets:
            return np.ndarray(value.shape, value.dtype, np.asarray(self.exposed), self.offsets[index])
        value = value.view()
        value.flags.writeable = False
        return value

    def referenced(self):
        """Whether an array view() returned (or an array derived from one) is still alive."""
        return self.exposed is not None and sys.getrefcount(self.exposed) > 2  # self's + the argument's


_ndarray = np.ndarray  # a global rather than np.ndarray: one lookup less on set_tensor's thin path
TensorDetails = dict[str, Any]  # a details dict, with LiteRT's keys and value types


class Delegate(Protocol):
    """What the Interpreter asks of a delegate (GpuDelegate is one)."""

    def can_run(self, node: Node) -> bool:
        """Whether the delegate can run `node` (the Interpreter asks about nodes its CPU refuses)."""

    def partition(self, graph: Graph, candidates: list[Node]) -> list[Any]:
        """Claim runs of the `candidates` nodes of `graph`; returns one step per run, each with
        run(storage, capture=None) and, optionally, release()."""


def _check_delegate(delegate, where):
    """A TypeError unless `delegate` speaks the protocol the Interpreter drives (GpuDelegate's):
    can_run(node) and partition(graph, nodes). `where` names its place in the caller's list."""
    if not all(callable(getattr(delegate, method, None)) for method in ("can_run", "partition")):
        raise TypeError(f"{where} must be a delegate such as GpuDelegate (an object with can_run(node) and "
                        f"partition(graph, nodes)), got {type(delegate).__name__} {delegate!r:.80}")
    return delegate


def _check_delegates(delegates, name):
    """The list of delegates `name` holds (None: none), each checked by _check_delegate."""
    if delegates is None:
        return []
    if not isinstance(delegates, (list, tuple)):
        raise TypeError(f"{name} must be a list of delegates, got {type(delegates).__name__} {delegates!r:.80}")
    return [_check_delegate(d, f"{name}[{k}]") for k, d in enumerate(delegates)]


def _check_num_threads(num_threads):
    """num_threads as LiteRT's Interpreter takes it: None (the runtime's default) or an int >= 1,
    else a ValueError (LiteRT's type, for a wrong type too)."""
    if num_threads is not None and not isinstance(num_threads, int):
        raise ValueError(f"num_threads must be an int >= 1 or None, got {type(num_threads).__name__} "
                         f"{num_threads!r:.80}")
    if num_threads is not None and num_threads < 1:
        raise ValueError(f"num_threads must be an int >= 1 or None, got {num_threads}")
    return num_threads


class InterpreterOptions:
    """Options in the shape of Java's Interpreter.Options: `add_delegate(d)`, `num_threads`."""

    def __init__(self, num_threads: int | None = None) -> None:
        self.delegates: list[Delegate] = []
        self.num_threads = _check_num_threads(num_threads)

    def add_delegate(self, delegate: Delegate) -> Self:
        """Append a delegate; returns self so calls chain as in Java."""
        self.delegates.append(_check_delegate(delegate, "add_delegate()'s argument"))
        return self

    def set_num_threads(self, num_threads: int | None) -> Self:
        """Set num_threads (an int >= 1, as LiteRT's); returns self so calls chain as in Java."""
        self.num_threads = _check_num_threads(num_threads)
        return self


def _delegate_can_run(delegate, node, cpu_reason):
    """delegate.can_run(node) for a node the reference kernels refuse: such a node may be
    malformed (an omitted input, a missing operand), and a delegate's check failing on it is the
    model's error, said as one."""
    try:
        return delegate.can_run(node)
    except (ModelError, ValueError):
        raise
    except Exception as exc:
        raise ModelError(f"operator {node.label} is malformed: the CPU refuses it ({cpu_reason}) and "
                         f"{type(delegate).__name__}.can_run failed on it ({type(exc).__name__}: {exc})") from None


class _CpuStep:
    """One node run on the reference kernels. `dynamic`: its outputs are dynamic tensors
    (shape_propagation.dynamic_tensors), which take whatever shape the kernel gives. `check`:
    it reads dynamic tensors, so its checks (ops SUPPORT) run at every invoke, on the shapes
    the invoke gave them (cpu_litert.checked_at_invoke). `why`: the reason LiteRT does not run
    it (cpu_summary)."""
    backend = "reference"

    def __init__(self, node, dynamic=False, check=False, why=None):
        self.nodes = [node]
        self.dynamic = dynamic
        self.check = check
        self.why = why

    def run(self, storage, capture=None):
        node = self.nodes[0]
        if self.check:
            _check_at_invoke(node)
        if not self.dynamic:
            ops.run_into(node, storage)
            return
        outputs = ops.run_node(node, [None if t is None else storage[t.index] for t in node.inputs], dynamic=True)
        for tensor, value in zip(node.outputs, outputs):
            # As TFLite resizes a dynamic tensor: the details show the shape it now has.
            storage[tensor.index] = np.array(value, tensor.dtype)
            tensor.shape = storage[tensor.index].shape


def _check_at_invoke(node):
    """A ModelError naming the node when its checks refuse the shapes its dynamic tensors have
    now (their declared shapes were only placeholders at allocate_tensors)."""
    reason = ops.unsupported_reason(node)
    if reason is not None:
        shapes = [None if t is None else list(t.shape) for t in node.inputs]
        raise ModelError(f"operator {node.label} cannot run on the CPU with the input shapes {shapes} this invoke "
                         f"gave it: {reason}")


def _compute_fused_away(partition, storage):
    """Preserving all tensors: the tensors of a GPU partition that a rewrite fused away (no
    dispatch computes them: partition.fused_away) from the reference kernels, on the values the
    GPU computed for their inputs, in the partition's node order; they kept their zero fill."""
    for node in partition.nodes:
        if any(t is not None and t.index in partition.fused_away for t in node.outputs):
            ops.run_into(node, storage, only=partition.fused_away)


def unwritten_outputs(graph):
    """Indices of the graph outputs that no node writes and that are neither graph inputs nor
    constants (folded ones included) nor variables. LiteRT gives such a tensor no memory: the
    model allocates and invokes, and reading the output fails ('Tensor data is null')."""
    written = {id(t) for node in graph.nodes for t in node.outputs} | {id(t) for t in graph.inputs}
    return frozenset(t.index for t in graph.outputs
                     if id(t) not in written and not t.is_const and not t.is_variable)


def kept_inside(graph, steps):
    """Indices of the tensors a step running several nodes (a delegate's partition, a LiteRT
    sub-model) computes and keeps to itself: no later step reads them and the graph does not
    output them, so their storage holds no value (LiteRT: 'Tensor data is null')."""
    kept = set()
    for step in steps:
        if isinstance(step, _CpuStep):
            continue
        shared = {id(t) for t in boundary(graph, step.nodes).outputs}
        kept.update(t.index for node in step.nodes for t in node.outputs if t is not None and id(t) not in shared)
    return frozenset(kept)


class _Executor:
    """Runs one subgraph: owns its graph, tensor storage and execution plan."""

    def __init__(self, model, subgraph_index, preserve_all_tensors=False, cpu=None, runtime=None):
        self.model = model
        self.cpu = cpu or CpuBackend("reference")  # which CPU nodes run through LiteRT (cpu_litert.py)
        self.preserve_all_tensors = preserve_all_tensors
        self.subgraph_index = subgraph_index
        self.runtime = runtime  # subgraphs.Runtime: what control flow and variable kernels call
        self.dynamic = frozenset()  # see shape_propagation.dynamic_tensors
        # The first allocate() folds and plans this graph itself unless an input was resized
        # (a graph costs 0.5-3 ms to build; resize_tensor_input edits this one's input shapes).
        self.graph = self._unused_graph = Graph.from_model(model, subgraph_index)
        self.storage = None
        self.steps = None
        self.input_shapes = {}
        self.unwritten = frozenset()  # see unwritten_outputs
        self.kept = frozenset()  # see kept_inside
        self.delegates = []  # what allocate() planned with
        self.fixed_variables = {}  # resource_variables.fixed(): checked before each invoke
        self.previous_whole = None  # the WholeModelStep of the plan release() dropped

    def allocate(self, delegates, transient=False):
        """Plan the graph for the current input shapes with `delegates`. transient: a plan for one
        run (subgraphs.py: a loop body whose carried tensors changed shape during the invoke, a
        CALL_ONCE initializer), whose CPU nodes CpuBackend.replanning places."""
        self.check_unreferenced("allocate_tensors()")
        graph, self._unused_graph = self._unused_graph, None
        if graph is None or self.input_shapes:
            graph = Graph.from_model(self.model, self.subgraph_index)
        for node in graph.nodes:  # only these: a node a delegate keeps must not hold the executors
            if node.op in ops.RUNTIME_OPS:
                node.runtime = self.runtime
        propagate_shapes(graph, self.input_shapes, run_node=self.cpu.node_runner(graph))
        densify_sparse_reads(graph)
        fold_constants(graph)
        dynamic = resource_variables.annotate(graph, self.runtime)  # dynamic_tensors; the variables' shapes
        # Folding only makes values known: the dynamic tensors can only become fewer, so none
        # before means none after (a dynamic-batch Keras model: a whole pass saved).
        if fold_shapes(graph, dynamic) and dynamic:
            dynamic = dynamic_tensors(graph)
        for node in graph.nodes:
            reason = ops.unsupported_reason(node)
            if reason is not None and not checked_at_invoke(node, reason, dynamic) \
                    and not any(_delegate_can_run(d, node, reason) for d in delegates):
                self.cpu.check(node, reason, graph)
        check_declared_shapes(graph, dynamic)
        self.release()
        previous, self.previous_whole = self.previous_whole, None
        self.graph, self.storage, self.dynamic = graph, None, dynamic
        self.unwritten = unwritten_outputs(graph)
        self.steps = self.plan(graph, delegates, self.cpu.replanning() if transient else self.cpu, transient, previous)
        self.kept = frozenset() if self.preserve_all_tensors else kept_inside(graph, self.steps)
        # The variables the delegates' steps (those without a CPU `backend`) hold, at their shapes.
        self.delegates = delegates
        self.fixed_variables = resource_variables.fixed(n for s in self.steps if not hasattr(s, "backend")
                                                        for n in s.nodes)
        try:
            storage = self.make_storage(graph, self.steps)
        except BaseException:
            self.release()
            raise
        self.storage = storage
        # Deferred folds (fold_constants.deferrable) the CPU or the caller will read: computed
        # now, so that a malformed sparse tensor is an error of allocate_tensors, not of invoke.
        needed = {t.index for step in self.steps if isinstance(step, (_CpuStep, WholeModelStep))
                  for node in step.nodes for t in node.inputs if t}
        for index in (needed | {t.index for t in graph.outputs}) & storage.deferred.keys():
            storage[index]  # noqa: B018 (computes it)

    def check_unreferenced(self, what):
        """A RuntimeError, LiteRT's, when an array from Interpreter.tensor() is still alive: `what`
        replaces the storage, and a write into that array would be lost without a word."""
        if self.storage is not None and self.storage.referenced():
            raise RuntimeError(
                "There is at least 1 reference to internal data in the interpreter in the form of a numpy array "
                f"or slice (from tensor()): {what} would leave it pointing at memory the interpreter no longer "
                "uses. Hold the function tensor() returns, not its array, and call it again afterwards.")

    def resize_input(self, tensor, shape):
        """Give input `tensor` a new shape, which the next allocate() propagates through the graph."""
        self.check_unreferenced("resizing an input")
        self.input_shapes[tensor.index] = shape
        self.storage = None
        self.release()
        tensor.shape = shape  # the details show the new shape at once, as in LiteRT

    def make_storage(self, graph, steps):
        """{tensor index: array}: constants as they are, every other tensor a zeroed view into one
        allocation (one calloc, whose pages the OS maps only once written: the tensors a GPU
        partition keeps to itself cost no time and no memory), in which intermediates whose
        lifetimes over `steps` do not overlap share memory (tensor_memory.py)."""
        storage, placed = _Storage(), []
        for tensor in graph.tensors:
            if tensor.is_deferred:
                storage.deferred[tensor.index] = tensor
            elif tensor.is_const:
                storage[tensor.index] = tensor.data
            elif tensor.dtype is not None:
                placed.append(tensor)
        offsets, total, storage.shared = tensor_memory.place(placed, steps, self.own_memory(graph, steps))
        try:
            block = np.zeros(total, np.uint8)
        except MemoryError:
            largest = max(placed, key=lambda t: t.size, default=None)
            raise ModelError(f"the model's tensors need {total:,} bytes, which do not fit in memory (the largest: "
                             f"tensor {largest.index} ({largest.name!r}) of shape {list(largest.shape)})") from None
        storage.place(block, {t.index: (t.shape, np.dtype(t.dtype), offsets[t.index]) for t in placed})
        return storage

    def own_memory(self, graph, steps):
        """Indices of the tensors that keep memory of their own: what the caller reads or writes
        between invokes (graph inputs and outputs, a signature's tensors), variables, dynamic
        tensors (their arrays are replaced at invoke), and what a GPU partition or a LiteRT
        sub-model (a step of no `backend` 'reference') outputs: it may stay in that step's own
        buffer until read (_Storage.defer_output), and be copied in later, when the memory might
        be a later tensor's; every tensor when preserving all tensors. Any other intermediate may
        share its memory once its last reader ran, as in LiteRT (whose intermediates are readable
        only with experimental_preserve_all_tensors)."""
        if self.preserve_all_tensors:
            return {t.index for t in graph.tensors}
        signatures = [s for s in self.model.signature_defs if s.subgraph_index == self.subgraph_index]
        held = {t.index for step in steps if getattr(step, "backend", None) != "reference"
                for node in step.nodes for t in node.outputs if t is not None}
        return held | {t.index for t in (*graph.inputs, *graph.outputs)} | \
            {t.index for t in graph.tensors if t.is_variable or id(t) in self.dynamic} | \
            {i for s in signatures for i in (*s.inputs.values(), *s.outputs.values())}

    def plan(self, graph, delegates, cpu, transient=False, previous=None):
        """The steps that run `graph`: the partitions `delegates` claim, the CPU's nodes placed
        by `cpu` (a CpuBackend), or the model file whole on LiteRT (a WholeModelStep, given the
        LiteRT interpreter of `previous`, the last plan's, to resize where it has one)."""
        claimed = {}
        # A delegate plans for fixed shapes: nodes that read or write dynamic tensors stay here.
        fixed = [n for n in graph.nodes if not any(t is not None and id(t) in self.dynamic
                                                   for t in [*n.inputs, *n.outputs])]
        # What the CPU runs, for a delegate that times its partitions against it (placement.py).
        side = CpuSide(cpu, whole_model=self.runs_whole(graph, cpu, transient))
        for delegate in delegates:
            free = [n for n in fixed if id(n) not in claimed]
            wants_side = getattr(delegate, "wants_cpu_side", False)
            for partition in delegate.partition(graph, free, **({"cpu": side} if wants_side else {})):
                for node in partition.nodes:
                    claimed[id(node)] = partition
        if side.declined and not claimed and side.whole_model:
            try:
                return [WholeModelStep(graph, side.whole_threads or cpu.num_threads)]
            except ModelError:
                pass  # LiteRT refuses the model file: its nodes are placed one run at a time below
        steps, placed = [], set()
        for node in graph.nodes:
            partition = claimed.get(id(node))
            if partition is None:
                steps.append(node)  # the CPU's: the reference's or LiteRT's (cpu.place)
            elif id(partition) not in placed:
                placed.add(id(partition))
                steps.append(partition)
        try:
            # Nodes of dynamic tensors stay on the reference: a LiteRT sub-model is planned for fixed shapes.
            pinned = {id(n) for n in graph.nodes if any(t is not None and id(t) in self.dynamic
                                                        for t in [*n.inputs, *n.outputs])}
            placed = cpu.place(graph, steps, lambda node, why: _CpuStep(node, any(id(t) in self.dynamic
                                                                                   for t in node.outputs),
                                                                        reads_dynamic(node, self.dynamic), why),
                               pinned, self.dynamic)
        except BaseException:  # LiteRT refused a run: free what the delegates compiled
            for step in steps:
                if hasattr(step, "release"):
                    step.release()
            raise
        return self.whole_instead(graph, placed, side, self.dynamic, previous) if not delegates else placed

    @staticmethod
    def whole_instead(graph, placed, side, dynamic, previous=None):
        """`placed` (a plan without delegates, its nodes checked), or the model file whole on
        LiteRT where that plan leaves nodes to the reference only for what LiteRT's own
        interpreter carries (whole_model.carried_whole: state, dynamic shapes) and
        whole_model.refusal() finds nothing LiteRT would not check (whole_model.py)."""
        reference = [s.nodes[0] for s in placed if getattr(s, "backend", None) == "reference"]
        if not side.whole_model or not reference or not all(carried_whole(n, dynamic) for n in reference):
            return placed
        try:
            whole = WholeModelStep(graph, side.backend.num_threads, previous, keep_state=True)
        except ModelError:
            return placed  # LiteRT refuses the model file, or would not check it (whole_model.py)
        for step in placed:
            if hasattr(step, "release"):
                step.release()
        return [whole]

    def runs_whole(self, graph, cpu, transient):
        """Whether this subgraph can run as the model file whole on LiteRT (WholeModelStep) once
        a delegate leaves it every node: the main subgraph of a model LiteRT runs through
        cpu_backend 'auto' or 'litert', planned for more than one run (dynamic tensors, a Keras
        RNN's loop outputs, are LiteRT's to resize), intermediates kept to itself (no
        experimental_preserve_all_tensors), and every signature on it (another subgraph's
        runner would run on this package's variables, not LiteRT's). WholeModelStep refuses a
        model with a node LiteRT's kernels would crash on (litert_crashes.py)."""
        return (self.subgraph_index == 0 and not transient and not self.preserve_all_tensors
                and cpu.backend in ("auto", "litert") and cpu_litert.litert_interpreter_class() is not None
                and graph.source_model is not None and graph.source_model.source_bytes is not None
                and all(s.subgraph_index == 0 for s in self.model.signature_defs))

    def invoke(self):
        if self.fixed_variables and resource_variables.stale(self.fixed_variables, self.runtime.variables):
            self.replan_keeping_inputs()
        # Preserving all tensors: delegates read back every intermediate they compute (into
        # storage itself), so get_tensor() shows what the GPU computed for every tensor.
        capture = self.storage if self.preserve_all_tensors else None
        for step in self.steps:
            step.run(self.storage, capture=capture)
            if capture is not None and getattr(step, "fused_away", None):
                _compute_fused_away(step, self.storage)

    def replan_keeping_inputs(self):
        """allocate() again, the inputs set before kept: a variable whose shape the plan fixed
        holds a value of another shape now (resource_variables.stale)."""
        inputs = {t.index: np.array(self.storage[t.index], copy=True) for t in self.graph.inputs}
        self.allocate(self.delegates)
        for index, value in inputs.items():
            self.storage[index][...] = value

    def release(self):
        """Free what delegates compiled for the previous plan (before re-planning, or when the
        interpreter goes away). Safe after the delegate was closed."""
        steps, self.steps = self.steps or (), None
        # LiteRT's interpreter of a whole-model plan is resized, not made again (its variables)
        if steps:
            self.previous_whole = steps[0] if len(steps) == 1 and isinstance(steps[0], WholeModelStep) else None
        for step in steps:
            if hasattr(step, "release"):
                step.release()


class _TracedExecutor(_Executor):
    """An _Executor that offers `record` each of its runs: a function returning copies of its
    tensors after the run (its inputs as they came in), called only for the runs `record` keeps."""

    def __init__(self, *args, record):
        super().__init__(*args)
        self.record = record

    def invoke(self):
        arrived = {t.index: np.array(self.storage[t.index]) for t in self.graph.inputs}
        super().invoke()
        storage = self.storage
        self.record(lambda: {**{t.index: np.array(storage[t.index]) for t in self.graph.tensors
                                if not t.is_const and t.dtype is not None}, **arrived})


def trace_subgraph(model, inputs, index, limit):
    """[(run number, {tensor index: array})]: the tensors of subgraph `index` of `model` (a ModelDef) after up to
    `limit` of its runs (spread evenly over them, the first included; its inputs as they came
    in), when the model runs once from subgraph 0 on the CPU (reference kernels, LiteRT's where
    the reference lacks one; no delegate) on `inputs` (arrays in the order of the model's
    inputs, which take their shapes). What a loop body really receives: precision 'auto'
    calibrates a GPU partition inside a subgraph on it (calibrate.py). ModelError if the model
    fails on them."""
    kept, stride, runs = [], 1, 0

    def record(snapshot):
        nonlocal stride, runs
        if runs % stride == 0:
            kept.append((runs, snapshot()))
            if len(kept) == 2 * limit:  # keep every other run from now on
                del kept[1::2]
                stride *= 2
        runs += 1

    # Every tensor stays readable, and loops run on our side (cpu_litert.PRESERVING_CALLERS):
    # their callees' runs are what is traced.
    cpu = CpuBackend("auto", preserve_all_tensors=True)

    def make(k, runtime):
        return _TracedExecutor(model, k, True, cpu, runtime, record=record) if k == index else \
            _Executor(model, k, True, cpu, runtime)
    subgraphs = Subgraphs(model, make, [])
    main = subgraphs.executor(0)
    try:
        for tensor, value in zip(main.graph.inputs, inputs):
            if tuple(tensor.shape) != value.shape:
                main.resize_input(tensor, value.shape)
        main.allocate([])
        for tensor, value in zip(main.graph.inputs, inputs):
            _set(main, tensor, value)
        main.invoke()
    finally:
        for executor in subgraphs.executors.values():
            executor.release()
    picks = sorted({round(x) for x in np.linspace(0, len(kept) - 1, min(limit, len(kept)))})
    return [kept[k] for k in picks]


class Interpreter:
    """Interpreter(model_path=None, model_content=None, experimental_delegates=None,
    num_threads=None, options=None): the API of ai_edge_litert.interpreter.Interpreter.

    Delegates come from `experimental_delegates` and from `options.add_delegate(...)`, in that
    order; each claims the nodes it can run, the rest run on the CPU (cpu_backend).
    num_threads: passed to the LiteRT interpreters of the CPU nodes (the numpy path ignores it).
    experimental_preserve_all_tensors: every intermediate stays readable with get_tensor(),
    including those a GPU partition computes (read back after each dispatch: slow) and those
    inside a LiteRT sub-model (its interpreter preserves them too).
    cpu_backend: which kernels run the nodes no delegate takes:
      'auto' (default): LiteRT's (XNNPACK where LiteRT uses it) for every CPU node LiteRT can
        take when ai-edge-litert is installed, each run of consecutive ones as one LiteRT
        sub-model; the numpy reference kernels for the others (custom ops, control flow,
        variable tensors, nodes of dynamic shapes, nodes LiteRT refuses: cpu_summary() says
        which and why), and for every node without ai-edge-litert;
      'fallback': the reference, LiteRT only for the nodes the reference lacks (the oracle the
        GPU is compared with: gles-parity);
      'litert': as 'auto', ai-edge-litert required;
      'reference': the reference only.
    See gles_delegate/cpu_litert.py and docs/usage.md.
    """

    def __init__(self, model_path: str | os.PathLike[str] | None = None,
                 model_content: bytes | bytearray | memoryview | None = None,
                 experimental_delegates: Sequence[Delegate] | None = None, num_threads: int | None = None,
                 options: InterpreterOptions | None = None, experimental_preserve_all_tensors: bool = False,
                 cpu_backend: str = "auto") -> None:
        if (model_path is None) == (model_content is None):
            raise ValueError("pass exactly one of model_path or model_content")
        if options is not None and not isinstance(options, InterpreterOptions):
            raise TypeError(f"options must be an InterpreterOptions, got {type(options).__name__}")
        if model_content is not None and not isinstance(model_content, (bytes, bytearray, memoryview)):
            raise TypeError(f"model_content must be bytes, got {type(model_content).__name__}")
        self._delegates = _check_delegates(experimental_delegates, "experimental_delegates") + \
            _check_delegates(options.delegates if options else None, "options.delegates")
        with gc_paused():  # gc_pause.py: a large model's graph is millions of objects that live on
            digest = any(getattr(d, "wants_model_digest", False) for d in self._delegates)
            self._model = read_model(model_path if model_path is not None else bytes(model_content),
                                     background_digest=digest)
            self._num_threads = _check_num_threads(num_threads) if num_threads is not None else \
                (options.num_threads if options else None)
            self._preserve_all_tensors = experimental_preserve_all_tensors
            self._cpu = CpuBackend(cpu_backend, self._num_threads, experimental_preserve_all_tensors)
            # Made without a reference to self (see subgraphs.Subgraphs).
            model, preserve, cpu = self._model, experimental_preserve_all_tensors, self._cpu
            self._subgraphs = Subgraphs(model, lambda index, runtime: _Executor(model, index, preserve, cpu, runtime),
                                        self._delegates)
            self._executors: dict[int, _Executor] = self._subgraphs.executors
            self._resize_pending = False
            self._lock = threading.RLock()
            self._main = self._executor(0)
            self._direct: DirectPath | None = None  # the thin path of a model run whole on LiteRT (direct_path.py)

    # -- internals ------------------------------------------------------------------------
    def _executor(self, subgraph_index):
        return self._subgraphs.executor(subgraph_index)

    def _tensor(self, index, executor=None):
        executor = executor or self._main
        if not isinstance(index, (int, np.integer)):
            raise TypeError(f"a tensor index is an int, not {type(index).__name__} ({index!r})")
        if not 0 <= index < len(executor.graph.tensors):
            raise ValueError(f"tensor index {index} out of range [0, {len(executor.graph.tensors)})")
        return executor.graph.tensors[int(index)]

    def _require_allocated(self, executor=None):
        executor = executor or self._main
        if executor.storage is None:
            if self._resize_pending:
                raise StateError("resize_tensor_input() changed the input shapes: call allocate_tensors() "
                                 "before set_tensor(), invoke() or get_tensor()")
            raise StateError("allocate_tensors() must be called before set_tensor(), invoke() or get_tensor()")

    def _require_data(self, executor, tensor):
        """ValueError unless `tensor`'s storage holds a value get_tensor() / tensor() may show."""
        if tensor.index in executor.unwritten:
            raise ValueError(f"tensor {tensor.index} ({tensor.name!r}) holds no data: it is a graph output that no "
                             "operator writes, and neither a graph input nor a constant")
        if tensor.index in executor.kept:
            raise ValueError(f"Tensor data is null (as in LiteRT): tensor {tensor.index} ({tensor.name!r}) is an "
                             "intermediate that a GPU partition or a LiteRT sub-model keeps to itself; pass "
                             "experimental_preserve_all_tensors=True to the Interpreter to read it")

    # -- lifecycle ------------------------------------------------------------------------
    def allocate_tensors(self) -> None:
        """Plan execution (fold constants, let delegates claim nodes) and allocate tensors. After
        resize_tensor_input(), a ModelError is a ResizeError (also a RuntimeError, as LiteRT's)."""
        with self._lock, gc_paused():
            if self._whole_on_litert() and not self._resize_pending:
                # Nothing changed, as LiteRT's AllocateTensors then: a new plan would make a new
                # LiteRT interpreter, without the state (resource variables) the model keeps there.
                self._main.check_unreferenced("allocate_tensors()")  # as ever, though nothing moves
                if self._direct is None:  # left for a view or a runner: the storage is the newer
                    self._direct = DirectPath.of(self._main)
                    self._direct.enter(self._main.storage)
                return
            self._direct = None  # the plan, and LiteRT's interpreter with it, is made again
            self._subgraphs.replan()
            try:
                self._main.allocate(self._delegates)
            except ModelError as exc:
                if not self._main.input_shapes or isinstance(exc, ResizeError):
                    raise
                raise ResizeError(str(exc)).with_traceback(exc.__traceback__) from None
            self._resize_pending = False
            self._direct = DirectPath.of(self._main)

    def _whole_on_litert(self):
        """Whether the model runs whole on one LiteRT interpreter (cpu_litert.WholeModelStep)."""
        steps = self._main.steps if self._main.storage is not None else None
        return bool(steps) and len(steps) == 1 and isinstance(steps[0], WholeModelStep)

    def _leave_direct(self):
        """Hand the values the thin path left in LiteRT's tensors to the storage, which every
        other path reads and writes (direct_path.py); nothing when not on it."""
        with self._lock:
            direct, self._direct = self._direct, None
            if direct is not None and self._main.storage is not None:
                direct.leave(self._main.storage)

    def __del__(self):
        # Free the GPU partitions now rather than when their delegate closes (a delegate may
        # serve many interpreters). Harmless after the delegate was closed.
        try:
            for executor in getattr(self, "_executors", {}).values():
                executor.release()
        except Exception:  # interpreter shutdown: GL may already be gone
            pass

    def invoke(self) -> None:
        """Run the model on the current input tensors."""
        # acquire / release rather than `with`: half the cost, which on a model of a few
        # microseconds (the thin path, direct_path.py) is a few percent.
        self._lock.acquire()
        try:
            if self._direct is not None:
                try:
                    return self._direct.invoke()
                except (ValueError, RuntimeError) as exc:
                    raise whole_model_failure(exc) from None
        finally:
            self._lock.release()
        self._require_allocated()
        with self._lock:
            self._main.invoke()

    def resize_tensor_input(self, input_index: int, tensor_size: Sequence[int] | np.ndarray,
                            strict: bool = False) -> None:
        """Change an input's shape; takes effect at the next allocate_tensors()."""
        tensor = self._tensor(input_index)
        if not any(tensor is t for t in self._main.graph.inputs):
            raise ValueError(f"tensor {input_index} is not an input of the model")
        shape = _checked_shape(tensor, tensor_size, strict)
        with self._lock:
            if self._main.storage is not None and not self._resize_pending and tuple(tensor.shape) == shape:
                return  # allocated at this shape already: nothing changes, as in LiteRT's ResizeInputTensor
            self._direct = None  # the storage and the plan are dropped
            self._main.resize_input(tensor, shape)
            self._resize_pending = True

    # -- details --------------------------------------------------------------------------
    def _details(self, tensor, name=None):
        q = tensor.quantization
        direct = self._direct
        # on the thin path LiteRT's tensors hold the shapes its kernels gave at the last invoke
        shape = direct.shape(tensor.index) if direct is not None and tensor.index in direct.readable else tensor.shape
        scales = q.scales.astype(np.float32) if q is not None else np.zeros(0, np.float32)
        zero_points = q.zero_points.astype(np.int32) if q is not None else np.zeros(0, np.int32)
        signature = tensor.shape_signature if tensor.shape_signature is not None else tensor.shape
        return {
            "name": tensor.name if name is None else name,
            "index": tensor.index,
            "shape": np.array(shape, np.int32),
            "shape_signature": np.array(signature, np.int32),
            "dtype": tensor.dtype.type if tensor.dtype is not None else None,
            "quantization": (float(scales[0]), int(zero_points[0])) if scales.size == 1 else (0.0, 0),
            "quantization_parameters": {"scales": scales, "zero_points": zero_points,
                                        "quantized_dimension": q.quantized_dimension if q else 0,
                                        "block_size": 0},
            "sparsity_parameters": _sparsity_details(tensor.sparsity),
        }

    def get_input_details(self) -> list[TensorDetails]:
        """One details dict per model input, with LiteRT's keys and value types."""
        return [self._details(t) for t in self._main.graph.inputs]

    def get_output_details(self) -> list[TensorDetails]:
        """One details dict per model output, with LiteRT's keys and value types."""
        return [self._details(t) for t in self._main.graph.outputs]

    def get_tensor_details(self) -> list[TensorDetails]:
        """One details dict per tensor of the main subgraph, in tensor index order."""
        return [self._details(t) for t in self._main.graph.tensors]

    # -- tensors --------------------------------------------------------------------------
    def set_tensor(self, tensor_index: int, value: np.ndarray) -> None:
        """Copy `value` into a tensor; dtype and shape must match exactly (ValueError if not)."""
        direct = self._direct
        # The thin path (direct_path.py): an array of numpy's own instance of the input's dtype
        # (not an equal one of another byte order, which LiteRT would copy as it is); LiteRT
        # checks the shape, and the checks below say what is wrong where it refuses.
        if direct is not None and type(tensor_index) is int and type(value) is _ndarray \
                and value.dtype is direct.dtypes.get(tensor_index):
            try:
                return direct.set(tensor_index, value)
            except ValueError:
                pass
        self._require_allocated()
        tensor = self._tensor(tensor_index)
        value = _checked_value(self._main, tensor, value)
        if direct is not None and tensor.index in direct.dtypes:
            direct.set(tensor.index, value)
        else:
            self._leave_direct()  # a tensor only the storage holds (an intermediate, an output)
            self._main.storage[tensor.index][...] = value

    def get_tensor(self, tensor_index: int, subgraph_index: int = 0) -> np.ndarray:
        """A copy of a tensor's current contents (after the invoke running on another thread, if
        any). ValueError for a graph output nothing writes (see unwritten_outputs) and, as in
        LiteRT, for an intermediate a GPU partition or a LiteRT sub-model keeps to itself
        (kept_inside) unless experimental_preserve_all_tensors."""
        direct = self._direct
        if direct is not None and type(tensor_index) is int and tensor_index in direct.readable and subgraph_index == 0:
            self._lock.acquire()  # as invoke()'s
            try:
                return direct.get(tensor_index)
            finally:
                self._lock.release()
        executor = self._subgraph_executor(subgraph_index)
        self._require_allocated(executor)
        tensor = self._tensor(tensor_index, executor)
        if direct is not None and executor is self._main and tensor.index in direct.readable:
            # An index of another int type (numpy's): LiteRT holds the value, the storage a stale one.
            with self._lock:
                return direct.get(tensor.index)
        self._require_data(executor, tensor)
        # Not during an invoke: the copy may read a LiteRT sub-model's output buffer, whose view
        # would make LiteRT's invoke() refuse to run (cpu_litert.LiteRTStep.run).
        with self._lock:
            return executor.storage.output_copy(tensor.index)

    def _subgraph_executor(self, subgraph_index):
        """The executor of subgraph `subgraph_index`: a ValueError for an index the model does not
        have (as LiteRT's), or a subgraph no invoke has run yet (its tensors hold no data)."""
        count = len(self._model.subgraphs)
        if not isinstance(subgraph_index, (int, np.integer)) or not 0 <= subgraph_index < count:
            raise ValueError(f"invalid subgraph index {subgraph_index!r}: the model has subgraphs 0 to {count - 1}")
        executor = self._executors.get(int(subgraph_index))
        if executor is None:
            raise ValueError(f"subgraph {subgraph_index} has not run yet (a control-flow op runs it at invoke): "
                             "its tensors hold no data")
        return executor

    def tensor(self, tensor_index: int) -> Callable[[], np.ndarray]:
        """A function returning a numpy view of the tensor's storage (no copy), as in LiteRT: the
        view stays valid across invoke(); allocate_tensors() and resize_tensor_input() raise
        RuntimeError while one is alive (hold the function, call it again afterwards). A
        constant's view is read-only."""
        self._require_allocated()
        index = self._tensor(tensor_index).index
        self._leave_direct()  # the view is of the storage, which invoke() must then read
        return lambda: self._view(index)

    def _view(self, index):
        self._require_allocated()
        self._require_data(self._main, self._main.graph.tensors[index])
        with self._lock:  # as get_tensor's copy
            return self._main.storage.view(index)

    def reset_all_variables(self) -> None:
        """Zero every variable tensor (LSTM state) of the allocated subgraphs."""
        with self._lock:
            if self._direct is not None:
                self._direct.reset_variables()
                return
        for executor in self._executors.values():
            if executor.storage is not None:
                for tensor in executor.graph.tensors:
                    if tensor.is_variable and not tensor.is_const:
                        executor.storage[tensor.index][...] = 0
                for step in executor.steps:  # a WholeModelStep: LiteRT holds the model's variables
                    if hasattr(step, "reset_variables"):
                        step.reset_variables()

    # -- signatures -----------------------------------------------------------------------
    def get_signature_list(self) -> dict[str, dict[str, list[str]]]:
        """{key: {'inputs': [names], 'outputs': [names]}} as in LiteRT."""
        return {s.key: {"inputs": sorted(s.inputs), "outputs": sorted(s.outputs)}
                for s in self._model.signature_defs}

    def get_signature_runner(self, signature_key: str | None = None) -> "SignatureRunner":
        """A callable running one signature: runner(**inputs) -> {output name: array}."""
        signatures = {s.key: s for s in self._model.signature_defs}
        if signature_key is None:
            if len(signatures) != 1:
                raise ValueError(f"signature_key is required: the model has {len(signatures)} signatures")
            signature_key = next(iter(signatures))
        if signature_key not in signatures:
            raise ValueError(f"no signature {signature_key!r}; the model has {sorted(signatures)}")
        return SignatureRunner(self, signatures[signature_key])

    def cpu_summary(self) -> dict[str, Any]:
        """Where the nodes no delegate takes run, after allocate_tensors(): {'cpu_backend': the
        option, 'litert': the ai-edge-litert version or None when it is not importable,
        'reference_nodes': [node labels], 'reference_reasons': {node label: why LiteRT does not
        run it}, 'litert_nodes': [node labels], 'litert_partitions': [[node labels of one LiteRT
        sub-model], ...]} over the main subgraph."""
        self._require_allocated()
        steps = [s for s in self._main.steps if getattr(s, "backend", None) in ("reference", "litert")]
        runs = [[n.label for n in s.nodes] for s in steps if s.backend == "litert"]
        reference = [s for s in steps if s.backend == "reference"]
        return {"cpu_backend": self._cpu.backend, "litert": litert_version(),
                "reference_nodes": [s.nodes[0].label for s in reference],
                "reference_reasons": {s.nodes[0].label: s.why for s in reference},
                "litert_nodes": [label for run in runs for label in run], "litert_partitions": runs}

    def num_subgraphs(self) -> int:
        """The number of subgraphs of the model."""
        return len(self._model.subgraphs)


class SignatureRunner:
    """Runs one signature of a model; inputs and outputs by their signature names."""

    def __init__(self, interpreter: Interpreter, signature: SignatureDef) -> None:
        self._interpreter = interpreter
        self._signature = signature
        interpreter._leave_direct()  # the runner runs the plan on the storage
        self._executor = interpreter._executor(signature.subgraph_index)
        if self._executor.storage is None:
            self._executor.allocate(interpreter._delegates)

    def get_input_details(self) -> dict[str, TensorDetails]:
        """{signature input name: details dict}."""
        return {name: self._interpreter._details(self._executor.graph.tensors[i])
                for name, i in self._signature.inputs.items()}

    def get_output_details(self) -> dict[str, TensorDetails]:
        """{signature output name: details dict}."""
        return {name: self._interpreter._details(self._executor.graph.tensors[i])
                for name, i in self._signature.outputs.items()}

    def __call__(self, **inputs: np.ndarray) -> dict[str, np.ndarray]:
        """Run the signature on inputs {signature input name: array}; returns {signature output
        name: array (a copy)}. An input of another shape resizes it and re-allocates first, as
        LiteRT's runner does."""
        expected = set(self._signature.inputs)
        if set(inputs) != expected:
            raise ValueError(f"signature {self._signature.key!r} takes inputs {sorted(expected)}, "
                             f"got {sorted(inputs)}")
        values = {self._signature.inputs[name]: np.asarray(value) for name, value in inputs.items()}
        self._interpreter._leave_direct()  # allocate_tensors() since this runner was made took the thin path again
        with self._interpreter._lock:
            self._fit(values)
            for index, value in values.items():
                _set(self._executor, self._executor.graph.tensors[index], value)
            self._executor.invoke()
            return {name: self._executor.storage.output_copy(i) for name, i in self._signature.outputs.items()}

    def _fit(self, values):
        """Resize the inputs {tensor index: array} whose shape changed, then re-allocate if needed
        (only then: re-planning recompiles the GPU partitions)."""
        executor = self._executor
        for index, value in values.items():
            tensor = executor.graph.tensors[index]
            if value.shape != tuple(tensor.shape):
                _check_dtype(tensor, value)
                executor.resize_input(tensor, _checked_shape(tensor, value.shape, strict=False))
        if executor.storage is None:
            executor.allocate(self._interpreter._delegates)


def _checked_shape(tensor, tensor_size, strict):
    """tensor_size as a shape the input `tensor` can take: every dimension >= 0, any rank (as
    LiteRT's ResizeInputTensor: the nodes' checks then say what they cannot take), and with
    `strict` only the dimensions its shape signature leaves free (-1) changed, at its rank."""
    shape = tuple(int(d) for d in np.asarray(tensor_size).reshape(-1))
    if any(d < 0 for d in shape):
        raise ValueError(f"cannot resize input {tensor.index} of shape {list(tensor.shape)} to {list(shape)}")
    if strict:
        signature = tensor.shape_signature or tensor.shape
        if len(shape) != len(signature):
            raise ValueError(f"strict resize of input {tensor.index}: rank {len(shape)}, the model's is {len(signature)}")
        for dim, (old, new) in enumerate(zip(signature, shape)):
            if old != -1 and old != new:
                raise ValueError(f"strict resize of input {tensor.index}: dimension {dim} is fixed at {old}")
    return shape


def _check_dtype(tensor, value):
    if tensor.dtype is None or value.dtype != tensor.dtype:
        raise ValueError(f"cannot set tensor {tensor.index} ({tensor.name!r}): got {value.dtype}, "
                         f"expected {tensor.dtype}")


def _checked_value(executor, tensor, value):
    """`value` as an array set_tensor() may copy into `tensor`: a ValueError naming the tensor
    for another dtype or shape, or a constant."""
    value = np.asarray(value)
    _check_dtype(tensor, value)
    target = executor.storage[tensor.index]
    if value.shape != target.shape:
        raise ValueError(f"cannot set tensor {tensor.index} ({tensor.name!r}): got shape {list(value.shape)}, "
                         f"expected {list(target.shape)}")
    if tensor.is_const:
        raise ValueError(f"cannot set tensor {tensor.index} ({tensor.name!r}): it is a constant")
    return value


def _set(executor, tensor, value):
    # Same dtype and shape: np.copyto's copy, without its 0.2 us of dispatch.
    executor.storage[tensor.index][...] = _checked_value(executor, tensor, value)


def _sparsity_details(sparsity):
    if sparsity is None:
        return {}
    dims = []
    for d in sparsity.dim_metadata:
        entry = {"format": 0 if d.format == "DENSE" else 1, "dense_size": d.dense_size}
        if d.array_segments is not None or d.array_indices is not None:
            entry["array_segments"] = np.zeros(0, np.int32) if d.array_segments is None else \
                d.array_segments.astype(np.int32)
            entry["array_indices"] = np.zeros(0, np.int32) if d.array_indices is None else \
                d.array_indices.astype(np.int32)
        dims.append(entry)
    return {"traversal_order": np.array(sparsity.traversal_order, np.int32),
            "block_map": np.array(sparsity.block_map, np.int32), "dim_metadata": dims}
