"""Python's cyclic garbage collector paused while a model is read, partitioned, compiled and
allocated.

Reading and compiling a graph makes a few dozen container objects per node (tensors, nodes,
dispatches, their dicts and lists), nearly all of which live as long as the interpreter. With
the collector running, every 700 new objects start a collection, and the older generations are
traversed again and again as they grow: 240 collections while our Interpreter of 2,000 ADDs was
built, and at 100,000 nodes (issue 40) each of the older generations' traverses millions of
objects. Paused, no collection runs; reference counting still frees everything that is not in a
cycle.

When the outermost pause ends the collector runs again on its own schedule: its next
collections traverse what the pause made (once per generation it passes through), where a
running collector had traversed it hundreds of times. Two cheaper endings were tried and
dropped. Left frozen (gc.freeze()), a cycle is never collected: every 5,000-node interpreter
built and dropped left 13 MB behind. Moved straight to the oldest generation (gc.freeze() then
gc.unfreeze()), the objects do not count toward its next collection: twelve such interpreters
built and dropped in a row held 10 MB more each, none of it collected.
"""
import contextlib
import gc
import threading

_lock = threading.Lock()
_depth = 0          # pauses entered and not yet left, over every thread
_resume = False     # whether the collector was enabled when the outermost pause began


@contextlib.contextmanager
def gc_paused():
    """A context in which the cyclic garbage collector does not run. Pauses nest, also across
    threads: the collector runs again when the last one ends, and only if it was enabled when
    the first began (a caller that disabled it keeps it disabled). Exceptions pass through."""
    global _depth, _resume
    with _lock:
        if _depth == 0:
            _resume = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _resume:
                gc.enable()
