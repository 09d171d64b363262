"""Checking that an object goes by reference counting alone, not waiting in a reference cycle
for the cyclic garbage collector (tests/reliability/test_cycles.py says why it matters)."""
import contextlib
import gc


@contextlib.contextmanager
def collector_disabled():
    """The cyclic garbage collector disabled for the block, enabled again after if it was: an
    object dropped inside that sits in a cycle stays (a weakref to it stays alive)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
