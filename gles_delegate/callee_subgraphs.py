"""The subgraphs a WHILE or IF calls, copied into the LiteRT sub-model of the CPU run that holds it;
and those the StableHLO ops LiteRT runs call (a scatter's update computation, a reduction's body,
a sort's comparator, a composite's decomposition), which have no kernel of ours: LiteRT's is
theirs, with their callees copied in the same way.

Why: a loop the CPU runs on our side goes through our Python once per iteration (subgraphs.py
plans its body and runs it step by step): the zoo's Keras GRU/LSTM models took 5.6-16 ms on an
H100 against 0.16-0.35 ms for LiteRT's interpreter of the same file, whose WHILE kernel runs the
body in C++. So a WHILE or IF whose callees LiteRT can run without us goes into the LiteRT
sub-model of its CPU run (cpu_litert.sub_model), its callees copied after the sub-model's own
subgraph, renumbered 1..k in the order first called, their constants copied into its buffers.

A callee keeps a node on our side (where a GPU delegate runs the callees' nodes) when they compute
much per call (CALLEE_WORK_MAX), or (callee_refusal) when it holds state only our runtime has:
resource variables (VAR_HANDLE, READ_VARIABLE, ASSIGN_VARIABLE: shared with every subgraph of
our interpreter, which a LiteRT sub-model would hold apart), CALL_ONCE (our interpreter's record
of what ran), variable tensors (reset_all_variables() zeroes ours), and custom ops (LiteRT's
builtin resolver lacks MediaPipe's).
"""
from dataclasses import replace

from .errors import ModelError
from .graph import BODY_OP, Graph
from .litert_crashes import crash_reason
from .ops.control_flow import SUBGRAPH_OPTIONS, calls
from .partition import work

# The options naming the subgraphs an op calls: our control flow's (ops/control_flow.py) and the
# StableHLO ops' (their tables in the second options union).
CALLEE_OPTIONS = {**SUBGRAPH_OPTIONS, "STABLEHLO_SCATTER": ("update_computation_subgraph_index",),
                  "STABLEHLO_REDUCE": ("body_subgraph_index",), "STABLEHLO_REDUCE_WINDOW": ("body_subgraph_index",),
                  "STABLEHLO_SORT": ("comparator_subgraph_index",),
                  "STABLEHLO_WHILE": ("cond_subgraph_index", "body_subgraph_index"),
                  "STABLEHLO_COMPOSITE": ("decomposition_subgraph_index",)}
# Callers our kernels run too: their callees stay ours when they compute much (CALLEE_WORK_MAX).
OWN_CALLERS = ("WHILE", "IF")
# Callees run by LiteRT's kernels inside the sub-model; CALL_ONCE's state is our interpreter's.
COPIED_CALLERS = (*OWN_CALLERS, *(op for op in CALLEE_OPTIONS if op.startswith("STABLEHLO_")))
# Multiply-adds per call (partition.work) above which callees stay ours, their nodes in GPU
# partitions: our cost per call (about 0.3 ms of Python and GPU round trip on an H100 for the
# zoo's GRU bodies) is then small beside theirs on one CPU core (2^24 multiply-adds: about 1 ms
# for XNNPACK), and an IF whose branch is the whole network stays off the CPU.
CALLEE_WORK_MAX = 1 << 24
STATEFUL_OPS = frozenset({"VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE", "CALL_ONCE"})


def callees(model, roots):
    """The subgraph indices of `model` (a ModelDef) that operators `roots` call, directly or
    through their callees, in the order first called."""
    found, pending = [], [i for op in roots for i in calls(op, CALLEE_OPTIONS)]
    while pending:
        index = pending.pop(0)
        if index in found or not 0 <= index < len(model.subgraphs):
            continue
        found.append(index)
        pending += [i for op in model.subgraphs[index].operators for i in calls(op, CALLEE_OPTIONS)]
    return found


def callee_refusal(node, graph):
    """None when LiteRT can run `node` of `graph` (a WHILE, an IF, a StableHLO op that calls
    subgraphs) with its callees copied into a sub-model, else why not (see the module docstring)."""
    if node.op not in COPIED_CALLERS:
        return f"{node.op} runs subgraphs"
    model = graph.source_model
    if model is None:
        return f"{node.op} runs subgraphs, and the model file they are in is not at hand"
    indices = callees(model, [node])
    named = calls(node, CALLEE_OPTIONS)
    if graph.subgraph_index in indices or any(not 0 <= i < len(model.subgraphs) for i in named):
        return f"{node.op} calls a subgraph that is out of range or calls back into its caller"
    for index in indices:
        subgraph = model.subgraphs[index]
        held = next((op.op for op in subgraph.operators if op.custom or op.op in STATEFUL_OPS), None)
        if held is not None:
            return f"{node.op} calls subgraph {index}, which runs {held} (state our interpreter holds, or a custom op)"
        if any(t.is_variable or t.type_name in ("RESOURCE", "STRING", "VARIANT") for t in subgraph.tensors):
            return f"{node.op} calls subgraph {index}, which holds a variable, resource or string tensor"
    try:
        graphs = {index: Graph.from_model(model, index) for index in indices}
    except ModelError as error:
        return f"{node.op} calls a subgraph our reader refuses: {error}"
    crash = next(((i, n, why) for i, g in graphs.items() for n in g.nodes if (why := crash_reason(n))), None)
    if crash is not None:
        return f"{node.op} calls subgraph {crash[0]}, whose {crash[1].label}: {crash[2]}"
    per_call = sum(work(g.nodes) for g in graphs.values())
    if node.op in OWN_CALLERS and per_call > CALLEE_WORK_MAX:
        return (f"{node.op}'s subgraphs compute about {per_call:,} multiply-adds a call, over "
                f"{CALLEE_WORK_MAX:,} (callee_subgraphs.CALLEE_WORK_MAX): they run on our side, on the GPU where it takes them")
    return None


def callee_work(model, indices):
    """The multiply-adds (partition.work) subgraphs `indices` of `model` compute a call."""
    return sum(work(Graph.from_model(model, index).nodes) for index in indices)


def small_loop_caller(model, index):
    """'operator #i (WHILE) of subgraph s' when subgraph `index` of `model` is called, directly
    or through its callees, by a WHILE / IF whose callees compute at most CALLEE_WORK_MAX
    multiply-adds a call; else None. In LiteRT's Interpreter such a subgraph is left to LiteRT's
    kernels whole (litert/plan.py): a GPU partition in a loop body costs a call into our Python
    per iteration, the cliff this module removes from our Interpreter."""
    for s, subgraph in enumerate(model.subgraphs):
        for i, op in enumerate(subgraph.operators):
            if op.op not in COPIED_CALLERS or op.custom:
                continue
            indices = callees(model, [op])
            if index not in indices or s in indices:
                continue
            try:
                if callee_work(model, indices) <= CALLEE_WORK_MAX:
                    return f"operator #{i} ({op.op}) of subgraph {s}"
            except ModelError:
                continue
    return None


def copy_callees(model, nodes, first_buffer):
    """(SubgraphDefs, buffers, {old index: new index}) of the subgraphs `nodes` (graph Nodes)
    call in `model` (a ModelDef), renumbered from 1 (after the sub-model's own subgraph 0), with
    their options renumbered alike and their constants' buffers numbered from `first_buffer`."""
    indices = callees(model, nodes)
    renumber = {old: new for new, old in enumerate(indices, start=1)}
    subgraphs, buffers, buffer_index = [], [], {}
    for old in indices:
        subgraph = model.subgraphs[old]
        tensors = []
        for tensor in subgraph.tensors:
            if tensor.buffer > 0 and tensor.buffer < len(model.buffers) and model.buffers[tensor.buffer].size:
                if tensor.buffer not in buffer_index:
                    buffer_index[tensor.buffer] = first_buffer + len(buffers)
                    buffers.append(model.buffers[tensor.buffer])
                tensor = replace(tensor, buffer=buffer_index[tensor.buffer])
            else:
                tensor = replace(tensor, buffer=0)
            tensors.append(tensor)
        operators = [replace(op, options=renumbered_options(op, renumber)) for op in subgraph.operators]
        subgraphs.append(replace(subgraph, tensors=tensors, operators=operators))
    return subgraphs, buffers, renumber


def renumbered_options(op, renumber):
    """`op`'s options (a dict) with the subgraph indices it names renumbered ({old: new}), less
    what Graph.from_model derived from the model (graph.BODY_OP: the file has no such field)."""
    options = dict(op.options)
    options.pop(BODY_OP, None)
    if not op.custom:
        for option in CALLEE_OPTIONS.get(op.op, ()):
            if options.get(option) in renumber:
                options[option] = renumber[options[option]]
    return options
