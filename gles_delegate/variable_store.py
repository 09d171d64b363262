"""The resource variables of one interpreter, and who holds their latest value.

A variable's value lives on the CPU (an array of the model's dtype and the variable's shape), or
in the GPU memory of the GPU partitions that read and assign it (gpu/variable_sync.py), which keep
it there between invokes. Each variable has one current holder:

  - the CPU: `values[rid]` is the latest value; a GPU partition whose copy is not `current`
    uploads it before its next run (once: then its copy is current);
  - a GPU partition (`latest`), after a run of it assigned the variable: its copy is the latest,
    the CPU's and every other partition's are stale. The CPU side (a READ_VARIABLE on the
    reference, another partition, another subgraph) reads it through read(), which downloads
    it from that partition once; the CPU then holds it again, and that partition's copy stays
    current (nothing changed it).

A CPU write (assign(): ASSIGN_VARIABLE on the reference, an init subgraph) makes the CPU the
holder and every GPU copy stale. So a streaming model whose partition reads and assigns its
state moves it to the GPU once (after CALL_ONCE's initializer assigned it on the CPU) and never
back, unless something on the CPU reads it. A partition that goes away (re-planned, its
delegate closed) hands the values only it holds to the CPU first (release()).

Resource ids (rid) are the interpreter's (subgraphs.Runtime.resource_id).
"""
from dataclasses import dataclass, field

import numpy as np


@dataclass
class _Entry:
    """One variable: the CPU copy (`value`, None before any assignment), the GPU holder whose
    copy is newer (`latest`, None: the CPU copy is the latest), and the GPU holders whose copy
    equals the latest value (`current`)."""
    value: np.ndarray | None = None
    latest: object = None
    current: set = field(default_factory=set)


class VariableStore:
    """{resource id: value} with the holder protocol of the module docstring. A GPU holder
    (gpu/variable_sync.GpuVariables) offers download(rid) -> array (model dtype) and describe(rid)
    -> (shape, dtype) of its copy."""

    def __init__(self):
        self._entries = {}

    def _entry(self, rid):
        return self._entries.setdefault(rid, _Entry())

    # -- the CPU side ----------------------------------------------------------------------
    def read(self, rid):
        """The latest value of variable `rid` (the array itself: copy it before changing it),
        downloaded from the GPU partition holding it first; None before any assignment."""
        entry = self._entries.get(rid)
        if entry is None:
            return None
        if entry.latest is not None:
            entry.value, entry.latest = entry.latest.download(rid), None
        return entry.value

    def assign(self, rid, value):
        """Variable `rid` takes `value` (an array the store keeps: pass a copy); every GPU copy
        of it is stale."""
        entry = self._entry(rid)
        entry.value, entry.latest = value, None
        entry.current.clear()

    def describe(self, rid):
        """(shape, dtype) of the latest value of variable `rid` without moving it, or None
        before any assignment."""
        entry = self._entries.get(rid)
        if entry is None:
            return None
        if entry.latest is not None:
            return entry.latest.describe(rid)
        return None if entry.value is None else (tuple(entry.value.shape), entry.value.dtype)

    # -- the GPU side ----------------------------------------------------------------------
    def is_current(self, rid, holder):
        """Whether `holder`'s copy of variable `rid` is the latest value."""
        entry = self._entries.get(rid)
        return entry is not None and holder in entry.current

    def uploaded(self, rid, holder):
        """`holder` uploaded the latest value of `rid` (read() gave it): its copy is current."""
        self._entry(rid).current.add(holder)

    def assigned(self, rid, holder):
        """A run of `holder` assigned variable `rid`: its copy is the latest, every other stale."""
        entry = self._entry(rid)
        entry.latest = holder
        entry.current = {holder}

    def forget(self, rid, holder):
        """`holder`'s copy of `rid` is unknown (a run of it failed midway): not current. When
        it held the latest value, the CPU copy (the value before that run) is the latest again."""
        entry = self._entries.get(rid)
        if entry is not None:
            entry.current.discard(holder)
            if entry.latest is holder:
                entry.latest = None

    def release(self, holder, rids):
        """`holder` goes away: the values of `rids` it alone holds move to the CPU first."""
        for rid in rids:
            entry = self._entries.get(rid)
            if entry is None:
                continue
            if entry.latest is holder:
                self.read(rid)
            entry.current.discard(holder)
