"""The memory planner (gpu/memory.py) checked directly, on synthetic and random dispatch lists and
on the plans of small models, against an independent reading of the same dispatches: tensors
alive at one dispatch never overlap unless they legitimately share storage (a free reshape, or an
in-place output over an input that dies there, at exactly the same offset); the arena is no
smaller than the most storage alive at one dispatch and no larger than one buffer per tensor; the
same dispatches always get the same plan. Every size is in vec4 elements."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gles_delegate import GpuDelegate
from gles_delegate.graph import Tensor
from gles_delegate.gpu import memory
from gles_delegate.gpu.kernels.base import Dispatch
from gles_delegate.gpu.phwc4 import bhwc
from tests.oplib import run_ours
from tests.gpu.transforms.rulelib import Chain, check_gpu, random


def tensor(index, shape):
    return Tensor(index, f"t{index}", tuple(shape), np.dtype(np.float32))


def size(t):
    return bhwc(t.shape).elements


# -- an independent reading of a dispatch list -----------------------------------------------------
def alias_classes(dispatches, aliases, views=()):
    """[(members, first, last, size, place)] per class of tensors joined by alias pairs and views
    (tensor, whole, offset) (transitively), a tensor neither names being its own class; first /
    last: the dispatches touching any member, None when none does; place: {id(member): its
    offset from the class's start}; size: from that start to the end of its last member."""
    edges = {}
    for t in [t for d in dispatches for t in d.writes + d.reads] + [t for pair in aliases for t in pair] + \
            [t for view in views for t in view[:2]]:
        edges.setdefault(id(t), (t, []))
    for tensor_, source in aliases:
        edges[id(tensor_)][1].append((source, 0))
        edges[id(source)][1].append((tensor_, 0))
    for tensor_, whole, offset in views:
        edges[id(tensor_)][1].append((whole, -offset))
        edges[id(whole)][1].append((tensor_, offset))
    out, seen = [], set()
    for key, (t, _) in edges.items():
        if key in seen:
            continue
        place = _offsets(edges, t)
        seen |= set(place)
        low = min(place.values())
        place = {k: v - low for k, v in place.items()}
        members = [edges[k][0] for k in place]
        touched = [i for i, d in enumerate(dispatches) for m in d.writes + d.reads if id(m) in place]
        first, last = (min(touched), max(touched)) if touched else (None, None)
        out.append((members, first, last, max(place[id(m)] + size(m) for m in members), place))
    return out


def _offsets(edges, start):
    """{id(tensor): offset from `start`} of every tensor `start` shares storage with."""
    place, todo = {id(start): 0}, [start]
    while todo:
        t = todo.pop()
        for other, step in edges[id(t)][1]:
            if id(other) not in place:
                place[id(other)] = place[id(t)] + step
                todo.append(other)
    return place


def handed_over(dispatches, a, b):
    """Whether class b may take class a's storage in place: a's last dispatch is b's first, which
    writes one tensor, of b, and declares a tensor of a in Dispatch.inplace; neither holds a
    view (another invocation may still read another part of it)."""
    (members_a, _, last_a, _, _), (members_b, first_b, _, _, _) = a, b
    if holds_view(a) or holds_view(b):
        return False
    if last_a != first_b:
        return False
    d = dispatches[first_b]
    return len(d.writes) == 1 and d.writes[0] in members_b and any(t in members_a for t in d.inplace)


def holds_view(cls):
    """Whether a class of alias_classes holds a view: a member at a nonzero offset, or smaller
    than the class."""
    members, _, _, extent, place = cls
    return any(place.values()) or any(size(m) != extent for m in members)


def check_plan(dispatches, aliases, arena, views=(), phases=None):
    """Assert the plan's invariants against alias_classes (see the module docstring); phases:
    the (first, last) dispatch of each dispatch's barrier phase, whose lifetimes the plan widens
    to whole phases."""
    exact = alias_classes(dispatches, aliases, views)
    classes = exact if phases is None else \
        [(members, None if first is None else phases[first][0], None if last is None else phases[last][1], size, place)
         for members, first, last, size, place in exact]
    handover = {id(w[0]): e for w, e in zip(classes, exact)}  # in place: the exact lifetimes meet
    live = [c for c in classes if c[1] is not None]
    start = {id(c[0]): arena.offsets[id(c[0][0])] - c[4][id(c[0][0])] for c in live}
    for members, first, _, _, place in classes:  # each member at its place in its class; none for an unused class
        if first is None:
            assert {arena.offsets.get(id(t)) for t in members} == {None}
        else:
            assert {id(t): arena.offsets[id(t)] for t in members} == {key: start[id(members)] + offset
                                                                      for key, offset in place.items()}
    for k, a in enumerate(live):
        assert 0 <= start[id(a[0])] and start[id(a[0])] + a[3] <= arena.elements
        for b in live[k + 1:]:
            if a[2] < b[1] or b[2] < a[1]:
                continue  # lifetimes apart
            (sa, ea), (sb, eb) = (start[id(a[0])], start[id(a[0])] + a[3]), (start[id(b[0])], start[id(b[0])] + b[3])
            if sa < eb and sb < ea:  # overlapping storage while both are alive: only an in-place handover
                a_, b_ = handover[id(a[0])], handover[id(b[0])]
                assert sa == sb and (handed_over(dispatches, a_, b_) or handed_over(dispatches, b_, a_)), \
                    ([t.index for t in a[0]], [t.index for t in b[0]])
    steps = range(len(dispatches))
    alive = [sum(c[3] for c in live if c[1] <= s <= c[2]) for s in steps]
    shared = [sum(max(c[3] for c in live if c[1] <= s <= c[2] and start[id(c[0])] == offset)  # one per offset
                  for offset in {start[id(c[0])] for c in live if c[1] <= s <= c[2]}) for s in steps]
    assert max(shared, default=0) <= arena.lower_bound <= arena.elements <= arena.naive == sum(c[3] for c in live)
    if not any(d.inplace for d in dispatches):  # an in-place group is as large as its largest member, all its life
        assert arena.lower_bound == max(alive, default=0)


# -- random dispatch lists -----------------------------------------------------------------------
@st.composite
def programs(draw, with_views=False):
    """(dispatches, aliases, views) of a random partition: each dispatch reads up to 3 earlier
    tensors, writes one new tensor (or two), and may declare reads in place; an alias names an
    earlier tensor under a new one of its shape, which later dispatches may read; with_views,
    a view puts a new tensor at an offset inside an earlier one (a slice read in place) or an
    earlier one inside a new one (a concatenation's input written in place), each tensor inside
    at most one other."""
    tensors, dispatches, aliases, views, inside = [], [], [], [], set()

    def new(shape=None):
        shape = shape or (1, draw(st.integers(1, 4)), draw(st.integers(1, 4)), draw(st.integers(1, 12)))
        tensors.append(tensor(len(tensors), shape))
        return tensors[-1]

    def some(pool, most=3):
        return tuple(draw(st.lists(st.sampled_from(pool), max_size=most, unique_by=id))) if pool else ()

    kinds = ("compute", "compute", "compute", "alias", "two outputs") + (("slice", "concat") if with_views else ())
    for _ in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(kinds))
        if kind == "alias" and tensors:
            source = draw(st.sampled_from(tensors))
            aliases.append((new(source.shape), source))
            continue
        if kind == "slice" and tensors:
            whole = draw(st.sampled_from(tensors))
            n = draw(st.integers(1, size(whole)))
            views.append((new((1, 1, n, 4)), whole, draw(st.integers(0, size(whole) - n))))
            inside.add(id(tensors[-1]))
            continue
        free = [t for t in tensors if id(t) not in inside and not any(t is a for a, _ in aliases)
                and not any(t is s for _, s in aliases)]
        if kind == "concat" and free:
            piece = draw(st.sampled_from(free))
            whole = new((1, 1, size(piece) + draw(st.integers(0, 6)), 4))
            views.append((piece, whole, draw(st.integers(0, size(whole) - size(piece)))))
            inside.add(id(piece))
            continue
        reads = some(tensors)
        writes = (new(), new()) if kind == "two outputs" else (new(),)
        dispatches.append(Dispatch("t", (1, 1, 1), reads=reads, writes=writes, inplace=some(list(reads))))
    dispatches.append(Dispatch("out", (1, 1, 1), reads=some(tensors)))
    return dispatches, aliases, views


def reallocated(dispatches, aliases, views=()):
    """The same program over new Tensor objects made in reverse order (other ids, other
    addresses), the alias pairs and views reversed too; and {id(new tensor): index}."""
    old = {t.index: t for d in dispatches for t in d.writes + d.reads} | {t.index: t for p in aliases for t in p} | \
        {t.index: t for v in views for t in v[:2]}
    new = {i: tensor(i, old[i].shape) for i in sorted(old, reverse=True)}

    def same(ts):
        return tuple(new[t.index] for t in ts)
    copies = [Dispatch(d.template, d.grid, reads=same(d.reads), writes=same(d.writes), inplace=same(d.inplace))
              for d in dispatches]
    return copies, [same(pair) for pair in reversed(aliases)], [same(v[:2]) + v[2:] for v in reversed(views)]


def by_index(dispatches, aliases, offsets, views=()):
    tensors = [t for d in dispatches for t in d.writes + d.reads] + [t for p in aliases for t in p] + \
        [t for v in views for t in v[:2]]
    return {t.index: offsets[id(t)] for t in tensors if id(t) in offsets}


@settings(max_examples=150, deadline=None)
@given(programs(with_views=True))
def test_random_plans_keep_their_invariants_under_every_strategy(program):
    dispatches, aliases, views = program
    for strategy in memory.STRATEGIES:
        arena = memory.plan_arena(dispatches, strategy, aliases, views=views)
        check_plan(dispatches, aliases, arena, views)
        assert memory.plan_arena(dispatches, strategy, aliases, views=views) == arena  # the same input, the same plan
        copies, copied_aliases, copied_views = reallocated(dispatches, aliases, views)
        again = memory.plan_arena(copies, strategy, copied_aliases, views=copied_views)
        assert by_index(copies, copied_aliases, again.offsets, copied_views) == \
            by_index(dispatches, aliases, arena.offsets, views)
        assert (again.elements, again.lower_bound, again.naive) == (arena.elements, arena.lower_bound, arena.naive)


@settings(max_examples=100, deadline=None)
@given(programs(), st.data())
def test_persistent_storage_is_shared_with_nothing(program, data):
    """A persistent tensor (a resource variable's storage) overlaps no tensor outside its alias
    class, whatever their lifetimes, and no output takes it in place: it keeps its value from
    one invoke to the next."""
    dispatches, aliases, _ = program
    touched = list({id(t): t for d in dispatches for t in d.writes + d.reads}.values())
    persistent = data.draw(st.lists(st.sampled_from(touched), max_size=2, unique_by=id)) if touched else []
    classes = alias_classes(dispatches, aliases)
    for strategy in memory.STRATEGIES:
        arena = memory.plan_arena(dispatches, strategy, aliases, persistent)
        for kept in persistent:
            members, _, _, kept_size, _ = next(c for c in classes if kept in c[0])
            start = arena.offsets[id(kept)]
            for other, _, _, other_size, _ in classes:
                offset = arena.offsets.get(id(other[0]))
                if other is members or offset is None:
                    continue
                assert offset + other_size <= start or start + kept_size <= offset, (strategy, kept.index)


def test_the_checker_sees_an_overlap():
    """check_plan fails a plan that puts two live tensors on the same storage (so the tests above
    can fail)."""
    x, y = tensor(0, (1, 4, 4, 4)), tensor(1, (1, 4, 4, 4))
    dispatches = [Dispatch("in", (1, 1, 1), writes=(x,)), Dispatch("f", (1, 1, 1), reads=(x,), writes=(y,)),
                  Dispatch("out", (1, 1, 1), reads=(x, y))]
    wrong = memory.ArenaPlan({id(x): 0, id(y): 8}, 24, 32, 32)
    with pytest.raises(AssertionError):
        check_plan(dispatches, [], wrong)
    check_plan(dispatches, [], memory.plan_arena(dispatches))


# -- synthetic cases -----------------------------------------------------------------------------
def test_elementwise_output_takes_the_storage_of_an_input_that_dies():
    x, y, z = tensor(0, (1, 8, 8, 8)), tensor(1, (1, 8, 8, 8)), tensor(2, (1, 8, 8, 8))
    dispatches = [Dispatch("in", (1, 1, 1), writes=(x,)),
                  Dispatch("neg", (1, 1, 1), reads=(x,), writes=(y,), inplace=(x,)),
                  Dispatch("abs", (1, 1, 1), reads=(y,), writes=(z,), inplace=(y,)),
                  Dispatch("out", (1, 1, 1), reads=(z,))]
    arena = memory.plan_arena(dispatches, "best")
    assert arena.offsets[id(x)] == arena.offsets[id(y)] == arena.offsets[id(z)]
    assert arena.elements == arena.lower_bound == 128 and arena.naive == 3 * 128


def test_an_input_read_later_is_not_overwritten():
    x, y = tensor(0, (1, 8, 8, 8)), tensor(1, (1, 8, 8, 8))
    dispatches = [Dispatch("in", (1, 1, 1), writes=(x,)),
                  Dispatch("neg", (1, 1, 1), reads=(x,), writes=(y,), inplace=(x,)),
                  Dispatch("add", (1, 1, 1), reads=(x, y))]
    arena = memory.plan_arena(dispatches, "best")
    assert arena.offsets[id(x)] != arena.offsets[id(y)] and arena.elements == 256


def test_a_larger_output_does_not_take_a_smaller_inputs_storage():
    x, y = tensor(0, (1, 4, 4, 4)), tensor(1, (1, 8, 8, 4))
    dispatches = [Dispatch("in", (1, 1, 1), writes=(x,)),
                  Dispatch("grow", (1, 1, 1), reads=(x,), writes=(y,), inplace=(x,)),
                  Dispatch("out", (1, 1, 1), reads=(y,))]
    arena = memory.plan_arena(dispatches, "best")
    assert arena.offsets[id(y)] != arena.offsets[id(x)] and arena.elements == 16 + 64


def test_an_alias_shares_storage_for_its_joint_lifetime():
    x, r, y = tensor(0, (1, 4, 4, 8)), tensor(1, (1, 16, 8)), tensor(2, (1, 4, 4, 8))
    dispatches = [Dispatch("in", (1, 1, 1), writes=(x,)), Dispatch("other", (1, 1, 1), writes=(y,)),
                  Dispatch("out", (1, 1, 1), reads=(r, y))]
    arena = memory.plan_arena(dispatches, "best", [(r, x)])
    assert arena.offsets[id(x)] == arena.offsets[id(r)] != arena.offsets[id(y)]
    assert arena.elements == arena.lower_bound == 64


def test_first_fit_reuses_what_naive_does_not():
    """A short-lived large tensor between long-lived small ones: every first-fit order reaches
    the bound (the step where all three are alive); naive gives each its own storage."""
    a, b, big, c = tensor(0, (1, 1, 1, 4)), tensor(1, (1, 1, 1, 4)), tensor(2, (1, 4, 4, 4)), tensor(3, (1, 1, 1, 4))
    dispatches = [Dispatch("a", (1, 1, 1), writes=(a,)), Dispatch("big", (1, 1, 1), writes=(big,)),
                  Dispatch("b", (1, 1, 1), reads=(big,), writes=(b,)),
                  Dispatch("c", (1, 1, 1), reads=(b,), writes=(c,)),
                  Dispatch("out", (1, 1, 1), reads=(a, c))]
    totals = {s: memory.plan_arena(dispatches, s).elements for s in memory.STRATEGIES}
    assert memory.plan_arena(dispatches).lower_bound == 1 + 16 + 1
    assert totals.pop("naive") == 1 + 16 + 1 + 1 and set(totals.values()) == {1 + 16 + 1}


# -- plans of real models ------------------------------------------------------------------------
def branches():
    c = Chain((1, 6, 6, 4))
    a, b = c.op("ABS", c.conv(c.x, 8, seed=1)), c.depthwise(c.conv(c.x, 4, seed=2))
    joined = c.op("CONCATENATION", a, b, shape=(1, 6, 6, 12), axis=3)
    return c.build(c.op("HARD_SWISH", c.conv(joined, 4, seed=5)))


def test_the_checker_sees_a_misplaced_view():
    """check_plan fails a plan that puts a view anywhere but at its offset in its whole."""
    x, y = tensor(0, (1, 1, 4, 4)), tensor(1, (1, 1, 2, 4))
    dispatches = [Dispatch("in", (1, 1, 1), writes=(x,)), Dispatch("out", (1, 1, 1), reads=(y,))]
    views = [(y, x, 2)]
    with pytest.raises(AssertionError):
        check_plan(dispatches, [], memory.ArenaPlan({id(x): 0, id(y): 1}, 4, 4, 4), views)
    arena = memory.plan_arena(dispatches, views=views)
    assert arena.offsets[id(y)] == arena.offsets[id(x)] + 2
    check_plan(dispatches, [], arena, views)


def reshapes():
    c = Chain((1, 4, 5, 8))
    r = c.op("RESHAPE", c.op("ABS", c.x), c.const((1, 20, 8), np.int32), shape=(1, 20, 8))
    return c.build(c.op("NEG", r), c.op("EXP", c.conv(c.x, 4)))


def elementwise_chain():
    c = Chain((2, 5, 6, 7))
    return c.build(c.op("EXP", c.op("NEG", c.op("ABS", c.op("ADD", c.x, c.const(random(7, 1)))))))


def views():
    """A concatenation written in place (rule concat_in_place) and a slice of it read in place
    (rule slice_views), by an elementwise op (in place, were it no view) and a convolution."""
    c = Chain((1, 4, 5, 8))
    cat = c.op("CONCATENATION", c.conv(c.x, 8), c.op("ABS", c.x), shape=(1, 4, 5, 16), axis=3)
    begin, size = c.const((0, 0, 0, 4), np.int32), c.const((1, 4, 5, 8), np.int32)
    part = c.op("SLICE", cat, begin, size, shape=(1, 4, 5, 8))
    return c.build(c.op("EXP", part), c.conv(part, 4), c.conv(cat, 4))


MODELS = {"branches": (branches, (1, 6, 6, 4)), "reshapes": (reshapes, (1, 4, 5, 8)), "views": (views, (1, 4, 5, 8)),
          "elementwise_chain": (elementwise_chain, (2, 5, 6, 7))}


@pytest.mark.parametrize("rules", [True, False])
@pytest.mark.parametrize("name", MODELS)
def test_plans_of_small_models_keep_their_invariants(monkeypatch, name, rules):
    """The compiler's own calls, recorded: every strategy's plan of the model's dispatches."""
    calls = []

    def plan_arena(dispatches, strategy="best", aliases=(), persistent=(), views=(), phases=None):
        calls.append((dispatches, list(aliases), list(views), phases))
        return original(dispatches, strategy, aliases, persistent, views, phases)
    original = memory.plan_arena
    monkeypatch.setattr(memory, "plan_arena", plan_arena)
    build, shape = MODELS[name]
    with GpuDelegate(rewrite_rules=rules) as delegate:
        run_ours(build(), [random(shape)], experimental_delegates=[delegate])
        summary = delegate.summary()
    assert len(calls) == summary["partitions"] == 1
    dispatches, aliases, views, phases = calls[0]
    if name == "views" or not rules:
        assert len(views) == (3 if rules else 0)  # both inputs in place, the slice read in place
    assert len(dispatches) == summary["dispatches"]
    for strategy in memory.STRATEGIES:
        check_plan(dispatches, aliases, original(dispatches, strategy, aliases, views=views, phases=phases), views,
                   phases)
    best = original(dispatches, "best", aliases, views=views, phases=phases)
    assert summary["intermediate_bytes"] == best.elements * 16  # fp32: 16 bytes per vec4


def test_in_place_chain_runs_correctly_unfused():
    """Rules off: each elementwise node is its own dispatch and overwrites its input."""
    summary, _ = check_gpu(elementwise_chain(), [random((2, 5, 6, 7))], rewrite_rules=False)
    assert summary["intermediate_bytes"] == summary["intermediate_lower_bound_bytes"] == 2 * 2 * 5 * 6 * 16
