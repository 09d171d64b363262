"""Compile one GPU partition: kernels -> dispatches -> memory plan -> programs -> a runnable plan.

Every activation tensor of the partition lives in one arena buffer (binding 0) at an offset the
memory planner chose; weights live in one constants buffer (binding 1); partition inputs and
outputs pass through an I/O buffer of plain BHWC float32 (binding 2), converted by the
convert_in / convert_out kernels. Per-dispatch values (sizes, offsets) live in one uniform
buffer, one aligned slot per dispatch, so a dispatch costs one bind, one run and, only where a
dispatch reads or overwrites memory an earlier one wrote, one barrier.
"""
from dataclasses import dataclass

import numpy as np

from . import kernels, memory, shader
from .kernels.base import ArenaRef, ConstRef, Dispatch, KernelEnv
from .layout import bhwc
from .workgroups import choose_workgroup, group_counts


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
    constants: np.ndarray  # packed constants, float32 [N, 4]
    arena_elements: int
    arena_lower_bound: int
    arena_naive: int
    io_bytes: int
    inputs: list         # IoSlot
    outputs: list        # IoSlot
    storage_half: bool
    labels: list         # one per step, for profiling and the inspector
    writes: list         # per step: [(tensor index, arena offset, shape)] it writes (for capture)


def build_dispatches(nodes, inputs, outputs, env):
    """The dispatch list of a partition: convert inputs, run each node's kernel, convert outputs.
    Also returns the I/O slots."""
    dispatches, io_in, io_out, io_bytes = [], [], [], 0
    for group, kind in ((inputs, "convert_in"), (outputs, "convert_out")):
        for tensor in group:
            nbytes = int(np.prod(tensor.shape, dtype=np.int64)) * 4
            slot = IoSlot(tensor.index, io_bytes, nbytes, tuple(tensor.shape))
            (io_in if kind == "convert_in" else io_out).append(slot)
            io_bytes += -(-nbytes // 16) * 16
    dispatches += [_convert(tensor, slot, "convert_in", env) for tensor, slot in zip(inputs, io_in)]
    for node in nodes:
        for d in kernels.BUILD[node.op](node, env):
            d.label = d.label or node.label
            dispatches.append(d)
    dispatches += [_convert(tensor, slot, "convert_out", env) for tensor, slot in zip(outputs, io_out)]
    return dispatches, io_in, io_out, max(io_bytes, 16)


def _convert(tensor, slot, kind, env):
    s4 = bhwc(tensor.shape)
    arena = {"reads": () if kind == "convert_in" else (tensor,),
             "writes": (tensor,) if kind == "convert_in" else ()}
    return Dispatch(kind, (s4.w, s4.h, s4.slices * s4.b),
                    params={"size": s4.as_ivec4(), "channels": s4.c, "tensor_offset": ArenaRef(tensor),
                            "io_offset": slot.offset // 4},
                    label=f"{kind} tensor {tensor.index}", **arena)


def plan_memory(dispatches, strategy):
    """Offsets (elements) of every arena tensor, and the plan's size, lower bound and naive size."""
    first, last, sizes = {}, {}, {}
    for i, d in enumerate(dispatches):
        for tensor in d.writes + d.reads:
            key = id(tensor)
            sizes[key] = bhwc(tensor.shape).elements
            first.setdefault(key, i)
            last[key] = i
    usages = [memory.Usage(k, sizes[k], first[k], last[k]) for k in sizes]
    offsets, total = memory.plan(usages, strategy)
    return offsets, total, memory.lower_bound(usages), memory.plan(usages, "naive")[1]


def _resolve(params, offsets, const_offsets):
    resolved = {}
    for name, value in params.items():
        if isinstance(value, ArenaRef):
            value = offsets[id(value.tensor)]
        elif isinstance(value, ConstRef):
            value = const_offsets[value.index]
        resolved[name] = value
    return resolved


def _barriers(dispatches, offsets):
    """barrier[i]: dispatch i reads what an earlier dispatch wrote, or writes over what an
    earlier one read or wrote, since the last barrier (ranges compare by arena address)."""
    def ranges(tensors):
        return [(offsets[id(t)], offsets[id(t)] + bhwc(t.shape).elements) for t in tensors]

    def overlaps(a, b):
        return any(s1 < e2 and s2 < e1 for s1, e1 in a for s2, e2 in b)
    flags, written, read = [], [], []
    for d in dispatches:
        r, w = ranges(d.reads), ranges(d.writes)
        needed = overlaps(r, written) or overlaps(w, written) or overlaps(w, read)
        if needed:
            written, read = [], []
        flags.append(needed)
        written += w
        read += r
    return flags


def compile_plan(nodes, inputs, outputs, precision, limits, memory_strategy="best"):
    """Build the Plan of a partition (pure: no GL calls).

    nodes: graph nodes in execution order; inputs / outputs: the partition's boundary tensors.
    precision: 'fp32' | 'fp16' | 'fp16_fp32acc'.
    """
    env = KernelEnv(precision, limits)
    dispatches, io_in, io_out, io_bytes = build_dispatches(nodes, inputs, outputs, env)
    offsets, arena_elements, lower, naive = plan_memory(dispatches, memory_strategy)
    const_offsets = np.cumsum([0] + [len(c) for c in env.constants]).tolist()
    constants = np.concatenate(env.constants) if env.constants else np.zeros((1, 4), np.float32)
    alignment = max(16, limits.get("ubo_offset_alignment", 256))
    sources, source_index, steps, params, labels, writes = [], {}, [], bytearray(), [], []
    for d, barrier in zip(dispatches, _barriers(dispatches, offsets)):
        workgroup = d.workgroup or choose_workgroup(d.grid, limits)
        values = _resolve({**d.params, "grid": tuple(d.grid)}, offsets, const_offsets)
        defines = {**d.defines, "WG_X": workgroup[0], "WG_Y": workgroup[1], "WG_Z": workgroup[2]}
        source = shader.assemble(d.template, defines, values, env.storage_half, precision == "fp16")
        index = source_index.setdefault(source, len(sources))
        if index == len(sources):
            sources.append(source)
        block = shader.pack_params(values)
        params.extend(b"\0" * (-len(params) % alignment))
        steps.append((index, len(params), len(block), group_counts(d.grid, workgroup), barrier))
        params.extend(block)
        labels.append(d.label)
        writes.append([(t.index, offsets[id(t)], tuple(t.shape)) for t in d.writes])
    return Plan(steps=steps, sources=sources, params=bytes(params) or b"\0" * 16, constants=constants,
                arena_elements=max(arena_elements, 1), arena_lower_bound=lower, arena_naive=naive,
                io_bytes=io_bytes, inputs=io_in, outputs=io_out, storage_half=env.storage_half,
                labels=labels, writes=writes)
