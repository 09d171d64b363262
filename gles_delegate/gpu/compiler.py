"""Compile one GPU partition: kernels -> dispatches -> memory plan -> programs -> a runnable plan.

Every activation tensor of the partition lives in one arena buffer (binding 0) at an offset the
memory planner chose; weights live in one constants buffer (binding 1); partition inputs and
outputs pass through an I/O buffer of plain BHWC float32 (binding 2), converted by the
convert_in / convert_out kernels, or stored there by the kernel that computes an output nothing
else reads (fuse_output_stores). Per-dispatch values (sizes, offsets) are constants of a
dispatch's program where no other dispatch shares it, else live in one uniform buffer, one
aligned slot per dispatch (_params_blocks), so a dispatch costs a program switch, at most one
bind, one run and, only where a dispatch reads or overwrites memory an earlier one wrote, one
barrier.

The memory planner (memory.plan_arena) decides where each arena tensor lives, tensors that share
storage (free reshapes, in-place elementwise outputs) included.
"""
import collections
from dataclasses import dataclass, field

import numpy as np

from ..errors import GpuError
from ..graph import fused_reads
from . import io_loads, kernels, memory, schedule, shader, storage
from .kernels.base import MAX_LANE_READS, ArenaRef, Dispatch, KernelEnv, KernelLimitError
from .phwc4 import bhwc
from .variables import slots as variable_slots
from .workgroups import candidates, choose_workgroup, clamp_workgroup, group_counts

# Kernels store partition outputs straight into the I/O buffer where they can (fuse_output_stores);
# False: a convert_out dispatch for every output, as before.
FUSE_OUTPUT_STORES = True
# Dispatches reordered into barrier phases (gpu/schedule.py); False: the graph's node order.
SCHEDULE = True
# A partition input that only a TRANSPOSE reads is converted straight into its output
# (permute_on_input); False: convert_in, then the TRANSPOSE's copy.
PERMUTE_ON_INPUT = True
# Where each partition input and output starts in the I/O buffer (bytes): TFLite's
# kDefaultTensorAlignment, so that LiteRT's Interpreter can take a mapped output as a tensor's
# memory (litert/memory.py); the kernels need 16 (a vec4).
IO_ALIGNMENT = 64
# The dispatches whose params become constants of their program (_params_blocks): "own", those
# whose program no other dispatch shares; "all", every one (a program per dispatch; what
# inference_preference='sustained_speed' asks for); "none", every params block bound per run.
BAKE_PARAMS = "own"
BAKE_CHOICES = ("none", "own", "all")
# Half storage notes a finite value it rounds to inf in the partition's overflow word (common.glsl
# note_overflow, gpu/half_overflow.py); False: no word, no test per store.
HALF_OVERFLOW_CHECK = True
# Templates each of whose half stores is activate(...) with no step after it, unless one of these
# defines is set (a store or rounding of another value): with a bounded fused activation
# (RELU_N1_TO_1, RELU6, TANH) they cannot overflow, so they go without the test (_may_overflow).
BOUNDED_BY_ACTIVATION = {"conv2d": ("GATED", "EP_COUNT", "IN_IO"),
                         "depthwise_conv2d": ("PASS_THROUGH", "TILE_SUMS", "EP_COUNT", "IN_IO")}
BOUNDED_ACTIVATIONS = (2, 3, 4)


@dataclass
class IoSlot:
    """A partition input or output in the I/O buffer: tensor index, byte offset, byte size."""
    tensor_index: int
    offset: int
    nbytes: int
    shape: tuple


@dataclass
class Plan:
    """Everything the runtime needs, in plain data (what serialization stores)."""
    steps: list          # (source index, ubo offset, ubo size, groups, barrier before)
    sources: list        # GLSL sources, deduplicated
    params: bytes        # the uniform buffer
    constants: np.ndarray  # packed constants [N, 4], in the storage type (float16 when storage_half)
    arena_elements: int
    arena_lower_bound: int
    arena_naive: int
    io_bytes: int
    inputs: list         # IoSlot
    outputs: list        # IoSlot
    storage_half: bool
    labels: list         # one per step, for profiling and the inspector
    writes: list         # per step: [(tensor index, arena offset, shape)] it writes (for capture)
    templates: list      # per step: the kernels_glsl template it runs
    workgroups: list     # per step: its (x, y, z) workgroup
    tuned: bool          # the workgroups were timed on this GPU (workgroup_tuner.WorkgroupTuner)
    # Precision 'auto' (gpu/storage.py): the float buffer, its promoted weights first, then its
    # tensors (float_elements vec4 in all; 0: no float buffer); what was promoted and why
    # ({tensor index: why}, {node label: why}); per step its mode (storage.Layout.mode).
    float_constants: np.ndarray = field(default_factory=lambda: np.zeros((0, 4), np.float32))
    float_elements: int = 0
    promoted_tensors: dict = field(default_factory=dict)
    promoted_nodes: dict = field(default_factory=dict)
    step_storage: list = field(default_factory=list)
    # Partition outputs their kernels store straight into the I/O buffer alone (fuse_output_stores;
    # not those kept in the arena too): not in the arena, so a capture takes them from the outputs.
    io_stores: list = field(default_factory=list)
    # Status words (KernelEnv.status_word): float32 words from byte status_offset of the I/O
    # buffer, between the inputs and the outputs, one per error a kernel may report
    # (status_errors: its message): the copy in zeroes them with the inputs, the copy out reads
    # them with the outputs.
    status_offset: int = 0
    status_errors: list = field(default_factory=list)
    # Half storage: the byte offset in the I/O buffer of the overflow word, just before the status
    # words, which a store rounding a finite value to inf sets nonzero (gpu/half_overflow.py); -1: none.
    overflow_offset: int = -1
    # Precision 'auto': what calibration found ({'rounds', 'output_error', 'target', 'samples', 'demoted'};
    # calibrate.py).
    calibration: dict = field(default_factory=dict)
    # The resource variables the partition holds in its arena between invokes (variables.VariableSlot).
    variables: list = field(default_factory=list)
    # {tensor index: shift} of the lane views (KernelEnv.view with lanes): a capture reads each
    # from its whole's vec4s, `shift` lanes in (runtime.read_written).
    lane_shifts: dict = field(default_factory=dict)
    # {tensor index: (I/O element offset, element steps of its (w, h, c, b), shape)} of the
    # partition inputs (or their permutation: permute_on_input) their one reader loads straight
    # from the I/O buffer (io_loads.py): not in the arena, so a capture takes them from there.
    io_loads: dict = field(default_factory=dict)

    @property
    def element_bytes(self):
        """Bytes of one vec4 element of the arena and constants buffers (8 in half storage)."""
        return 8 if self.storage_half else 16

    def buffer_bytes(self):
        """{buffer: bytes} of the GL buffers a partition of this plan creates."""
        sizes = {"arena": self.arena_elements * self.element_bytes,
                 "constants": self.constants.shape[0] * self.element_bytes,
                 "params": len(self.params), "I/O": self.io_bytes}
        if self.float_elements:
            sizes["float"] = self.float_elements * 16
        return sizes


class PlanLimitError(GpuError):
    """A plan exceeds a limit of the device. steps: the indices of the dispatches at fault, or
    () when the partition as a whole is (its arena, constants or I/O buffer is larger than one
    shader storage block may be); labels: their Plan.labels."""

    def __init__(self, message, steps=(), labels=()):
        super().__init__(message)
        self.steps = tuple(steps)
        self.labels = tuple(labels)


def check_limits(plan, limits):
    """PlanLimitError unless every buffer the plan binds as a shader storage block fits in
    GL_MAX_SHADER_STORAGE_BLOCK_SIZE and every dispatch's group counts fit in
    GL_MAX_COMPUTE_WORK_GROUP_COUNT (a limit missing from `limits`, or 0, is not checked)."""
    max_ssbo = int(limits.get("max_ssbo_bytes") or 0)
    if max_ssbo > 0:
        buffers = plan.buffer_bytes()
        sizes = {"arena (intermediate tensors)": buffers["arena"], "constants (weights)": buffers["constants"],
                 "I/O": buffers["I/O"], "float (promoted tensors and weights)": buffers.get("float", 0)}
        over = {what: size for what, size in sizes.items() if size > max_ssbo}
        if over:
            said = ", ".join(f"{what} {size:,} bytes" for what, size in over.items())
            raise PlanLimitError(f"the partition's {said} exceed{'s' if len(over) == 1 else ''} the device's "
                                 f"largest shader storage block (GL_MAX_SHADER_STORAGE_BLOCK_SIZE "
                                 f"{max_ssbo:,} bytes)")
    max_groups = limits.get("max_workgroup_count")
    if max_groups:
        bad = [k for k, step in enumerate(plan.steps) if any(g > m for g, m in zip(step[3], max_groups))]
        if bad:
            first = plan.steps[bad[0]][3]
            raise PlanLimitError(f"dispatch {plan.labels[bad[0]]!r} needs {tuple(int(g) for g in first)} workgroups, "
                                 f"more than the device's GL_MAX_COMPUTE_WORK_GROUP_COUNT "
                                 f"{tuple(int(m) for m in max_groups)}"
                                 + (f" ({len(bad)} dispatches do)" if len(bad) > 1 else ""),
                                 bad, [plan.labels[k] for k in bad])


def build_dispatches(nodes, inputs, outputs, env):
    """The dispatch list of a partition: convert inputs, run each node's kernel, convert outputs.
    Also returns the I/O slots and the I/O buffer's size in bytes: the inputs, in half storage
    the overflow word (Plan.overflow_offset), the status words the kernels asked for
    (KernelEnv.status_word), the outputs."""
    io_in, io_bytes = _io_slots(inputs, 0)
    dispatches = [_convert(tensor, slot, "convert_in", env) for tensor, slot in zip(inputs, io_in)]
    env.overflow_word = io_bytes // 4 if env.storage_half and HALF_OVERFLOW_CHECK else None
    env.status_base = io_bytes // 4 + (env.overflow_word is not None)
    for node in nodes:
        env.node = node
        try:
            built = kernels.BUILD[node.op](node, env)
        except KernelLimitError as exc:  # e.g. indices half storage cannot hold: the node goes to the CPU
            raise PlanLimitError(str(exc), labels=(node.label,)) from None
        for d in built:
            d.label = d.label or node.label
            d.node = node
            dispatches.append(d)
    env.node = None
    if PERMUTE_ON_INPUT:
        dispatches = permute_on_input(dispatches, inputs, io_in, env)
    words = len(env.status_errors) + (env.overflow_word is not None)
    io_out, io_bytes = _io_slots(outputs, io_bytes + -(-words // 4) * 16)
    dispatches, env.io_loads = io_loads.load_inputs_from_io(dispatches, len(inputs), io_bytes, outputs, _shared(env),
                                                               env.lanes)
    stored = fuse_output_stores(dispatches, outputs, io_out, env) if FUSE_OUTPUT_STORES else set()
    converts = [_convert(tensor, slot, "convert_out", env) for tensor, slot in zip(outputs, io_out)
                if id(tensor) not in stored]
    dispatches = _after_last_use(dispatches, converts)
    lane_accesses(dispatches, env)
    return dispatches, io_in, io_out, max(io_bytes, 16)


def lane_accesses(dispatches, env):
    """Give each dispatch that reads or writes a lane view (KernelEnv.view with lanes) what
    common.glsl's load / store realign it with: LANE_READS (at most MAX_LANE_READS views) and
    per view lane_rK_offset (its arena offset: its whole's slice it starts in) and lane_rK
    (elements, H x W, shift, channels); LANE_WRITES (one view) with lane_w0_offset and lane_w0
    (elements, H x W, shift, lanes stored)."""
    for d in dispatches:
        for kind, tensors, most in (("r", d.reads, MAX_LANE_READS), ("w", d.writes, 1)):
            views = list({id(t): env.lanes[id(t)] for t in tensors if id(t) in env.lanes}.values())
            if len(views) > most:
                raise GpuError(f"dispatch {d.label!r} {'reads' if kind == 'r' else 'writes'} {len(views)} lane views "
                               f"(tensors {[t.index for t, _ in views]}), more than {most}")
            for k, (tensor, lanes) in enumerate(views):
                s4 = bhwc(tensor.shape)
                last = lanes.channels if kind == "r" else lanes.limit
                d.params.update({f"lane_{kind}{k}_offset": ArenaRef(tensor),
                                 f"lane_{kind}{k}": (s4.elements, s4.h * s4.w, lanes.shift, last)})
            if views:
                d.defines["LANE_READS" if kind == "r" else "LANE_WRITES"] = len(views)


def _after_last_use(dispatches, converts):
    """`dispatches` with each convert_out of `converts` right after the last dispatch that reads
    or writes its tensor (at the end for one none touches, an alias read only under another
    shape): an output's arena storage then dies there and can be reused, where a convert_out at
    the end kept every output read inside the partition alive to the end (10,000 such outputs:
    10,000 lifetimes that all overlap, which the memory planner compares pairwise)."""
    last = {}
    for i, d in enumerate(dispatches):
        for t in (*d.reads, *d.writes):
            last[id(t)] = i
    after = {}  # dispatch index -> the converts that follow it
    for convert in converts:
        after.setdefault(last.get(id(convert.reads[0]), len(dispatches) - 1), []).append(convert)
    ordered = list(after.get(-1, ()))  # no dispatch at all
    for i, d in enumerate(dispatches):
        ordered.append(d)
        ordered += after.get(i, ())
    return ordered


def _io_slots(tensors, offset):
    """The IoSlots of `tensors` (float32 each, IO_ALIGNMENT-byte aligned) from byte `offset` on,
    and the byte after them."""
    slots = []
    for tensor in tensors:
        offset = -(-offset // IO_ALIGNMENT) * IO_ALIGNMENT
        slots.append(IoSlot(tensor.index, offset, tensor.size * 4, tuple(tensor.shape)))
        offset += -(-tensor.size * 4 // 16) * 16
    return slots, offset


def fuse_output_stores(dispatches, outputs, io_out, env):
    """Let the kernels that compute a partition output store it straight into the I/O buffer
    (common.glsl OUT_IO) instead of a convert_out dispatch reading it back from the arena: one
    dispatch and one barrier fewer per output and invoke. An output that dispatches of the
    partition read is stored into its arena storage too (OUT_IO 2, Dispatch.io_kept). Only for
    an output that shares no storage with another tensor (an alias is read under another shape,
    a view's storage is a block of another's), and whose every writer stores no other output
    this way. Returns the ids of the outputs fused."""
    aliased = {id(t) for group in memory.alias_groups(env.aliases, _views(env)).values() for t in group}
    wanted = {id(t) for t in outputs}
    writers, read = {}, set()  # {id(output): [dispatches writing it]}, {id(tensor) some dispatch reads}
    for d in dispatches:
        for t in d.writes:
            if id(t) in wanted:
                writers.setdefault(id(t), []).append(d)
        read.update(map(id, d.reads))
    fused = set()
    for tensor, slot in zip(outputs, io_out):
        mine = writers.get(id(tensor), ())
        if not mine or id(tensor) in aliased or any(d.node is None or d.io_store is not None for d in mine):
            continue
        s4 = bhwc(tensor.shape)
        kept = id(tensor) in read
        store = {"out_io_tensor": ArenaRef(tensor), "out_io_size": s4.as_ivec4(), "out_io_channels": s4.c,
                 "out_io_offset": slot.offset // 4}
        for d in mine:
            d.io_store, d.io_kept = tensor, kept
            d.defines["OUT_IO"] = 2 if kept else 1
            d.params.update(store)
        fused.add(id(tensor))
    return fused


def _convert(tensor, slot, kind, env, io_strides=None):
    """The dispatch copying `tensor` between its I/O slot (BHWC float32, row-major unless
    io_strides: the I/O element step of its (w, h, c, b)) and its PHWC4 storage."""
    s4 = bhwc(tensor.shape)
    arena = {"reads": () if kind == "convert_in" else (tensor,),
             "writes": (tensor,) if kind == "convert_in" else ()}
    strides = io_strides or (s4.c, s4.w * s4.c, 1, s4.h * s4.w * s4.c)
    return Dispatch(kind, (s4.w, s4.h, s4.slices * s4.b),
                    params={"size": s4.as_ivec4(), "channels": s4.c, "tensor_offset": ArenaRef(tensor),
                            "io_offset": slot.offset // 4, "io_strides": strides},
                    defines={"IO_READS" if kind == "convert_in" else "IO_WRITES": 1},
                    label=f"{kind} tensor {tensor.index}", **arena)


def permute_on_input(dispatches, inputs, io_in, env):
    """`dispatches` with each partition input that only a TRANSPOSE reads (a PyTorch model's
    NCHW image) converted straight into the TRANSPOSE's output, reading its I/O slot with the
    permuted strides: the TRANSPOSE's copy dispatch, and a barrier, go. Only a rank-4 float32
    input whose storage no alias or view shares, read by the TRANSPOSE's one dispatch alone (no
    epilogue, no fused operand), and an output that is no lane view."""
    converts = {id(d.writes[0]): k for k, d in enumerate(dispatches[:len(inputs)])}
    shared = _shared(env)
    readers = {}
    for d in dispatches[len(inputs):]:
        for t in set(map(id, d.reads)):
            readers.setdefault(t, []).append(d)
    dropped = set()
    for tensor, slot in zip(inputs, io_in):
        transpose = _sole_transpose(readers.get(id(tensor), ()), tensor, env)
        if transpose is None or id(tensor) not in converts or id(tensor) in shared:
            continue
        out = transpose.writes[0]
        convert = _convert(out, slot, "convert_in", env, _permuted_strides(tensor.shape, transpose.node))
        convert.label = f"convert_in tensor {tensor.index} as {transpose.label}"  # node None: no kernel's (no I/O store)
        dispatches[converts[id(tensor)]] = convert
        dropped.add(id(transpose))
    return [d for d in dispatches if id(d) not in dropped]


def _shared(env):
    """The ids of tensors whose storage another tensor shares (a RESHAPE made an alias, a slice
    a view): read under that tensor's name too, such an input keeps its own storage."""
    return {id(t) for pair in env.aliases for t in pair} | {id(t) for view in env.views for t in view[:2]}


def _sole_transpose(readers, tensor, env):
    """The one dispatch reading partition input `tensor` when it is a TRANSPOSE's plain copy of
    it (see permute_on_input), else None."""
    if len(readers) != 1 or len(tensor.shape) != 4 or tensor.dtype != np.float32 or tensor.quantization is not None:
        return None
    d = readers[0]
    node = d.node
    if node is None or node.op != "TRANSPOSE" or node.inputs[0] is not tensor or len(d.writes) != 1:
        return None
    if tuple(d.reads) != (tensor,) or d.defines.get("EP_COUNT", 0) or fused_reads(node) or d.template != "layout_map":
        return None
    out = d.writes[0]
    if out is not node.outputs[0] or out.dtype != np.float32 or id(out) in env.lanes:
        return None
    return d


def _permuted_strides(shape, transpose):
    """The I/O element step of each of (w, h, c, b) of the TRANSPOSE's output, read from its
    row-major input of `shape`: output dim k is input dim perm[k]."""
    perm = [int(p) % 4 for p in np.asarray(transpose.inputs[1].data).reshape(-1)]
    row_major = [int(np.prod(shape[k + 1:])) for k in range(4)]
    b, h, w, c = (row_major[p] for p in perm)
    return w, h, c, b


def _views(env):
    """The (tensor, whole, offset) triples of KernelEnv.views."""
    return [view[:3] for view in env.views]


class _Completions(dict):
    """{dispatch index: [tensors of storage holding views that are complete after it]};
    viewed: the ids of every tensor of such storage."""
    viewed = frozenset()


def _view_completions(dispatches, env, offsets):
    """When each tensor of storage holding views (KernelEnv.view) holds its value, for a capture
    (Plan.writes): after the last dispatch writing any part of its storage range before the
    first dispatch reading it (a concatenation written in place: its last input; a slice: its
    whole). A tensor written by no dispatch before that is never captured."""
    out = _Completions()
    groups = memory.alias_groups(env.aliases, _views(env))
    members = {id(t): t for view in env.views for t in groups[id(view[0])]}
    out.viewed = frozenset(members)
    span = {key: (offsets[key], offsets[key] + bhwc(t.shape).elements) for key, t in members.items() if key in offsets}
    first_read, writers = {}, []
    for i, d in enumerate(dispatches):
        # A dispatch that reads what it writes (a layout map's pieces merge their lanes into
        # the vec4s an earlier piece stored) is still building the tensor, not reading it.
        building = {id(groups.get(id(t), t)) for t in d.writes}
        for t in d.reads:
            if id(groups.get(id(t), t)) not in building:
                first_read.setdefault(id(t), i)
        writers += [(i, id(groups[id(t)]), span[id(t)]) for t in d.writes if id(t) in span]
    for key, (start, end) in span.items():
        before, group = first_read.get(key, len(dispatches)), id(groups[key])
        steps = [i for i, g, (s, e) in writers if g == group and i < before and s < end and start < e]
        if steps:
            out.setdefault(max(steps), []).append(members[key])
    return out


# -- barriers --------------------------------------------------------------------------------
def _access(tensor, offsets, box=None):
    """(arena offset, Shape4, box) of a tensor access; box None: the whole tensor."""
    s4 = bhwc(tensor.shape)
    return offsets[id(tensor)], s4, box or ((0, s4.b), (0, s4.slices), (0, s4.h), (0, s4.w))


def _span(access):
    """Arena element range [start, end) a box access lies within."""
    offset, s4, ((b0, b1), (s0, s1), (h0, h1), (w0, w1)) = access

    def index(b, s, h, w):
        return offset + ((b * s4.slices + s) * s4.h + h) * s4.w + w
    return index(b0, s0, h0, w0), index(b1 - 1, s1 - 1, h1 - 1, w1 - 1) + 1


def _overlap(a, b):
    """Whether two accesses may touch a common element: boxes of one storage layout compare
    exactly, anything else by the address ranges they span."""
    if a[0] == b[0] and a[1] == b[1]:
        return all(lo1 < hi2 and lo2 < hi1 for (lo1, hi1), (lo2, hi2) in zip(a[2], b[2]))
    (s1, e1), (s2, e2) = _span(a), _span(b)
    return s1 < e2 and s2 < e1


def _barriers(dispatches, offsets):
    """barrier[i]: dispatch i reads what an earlier dispatch wrote, or writes over what an
    earlier one read or wrote, since the last barrier. Writes compare by the box they write,
    so a concatenation's per-input dispatches need none between them unless they share a vec4
    slice. A barrier is glMemoryBarrier(GL_SHADER_STORAGE_BARRIER_BIT): every dependency between
    dispatches goes through storage buffers (the runtime adds BUFFER_UPDATE before reading back).
    A partition output stored straight into the I/O buffer alone (Dispatch.io_store, not
    io_kept) is no arena write: nothing in the partition reads it, and every output has a slot of
    the I/O buffer of its own."""
    flags, written, read = [], [], []
    for d in dispatches:
        r = [_access(t, offsets) for t in d.reads]
        w = [_access(t, offsets, d.box if len(d.writes) == 1 else None) for t in d.writes
             if t is not d.io_store or d.io_kept]
        needed = any(_overlap(a, b) for a in r + w for b in written) or any(_overlap(a, b) for a in w for b in read)
        if needed:
            written, read = [], []
        flags.append(needed)
        written += w
        read += r
    return flags


# -- programs --------------------------------------------------------------------------------
class _Programs:
    """The variants of a partition's dispatches (variants()), with what they share memoized for
    one compile: the assembled sources (shader.assemble's cache, and before it one keyed by a
    dispatch's defines as the kernel ordered them, which skips merging and sorting them) and the
    heuristic's workgroup of each grid. A chain of 100,000 elementwise nodes has a handful of
    distinct sources and grids."""

    def __init__(self, env, limits, tune):
        self.env, self.limits, self.tune = env, limits, tune
        self.sources, self.keyed, self.workgroups = {}, {}, {}

    def variants(self, d, values, mode="plain", types=None, baked=False):
        """[(workgroup, GLSL source, group counts)] of a dispatch: the chosen workgroup first (the
        kernel's own request, clamped, else the heuristic's), then for tuning the other candidates
        (none for a kernel that fixed its workgroup). types: shader.param_types(values)."""
        env, limits = self.env, self.limits
        if d.workgroup:
            workgroups = [clamp_workgroup(d.workgroup, limits)]
        elif self.tune:
            workgroups = candidates(d.grid, limits)
        else:
            grid = tuple(d.grid)
            if grid not in self.workgroups:
                self.workgroups[grid] = [choose_workgroup(grid, limits)]
            workgroups = self.workgroups[grid]
        types = shader.param_types(values) if types is None else types
        tensors_half = env.storage_half and mode not in storage.FLOAT_TENSOR_MODES
        # In 'fp16' only int32 tensors and constants make a dispatch other than plain: it moves
        # their bits through float variables, which mediump may hold in 16 bits (NVIDIA's does).
        math_half = env.precision == "fp16" and mode == "plain"
        defines = tuple(d.defines.items())
        out = []
        for wg in workgroups:
            key = (d.template, defines, mode, wg, types, tensors_half, math_half)
            source = None if baked else self.keyed.get(key)
            if source is None:
                merged = {**d.defines, **storage.defines(mode), "WG_X": wg[0], "WG_Y": wg[1], "WG_Z": wg[2]}
                if tensors_half and env.overflow_word is not None and _may_overflow(d.template, merged):
                    merged["HALF_OVERFLOW_WORD"] = env.overflow_word
                source = shader.assemble(d.template, merged, values, tensors_half, math_half, self.sources, types, baked)
                if not baked:  # a baked source is this dispatch's alone
                    self.keyed[key] = source
            out.append((wg, source, group_counts(d.grid, wg)))
        return out


def _may_overflow(template, defines):
    """Whether a dispatch of `template` with `defines` may round a finite value to inf in half
    storage: all but those BOUNDED_BY_ACTIVATION names whose stores a bounded activation ends."""
    others = BOUNDED_BY_ACTIVATION.get(template)
    return others is None or defines.get("ACTIVATION") not in BOUNDED_ACTIVATIONS \
        or any(defines.get(name) for name in others)


def compile_plan(nodes, inputs, outputs, precision, limits, memory_strategy="best", tuner=None, promotion=None,
                 bake=None):
    """Build the Plan of a partition (pure: no GL calls, except through `tuner`).

    nodes: graph nodes in execution order; inputs / outputs: the partition's boundary tensors.
    precision: 'fp32' | 'fp16' | 'fp16_fp32acc' | 'auto' (half storage as 'fp16_fp32acc', except
        what `promotion`, a storage.Promotion, names, and weights a half cannot hold: float).
    tuner: None (heuristic workgroups), or an object whose choose(plan, variants) picks a
        workgroup per step, or returns None to keep the heuristic's (workgroup_tuner.WorkgroupTuner
        times them on the GPU).
    bake: which dispatches' params are baked into their programs, one of BAKE_CHOICES (None:
        BAKE_PARAMS; _params_blocks).
    Raises PlanLimitError when the plan exceeds a limit of the device (check_limits).
    """
    bake = BAKE_PARAMS if bake is None else bake
    if bake not in BAKE_CHOICES:
        raise ValueError(f"bake must be one of {BAKE_CHOICES}, got {bake!r}")
    env = KernelEnv(precision, limits)
    dispatches, io_in, io_out, io_bytes = build_dispatches(nodes, inputs, outputs, env)
    phases = None
    if SCHEDULE:
        group_of = schedule.storage_groups(dispatches, env.aliases, [v[:3] for v in env.views])
        order, sizes = schedule.phase_order(dispatches, group_of)
        dispatches, phases = [dispatches[i] for i in order], schedule.phase_bounds(sizes)
    # Constants are converted to the storage type here, once: a warm start uploads the entry's as they are.
    layout = storage.lay_out(dispatches, env, nodes, promotion, memory_strategy, phases)
    arena, offsets = layout.arena, layout.offsets
    alignment = max(16, limits.get("ubo_offset_alignment", 256))
    aliases = memory.alias_groups(env.aliases)
    completed = _view_completions(dispatches, env, offsets)
    programs = _Programs(env, limits, tuner is not None)
    variants, resolved, writes, modes = [], [], [], []
    for k, d in enumerate(dispatches):
        modes.append(layout.mode(d))
        values = layout.resolve(d.params, modes[-1], grid=tuple(d.grid))
        types = shader.param_types(values)
        variants.append(programs.variants(d, values, modes[-1], types, baked=bake == "all"))
        resolved.append((values, types))
        written = [m for t in d.writes if id(t) not in completed.viewed for m in aliases.get(id(t), [t])]
        written += completed.get(k, [])
        writes.append([(t.index, offsets[id(t)], tuple(t.shape)) for t in written])
    blocks, params = _params_blocks(dispatches, variants, resolved, modes, programs, alignment, bake)
    plan = Plan(steps=[], sources=[], params=bytes(params) or b"\0" * 16, constants=layout.constants,
                arena_elements=max(arena.elements, 1), arena_lower_bound=arena.lower_bound, arena_naive=arena.naive,
                io_bytes=io_bytes, inputs=io_in, outputs=io_out, storage_half=env.storage_half,
                labels=[d.label for d in dispatches], writes=writes, templates=[d.template for d in dispatches],
                workgroups=[], tuned=False, float_constants=layout.float_constants,
                float_elements=layout.float_elements, promoted_tensors=layout.promoted_tensors,
                promoted_nodes=layout.promoted_nodes, step_storage=modes,
                io_stores=sorted({d.io_store.index for d in dispatches if d.io_store is not None and not d.io_kept}),
                status_offset=env.status_base * 4, status_errors=list(env.status_errors),
                overflow_offset=-1 if env.overflow_word is None else env.overflow_word * 4,
                variables=variable_slots(dispatches, env, offsets),
                lane_shifts={t.index: lanes.shift for t, lanes in env.lanes.values()}, io_loads=env.io_loads)
    barriers = _barriers(dispatches, offsets)
    _set_steps(plan, variants, blocks, barriers, [0] * len(dispatches))
    check_limits(plan, limits)  # before a tuner allocates the plan's buffers
    choice = tuner.choose(plan, variants) if tuner is not None else None
    if choice is not None:
        _set_steps(plan, variants, blocks, barriers, choice)
        plan.tuned = True
        try:
            check_limits(plan, limits)
        except PlanLimitError:  # a smaller workgroup needs more groups than the device has
            _set_steps(plan, variants, blocks, barriers, [0] * len(dispatches))
            plan.tuned = False
    return plan


def _params_blocks(dispatches, variants, resolved, modes, programs, alignment, bake):
    """([(offset, size)] of each dispatch's params block in the params buffer, its bytes). A
    dispatch whose program serves no other dispatch (bake 'own'; every one with 'all') has its
    params baked into its program as constants instead (size 0; its variants replaced): the
    runtime then binds no block for it, a glBindBufferRange less per dispatch, which on an H100
    was 5-9 % of a small model's end-to-end time (docs/performance.md, round 28). Sharing
    dispatches keep the block: baking theirs would compile a program per dispatch (twice the
    programs of a cold start on MobileNet v1). With 'all' the variants are baked already."""
    uses = collections.Counter(options[0][1] for options in variants)
    blocks, params = [], bytearray()
    for k, (d, (values, types)) in enumerate(zip(dispatches, resolved)):
        if bake == "all":
            block = b""
        elif bake == "own" and uses[variants[k][0][1]] == 1:
            variants[k] = programs.variants(d, values, modes[k], types, baked=True)
            block = b""
        else:
            block = shader.pack_params(values, types)
        params.extend(b"\0" * (-len(params) % alignment))
        blocks.append((len(params), len(block)))
        params.extend(block)
    return blocks, params


def _set_steps(plan, variants, blocks, barriers, choice):
    """Fill the plan's steps, sources and workgroups with variant choice[i] of each dispatch."""
    sources, index_of, steps, workgroups = [], {}, [], []
    for options, k, (offset, size), barrier in zip(variants, choice, blocks, barriers):
        workgroup, source, groups = options[k]
        index = index_of.setdefault(source, len(sources))
        if index == len(sources):
            sources.append(source)
        steps.append((index, offset, size, groups, barrier))
        workgroups.append(workgroup)
    plan.steps, plan.sources, plan.workgroups = steps, sources, workgroups
