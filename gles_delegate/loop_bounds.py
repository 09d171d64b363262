"""Which loop of a model runs as many times as its inputs say (input_bound_loop).

placement='fastest' times a model whole on LiteRT with zeros for inputs (placement.py). A loop
whose trip count follows from an input may never end on zeros (allocate_tensors hung on one
where placement='gpu' took 0.1 s), and its time there says nothing of real inputs'; a loop whose
condition reads only what the model's constants decide (a Keras RNN's step counter against its
sequence length) runs as often on zeros as on anything, and timing it is fair.

What the inputs decide is followed as taint through the operators, in order: an output is tainted
when an input is, except where it only depends on shapes (SHAPE, RANK: fixed once the inputs'
shapes are). A variable's value (a variable tensor, READ_VARIABLE) is state of earlier invokes:
tainted. A WHILE's carried values are tainted when their initial values are or when the body
makes them so, to the fixpoint; then its condition is followed on them. IF follows both
branches, every output tainted where the condition is. An op that runs a subgraph in a way not
known here counts as input-bound itself.
"""
from .ops.control_flow import SUBGRAPH_OPTIONS

SHAPE_ONLY = frozenset({"SHAPE", "RANK"})
STATE_READS = frozenset({"READ_VARIABLE"})
# Deeper nesting than this is not followed (subgraphs.MAX_NESTING refuses it at invoke anyway).
MAX_DEPTH = 32


def input_bound_loop(model, subgraph_index=0):
    """'operator #i (WHILE) of subgraph s' for the first loop of `model` (a ModelDef) run from
    subgraph `subgraph_index` whose condition reads a value its inputs or a variable decide, or
    None when every loop's trip count is fixed by the model's constants and shapes."""
    taint = _Taint(model)
    subgraph = model.subgraphs[subgraph_index]
    taint.follow(subgraph_index, set(range(len(subgraph.inputs))), ())
    return taint.found


class _Taint:
    def __init__(self, model):
        self.model = model
        self.found = None  # the first input-bound loop

    def follow(self, index, tainted_inputs, stack):
        """The positions of subgraph `index`'s outputs its inputs at `tainted_inputs` (or a
        variable) decide; self.found set at the first input-bound loop met. `stack`: the
        subgraph indices calling it (a recursive or too deep call counts as input-bound)."""
        subgraph = self.model.subgraphs[index]
        if index in stack or len(stack) >= MAX_DEPTH:
            self._flag(f"a call of subgraph {index} from itself or {MAX_DEPTH} levels deep")
            return set(range(len(subgraph.outputs)))
        tainted = {subgraph.inputs[k] for k in tainted_inputs if k < len(subgraph.inputs)}
        tainted |= {i for i, t in enumerate(subgraph.tensors) if t.is_variable}
        for position, op in enumerate(subgraph.operators):
            hot = {k for k, t in enumerate(op.inputs) if t in tainted}
            for k in self._operator(op, hot, (*stack, index), f"operator #{position} ({op.op}) of subgraph {index}"):
                if k < len(op.outputs) and op.outputs[k] >= 0:
                    tainted.add(op.outputs[k])
        return {k for k, t in enumerate(subgraph.outputs) if t in tainted}

    def _operator(self, op, hot, stack, label):
        """The positions of `op`'s outputs its inputs at `hot` decide."""
        everything = range(len(op.outputs))
        if op.custom or op.op in STATE_READS:
            return everything if op.op in STATE_READS or hot else ()
        if op.op in SHAPE_ONLY:
            return ()
        if op.op == "WHILE":
            return self._loop(op, hot, stack, label)
        if op.op == "IF":
            return self._branch(op, hot, stack)
        if op.op == "STABLEHLO_WHILE":
            self._flag(label)  # a loop of a kind not followed here (StableHLO's other callers run a
            # computation per element or pair: bounded by the tensors' sizes)
            return everything
        return everything if hot else ()

    def _loop(self, op, hot, stack, label):
        cond, body = (op.options.get(k) for k in SUBGRAPH_OPTIONS["WHILE"])
        if not all(isinstance(i, int) and 0 <= i < len(self.model.subgraphs) for i in (cond, body)):
            self._flag(label)
            return range(len(op.outputs))
        carried = set(hot)
        while True:
            grown = carried | self.follow(body, carried, stack)
            if grown == carried:
                break
            carried = grown
        if self.follow(cond, carried, stack):
            self._flag(label)
        return carried

    def _branch(self, op, hot, stack):
        branches = [op.options.get(k) for k in SUBGRAPH_OPTIONS["IF"]]
        if 0 in hot or not all(isinstance(i, int) and 0 <= i < len(self.model.subgraphs) for i in branches):
            return range(len(op.outputs))
        passed = {k - 1 for k in hot}  # the branches take the inputs after the condition
        return set().union(*(self.follow(i, passed, stack) for i in branches))

    def _flag(self, label):
        if self.found is None:
            self.found = label
