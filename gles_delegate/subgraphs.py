"""What the interpreter offers the kernels of control flow and resource variables (ops/
control_flow.py, ops/variables.py): running other subgraphs of the model, and the resource
variables every subgraph shares. Each node reaches it as `node.runtime`, a Runtime: the
interpreter's Subgraphs as seen from the subgraph the node belongs to.

A called subgraph runs on the interpreter's executor of that subgraph (the one
get_tensor(..., subgraph_index) reads). It is planned for the input shapes its caller passes:
with the delegates the first time after allocate_tensors() (TFLite's WHILE / IF Prepare
allocates its subgraphs there, so the body of a loop gets GPU partitions, and its CPU nodes
LiteRT sub-models), and again, on the reference kernels only (LiteRT for the nodes the reference
lacks), whenever the shapes change during invoke (a loop whose carried tensors change shape:
planning GPU partitions or LiteRT interpreters at every iteration would cost more than it saves).
A CALL_ONCE initializer runs on the reference kernels too: it runs once, and the values it assigns
stay on the CPU until the GPU partitions that use them upload them (variable_store.py).
"""
import contextlib
import weakref

from .errors import ModelError
from .graph import tensor_dtype
from .ops.control_flow import SUBGRAPH_OPTIONS, calls
from .variable_store import VariableStore


# Control flow nested deeper than this (a WHILE in a body in a branch ...) is refused: each level
# costs Python stack frames when planned and run; converters emit a few levels.
MAX_NESTING = 32


def _callees(subgraph, ops=SUBGRAPH_OPTIONS):
    """The subgraph indices the operators of a SubgraphDef of `ops` name in their options."""
    return {index for op in subgraph.operators for index in calls(op, ops)}


@contextlib.contextmanager
def _naming(index):
    """A ModelError raised inside subgraph `index` says so (its operators' labels are its own)."""
    try:
        yield
    except ModelError as exc:
        raise ModelError(f"subgraph {index}: {exc}") from None


class Subgraphs:
    """The subgraphs of one interpreter's model: their executors, made on first use by
    make_executor(index, runtime) (allocate(delegates), resize_input(tensor, shape), invoke(),
    graph, storage, dynamic), the resource variables and the CALL_ONCE record. It holds no
    reference to the interpreter, which goes (releasing its GPU partitions) when its last user
    lets it go."""

    def __init__(self, model, make_executor, delegates):
        self.model = model
        self.make_executor = make_executor
        self.executors = {}  # subgraph index -> executor
        self.delegates = delegates
        self.calls = [_callees(sg) for sg in model.subgraphs]
        self.resource_ids = {}  # (container, shared_name) -> resource id
        self.variables = VariableStore()  # resource id -> value, and which GPU partition holds it
        self.initialized = set()  # the init subgraphs CALL_ONCE has run
        # The init subgraphs CALL_ONCE runs: planned on the reference kernels only (see the docstring).
        once = {"CALL_ONCE": SUBGRAPH_OPTIONS["CALL_ONCE"]}
        self.once = set().union(*(_callees(sg, once) for sg in model.subgraphs))
        self.planned = set()  # the subgraphs planned (with the delegates) since allocate_tensors()
        self._nesting = {}  # subgraph index -> nesting(index)

    def executor(self, index):
        """The executor of subgraph `index` (made on first use)."""
        if index not in self.executors:
            self.executors[index] = self.make_executor(index, Runtime(self, index))
        return self.executors[index]

    def replan(self):
        """Let the next call of each subgraph plan it with the delegates again (allocate_tensors)."""
        self.planned.clear()

    def reaches(self, start, target):
        """Whether running subgraph `start` may run subgraph `target` (itself included)."""
        seen, stack = set(), [start]
        while stack:
            index = stack.pop()
            if index == target:
                return True
            if index not in seen and 0 <= index < len(self.calls):
                seen.add(index)
                stack.extend(self.calls[index])
        return False

    def callees(self, index):
        """The subgraphs the nodes of subgraph `index` run (indices in range only)."""
        return [c for c in self.calls[index] if 0 <= c < len(self.calls)]

    def cycle_from(self, index):
        """A subgraph reachable from subgraph `index` that runs itself through control flow
        (a cycle of calls: recursion without end), or None."""
        on_path, done, stack = {index}, set(), [(index, iter(self.callees(index)))]
        while stack:
            node, pending = stack[-1]
            for callee in pending:
                if callee in on_path:
                    return callee
                if callee not in done:
                    on_path.add(callee)
                    stack.append((callee, iter(self.callees(callee))))
                    break
            else:
                on_path.discard(node)
                done.add(node)
                stack.pop()
        return None

    def nesting(self, index):
        """How many subgraphs deep running subgraph `index` goes (1: it calls none), at most
        MAX_NESTING + 1 (also for a cycle: Runtime.call_reason names the one into the caller)."""
        if index not in self._nesting:
            self._nesting[index] = self._depth(index, {}, set())
        return self._nesting[index]

    def _depth(self, index, memo, active):
        """nesting(index), given the subgraphs on the path to it (`active`) and the depths found
        so far (`memo`). A method, not a closure in nesting(): a recursive closure refers to
        itself, a reference cycle left for the cyclic collector at every call."""
        if index in active or len(active) > MAX_NESTING:
            return MAX_NESTING + 1
        if index not in memo:
            active.add(index)
            deepest = max((self._depth(c, memo, active) for c in self.callees(index)), default=0)
            active.discard(index)
            memo[index] = min(1 + deepest, MAX_NESTING + 1)
        return memo[index]

    def prepare(self, index, shapes):
        """The executor of subgraph `index`, planned for input `shapes` (a list of tuples)."""
        executor = self.executor(index)
        if executor.storage is not None and [tuple(t.shape) for t in executor.graph.inputs] == shapes:
            return executor
        with _naming(index):
            for tensor, shape in zip(executor.graph.inputs, shapes):
                if tuple(tensor.shape) != shape:
                    executor.resize_input(tensor, shape)
            transient = index in self.planned or index in self.once
            executor.allocate([] if transient else self.delegates, transient=transient)
        self.planned.add(index)
        return executor


class Runtime:
    """node.runtime: the Subgraphs of the interpreter as seen from subgraph `caller`."""

    def __init__(self, subgraphs, caller):
        # Weak: the Subgraphs holds the executors, which hold this Runtime (and their nodes do),
        # so a strong reference put every interpreter's whole graph in a reference cycle that
        # only the cyclic collector's full collection freed (docs/reliability.md, "scaling").
        self.subgraphs = weakref.proxy(subgraphs)
        self.caller = caller

    @property
    def variables(self):
        """The interpreter's resource variables (a variable_store.VariableStore)."""
        return self.subgraphs.variables

    def resource_id(self, container, shared_name):
        """The id of the resource variable (container, shared_name), the same in every subgraph."""
        ids = self.subgraphs.resource_ids
        return ids.setdefault((container, shared_name), len(ids))

    def call_reason(self, index, option):
        """Why the subgraph index of option `option` cannot be called from here, or None: out of
        range, or a call back into the caller (TFLite would recurse without end)."""
        count = len(self.subgraphs.model.subgraphs)
        if not isinstance(index, int) or not 0 <= index < count:
            return f"{option} {index!r} is out of range [0, {count})"
        if self.subgraphs.reaches(index, self.caller):
            return f"{option} {index} calls back into subgraph {self.caller}, the one this node is in"
        cycle = self.subgraphs.cycle_from(index)
        if cycle is not None:
            return f"{option} {index} runs subgraph {cycle}, which runs itself (a recursion without end)"
        if self.subgraphs.nesting(index) > MAX_NESTING:
            return f"{option} {index} nests control flow more than {MAX_NESTING} subgraphs deep"
        return None

    def signature(self, index):
        """([(dtype, name)] of the inputs, [(dtype, name)] of the outputs) of subgraph `index`
        as the file declares them."""
        sg = self.subgraphs.model.subgraphs[index]
        return ([(tensor_dtype(sg.tensors[i]), sg.tensors[i].name) for i in sg.inputs],
                [(tensor_dtype(sg.tensors[i]), sg.tensors[i].name) for i in sg.outputs])

    def output_shapes(self, index, shapes):
        """The output shapes of subgraph `index` when its inputs have `shapes`, planning it for
        them; None when one of them is dynamic (decided by its invoke)."""
        executor = self.subgraphs.prepare(index, [tuple(s) for s in shapes])
        if any(id(t) in executor.dynamic for t in executor.graph.outputs):
            return None
        return [tuple(t.shape) for t in executor.graph.outputs]

    def call(self, index, values):
        """Run subgraph `index` on input arrays `values`; returns copies of its outputs."""
        executor = self.subgraphs.prepare(index, [tuple(v.shape) for v in values])
        for tensor, value in zip(executor.graph.inputs, values):
            executor.storage[tensor.index][...] = value
        with _naming(index):
            executor.invoke()
        return [executor.storage[t.index].copy() for t in executor.graph.outputs]

    def call_once(self, index):
        """Run subgraph `index` (no inputs, no outputs) unless a CALL_ONCE of this interpreter
        ran it before (TFLite's initialization status: once per interpreter)."""
        if index in self.subgraphs.initialized:
            return
        self.call(index, [])
        self.subgraphs.initialized.add(index)

