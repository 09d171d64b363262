"""When the Interpreter may hand the model file whole to one LiteRT interpreter
(cpu_litert.WholeModelStep) instead of running its nodes one CPU run at a time.

Node by node, what LiteRT's sub-models cannot carry from invoke to invoke runs on the numpy
reference: a Keras LSTM's variable tensors, resource variables and their CALL_ONCE
initialisation, shapes decided at invoke. Whole, LiteRT runs those itself: 18-45x faster on
the zoo's Keras LSTM and keyword spotters (docs/performance.md, "Our Interpreter without a
delegate"). But LiteRT's kernels check less than ours: a READ_VARIABLE of a variable nothing
assigned yet, or of one with fewer elements than its output, reads past LiteRT's buffer without
a word (garbage out), malformed sparse weights crash its Prepare, and a node it crashes on in a
loop body takes the process down. So the model goes whole only where refusal() finds none of
those; anywhere else the node-by-node plan runs, whose reference kernels say what is wrong.
"""
import numpy as np

from .callee_subgraphs import STATEFUL_OPS
from .errors import ModelError
from .graph import Graph
from .litert_crashes import crash_reason
from .ops.variables import dynamic_read, ref_of
from .resource_variables import declared_assigns, var_handles
from .shape_propagation import dynamic_tensors



def refusal(graph):
    """Why the model of `graph` (subgraph 0, read from a file at hand) should not run whole on
    LiteRT, or None: a node of any of its subgraphs LiteRT's kernels crash on
    (litert_crashes.py), a subgraph our reader refuses, sparse weights (fold_constants checks
    their index arrays, LiteRT's Prepare reads them unchecked: a mutated one crashed it), or a
    resource variable a read of which LiteRT would not check (unchecked_read)."""
    crash = _crash(graph)
    if crash is not None:
        return crash
    sparse = next((t for t in graph.tensors if t.sparsity is not None), None)
    if sparse is not None:
        return f"tensor {sparse.index} ({sparse.name!r}) is sparse"
    # LiteRT's RESHAPE reads its shape input at invoke when its input is dynamic, as every tensor
    # after a READ_VARIABLE is in the whole file, and one omitted (-1: the shape from its options)
    # is a null pointer there (SIGSEGV: gles-fuzz seed 114, the stream seed). Its sub-model, of
    # static shapes, never reads it.
    unshaped = next((n for n in graph.nodes if n.op == "RESHAPE" and len(n.inputs) > 1 and n.inputs[1] is None),
                    None)
    if unshaped is not None and holds_resources(graph):
        return f"{unshaped.label} has its shape input omitted, which LiteRT reads when the shape is dynamic"
    return unchecked_read(graph)


def carried_whole(node, dynamic):
    """Whether LiteRT's interpreter of the whole file runs `node`, which the node-by-node plan
    left to the reference for what LiteRT's sub-models cannot carry: state (resource variables,
    CALL_ONCE, variable tensors) or tensors of shapes decided at invoke (`dynamic`: their ids).
    Not a node LiteRT refused or lacks: the whole file would fail, or crash, on it too."""
    tensors = [t for t in [*node.inputs, *node.outputs] if t is not None]
    return node.op in STATEFUL_OPS or any(t.is_variable or t.type_name == "RESOURCE" or id(t) in dynamic
                                       for t in tensors)


def _crash(graph):
    model = graph.source_model
    graphs = [graph]
    for index in range(len(model.subgraphs) if model is not None else 0):
        if index == graph.subgraph_index:
            continue
        try:
            graphs.append(Graph.from_model(model, index))
        except ModelError as error:
            return f"subgraph {index} is refused by our reader: {error}"
    for g in graphs:
        for node in g.nodes:
            why = crash_reason(node)
            if why is not None:
                return f"subgraph {g.subgraph_index}: {node.label}: {why}"
    return None


def unchecked_read(graph):
    """Why some READ_VARIABLE of `graph` could read what LiteRT does not check, or None. Each
    must read a variable assigned before it on the first invoke (by an ASSIGN_VARIABLE before
    it, or by the initializer of a CALL_ONCE before it; no variable op in a subgraph other than
    those initializers), every assignment of which, here and in the initializers, has a shape
    known now, the read's dtype, and at least as many elements as the read's output takes
    (LiteRT copies that many; more are left, as ops/variables.py does)."""
    initializers = _initializers(graph)
    if initializers is None:
        return "a subgraph other than a CALL_ONCE initializer uses resource variables"
    reads = [n for n in graph.nodes if n.op == "READ_VARIABLE"]
    if not reads:
        return None
    assigns, _ = declared_assigns(graph.source_model, graph.subgraph_index)
    dynamic = dynamic_tensors(graph)
    for node in graph.nodes:
        ref = ref_of(node)
        if node.op == "ASSIGN_VARIABLE" and ref is not None:
            value = node.inputs[1]
            assigns.setdefault(ref.key, []).append((None if id(value) in dynamic else tuple(value.shape), value.dtype))
    assigned = set()
    for node in graph.nodes:
        ref = ref_of(node) if node.op in ("READ_VARIABLE", "ASSIGN_VARIABLE") else None
        if node.op == "CALL_ONCE":
            assigned |= initializers.get(node.options.get("init_subgraph_index"), set())
        elif node.op == "ASSIGN_VARIABLE" and ref is not None:
            assigned.add(ref.key)
        elif node.op == "READ_VARIABLE":
            why = _read_reason(node, ref, assigned, assigns)
            if why is not None:
                return f"{node.label} {why}"
    return None


def _read_reason(node, ref, assigned, assigns):
    """Why READ_VARIABLE `node` (of variable `ref`) may read what LiteRT does not check."""
    if ref is None:
        return "reads a variable whose handle is not traced to a VAR_HANDLE"
    if ref.key not in assigned:
        return f"may read {ref.label} before anything assigns it"
    out = node.outputs[0]
    size = None if dynamic_read(node) else int(np.prod(out.shape))
    for shape, dtype in assigns.get(ref.key, []):
        if shape is None:
            return f"reads {ref.label}, which is assigned a value of a shape known only at invoke"
        if np.dtype(dtype) != np.dtype(out.dtype):
            return f"reads {ref.label}, assigned {np.dtype(dtype)}, into {np.dtype(out.dtype)}"
        if size is not None and int(np.prod(shape)) < size:
            return f"reads {ref.label}, assigned a value of shape {list(shape)}, into {list(out.shape)}"
    return None


def holds_resources(graph):
    """Whether `graph` uses resource variables (a VAR_HANDLE, or a CALL_ONCE initialising them)."""
    return any(n.op in ("VAR_HANDLE", "CALL_ONCE") for n in graph.nodes)


def _initializers(graph):
    """{subgraph index: the (container, shared_name) keys its ASSIGN_VARIABLEs assign} of the
    subgraphs CALL_ONCE nodes of `graph` initialise with; None where another subgraph (a loop
    body, a branch) uses variables too."""
    model = graph.source_model
    inits = {n.options.get("init_subgraph_index") for n in graph.nodes if n.op == "CALL_ONCE"}
    found = {}
    for index, subgraph in enumerate(model.subgraphs if model is not None else ()):
        if index == graph.subgraph_index:
            continue
        uses = [op for op in subgraph.operators if op.op in STATEFUL_OPS]
        if uses and index not in inits:
            return None
        handles = var_handles(uses, lambda i: i)
        found[index] = {handles[op.inputs[0]] for op in uses
                        if op.op == "ASSIGN_VARIABLE" and len(op.inputs) == 2 and op.inputs[0] in handles}
        if any(op.op in ("READ_VARIABLE", "CALL_ONCE") for op in uses):
            return None  # an initializer that reads, or initialises further: not followed here
    return found
