"""gc_pause.gc_paused: the cyclic garbage collector off while a model is read and allocated, the
caller's state restored after (enabled or not, their frozen objects), nesting across threads,
exceptions passing through; and the Interpreters use it."""
import gc
import threading
import weakref

import numpy as np
import pytest

from gles_delegate import GpuDelegate, Interpreter
from gles_delegate.gc_pause import gc_paused
from tests.litert import LiteRTInterpreter
from tools.bench_scale import scale_model


@pytest.fixture(autouse=True)
def collector_enabled():
    """Every test starts with the collector enabled and nothing frozen, and leaves it so."""
    assert gc.isenabled() and gc.get_freeze_count() == 0
    yield
    gc.enable()
    gc.unfreeze()


def test_the_collector_is_off_inside_and_on_after():
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_caller_that_disabled_the_collector_keeps_it_disabled():
    gc.disable()
    with gc_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_pauses_nest_and_the_outermost_one_enables_it_again():
    with gc_paused():
        with gc_paused():
            pass
        assert not gc.isenabled()  # the inner pause ended, the outer one holds
    assert gc.isenabled()


def test_an_exception_passes_through_and_the_collector_is_enabled_again():
    with pytest.raises(KeyError, match="inside"):
        with gc_paused():
            raise KeyError("inside")
    assert gc.isenabled()


def test_pauses_of_two_threads_end_when_both_have_ended():
    entered, release = threading.Event(), threading.Event()

    def other():
        with gc_paused():
            entered.set()
            release.wait(10)

    thread = threading.Thread(target=other)
    thread.start()
    entered.wait(10)
    with gc_paused():
        pass
    assert not gc.isenabled()  # the other thread's pause still holds
    release.set()
    thread.join(10)
    assert gc.isenabled()


class _Cyclic:
    """An object that refers to itself: only the cyclic collector frees it."""

    def __init__(self):
        self.me = self


def test_a_cycle_dropped_inside_is_collected_by_the_collectors_own_next_run():
    """Nothing is collected during the pause; after it, the collector's next run (set off by
    ordinary allocations, not gc.collect()) finds a cycle dropped inside. Moved to the oldest
    generation when the pause ended (gc.freeze() then gc.unfreeze(), tried first), it stayed:
    the objects such a move makes do not count toward the next full collection."""
    with gc_paused():
        dropped = _Cyclic()
        ref = weakref.ref(dropped)
        del dropped
        made = [[k] for k in range(5000)]
        assert ref() is not None
    made += [[k] for k in range(5000)]  # allocations: the collector runs on its own
    assert ref() is None and gc.get_freeze_count() == 0


def test_objects_the_caller_froze_stay_frozen():
    """What the caller froze stays frozen, what the pause made is not: checked on the objects
    (frozen ones are not among gc.get_objects()), not by gc.get_freeze_count(), which drops
    whenever another thread frees a frozen object (it failed so in a run of several test files
    on two pytest-xdist workers, on main too)."""
    kept = [[]]
    gc.freeze()
    with gc_paused():
        made = [[k] for k in range(1000)]
    tracked = {id(o) for o in gc.get_objects()}
    assert id(kept) not in tracked and id(made) in tracked and gc.isenabled()


def _collections_during(build):
    """How many collections the collector ran while build() ran."""
    runs = []

    def count(phase, info):
        if phase == "start":
            runs.append(info["generation"])
    gc.callbacks.append(count)
    try:
        build()
    finally:
        gc.callbacks.remove(count)
    return len(runs)


@pytest.mark.parametrize("runtime", ["ours", "litert"])
def test_no_collection_runs_while_an_interpreter_is_built(runtime):
    """Reading and allocating 2,000 ADDs makes some hundred thousand objects: without the pause,
    240 (ours) and 108 (LiteRT's) collections ran, two of them of every generation. With it, a
    pause that ends inside the build (ours: the Interpreter's construction; LiteRT's: reading
    the model) is followed by the collector's own next run over what it made: two in all here.
    A small model is built first: the modules the first build imports are no part of it."""
    make = Interpreter if runtime == "ours" else LiteRTInterpreter
    small, model = (scale_model(n, every_output=runtime == "ours") for n in (2, 2000))
    with GpuDelegate() as delegate:
        made = []

        def build(content):
            made.append(make(model_content=content, experimental_delegates=[delegate]))
            made[-1].allocate_tensors()
        build(small)
        assert _collections_during(lambda: build(model)) <= 4
        assert gc.isenabled()
        interpreter = made.pop()
        made.clear()
        x = np.ones((1, 2, 2, 4), np.float32)
        interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
        interpreter.invoke()
        np.testing.assert_array_equal(interpreter.get_tensor(interpreter.get_output_details()[-1]["index"]), x + 2000)
        del interpreter
