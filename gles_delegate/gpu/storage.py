"""Where a plan's tensors and weights live, and in which precision (the storage layout).

In 'fp32', 'fp16' and 'fp16_fp32acc' every tensor lives in the one arena and every weight in the
one constants buffer, all in the plan's storage type, except that in the half precisions int32
tensors and constants (their bits: kernels/base.py) live in the float buffer below. Precision
'auto' stores them as halves too, except those a Promotion names (calibrate.py chooses them):
those live in a float buffer (vec4, binding 3): the promoted weights first, then the promoted
tensors, planned like the arena. A
dispatch then runs in one of four modes (its #defines, common.glsl):
  'plain'  it touches nothing promoted: the plan's own storage, exactly as without promotions;
  'float'  it touches only promoted tensors and weights: FLOAT_BUFFER, plain float offsets into
           the float buffer, no branch;
  'float_tensors'  only promoted tensors, and weights all in half storage: FLOAT_BUFFER and
           HALF_WEIGHTS, no branch either;
  'mixed'  both kinds of tensor, or of weight: STORAGE_MIXED, and an offset of FLOAT_BASE or more
           names the float buffer.
A weight a half holds exactly (a model's float16 weights, dequantized) stays half whatever the
Promotion says: a float copy would change no value and cost twice the bytes.
Offsets in Plan.writes use the same encoding (a tensor at FLOAT_BASE + k is at element k of the
float buffer), so a capture reads each tensor from where it lives.
"""
import dataclasses
from dataclasses import dataclass, field

import numpy as np

from . import memory
from .kernels.base import ArenaRef, ConstRef

HALF_MAX = 65504.0  # the largest finite half: a value above it is stored as inf
FLOAT_BASE = 1 << 30  # offsets from here on name the float buffer (no arena reaches it: 8 GiB of halves)
INT32_WHY = "int32: its 32 bits (kernels/base.py)"  # why an int32 tensor or constant is in the float buffer


@dataclass(frozen=True)
class Promotion:
    """What precision 'auto' stores as float: tensors {tensor index: why} (their storage) and
    nodes {position in the partition's node list: why} (their weights; a node whose every
    tensor is promoted gets float weights too, so it runs in plain float)."""
    tensors: dict = field(default_factory=dict)
    nodes: dict = field(default_factory=dict)


FLOAT_TENSOR_MODES = ("float", "float_tensors")  # the modes whose tensors all live in the float buffer


def exact_in_half(rows):
    """Whether every value of `rows` (a float32 array) survives a round trip through half."""
    with np.errstate(over="ignore"):
        return bool(np.array_equal(np.asarray(rows, np.float32).astype(np.float16).astype(np.float32), rows))


@dataclass
class Layout:
    """offsets: {id(tensor): offset as the kernels address it}; const_offsets: per ConstRef index,
    likewise; constants: the arena's weights [N, 4] (float16 in half storage); float_constants:
    the promoted weights [M, 4] float32; arena: the memory.ArenaPlan of the arena; float_elements:
    the float buffer's size in vec4 (0: none); float_tensors: {id(tensor)} and float_consts:
    {ConstRef index} stored as float; promoted_tensors {tensor index: why} and promoted_nodes
    {node label: why}: what summary() and the tools report."""
    offsets: dict
    const_offsets: list
    constants: np.ndarray
    float_constants: np.ndarray
    arena: memory.ArenaPlan
    float_elements: int = 0
    float_tensors: set = field(default_factory=set)
    float_consts: set = field(default_factory=set)
    promoted_tensors: dict = field(default_factory=dict)
    promoted_nodes: dict = field(default_factory=dict)

    def mode(self, dispatch):
        """'plain', 'float', 'float_tensors' or 'mixed' (the module docstring) of one dispatch."""
        if not self.float_tensors and not self.float_consts:  # nothing promoted: every dispatch
            return "plain"
        tensors = {id(t) in self.float_tensors for t in dispatch.reads + dispatch.writes}
        weights = {v.index in self.float_consts for v in dispatch.params.values() if isinstance(v, ConstRef)}
        if True not in tensors | weights:
            return "plain"
        if tensors == {True} and len(weights) < 2:
            return "float" if weights != {False} else "float_tensors"
        return "mixed"

    def resolve(self, params, mode, **more):
        """params (and the `more` params) with ArenaRef / ConstRef replaced by the offsets a
        dispatch of `mode` uses."""
        shift = FLOAT_BASE if mode in FLOAT_TENSOR_MODES else 0
        resolved = {}
        for name, value in params.items():
            kind = type(value)
            if kind is ArenaRef:
                value = self.offsets[id(value.tensor)] - (shift if id(value.tensor) in self.float_tensors else 0)
            elif kind is ConstRef:
                value = self.const_offsets[value.index] - (shift if value.index in self.float_consts else 0)
            resolved[name] = value
        resolved.update(more)
        return resolved


def defines(mode):
    """The #defines common.glsl reads for a dispatch mode (do not edit the dict)."""
    return _MODE_DEFINES[mode]


_MODE_DEFINES = {"plain": {}, "float": {"FLOAT_BUFFER": 1}, "float_tensors": {"FLOAT_BUFFER": 1, "HALF_WEIGHTS": 1},
                 "mixed": {"STORAGE_MIXED": 1, "FLOAT_BASE": FLOAT_BASE}}


def lay_out(dispatches, env, nodes, promotion, strategy, phases=None):
    """The Layout of a partition's dispatches (built with `env`, a KernelEnv, from `nodes`).
    promotion: a Promotion, used only in precision 'auto', where weights of more than HALF_MAX
    are promoted whatever it says (a half would hold inf), and the weights of a node that a half
    holds exactly stay half. In every half precision, int32 tensors and constants (their bits:
    kernels/base.py) live in the float buffer, as promoted ones do."""
    ints = {t.index: INT32_WHY for t in _tensors(dispatches, env) if t.dtype == np.int32}
    if not env.storage_half or (env.precision != "auto" and not ints and not env.int_constants):
        arena = memory.plan_arena(dispatches, strategy, env.aliases, _persistent(env), _views(env), phases)
        const_offsets, constants = _pack(env.constants, range(len(env.constants)), env.storage_half, 1)
        return Layout(arena.offsets, const_offsets, constants, np.zeros((0, 4), np.float32), arena)
    promotion = promotion if env.precision == "auto" and promotion else Promotion()
    promoted_tensors = _promoted_tensors(dispatches, env, Promotion({**promotion.tensors, **ints}, promotion.nodes))
    float_ids = {id(t) for t, _ in promoted_tensors}
    float_consts = set(env.int_constants)
    promoted_nodes = {id(env.constant_nodes[k]): (env.constant_nodes[k], INT32_WHY) for k in float_consts}
    if env.precision == "auto":
        float_consts, promoted_nodes = _auto_weights(dispatches, env, nodes, promotion, float_ids, float_consts)
    plain_consts = [k for k in range(len(env.constants)) if k not in float_consts]
    float_list = sorted(float_consts)
    half_offsets, constants = _pack(env.constants, plain_consts, True, 1)
    float_offsets, float_constants = _pack(env.constants, float_list, False, 0)
    const_offsets = [0] * len(env.constants)
    for k, offset in zip(plain_consts, half_offsets):
        const_offsets[k] = offset
    for k, offset in zip(float_list, float_offsets):
        const_offsets[k] = FLOAT_BASE + offset
    arena = memory.plan_arena(_restricted(dispatches, float_ids, False), strategy,
                              [a for a in env.aliases if id(a[0]) not in float_ids],
                              [t for t in _persistent(env) if id(t) not in float_ids],
                              [v for v in _views(env) if id(v[0]) not in float_ids], phases)
    offsets = dict(arena.offsets)
    float_elements = 0
    if float_ids:
        floats = memory.plan_arena(_restricted(dispatches, float_ids, True), strategy,
                                   [a for a in env.aliases if id(a[0]) in float_ids],
                                   [t for t in _persistent(env) if id(t) in float_ids],
                                   [v for v in _views(env) if id(v[0]) in float_ids], phases)
        base = FLOAT_BASE + len(float_constants)
        offsets.update({key: base + offset for key, offset in floats.offsets.items()})
        float_elements = len(float_constants) + floats.elements
    elif float_list:
        float_elements = len(float_constants)
    return Layout(offsets, const_offsets, constants, float_constants, arena, float_elements, float_ids,
                  float_consts, {t.index: why for t, why in promoted_tensors},
                  {node.label: why for node, why in promoted_nodes.values() if node is not None})


def _auto_weights(dispatches, env, nodes, promotion, float_ids, float_consts):
    """(the constants stored as float, {id(node): (node, why)} of the nodes owning them) of
    precision 'auto': besides `float_consts` (int32 ones), the weights of promoted nodes a half
    does not hold exactly, and every weight beyond HALF_MAX."""
    promoted_nodes = _promoted_nodes(dispatches, env, nodes, promotion, float_ids)
    # A node's weights move together (one of them in half storage would make its dispatch mixed).
    lossy = {id(node) for node, rows in zip(env.constant_nodes, env.constants)
             if id(node) in promoted_nodes and not exact_in_half(rows)}
    float_consts = set(float_consts) | {k for k, node in enumerate(env.constant_nodes) if id(node) in lossy}
    float_consts |= {k for k, rows in enumerate(env.constants) if np.abs(rows).max(initial=0) > HALF_MAX}
    owners = {id(env.constant_nodes[k]) for k in float_consts}
    promoted_nodes = {key: item for key, item in promoted_nodes.items() if key in owners}
    for k in float_consts:
        why = INT32_WHY if k in env.int_constants else \
            f"a weight of magnitude {float(np.abs(env.constants[k]).max()):.4g} > {HALF_MAX:g} (overflows half)"
        promoted_nodes.setdefault(id(env.constant_nodes[k]), (env.constant_nodes[k], why))
    return float_consts, promoted_nodes


def _persistent(env):
    """The tensors KernelEnv.persist kept (resource variables)."""
    return [tensor for tensor, _ in env.persistent.values()]


def _pack(constants, chosen, half, min_rows):
    """(offset of each chosen constant, the chosen constants packed [N, 4]) in float16 or
    float32; min_rows zero rows when none is chosen (a GL buffer cannot be empty)."""
    rows = [constants[k] for k in chosen]
    offsets = np.cumsum([0] + [len(r) for r in rows]).tolist()[:-1]
    packed = np.concatenate(rows) if rows else np.zeros((min_rows, 4), np.float32)
    with np.errstate(over="ignore"):  # a weight beyond a half is inf in half storage, as the GPU would round it
        return offsets, packed.astype(np.float16 if half else np.float32)


def _views(env):
    """The (tensor, whole, offset) triples of KernelEnv.views."""
    return [view[:3] for view in env.views]


def _tensors(dispatches, env):
    """Every arena tensor of the dispatches, the aliases and the views, once, in order of
    appearance."""
    seen = {}
    for d in dispatches:
        for t in d.writes + d.reads:
            seen.setdefault(id(t), t)
    for pair in env.aliases + [view[:2] for view in env.views]:
        for t in pair:
            seen.setdefault(id(t), t)
    return list(seen.values())


def _promoted_tensors(dispatches, env, promotion):
    """[(tensor, why)] stored as float: those the promotion names, and every tensor sharing
    storage with one of them (a free reshape or a view is the same memory, so the same
    precision)."""
    groups = memory.alias_groups(env.aliases, _views(env))
    out = {}
    for t in _tensors(dispatches, env):
        why = promotion.tensors.get(t.index)
        if why is None:
            continue
        for member in groups.get(id(t), [t]):
            out.setdefault(id(member), (member, why if member is t else f"shares the storage of tensor {t.index}"))
    return list(out.values())


def _promoted_nodes(dispatches, env, nodes, promotion, float_ids):
    """{id(node): (node, why)} of the nodes whose weights are float: those the promotion names,
    and those whose dispatches touch only promoted tensors."""
    out = {id(nodes[k]): (nodes[k], why) for k, why in promotion.nodes.items() if k < len(nodes)}
    touched = {}
    owners = {id(n): n for n in env.constant_nodes if n is not None}
    for d in dispatches:
        if d.node is not None and id(d.node) in owners:
            touched.setdefault(id(d.node), []).extend(d.reads + d.writes)
    for key, tensors in touched.items():
        if key not in out and tensors and all(id(t) in float_ids for t in tensors):
            out[key] = (owners[key], "every tensor it reads and writes is float")
    return out


def _restricted(dispatches, float_ids, want_float):
    """The dispatches as the planner of one buffer sees them: only the tensors stored there."""
    def keep(tensors):
        return tuple(t for t in tensors if (id(t) in float_ids) == want_float)
    return [dataclasses.replace(d, reads=keep(d.reads), writes=keep(d.writes), inplace=keep(d.inplace))
            for d in dispatches]
