"""Checks of a decoded entry against itself and the graph it is loaded for: the decoder checks
types, these check meaning (indices in range, offsets inside their buffers, dispatch sizes within
the GPU's limits, nodes that are this graph's). Each raises EntryError."""
import functools
import math
import re
import struct

import numpy as np

from ..compiler import IoSlot
from ..complex_view import view_shape
from ..variables import VariableSlot
from ..workgroups import group_counts
from ..phwc4 import MAX_RANK, bhwc
from ..runtime import ARENA_BINDING, CONSTS_BINDING, FLOAT_BINDING, IO_BINDING
from ..storage import FLOAT_BASE
from .. import shader
from ..shader import PARAMS_BINDING
from .entry import EntryError

_PARAMS_BLOCK = re.compile(r"uniform Params \{\n(.*?)\};", re.DOTALL)
_PARAMS_FIELD = re.compile(r"highp (int|float|i?vec[234]) (\w+);")
_WORKGROUP_DEFINE = re.compile(r"^#define WG_([XYZ]) (\d+)$", re.MULTILINE)
# (kind, name) -> binding of every block a program may have: what the runtime binds
RUNTIME_BLOCKS = {("uniform", "Params"): PARAMS_BINDING, ("buffer", "Arena"): ARENA_BINDING,
                  ("buffer", "Consts"): CONSTS_BINDING, ("buffer", "Io"): IO_BINDING,
                  ("buffer", "Floats"): FLOAT_BINDING}
STORAGE_MODES = frozenset({"plain", "float", "float_tensors", "mixed"})  # gpu/storage.py
ARENA_SLACK_ELEMENTS = 1 << 22    # a plan's arena may exceed 64x the graph's activations by this much
MAX_GROUPS = 1 << 31              # workgroups of one dispatch (the reader's element limit)


def is_index(value, count):
    """Whether `value` is an integer in [0, count)."""
    if type(value) is int:  # what JSON decodes to: the checks of a plan ask thousands
        return 0 <= value < count
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) and 0 <= value < count


def is_count(value, low=0):
    """Whether `value` is an integer >= low."""
    if type(value) is int:
        return value >= low
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) and value >= low


def claim_nodes(indices, ops, by_index, free):
    """The graph nodes (`by_index`: {index: node}) a partition names by index and op; each must
    be in `free` ({id(node)} of the nodes left to this delegate), which it is removed from."""
    if not (isinstance(indices, list) and isinstance(ops, list) and len(indices) == len(ops) and indices):
        raise EntryError("malformed node list")
    nodes = []
    for index, op in zip(indices, ops):
        node = by_index.get(index) if isinstance(index, int) and not isinstance(index, bool) else None
        if node is None or node.op != op or id(node) not in free:
            raise EntryError(f"node {index!r} ({op!r}) is not a free node of the graph")
        free.discard(id(node))
        nodes.append(node)
    return nodes


def check_fused_away(fused, tensor_count):
    """A partition's fused_away must be a set of tensor indices."""
    if not isinstance(fused, set) or not all(is_index(i, tensor_count) for i in fused):
        raise EntryError("malformed fused_away")


def program_binaries(value, count, blob):
    """[(format, bytes) or None] of the `count` program binaries of a partition; `blob`: the
    decoder's blob lookup."""
    if not isinstance(value, list) or len(value) != count:
        raise EntryError("program binary list does not match the sources")
    out = []
    for item in value:
        if item is None:
            out.append(None)
            continue
        if not (isinstance(item, list) and len(item) == 2 and is_index(item[0], 1 << 32)):
            raise EntryError("malformed program binary")
        out.append((item[0], blob(item[1])))
    return out


def check_log_lines(lines):
    """The partitioner's log lines ([level, format, args]) must format as they will be logged."""
    if not isinstance(lines, list):
        raise EntryError("malformed log lines")
    for line in lines:
        if not (isinstance(line, list) and len(line) == 3 and isinstance(line[0], int)
                and isinstance(line[1], str) and isinstance(line[2], list)
                and all(isinstance(a, (str, int, float)) and not isinstance(a, bool) for a in line[2])):
            raise EntryError("malformed log line")
        try:
            line[1] % tuple(line[2])
        except (TypeError, ValueError, KeyError):
            raise EntryError("log line does not format") from None


def vec4_elements(shape):
    """bhwc(shape).elements without building a Shape4 (rank <= MAX_RANK, checked by the caller)."""
    if not shape:
        return 1
    return math.prod(shape[:-1]) * -(-shape[-1] // 4)


def check_plan(plan, graph, limits):
    """EntryError unless a decoded Plan is consistent with itself and with the graph: every
    index in range, every offset and size inside its buffer, dispatch sizes within the GPU's
    limits, I/O shapes equal to the graph's. Fields this does not know are only type-checked
    by the decoder (update this when the compiler changes what a field means)."""
    def fail(what):
        raise EntryError(f"plan: {what}")
    if not isinstance(plan.sources, list) or not all(isinstance(s, str) for s in plan.sources):
        fail("sources")
    if not isinstance(plan.params, bytes):
        fail("params")
    constants = plan.constants
    if not isinstance(plan.storage_half, bool):
        fail("storage_half")
    if not isinstance(constants, np.ndarray) or constants.ndim != 2 or constants.shape[1] != 4 \
            or constants.dtype != (np.float16 if plan.storage_half else np.float32):
        fail("constants")
    for name in ("arena_elements", "arena_lower_bound", "arena_naive", "io_bytes"):
        if not is_count(getattr(plan, name)):
            fail(name)
    activations = sum(math.prod(t.shape) for t in graph.tensors if not t.is_const) + len(graph.tensors)
    if not 1 <= plan.arena_elements <= max(plan.arena_naive, 1) <= 64 * activations + ARENA_SLACK_ELEMENTS:
        fail(f"arena of {plan.arena_elements} elements (naive {plan.arena_naive})")
    max_groups = limits.get("max_workgroup_count", (1 << 31,) * 3)
    if not isinstance(plan.steps, list):
        fail("steps")
    for step in plan.steps:
        if not isinstance(step, tuple) or len(step) < 5:
            fail("malformed step")
        source, offset, size, groups, barrier = step[:5]
        if not is_index(source, len(plan.sources)):
            fail(f"step source {source!r}")
        if not (is_count(offset) and is_count(size) and offset + size <= len(plan.params)):
            fail(f"step params range {offset!r} +{size!r}")
        if not (isinstance(groups, tuple) and len(groups) == 3
                and all(is_count(g, 1) and g <= m for g, m in zip(groups, max_groups))
                and math.prod(groups) <= MAX_GROUPS):
            fail(f"step groups {groups!r}")
        if not isinstance(barrier, bool):
            fail("step barrier")
        check_params(plan, source, offset, size, fail)
        check_coverage(plan, step, fail)
    check_float_storage(plan, activations, fail)
    for name in ("labels", "writes"):
        value = getattr(plan, name)
        if not isinstance(value, list) or len(value) != len(plan.steps):
            fail(f"{name} does not match the steps")
    if not all(isinstance(label, str) for label in plan.labels):
        fail("labels")
    for written in plan.writes:
        if not isinstance(written, list):
            fail("writes")
        for item in written:
            # A negative tensor index names a kernel's scratch tensor (kernels/base.py Scratch).
            if not (isinstance(item, tuple) and len(item) == 3 and is_count(item[0], -(1 << 31)) and is_count(item[1])
                    and isinstance(item[2], tuple) and len(item[2]) <= MAX_RANK and all(is_count(d) for d in item[2])):
                fail(f"write {item!r}")
            if item[1] >= FLOAT_BASE:
                if item[1] - FLOAT_BASE + vec4_elements(item[2]) > plan.float_elements:
                    fail(f"write {item!r} beyond the float buffer")
            elif item[1] + vec4_elements(item[2]) > plan.arena_elements:
                fail(f"write {item!r} beyond the arena")
    check_status_words(plan, fail)
    check_variable_slots(plan, fail)
    if not isinstance(plan.lane_shifts, dict) or not all(is_count(k) and type(v) is int and 0 <= v <= 3
                                                         for k, v in plan.lane_shifts.items()):
        fail("lane_shifts")
    if plan.io_bytes > 2 * sum(getattr(s, "nbytes", 0) for s in list(plan.inputs) + list(plan.outputs)) \
            + 64 * (len(plan.inputs) + len(plan.outputs) + 1) + 4 * (len(plan.status_errors) + 1):
        fail(f"io_bytes {plan.io_bytes}")
    for slots in (plan.inputs, plan.outputs):
        if not isinstance(slots, list):
            fail("I/O slots")
        for slot in slots:
            if not isinstance(slot, IoSlot) or not is_index(slot.tensor_index, len(graph.tensors)):
                fail(f"I/O slot {slot!r}")
            tensor = graph.tensors[slot.tensor_index]
            shape = view_shape(tensor)  # a complex64 tensor's pairs (gpu/complex_view.py)
            if slot.shape != shape or slot.nbytes != math.prod(shape) * 4 \
                    or not is_count(slot.offset) or slot.offset + slot.nbytes > plan.io_bytes:
                fail(f"I/O slot {slot!r} does not fit tensor {tensor.index} {list(tensor.shape)}")
    check_io_loads(plan, graph, fail)


def check_io_loads(plan, graph, fail):
    """Each tensor Plan.io_loads names lies, at its offset and element steps, inside one input's
    I/O slot (a capture copies it from there: runtime.strided_value), and has the graph's shape."""
    if not isinstance(plan.io_loads, dict):
        fail("io_loads")
    for index, entry in plan.io_loads.items():
        if not (is_index(index, len(graph.tensors)) and isinstance(entry, tuple) and len(entry) == 3):
            fail(f"io_loads {index!r}")
        offset, strides, shape = entry
        if not (is_count(offset) and isinstance(strides, tuple) and len(strides) == 4
                and all(is_count(k) for k in strides) and shape == tuple(graph.tensors[index].shape)
                and len(shape) <= MAX_RANK):
            fail(f"io_loads {index!r}: {entry!r}")
        s4 = bhwc(shape)
        last = offset + sum((n - 1) * k for n, k in zip((s4.w, s4.h, s4.c, s4.b), strides))
        if not any(s.offset // 4 <= offset and last < (s.offset + s.nbytes) // 4 for s in plan.inputs):
            fail(f"io_loads {index!r} outside the inputs' I/O slots")


def check_variable_slots(plan, fail):
    """The resource variables' storage (variables.VariableSlot) lies inside its buffer."""
    if not isinstance(plan.variables, list):
        fail("variables")
    for slot in plan.variables:
        if not isinstance(slot, VariableSlot) or not all(isinstance(n, str) for n in (slot.container, slot.shared_name)) \
                or not is_count(slot.offset) or not isinstance(slot.shape, tuple) or len(slot.shape) > MAX_RANK \
                or not all(is_count(d) for d in slot.shape) or not isinstance(slot.reads, bool) \
                or not isinstance(slot.writes, bool):
            fail(f"variable slot {slot!r}")
        offset, limit = slot.offset, plan.arena_elements
        if offset >= FLOAT_BASE:
            offset, limit = offset - FLOAT_BASE, plan.float_elements
        if offset + vec4_elements(slot.shape) > limit:
            fail(f"variable slot {slot!r} beyond its buffer")


def check_status_words(plan, fail):
    """The status words (compiler.Plan) lie inside the I/O buffer, one error message each, and
    so does the overflow word, where there is one."""
    errors = plan.status_errors
    if not isinstance(errors, list) or not all(isinstance(e, str) for e in errors):
        fail("status_errors")
    if not is_count(plan.status_offset) or plan.status_offset % 4 \
            or plan.status_offset + 4 * len(errors) > plan.io_bytes:
        fail(f"status words at byte {plan.status_offset!r}")
    overflow = plan.overflow_offset
    if type(overflow) is not int or not (overflow == -1 or (0 <= overflow <= plan.io_bytes - 4 and overflow % 4 == 0)):
        fail(f"overflow word at byte {overflow!r}")


def check_float_storage(plan, activations, fail):
    """Precision 'auto''s fields (gpu/storage.py): the float buffer holds its constants and
    at most the graph's activations; a mode per step; what was promoted, as strings."""
    floats = plan.float_constants
    if not isinstance(floats, np.ndarray) or floats.ndim != 2 or floats.shape[1] != 4 or floats.dtype != np.float32:
        fail("float_constants")
    if not is_count(plan.float_elements) or not len(floats) <= plan.float_elements <= len(floats) \
            + 64 * activations + ARENA_SLACK_ELEMENTS:
        fail(f"float buffer of {plan.float_elements!r} elements")
    if not isinstance(plan.step_storage, list) or len(plan.step_storage) != len(plan.steps) \
            or not all(mode in STORAGE_MODES for mode in plan.step_storage):
        fail("step_storage")
    for name in ("promoted_tensors", "promoted_nodes"):
        value = getattr(plan, name)
        if not isinstance(value, dict) or not all(isinstance(why, str) for why in value.values()):
            fail(name)
    if not isinstance(plan.calibration, dict):
        fail("calibration")


@functools.lru_cache(maxsize=4096)
def params_layout(source):
    """(std140 bytes, [(name, byte offset, components)] of the `*_offset` int fields, {name: byte
    offset} of every field) of a source's Params block, laid out as shader.pack_params packs
    it; (16, [], {}) without one."""
    block = _PARAMS_BLOCK.search(source)
    fields, positions, position = [], {}, 0
    for kind, name in _PARAMS_FIELD.findall(block.group(1) if block else ""):
        count = int(kind[-1]) if "vec" in kind else 1
        position += -position % (4 if count == 1 else 8 if count == 2 else 16)
        if name.endswith("_offset") and kind.startswith(("int", "ivec")):
            fields.append((name, position, count))
        positions[name] = position
        position += 4 * count
    return max(16, position + -position % 16), fields, positions


@functools.lru_cache(maxsize=4096)
def baked_offsets(source):
    """((name, values) of the `*_offset` int params a source declares as constants
    (shader.baked_params), the grid it declares or None, whether it bakes any)."""
    baked = shader.baked_params(source)
    offsets = tuple((name, values) for name, (kind, values) in baked.items()
                    if name.endswith("_offset") and kind.startswith(("int", "ivec")))
    return offsets, baked["grid"][1] if "grid" in baked else None, bool(baked)


def step_offsets(plan, source_index, offset):
    """[(name, values)] of a step's `*_offset` params: from its block of plan.params, or from
    its source where the compiler baked them in (shader.assemble's `baked`)."""
    source = plan.sources[source_index]
    _, fields, _ = params_layout(source)
    if fields:
        return [(name, struct.unpack_from(f"<{count}i", plan.params, offset + position))
                for name, position, count in fields]
    return list(baked_offsets(source)[0])


def check_params(plan, source_index, offset, size, fail):
    """A step's params block must have its source's size (none for a source that bakes its
    params in), and every buffer offset in it must index an element of the arena, the constants
    or the I/O buffer's floats (which of them a field indexes is the kernel's: the plan does not
    say, so the largest bounds it; an offset past all three is forged, and on a GPU an
    out-of-range storage access is undefined behaviour)."""
    source = plan.sources[source_index]
    expected = 0 if baked_offsets(source)[2] else params_layout(source)[0]
    if size != expected:
        fail(f"params block of {size} bytes for a source that declares {expected}")
    limit = max(plan.arena_elements, len(plan.constants), plan.io_bytes // 4, plan.float_elements)
    for name, values in step_offsets(plan, source_index, offset):
        if not all(0 <= v < limit or 0 <= v - FLOAT_BASE < plan.float_elements for v in values):
            fail(f"params {name} = {values} outside the arena ({plan.arena_elements}), constants "
                 f"({len(plan.constants)}) and I/O ({plan.io_bytes // 4})")


@functools.lru_cache(maxsize=4096)
def local_size(source):
    """The (x, y, z) workgroup a source declares (its WG_X, WG_Y, WG_Z defines), or None. Only
    the defines ahead of the params (a block or constants) are read (a source is 28 kB, its defines the first
    few hundred bytes; shader.assemble writes them there), and so only they count."""
    ends = [end for end in (source.find("uniform Params"), source.find("\nconst highp ")) if end >= 0]
    found = dict(_WORKGROUP_DEFINE.findall(source, 0, min(ends, default=len(source))))
    return tuple(int(found[axis]) for axis in "XYZ") if found.keys() >= {"X", "Y", "Z"} else None


def check_coverage(plan, step, fail):
    """A step's workgroups must cover its dispatch's grid (the `grid` of its params block, which
    the kernel compares each invocation's id with), and no more: exactly the group counts the
    compiler gives that grid with the workgroup its source declares (a forged (1, 1, 1) would run
    a corner of the grid and leave the rest of the output as it was)."""
    source, offset, _, groups = step[:4]
    workgroup = local_size(plan.sources[source])
    position = params_layout(plan.sources[source])[2].get("grid")
    grid = baked_offsets(plan.sources[source])[1] if position is None else \
        struct.unpack_from("<3i", plan.params, offset + position)
    if workgroup is None or grid is None:
        fail(f"step of source {source} declares no workgroup or no grid")
    if groups != group_counts(grid, workgroup):
        fail(f"step groups {groups} do not cover its grid {grid} in workgroups of {workgroup}")


def check_program(program):
    """EntryError unless a linked program's active blocks are the runtime's, at the bindings the
    runtime binds them to, with the Params block its source declares and a storage block to
    write: a program from a forged binary or a gutted source (an empty main()) is not."""
    active = program.interface()
    for block, binding in active.items():
        if RUNTIME_BLOCKS.get(block) != binding:
            raise EntryError(f"program has {block[0]} block {block[1]} at binding {binding}, the runtime binds "
                             f"{RUNTIME_BLOCKS.get(block, 'no such block')}")
    if "uniform Params {" in program.source and ("uniform", "Params") not in active:
        raise EntryError("program does not use the Params block its source declares")
    if not any(kind == "buffer" for kind, _ in active):
        raise EntryError("program writes no storage buffer")
