"""The Interpreter's thin path: set_tensor / invoke / get_tensor forwarded straight to the one
LiteRT interpreter that runs the whole model (cpu_litert.WholeModelStep, what
placement='fastest' leaves when it moves every GPU partition to the CPU).

Why: a tiny model's invoke on LiteRT is a few microseconds (a streaming keyword spotter: ~1 us
of kernels), so what our Interpreter does around it is most of its time. Through the plan, each
invoke copied every input from our storage into LiteRT and every output and variable back, and
each call went through the Interpreter's checks and the storage's bookkeeping (4.6x LiteRT's
own Interpreter end to end, docs/performance.md). Here the values live in LiteRT's tensors only:
set_tensor copies the caller's array into LiteRT's input (one copy, as LiteRT's own
set_tensor), invoke is LiteRT's, get_tensor copies LiteRT's output out (one copy, as LiteRT's),
each through LiteRT's pybind wrapper (cpu_litert.native_calls). The Interpreter's methods make
these calls themselves (a Python frame less per call is a few percent of such a model).

The Interpreter leaves this path (leave(): LiteRT's inputs, variables and outputs copied into
its storage, after which the plan's WholeModelStep runs from there as before) for whatever needs
the storage: tensor()'s views, a signature runner, set_tensor of a tensor LiteRT's inputs do not
hold. A call this path does not take (a wrong dtype or shape, another tensor, an index of
another type) goes through the Interpreter's usual checks, so the errors are the same.
"""
import numpy as np

from .cpu_litert import WholeModelStep


class DirectPath:
    """The model's inputs, outputs and variable tensors on `step`'s LiteRT interpreter (a
    WholeModelStep of subgraph 0, whose tensor indices are the model's).
    set(index, array) / get(index) -> a copy / invoke(): LiteRT's own (cpu_litert.LiteRTCalls,
    which raise LiteRT's errors);
    dtypes: {tensor index: numpy dtype} of the inputs and variable tensors (what set() may
    write; `storage`, the Interpreter's, gives them); readable: the indices get() may read
    (those and the outputs, less `unwritten`: outputs nothing writes, which hold no data)."""

    def __init__(self, step, storage, unwritten):
        self.step = step
        self.set, self.get, self.invoke = step.calls  # invoke(): LiteRT's errors as they are (the Interpreter's to say)
        self.dtypes = {index: storage[index].dtype for index, _, _ in step.inputs if index in storage}
        self.readable = frozenset(self.dtypes) | {t.index for t, _, _ in step.outputs if t.index not in unwritten}
        self.variables = [t.index for t, _, _ in step.outputs if t.is_variable and t.index in self.dtypes]

    @classmethod
    def of(cls, executor):
        """The DirectPath of `executor` (interpreter._Executor) when its plan is one
        WholeModelStep, else None."""
        steps = executor.steps or ()
        if len(steps) == 1 and isinstance(steps[0], WholeModelStep):
            return cls(steps[0], executor.storage, executor.unwritten)
        return None

    def shape(self, index):
        """The shape LiteRT's tensor `index` has now: an output a kernel resized at invoke (a
        SEGMENT_SUM of runtime ids) has LiteRT's shape, which the graph's tensor does not follow
        on this path (WholeModelStep.run's take_output does, off it)."""
        wrapper = getattr(self.step.interpreter, "_interpreter", None)
        if callable(getattr(wrapper, "TensorSize", None)):
            return tuple(int(d) for d in wrapper.TensorSize(index, 0))
        return tuple(int(d) for d in self.step.interpreter._get_tensor_details(index, 0)["shape"])

    def enter(self, storage):
        """Copy the inputs and variable tensors `storage` (the Interpreter's) holds into LiteRT's:
        taking the thin path again on the same LiteRT interpreter, after the plan ran from the
        storage (which a set_tensor() or a view may have written since)."""
        for index in self.dtypes:
            self.set(index, storage[index])

    def reset_variables(self):
        """Zero the variable tensors (as the Interpreter's storage path does: zeros, where
        LiteRT's own reset writes an int8 tensor's zero point) and reset those LiteRT holds in
        the other subgraphs."""
        self.step.reset_variables()
        for index in self.variables:
            self.set(index, np.zeros_like(self.get(index)))

    def leave(self, storage):
        """Copy what LiteRT holds (inputs, variables, outputs) into `storage` (the Interpreter's),
        which the plan's WholeModelStep runs from afterwards."""
        for index in self.readable:
            try:
                value = self.get(index)
            except ValueError as exc:  # a dynamic output before the first invoke: no data yet
                if "null" not in str(exc):
                    raise
                continue
            if value.shape == storage[index].shape:
                storage[index][...] = value
            else:  # a dynamic output (its shape LiteRT's): as WholeModelStep.run takes it
                storage[index] = value
