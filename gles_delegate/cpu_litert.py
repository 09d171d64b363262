"""CPU nodes through LiteRT's kernels (ai-edge-litert, an optional extra) rather than the numpy reference.

Interpreter(..., cpu_backend=...) decides, for the nodes its delegates leave to the CPU, whether the
numpy reference kernels or LiteRT's run them:
  'auto' (default)  every CPU node LiteRT can take runs through LiteRT when ai-edge-litert is
                    importable (XNNPACK where LiteRT applies it: its default resolver), each run
                    of consecutive such nodes as one sub-model (one LiteRT interpreter, one copy
                    per boundary tensor); the reference runs the others, and everything when
                    ai-edge-litert is not installed;
  'fallback'        the reference wherever it has a kernel, LiteRT only for the nodes it lacks
                    (consecutive ones as one sub-model): the reference stays the oracle (what
                    gles-parity and the tests comparing the GPU with the reference run);
  'litert'          as 'auto', but ai-edge-litert is required, and a node the reference's checks
                    refuse is handed to LiteRT too, unless they find it malformed
                    (ops.checks.Malformed: an input or output count its op does not take, an
                    input it requires omitted, malformed sparsity): a ModelError, as under 'auto';
  'reference'       the reference only: a node it lacks is a ModelError at allocate_tensors.
A node the reference's checks refuse stays a ModelError under 'auto' and 'fallback' unless the
reason is a variant it has no kernel for (ops.checks.Unimplemented, e.g. int16 activations): those
checks also catch malformed nodes, which LiteRT's kernels are not guaranteed to survive, so under
'auto' LiteRT only sees nodes they accept. Nodes LiteRT cannot take from us stay on the reference
(litert_refusal): custom ops (LiteRT's builtin resolver lacks MediaPipe's), CALL_ONCE, and a
WHILE / IF whose subgraphs cannot be copied into the sub-model (callee_subgraphs.py: state our
interpreter holds, or much work a call; one that can takes the nodes of dynamic tensors after
it along into its sub-model), variable tensors (state the reference updates in place, which
reset_all_variables() zeroes), tensors numpy cannot hold (strings, resources) and operators with
intermediate tensors (integer LSTMs); so do the nodes of dynamic tensors (shapes decided at invoke;
a LiteRT sub-model is planned for fixed shapes), except one the reference lacks, which LiteRT runs
alone. Where LiteRT refuses a sub-model at allocate_tensors (an op version its resolver lacks, a
failed Prepare), the nodes it refuses alone run on the reference (one warning), or are a ModelError
naming the node when the reference lacks them too.

A run is written with our .tflite writer as a sub-model (its nodes, its constants copied, the
boundary tensors as its inputs and outputs) and run by one LiteRT Interpreter, made again at every
allocate_tensors() (so with the shapes a resize gave). Per invoke each boundary tensor is copied
once at most: into LiteRT's input through a numpy view of its buffer, from the producer's own
memory (a GPU partition's mapped output is not copied into our storage first: _Storage.current);
LiteRT's output is not copied out at all: the storage keeps the view as the tensor's value
(_Storage.defer_output) until the next invoke of the sub-model, and a GPU partition uploads from
it directly. LiteRT's Python API cannot adopt our arrays, and invoke() refuses to run while one of
its views is alive, so the step drops its outputs' views before it invokes (docs/architecture.md
has the figures). LiteRT's interpreters are not thread-safe: each runs under a lock.
"""
import re
import signal
import subprocess
import sys
import threading
import warnings
from typing import NamedTuple

import numpy as np

from . import ops, whole_model
from .callee_subgraphs import COPIED_CALLERS, callee_refusal, copy_callees, renumbered_options
from .litert_crashes import crash_reason
from .errors import ModelError
from .graph import Node
from .ops.checks import Malformed, Unimplemented
from .partition import boundary
from .tflite import schema
from .tflite.model import ModelDef, OperatorDef, SubgraphDef, TensorDef
from .tflite.writer import write_model

BACKENDS = ("auto", "fallback", "litert", "reference")
# Why a WHILE / IF stays ours under experimental_preserve_all_tensors (also what lets
# interpreter.trace_subgraph see a loop body's runs): LiteRT's WHILE leaves a carried value its
# body passes through unallocated (get_tensor: "Tensor data is null", a Keras GRU's).
PRESERVING_CALLERS = ("experimental_preserve_all_tensors: LiteRT's WHILE does not keep every tensor "
                      "(a carried value passed through), the reference's does")
INSTALL_HINT = "installing ai-edge-litert (`pip install ai-edge-litert`) would run it through LiteRT's kernels"


def check_backend(value):
    """`value` if it is one of BACKENDS, else a ValueError (a TypeError for a non-string)."""
    if not isinstance(value, str):
        raise TypeError(f"cpu_backend must be one of {', '.join(BACKENDS)}, got {type(value).__name__} {value!r:.80}")
    if value not in BACKENDS:
        raise ValueError(f"cpu_backend must be one of {', '.join(BACKENDS)}, got {value!r}")
    return value


def litert_interpreter_class():
    """ai_edge_litert.interpreter.Interpreter, or None when ai-edge-litert is not installed
    (imported on first use only: the package works without it)."""
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        return None
    return Interpreter


def litert_version():
    """The installed ai-edge-litert's version, or None when it cannot be imported."""
    if litert_interpreter_class() is None:
        return None
    from .litert.source import runtime_version
    return runtime_version("ai_edge_litert")


def litert_refusal(node, graph):
    """None if LiteRT can run `node` of `graph` as part of a sub-model we write, else why not."""
    if node.custom:
        return f"custom op {node.op} is not in LiteRT's builtin resolver"
    if node.op not in schema.BUILTIN_OP_CODES:
        return f"{node.op} is not a builtin op"
    if any("subgraph" in key for key in node.options):
        refusal = callee_refusal(node, graph)  # a WHILE / IF: its callees copied into the sub-model
        if refusal is not None:
            return refusal
    tensors = [t for t in node.inputs + node.outputs if t is not None]
    if any(t.is_variable for t in tensors):
        return "it updates a variable tensor in place"
    # A RESOURCE tensor holds a variable's id as an int32 here (graph.tensor_dtype), but LiteRT's
    # kernels take its type as written: a SOFTMAX writing one crashed LiteRT (found by gles-fuzz).
    unheld = next((t for t in tensors if t.dtype is None or t.type_name == "RESOURCE"), None)
    if unheld is not None:
        return f"tensor {unheld.index} is of type {unheld.type_name or 'unknown'}, which numpy does not hold"
    if _intermediates(node, graph):
        return "it has intermediate tensors, which the graph does not keep"
    return crash_reason(node)


def _intermediates(node, graph):
    """The operator's intermediate tensors in the model `graph` was read from (() if none)."""
    model = graph.source_model
    if model is None:
        return ()
    operators = model.subgraphs[graph.subgraph_index].operators
    return operators[node.index].intermediates if node.index < len(operators) else ()


def lacks_kernel(node):
    """Whether the reference has no kernel for `node`: not for its op, or not for its variant
    (ops.checks.Unimplemented)."""
    return node.op not in ops.KERNELS or isinstance(ops.unsupported_reason(node), Unimplemented)


def reads_dynamic(node, dynamic):
    """Whether `node` reads one of the `dynamic` tensors ({id(tensor)}:
    shape_propagation.dynamic_tensors), whose declared shapes are placeholders until the invoke
    decides them (a WHILE's growing [1, None] output declared [1, 1])."""
    return any(t is not None and id(t) in dynamic for t in node.inputs)


def checked_at_invoke(node, reason, dynamic):
    """Whether the reference's refusal of `node` (`reason`) waits for invoke, where its step
    checks the node again on the shapes its inputs have then: it reads dynamic tensors, and its
    op has a reference kernel whose variant is not the reason (that one decides LiteRT's
    kernels at allocate)."""
    return reads_dynamic(node, dynamic) and node.op in ops.KERNELS and not isinstance(reason, Unimplemented)


class CpuBackend:
    """Which CPU nodes of an Interpreter run through LiteRT, and the steps that run them."""

    def __init__(self, backend, num_threads=None, preserve_all_tensors=False):
        self.backend = check_backend(backend)
        self.num_threads = num_threads
        self.preserve_all_tensors = preserve_all_tensors
        if backend == "litert" and litert_interpreter_class() is None:
            raise ValueError("cpu_backend='litert' needs ai-edge-litert, which is not installed: "
                             "`pip install ai-edge-litert`, or pass cpu_backend='auto'")

    def replanning(self):
        """The backend of a plan for one run (subgraphs.py: a loop body planned again during an
        invoke because its carried tensors changed shape, a CALL_ONCE initializer): 'auto' as
        'fallback' there, LiteRT only for the nodes the reference lacks (a LiteRT interpreter
        made for one run would cost more than it saves)."""
        if self.backend != "auto":
            return self
        return CpuBackend("fallback", self.num_threads, self.preserve_all_tensors)

    def on_litert(self, node, graph):
        """Whether LiteRT runs `node` of `graph` when the CPU does (check() decides first whether
        a node the reference's checks refuse may run at all)."""
        if self.backend == "reference" or litert_refusal(node, graph) is not None:
            return False
        if node.op in COPIED_CALLERS and self.preserve_all_tensors:
            return False  # PRESERVING_CALLERS
        if self.backend == "litert":
            return True
        return litert_interpreter_class() is not None and (self.backend == "auto" or lacks_kernel(node))

    def reference_reason(self, node, graph):
        """Why `node` of `graph` runs on the reference when the CPU runs it (None when LiteRT
        does): what cpu_summary() reports."""
        if self.on_litert(node, graph):
            return None
        if self.backend in ("reference", "fallback"):
            return f"cpu_backend={self.backend!r}"
        if node.op in COPIED_CALLERS and self.preserve_all_tensors:
            return PRESERVING_CALLERS
        return litert_refusal(node, graph) or "ai-edge-litert is not installed"

    def check(self, node, reason, graph):
        """A ModelError naming `node`, which the reference refuses for `reason`, unless LiteRT
        runs it: a variant the reference lacks (or, under 'litert', any node but a malformed
        one: ops.checks.Malformed, which LiteRT's kernels do not survive)."""
        if self.on_litert(node, graph) and (lacks_kernel(node) or self._hands_to_litert(reason)):
            return
        message = f"operator {node.label} cannot run on the CPU: {reason}"
        # Any other refusal of an op the reference has stays its error (see the module docstring).
        if lacks_kernel(node) or self.backend == "litert":
            refusal = litert_refusal(node, graph)
            if refusal is not None:
                message += f"; nor through LiteRT: {refusal}"
            elif isinstance(reason, Malformed):
                message += "; a malformed node is not handed to LiteRT's kernels either"
            elif self.backend == "reference":
                message += "; cpu_backend='reference' keeps it off LiteRT's kernels, which 'auto' would run it on"
            elif litert_interpreter_class() is None:
                message += f"; {INSTALL_HINT}"
        raise ModelError(message)

    def _hands_to_litert(self, reason):
        """Whether 'litert' hands LiteRT a node the reference refuses for `reason` although it
        has a kernel for the node's variant: under 'litert', unless the reason is
        ops.checks.Malformed (an input count, a required input omitted, malformed sparsity):
        LiteRT's kernels read such a node's inputs unchecked (gles-fuzz: SIGSEGV in ADD,
        CONV_2D, SLICE, STRIDED_SLICE, DENSIFY; std::bad_alloc in a CONV_2D without weights)."""
        return self.backend == "litert" and not isinstance(reason, Malformed)

    def place(self, graph, steps, reference_step, pinned=frozenset(), dynamic=frozenset()):
        """`steps` (delegate steps, and Node objects where the CPU runs a node) with the CPU nodes
        made steps: runs of LiteRT nodes as LiteRTStep, the others reference_step(node, why) (why:
        the reason it is not on LiteRT). `pinned`: {id(node)} of nodes that stay on the reference
        (those of dynamic tensors), except one the reference lacks, which LiteRT runs alone with
        dynamic shapes (a SEGMENT_SUM of runtime ids). `dynamic`: {id(tensor)} of the dynamic
        tensors (checked_at_invoke)."""
        placed, run = [], []
        for step in steps + [None]:
            if isinstance(step, Node):
                run.append(step)
                continue
            placed += self._place_run(graph, run, reference_step, pinned, dynamic)
            run = []
            if step is not None:
                placed.append(step)
        return placed

    def _place_run(self, graph, run, reference_step, pinned, dynamic):
        """The steps of one run of consecutive CPU nodes."""
        for node in run:
            reason = ops.unsupported_reason(node)
            if reason is not None and not checked_at_invoke(node, reason, dynamic):
                self.check(node, reason, graph)  # a node a delegate could take but did not
        steps, group = [], []
        for node in run + [None]:
            # A WHILE / IF on LiteRT (its outputs often dynamic: a loop's growing accumulator)
            # takes the nodes of dynamic tensors after it along: LiteRT resizes them as TFLite does.
            if node is not None and self._joins(node, group, pinned) and self.on_litert(node, graph):
                group.append(node)
                continue
            if group:
                steps += self._litert_steps(graph, group, reference_step, any(id(n) in pinned for n in group))
                group = []
            if node is None:
                continue
            if id(node) in pinned and lacks_kernel(node) and self.on_litert(node, graph):
                steps.append(self._step(graph, [node], dynamic=True))
            else:
                why = "its tensors' shapes are decided at invoke" if id(node) in pinned and \
                    self.on_litert(node, graph) else self.reference_reason(node, graph)
                steps.append(reference_step(node, why))
        return steps

    @staticmethod
    def _joins(node, group, pinned):
        """Whether `node` may join the LiteRT run `group` (nodes): one of dynamic tensors
        (`pinned`) only as a WHILE / IF or after one."""
        return id(node) not in pinned or node.op in COPIED_CALLERS or any(n.op in COPIED_CALLERS for n in group)

    def _step(self, graph, nodes, dynamic=False):
        return LiteRTStep(graph, nodes, self.num_threads, self.preserve_all_tensors, dynamic)

    def _litert_steps(self, graph, nodes, reference_step, dynamic=False):
        """[one LiteRTStep of `nodes`] (`dynamic`: some of them read or write dynamic tensors);
        where LiteRT refuses that sub-model at allocate, the nodes it refuses alone run on the
        reference (one warning for them all) and each run of the others is a LiteRTStep again.
        The ModelError naming the node where the reference cannot run one LiteRT refuses (it
        lacks the op or the variant)."""
        # The errors' messages are kept, not the errors: an error in a local of this frame holds
        # the frame (its traceback's, and its context's), a reference cycle for the collector.
        try:
            return [self._step(graph, nodes, dynamic)]
        except ModelError as error:
            failed = str(error)
        refusals = {id(n): e for n in nodes if (e := self._refusal(graph, n, dynamic)) is not None} if len(nodes) > 1 else {}
        # Each node alone runs but the sub-model of all of them does not: all of them on the reference.
        refusals = refusals or {id(n): failed for n in nodes}
        for node in nodes:
            if id(node) in refusals and ops.unsupported_reason(node) is not None:
                raise ModelError(refusals[id(node)])
        refused = [n for n in nodes if id(n) in refusals]
        warnings.warn(f"LiteRT refused {_labels(refused)}, which run{'s' if len(refused) == 1 else ''} on the numpy "
                      f"reference kernels instead: {_why(refusals[id(refused[0])])}", RuntimeWarning, stacklevel=2)
        steps, group = [], []
        for node in nodes + [None]:
            if node is not None and id(node) not in refusals:
                group.append(node)
                continue
            if group:  # smaller than `nodes`: the recursion ends
                steps += self._litert_steps(graph, group, reference_step, dynamic)
                group = []
            if node is not None:
                steps.append(reference_step(node, f"LiteRT refused it: {_why(refusals[id(node)])}"))
        return steps

    def _refusal(self, graph, node, dynamic):
        """The message of the ModelError of LiteRT refusing `node` alone at allocate, or None
        when it takes it."""
        try:
            self._step(graph, [node], dynamic)
        except ModelError as error:
            return str(error)
        return None

    def node_runner(self, graph):
        """run(node, inputs) -> outputs for the nodes of `graph`: the reference's, or LiteRT's for
        a node the reference lacks (what shape propagation runs on stand-ins after a resize)."""
        def run(node, inputs):
            if not lacks_kernel(node) or not self.on_litert(node, graph):
                return ops.run_node(node, inputs)
            return run_once(node, inputs, self.num_threads)
        return run


# -- the sub-model ----------------------------------------------------------------------------
def sub_model(nodes, inputs, outputs, shapes=None, model=None):
    """(.tflite bytes, {id(tensor): sub-model tensor index}) of `nodes` with `inputs` / `outputs`
    (graph Tensors) as its inputs and outputs; constants copied into its buffers. shapes:
    {id(tensor): shape} overriding tensors' shapes. model: the ModelDef `nodes` were read from,
    whose subgraphs a WHILE / IF among them calls (copied after the sub-model's own:
    callee_subgraphs.py)."""
    shapes = shapes or {}
    tensors, index = [], {}
    for t in list(inputs) + [t for n in nodes for t in n.inputs + n.outputs if t is not None]:
        if id(t) not in index:
            index[id(t)] = len(tensors)
            tensors.append(t)
    buffers = [np.zeros(0, np.uint8)]
    defs = []
    for t in tensors:
        buffer = 0
        if t.is_const:
            buffer = len(buffers)
            buffers.append(np.ascontiguousarray(t.data).reshape(-1).view(np.uint8))
        type_name = t.type_name or schema.TENSOR_TYPE_NAMES[schema.DTYPE_TO_TENSOR_TYPE[np.dtype(t.dtype)]]
        defs.append(TensorDef(name=t.name, shape=tuple(shapes.get(id(t), t.shape)), type_name=type_name,
                              buffer=buffer, quantization=t.quantization, sparsity=t.sparsity))
    callees, callee_buffers, renumber = copy_callees(model, nodes, len(buffers)) if model is not None else ([], [], {})
    operators = [OperatorDef(op=n.op, inputs=_operands(n, index), outputs=tuple(index[id(t)] for t in n.outputs),
                             version=n.version, options=renumbered_options(n, renumber)) for n in nodes]
    subgraph = SubgraphDef(name="cpu_litert", tensors=defs, inputs=tuple(index[id(t)] for t in inputs),
                           outputs=tuple(index[id(t)] for t in outputs), operators=operators)
    # Constants after the flatbuffer (Buffer.offset / size): written in a third of the time, and
    # LiteRT's interpreter of pose_landmark_full made in 31 ms instead of 99.
    return write_model(ModelDef(subgraphs=[subgraph, *callees], buffers=buffers + callee_buffers),
                       external_buffers=True), index


def _operands(node, index):
    """`node`'s input indices in the sub-model ({id(tensor): index}), -1 where omitted; a
    RESHAPE's omitted shape left out: the reference reads it as absent, LiteRT's kernel reads
    the -1 (a crash, found by gles-fuzz) but takes the 1-input form (new_shape, else the
    output's shape)."""
    operands = [-1 if t is None else index[id(t)] for t in node.inputs]
    if node.op == "RESHAPE" and operands[-1:] == [-1]:
        operands.pop()
    return tuple(operands)


def _why(message):
    """What the message of a ModelError naming a node says after the node's label."""
    return message.split(": ", 1)[-1]


def _labels(nodes):
    return nodes[0].label if len(nodes) == 1 else f"{nodes[0].label} .. {nodes[-1].label} ({len(nodes)} nodes)"


def _interpreter(content, nodes, num_threads, preserve_all_tensors=False, shapes=None, builtin=False):
    """A LiteRT Interpreter of the sub-model `content`, tensors allocated (its inputs resized to
    `shapes` {input index: shape} first, where they differ); a ModelError naming `nodes` when
    LiteRT refuses it (an op or version its resolver lacks, a failed Prepare). builtin: LiteRT's
    builtin kernels only, without XNNPACK (else its default resolver)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "preserve_all_tensors is for debugging": it is
            kind = litert_interpreter_class()
            resolver = {"experimental_op_resolver_type": sys.modules[kind.__module__].OpResolverType
                        .BUILTIN_WITHOUT_DEFAULT_DELEGATES} if builtin else {}
            interpreter = kind(model_content=content, num_threads=num_threads,
                               experimental_preserve_all_tensors=preserve_all_tensors, **resolver)
        for detail in interpreter.get_input_details() if shapes else ():
            shape = shapes.get(detail["index"])
            if shape is not None and tuple(shape) != tuple(detail["shape"]):
                interpreter.resize_tensor_input(detail["index"], list(shape), strict=False)
        interpreter.allocate_tensors()
    except (ValueError, RuntimeError) as exc:
        reason = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())[:400]
        raise ModelError(f"operator {_labels(nodes)} cannot run through LiteRT: {reason}") from None
    return interpreter


def run_once(node, inputs, num_threads=None):
    """`node`'s outputs on `inputs` (arrays, None where omitted) through a one-node LiteRT
    interpreter: what shape propagation runs for a node the reference lacks."""
    runtime = [t for t, x in zip(node.inputs, inputs) if t is not None and not t.is_const]
    values = {id(t): np.asarray(x) for t, x in zip(node.inputs, inputs) if t is not None}
    content, index = sub_model([node], runtime, node.outputs, {id(t): values[id(t)].shape for t in runtime})
    interpreter = _interpreter(content, [node], num_threads)
    for t in runtime:
        interpreter.set_tensor(index[id(t)], values[id(t)].astype(t.dtype, copy=False))
    try:
        interpreter.invoke()
    except (ValueError, RuntimeError) as exc:
        raise ModelError(f"operator {node.label} failed in LiteRT: {str(exc).strip()[:400]}") from None
    return [interpreter.get_tensor(index[id(t)]) for t in node.outputs]


STABLEHLO_PREFIX = "STABLEHLO_"
TRIAL_TIMEOUT_S = 60
# A child process: LiteRT's interpreter of the sub-model on stdin, allocated and invoked once on
# zeros; a signal that ends it is a crash of LiteRT's kernels.
_TRIAL = """
import sys
import numpy as np
from ai_edge_litert.interpreter import Interpreter
interpreter = Interpreter(model_content=sys.stdin.buffer.read())
interpreter.allocate_tensors()
for detail in interpreter.get_input_details():
    interpreter.set_tensor(detail["index"], np.zeros(detail["shape"], detail["dtype"]))
interpreter.invoke()
"""


def _trial(content, nodes):
    """Run a sub-model of StableHLO ops once in a child process first: LiteRT's StableHLO kernels
    trust the options and the callees they are given, and a hostile file's (a scatter's dims past
    the operand's rank, an update computation of another type) crashed the process (gles-fuzz of
    such models: 233 of 580 mutated files, SIGSEGV or SIGABRT). A ModelError naming the nodes
    where the child dies of a signal or hangs; nothing where it runs or fails cleanly (the
    parent's own interpreter then says why)."""
    try:
        done = subprocess.run([sys.executable, "-c", _TRIAL], input=bytes(content), capture_output=True,
                              timeout=TRIAL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ModelError(f"{_labels(nodes)}: LiteRT's kernels did not finish a trial run in "
                         f"{TRIAL_TIMEOUT_S} s: refused") from None
    if done.returncode < 0:
        raise ModelError(f"{_labels(nodes)}: LiteRT's kernels crash on this sub-model "
                         f"({signal.Signals(-done.returncode).name} in a trial run): refused")


class LiteRTStep:
    """A run of consecutive CPU nodes as one LiteRT interpreter over a sub-model (see the module
    docstring); run(storage, capture) as every step of the Interpreter's plan. `dynamic`: one
    node of dynamic tensors (shape_propagation.dynamic_tensors): its inputs are resized to the
    shapes they have at invoke, and its outputs take the shapes LiteRT gives them, as TFLite's
    dynamic tensors."""
    backend = "litert"

    def __init__(self, graph, nodes, num_threads=None, preserve_all_tensors=False, dynamic=False):
        self.nodes = list(nodes)
        spec = boundary(graph, self.nodes)
        spec.inputs += _read_then_written(self.nodes)
        content, index = sub_model(self.nodes, spec.inputs, spec.outputs, model=graph.source_model)
        if any(n.op.startswith(STABLEHLO_PREFIX) for n in self.nodes):
            _trial(content, self.nodes)
        interpreter = _interpreter(content, self.nodes, num_threads, preserve_all_tensors)
        self._attach(interpreter, index, spec.inputs, spec.outputs, preserve_all_tensors, dynamic)

    def _attach(self, interpreter, index, inputs, outputs, preserve_all_tensors, dynamic):
        """Run `interpreter` with the graph tensors `inputs` / `outputs` as its boundary
        ({id(tensor): its index there}); a ModelError where LiteRT gives an output another shape
        than the model declares."""
        self.interpreter, self.dynamic = interpreter, dynamic
        producer = {id(t): n for n in self.nodes for t in n.outputs}
        # tensor() returns a function over LiteRT's Python object, safe to hold (unlike the view).
        self.inputs = [(t.index, index[id(t)], interpreter.tensor(index[id(t)])) for t in inputs]
        self.outputs = [(t, producer.get(id(t), self.nodes[0]), interpreter.tensor(index[id(t)])) for t in outputs]
        boundary_ids = {id(t) for t in outputs}
        self.intermediates = [(t.index, index[id(t)]) for n in self.nodes for t in n.outputs
                              if id(t) not in boundary_ids] if preserve_all_tensors else []
        self._lock = threading.Lock()
        # The shapes LiteRT's Prepare gave (a dynamic output keeps the declared one until invoke).
        reported = {d["index"]: tuple(int(k) for k in d["shape"]) for d in interpreter.get_output_details()}
        for tensor, node, _ in self.outputs:
            shape = reported.get(index[id(tensor)], tuple(tensor.shape))  # a variable: LiteRT holds it as declared
            if shape != tuple(tensor.shape) and not dynamic:
                raise ModelError(f"operator {node.label}: LiteRT computes shape {list(shape)} for its output tensor "
                                 f"{tensor.index} ({tensor.name!r}), the model declares {list(tensor.shape)}")

    def run(self, storage, capture=None):
        """Copy the inputs in, invoke LiteRT, give the outputs to `storage` (interpreter._Storage)
        as views of LiteRT's buffers (and, with `capture`, copy every intermediate into it:
        preserve_all_tensors)."""
        with self._lock:
            for tensor, _, _ in self.outputs:  # the last invoke's views: invoke() refuses to run while one is alive
                storage.forget(tensor.index, self)
            if self.dynamic:
                self._resize_inputs(storage)
            for index, theirs, view in self.inputs:
                _copy_in(self.interpreter, theirs, view, storage.current(index))
            try:
                self.interpreter.invoke()
            except (ValueError, RuntimeError) as exc:
                raise ModelError(f"operator {_labels(self.nodes)} failed in LiteRT: {str(exc).strip()[:400]}") from None
            for tensor, node, view in self.outputs:
                if self.dynamic:
                    take_output(storage, tensor, view())
                    continue
                _give_out(storage, node, tensor, view(), self)
            if capture is not None:
                for index, theirs in self.intermediates:
                    np.copyto(capture[index], self.interpreter.get_tensor(theirs))

    def _resize_inputs(self, storage):
        """Give LiteRT's inputs the shapes our tensors have now (a dynamic tensor's shape is
        decided at invoke), re-running its Prepare when one changed; a ModelError naming the
        node when its Prepare refuses them."""
        details = {d["index"]: tuple(d["shape"]) for d in self.interpreter.get_input_details()}
        changed = [(theirs, np.shape(storage[index])) for index, theirs, _ in self.inputs
                   if tuple(np.shape(storage[index])) != details[theirs]]
        if not changed:
            return
        try:
            for theirs, shape in changed:
                self.interpreter.resize_tensor_input(theirs, list(shape))
            self.interpreter.allocate_tensors()
        except (ValueError, RuntimeError) as exc:
            raise ModelError(f"operator {_labels(self.nodes)} cannot take input shapes "
                             f"{[list(shape) for _, shape in changed]} in LiteRT: {str(exc).strip()[:400]}") from None


class LiteRTCalls(NamedTuple):
    """set(index, array), get(index) -> a copy, invoke() of one LiteRT interpreter."""
    set: object
    get: object
    invoke: object


def native_calls(interpreter):
    """The LiteRTCalls of LiteRT's Interpreter `interpreter`: its pybind wrapper's SetTensor,
    GetTensor and Invoke (its `_interpreter`), else, where an ai-edge-litert has no such wrapper,
    its own set_tensor, get_tensor and invoke. Why: its Python methods add a frame each, and its
    invoke() counts the references to its wrapper (_ensure_safe: no numpy view of its buffers
    may outlive a reallocation), which is a tenth of a tiny model's invoke; a caller that never
    holds a view across an invoke needs not. Holding these makes that count refuse LiteRT's own
    invoke(): every invoke of `interpreter` must go through them."""
    wrapper = getattr(interpreter, "_interpreter", None)
    if all(callable(getattr(wrapper, name, None)) for name in ("SetTensor", "GetTensor", "Invoke")):
        return LiteRTCalls(wrapper.SetTensor, wrapper.GetTensor, wrapper.Invoke)
    return LiteRTCalls(interpreter.set_tensor, interpreter.get_tensor, interpreter.invoke)


class WholeModelStep(LiteRTStep):
    """The model file whole (subgraph 0 of `graph`, at its inputs' current shapes) through one
    LiteRT interpreter: its resource variables, CALL_ONCE and control flow as LiteRT runs them
    (each subgraph's tensors its own). What placement='fastest' leaves when it moved every GPU
    partition to the CPU (placement.py). The Interpreter mostly calls LiteRT through it
    directly (`calls`, direct_path.py); run(), from the storage: per invoke one copy in per
    model input and one out per output, its variable tensors (LSTM state) both, as a GPU
    partition's are (partition.boundary), so the storage holds their values (get_tensor,
    set_tensor, reset_all_variables). `num_threads`: LiteRT's. A ModelError when LiteRT
    refuses the model, or would crash on a node of it (litert_crashes.py)."""

    def __init__(self, graph, num_threads=None, previous=None, keep_state=False):
        refused = whole_model.refusal(graph)
        if refused is not None:  # the reference runs those nodes instead, and checks them
            raise ModelError(f"the model file does not go to LiteRT whole: {refused}")
        self.nodes, self.num_threads = list(graph.nodes), num_threads
        shapes = {t.index: tuple(t.shape) for t in graph.inputs}
        self.content = graph.source_model.source_bytes  # bytes, or the mmap read_model read the file through
        # keep_state, for a model of resource variables: LiteRT's builtin kernels, whose
        # interpreter is resized (a new plan's `previous`), keeping the variables, as LiteRT's own
        # resize does. Not XNNPACK's: LiteRT 2.3 with it fails to reshape, or corrupts its heap
        # ("free(): invalid next size"), when such a model is resized after an invoke.
        self.builtin = keep_state and whole_model.holds_resources(graph)
        if self.builtin and previous is not None and previous.builtin and previous.content is self.content \
                and previous.num_threads == num_threads:
            interpreter = _resized(previous.interpreter, shapes, self.nodes)
        else:
            interpreter = _interpreter(bytes(self.content), self.nodes, num_threads, shapes=shapes,
                                       builtin=self.builtin)
        index = {id(t): t.index for t in graph.tensors}  # subgraph 0's indices are LiteRT's
        state = [t for t in graph.tensors if t.is_variable and not t.is_const and t.dtype is not None]
        self._attach(interpreter, index, list(graph.inputs) + state, list(graph.outputs) + state, False, False)
        self.calls = native_calls(interpreter)

    def reset_variables(self):
        """Zero the variable tensors LiteRT holds in the model's other subgraphs too
        (Interpreter.reset_all_variables)."""
        self.interpreter.reset_all_variables()

    def run(self, storage, capture=None):
        """LiteRTStep.run, less what a whole model needs not: its inputs are the model's (no
        dynamic shapes, never a deferred output: set_tensor copies them in), its outputs have
        the shapes LiteRT's Prepare gave (checked when made), and the one Interpreter that owns
        it runs it under its own lock. The Interpreter runs it only when it left its thin path
        (direct_path.py), which skips the copies through its storage."""
        for index, theirs, _ in self.inputs:
            self.calls.set(theirs, storage[index])
        self.invoke()
        for tensor, _, view in self.outputs:  # copied now: a view held would cost a forget() per invoke
            take_output(storage, tensor, view())

    def invoke(self):
        """LiteRT's invoke of the model on what its inputs hold; a ModelError where it fails."""
        try:
            self.calls.invoke()
        except (ValueError, RuntimeError) as exc:
            raise whole_model_failure(exc) from None


def _resized(interpreter, shapes, nodes):
    """LiteRT's `interpreter` with its inputs resized to `shapes` and its tensors allocated
    again, as LiteRT's own resize_tensor_input + allocate_tensors do: its resource variables
    and CALL_ONCE keep what they hold (a new interpreter would start them afresh). Through its
    pybind wrapper: a WholeModelStep's `calls` on it would make the Python methods refuse."""
    wrapper = interpreter._interpreter
    try:
        for index, shape in shapes.items():
            if tuple(wrapper.TensorSize(index, 0)) != tuple(shape):
                wrapper.ResizeInputTensor(index, np.array(shape, np.int32), False, 0)
        wrapper.AllocateTensors(-1)
    except (ValueError, RuntimeError) as exc:
        reason = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())[:400]
        raise ModelError(f"operator {_labels(nodes)} cannot run through LiteRT: {reason}") from None
    return interpreter


def take_output(storage, tensor, value):
    """Copy LiteRT's `value` of graph Tensor `tensor` into `storage` (interpreter._Storage): in
    place where the shapes agree, else, as TFLite resizes a dynamic tensor
    (shape_propagation.dynamic_tensors), as a new array of the shape LiteRT gave it, which the
    tensor's details then show."""
    if value.shape == storage[tensor.index].shape:
        np.copyto(storage[tensor.index], value)
    else:
        storage[tensor.index] = np.array(value, tensor.dtype)
        tensor.shape = value.shape


def whole_model_failure(exc):
    """The ModelError of LiteRT's invoke of a whole model failing with `exc`, naming the main
    subgraph's operator as the per-node runs do: LiteRT's message ends with the operator that
    failed in each subgraph it entered, innermost first ("Node number 1 (ADD) failed to invoke.
    Node number 0 (WHILE) failed to invoke."), and subgraph 0's numbers are the model's."""
    text = str(exc).strip()
    failed = re.findall(r"Node number (\d+) \((\w+)\) failed to invoke", text)
    where = f"operator #{failed[-1][0]} ({failed[-1][1]})" if failed else "the model"
    return ModelError(f"{where} failed in LiteRT: {text[:400]}")


def _read_then_written(nodes):
    """The tensors a node of `nodes` reads before a later one writes them (a graph input the
    model overwrites): inputs of the sub-model, which partition.boundary leaves out as written
    inside it."""
    written, found = set(), {}
    for node in nodes:
        for t in node.inputs:
            if t is not None and not t.is_const and id(t) not in written:
                found.setdefault(id(t), t)
        written |= {id(t) for t in node.outputs}
    return [t for key, t in found.items() if key in written]


def _copy_in(interpreter, index, view, value):
    """value into LiteRT's input tensor `index` through a fresh view (dropped on return: LiteRT
    refuses to invoke while one is held); a 0-d tensor's view is a numpy scalar, not an array,
    so it goes through set_tensor."""
    target = view()
    if isinstance(target, np.ndarray):
        np.copyto(target, value)
    else:
        interpreter.set_tensor(index, np.asarray(value, type(target)))


def _give_out(storage, node, tensor, value, owner):
    """LiteRT's output `value` (a view of its buffer, in the shape LiteRT reports) as `tensor`'s
    value in `storage`: the view itself until `owner` runs again (_Storage.defer_output), else a
    copy; a ModelError when a dynamic output came out in another shape than the model declares."""
    value = np.asarray(value)  # a 0-d output's view is a numpy scalar
    target = storage[tensor.index]
    if value.shape != target.shape:
        raise ModelError(f"operator {node.label} produced shape {list(value.shape)} for tensor {tensor.index} "
                         f"through LiteRT, the model declares {list(target.shape)}")
    if not storage.defer_output(tensor.index, value, owner):
        np.copyto(target, value)
