"""gpu/schedule.py: the dispatch order puts independent dispatches in one barrier phase, keeps
every dependency of storage in order, moves nothing ahead by more than its window, and the plans
it makes compute what the reference does with fewer barriers."""
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gles_delegate import GpuDelegate
from gles_delegate.gpu import compiler, schedule
from tests.gpu.gpulib import PRECISIONS, assert_gpu_matches
from tests.gpu.transforms.rulelib import Chain, random
from tests.oplib import run_ours


def dispatch(reads, writes):
    return SimpleNamespace(reads=tuple(reads), writes=tuple(writes))


@st.composite
def dispatch_lists(draw):
    """(dispatches, group_of) of a random program: each dispatch reads and writes a few of a small
    set of storage groups (so that reads after writes, writes after reads and writes after writes
    all occur, as arena reuse, in-place outputs and views make them)."""
    groups = [object() for _ in range(draw(st.integers(1, 8)))]
    pick = st.lists(st.sampled_from(groups), max_size=3, unique_by=id)
    dispatches = [dispatch(draw(pick), draw(pick)) for _ in range(draw(st.integers(0, 40)))]
    return dispatches, {id(g): k for k, g in enumerate(groups)}


def conflicts(a, b, group_of):
    groups = lambda tensors: {group_of[id(t)] for t in tensors}  # noqa: E731
    return bool(groups(a.writes) & (groups(b.reads) | groups(b.writes)) or groups(a.reads) & groups(b.writes))


@settings(max_examples=300, deadline=None)
@given(dispatch_lists(), st.integers(1, 6))
def test_order_keeps_every_dependency_and_the_window(program, window):
    dispatches, group_of = program
    order, sizes = schedule.phase_order(dispatches, group_of, window)
    assert sorted(order) == list(range(len(dispatches))) and sum(sizes) == len(dispatches)
    position = {j: k for k, j in enumerate(order)}
    phase = [p for p, size in enumerate(sizes) for _ in range(size)]
    for i in range(len(dispatches)):
        for j in range(i + 1, len(dispatches)):
            if conflicts(dispatches[i], dispatches[j], group_of):
                # in order, and a phase (a barrier) apart
                assert phase[position[i]] < phase[position[j]], (i, j)
            if j - i >= window:
                assert position[i] < position[j], (i, j)  # moved ahead by no more than the window
    for k in range(len(order)):  # within a phase no two conflict: they share no barrier
        for m in range(k + 1, len(order)):
            if phase[k] == phase[m]:
                assert not conflicts(dispatches[order[k]], dispatches[order[m]], group_of)


def test_independent_dispatches_share_a_phase_and_a_chain_does_not():
    a, b, c, d = (object() for _ in range(4))
    group_of = {id(t): k for k, t in enumerate((a, b, c, d))}
    # a -> b, a -> c, then b -> d: the reads of a go side by side, d after b
    listed = [dispatch([a], [b]), dispatch([b], [d]), dispatch([a], [c])]
    order, sizes = schedule.phase_order(listed, group_of)
    assert order == [0, 2, 1] and sizes == [2, 1]
    chain = [dispatch([a], [b]), dispatch([b], [c]), dispatch([c], [d])]
    assert schedule.phase_order(chain, group_of) == ([0, 1, 2], [1, 1, 1])
    # No storage shared (storage_groups gives None): each tensor is its own group.
    assert schedule.storage_groups(listed, [], []) is None
    assert schedule.phase_order(listed, None) == ([0, 2, 1], [2, 1])


def branches():
    """x [1, 8, 8, 6] -> three branches of CONV_2D -> DEPTHWISE_CONV_2D, listed branch after
    branch (as a converter writes them), joined by ADDs: each branch's depthwise reads its own
    convolution, so listed in order every other dispatch starts a barrier phase."""
    c = Chain((1, 8, 8, 6))
    outs = [c.depthwise(c.conv(c.x, 6, seed=10 * k), seed=10 * k + 3) for k in range(3)]
    total = c.op("ADD", outs[0], outs[1], fused_activation_function=0)
    total = c.op("ADD", total, outs[2], fused_activation_function=0)
    return c.build(total)


def barriers_and_outputs(model, values, precision, scheduled, monkeypatch):
    monkeypatch.setattr(compiler, "SCHEDULE", scheduled)
    with GpuDelegate(precision=precision) as delegate:
        outputs = run_ours(model, values, experimental_delegates=[delegate])
        [partition] = delegate.partitions
        return sum(1 for step in partition.plan.steps if step[4]), outputs


@pytest.mark.parametrize("precision", PRECISIONS)
def test_branches_run_side_by_side_with_fewer_barriers(precision, monkeypatch):
    model, values = branches(), [random((1, 8, 8, 6), 7)]
    reference = run_ours(model, values)
    listed, _ = barriers_and_outputs(model, values, precision, False, monkeypatch)
    scheduled, outputs = barriers_and_outputs(model, values, precision, True, monkeypatch)
    assert scheduled < listed, (scheduled, listed)
    assert_gpu_matches(reference[0], outputs[0], precision, "branches")
    assert np.isfinite(outputs[0]).all()
