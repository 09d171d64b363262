"""Invokes on a context kept current on their thread (gpu/context.py KEEP_CURRENT): the second
invoke on a thread makes no EGL call; a thread's own current context comes back; what the main
context did (a plain current()) is visible to the next invoke; threads beyond
MAX_KEPT_CONTEXTS, and ended ones, are handled. Every case checks the outputs."""
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

from gles_delegate import GpuDelegate, Interpreter
from gles_delegate.gpu import context as context_module
from gles_delegate.gpu import egl
from gles_delegate.tflite import ModelBuilder
from tests.gpu.test_invoke_state import BindCounter
from tests.threads import run_in_threads

SHAPE = (1, 5, 3, 6)
BIAS = np.arange(1, 7, dtype=np.float32)  # six different values: stored in the constants buffer


def bias_model():
    b = ModelBuilder()
    x, out = b.input("x", SHAPE), b.tensor("out", SHAPE)
    b.op("ADD", [x, b.const("bias", BIAS)], [out], fused_activation_function=0)
    b.output(out)
    return b.build()


class Model:
    def __init__(self, delegate):
        self.interpreter = Interpreter(model_content=bias_model(), experimental_delegates=[delegate])
        self.interpreter.allocate_tensors()
        self.partition = delegate.partitions[-1]
        self.rng = np.random.default_rng(len(delegate.partitions))

    def out(self, x):
        self.interpreter.set_tensor(self.interpreter.get_input_details()[0]["index"], x)
        self.interpreter.invoke()
        return self.interpreter.get_tensor(self.interpreter.get_output_details()[0]["index"])

    def check(self, bias=BIAS):
        x = self.rng.normal(size=SHAPE).astype(np.float32)
        np.testing.assert_array_equal(self.out(x), x + bias)


class MakeCurrentCounter:
    def __init__(self, monkeypatch):
        self.count = 0
        library = egl.library()
        real = library.eglMakeCurrent

        def counted(*args):
            self.count += 1
            return real(*args)
        monkeypatch.setattr(library, "eglMakeCurrent", counted)


@pytest.fixture
def delegate():
    with GpuDelegate() as d:
        yield d


def in_thread(work, context=None):
    """Run work() in a new thread (once `context` made the EGL context that thread will take, so
    its first invoke runs on it); re-raise what it raised."""
    if context is not None:
        context.prepare_thread_context()
    run_in_threads([work])


def test_the_second_invoke_on_a_thread_makes_no_egl_call(monkeypatch, delegate):
    model = Model(delegate)

    def work():
        model.check()  # the thread's own context: made, made current, kept
        counter = MakeCurrentCounter(monkeypatch)
        for _ in range(3):
            model.check()
        assert counter.count == 0
        context_module.KEEP_CURRENT = False  # monkeypatched below: the shared path pays two a run
        try:
            model.check()
        finally:
            context_module.KEEP_CURRENT = True
        assert counter.count == 2
    monkeypatch.setattr(context_module, "KEEP_CURRENT", True)
    in_thread(work, delegate.context)


def test_a_context_current_on_the_thread_before_comes_back(delegate):
    model = Model(delegate)
    other = egl.Context(delegate.context.egl.display, delegate.context.egl.api)  # the user's own context

    def work():
        token = other.enter()
        try:
            model.check()
            model.check()
            assert other.is_current()
        finally:
            other.exit(token)
    try:
        in_thread(work)
    finally:
        other.destroy()


def test_what_a_plain_current_changed_is_seen_by_the_next_invoke(delegate):
    model = Model(delegate)
    model.check()
    constants = model.partition.consts
    with delegate.context.current():
        original = constants.read()
        constants.write(np.zeros(len(original) // 4, np.float32).tobytes())
    model.check(bias=np.zeros_like(BIAS))
    with delegate.context.current():
        constants.write(original)
    in_thread(model.check)  # another thread's context sees it too
    model.check()


def test_threads_beyond_the_limit_share_the_main_context(monkeypatch, delegate):
    before = delegate.context.kept_contexts
    monkeypatch.setattr(context_module, "MAX_KEPT_CONTEXTS", max(before, 1))
    models = [Model(delegate) for _ in range(3)]
    start = threading.Barrier(3)

    def work(model):
        start.wait(timeout=60)
        for _ in range(10):
            model.check()
    run_in_threads([lambda m=m: work(m) for m in models])
    assert delegate.context.kept_contexts <= max(before, 1)


def test_contexts_of_ended_threads_are_destroyed(delegate):
    model = Model(delegate)
    delegate.context.prepare_thread_context()
    model.check()  # this thread's own
    for _ in range(3):
        in_thread(model.check, delegate.context)
    # Each new thread's context replaced those of ended threads (earlier tests' too); the last
    # stays until the next is made: this thread's and that one.
    assert delegate.context.kept_contexts == 2
    model.check()


def test_a_first_invoke_before_its_context_is_made_shares_the_main_context(monkeypatch, delegate):
    model = Model(delegate)
    delegate.context.prepare_thread_context()
    slow = threading.Event()
    real_take = context_module._Spare.take
    monkeypatch.setattr(context_module._Spare, "take", lambda self, wait=False: real_take(self, wait) if wait or slow.is_set() else None)

    def work():
        model.check()  # no context ready: the main one, made current and released
        before = delegate.context.kept_contexts  # (ended threads' contexts pruned by now)
        assert getattr(delegate.context._thread, "binding", None) is None
        slow.set()
        delegate.context.prepare_thread_context()
        model.check()  # now it takes its own
        assert delegate.context.kept_contexts == before + 1
    in_thread(work)


def test_kept_current_off_makes_no_context(monkeypatch, delegate):
    monkeypatch.setattr(context_module, "KEEP_CURRENT", False)
    model = Model(delegate)
    before = delegate.context.kept_contexts
    in_thread(model.check)
    model.check()
    assert delegate.context.kept_contexts == before


def test_a_context_that_cannot_be_made_leaves_the_thread_on_the_main_one(monkeypatch, delegate, caplog):
    model = Model(delegate)
    context = delegate.context
    in_thread(model.check, context)  # a thread takes the context made ahead: none is left
    real_init = egl.Context.__init__

    def refuse_shared(self, display, api, use_pbuffer=None, share=None):
        if share is not None:
            raise RuntimeError("the driver will not share")
        real_init(self, display, api, use_pbuffer, share)
    monkeypatch.setattr(egl.Context, "__init__", refuse_shared)

    def work():
        before = context.kept_contexts
        with caplog.at_level("INFO", logger="gles_delegate"):
            model.check()  # starts making this thread's context, on the main one meanwhile
            context.prepare_thread_context()
            model.check()  # takes what stopped it: stays on the main one
            model.check()
        assert context.kept_contexts <= before and "will not share" in caplog.text
    in_thread(work)


def test_a_thread_that_ends_releases_its_context(delegate):
    """EGL keeps a context current on a thread that ended (and never frees it, nor the buffers
    it binds); the thread's end releases it, so another thread may make it current."""
    model = Model(delegate)
    held = {}

    def work():
        model.check()
        held["binding"] = delegate.context._thread.binding
        assert held["binding"].egl.is_current()
    in_thread(work, delegate.context)
    token = held["binding"].egl.enter()  # EGL_BAD_ACCESS (a GpuError) while still current on the ended thread
    held["binding"].egl.exit(token)


def test_the_main_context_binds_again_after_an_ended_threads_context_ran(monkeypatch, delegate):
    """A thread's context ran the partition last, then ended: the main context, back in use
    without a switch, must bind the buffers again (GL re-attach rule), not trust what it bound
    before."""
    model = Model(delegate)
    context = delegate.context
    monkeypatch.setattr(context_module, "KEEP_CURRENT", False)
    model.check()  # on the main context: it binds the partition's buffers
    monkeypatch.setattr(context_module, "KEEP_CURRENT", True)
    in_thread(model.check, context)  # on that thread's own context, which it takes
    binds = BindCounter(monkeypatch, context)

    def work():  # its first invoke finds no context ready: the main one, after pruning the ended one's
        model.check()
    in_thread(work)
    assert binds.take() >= 3


def test_a_process_that_ends_right_after_its_first_invoke_exits_cleanly():
    """The first invoke starts making the thread's context on another thread; the process may end
    while that runs, and must still exit with status 0."""
    script = textwrap.dedent("""
        from gles_delegate import GpuDelegate, Interpreter
        from tests.gpu.test_kept_context import bias_model
        delegate = GpuDelegate()
        interpreter = Interpreter(model_content=bias_model(), experimental_delegates=[delegate])
        interpreter.allocate_tensors()
        interpreter.invoke()
        print("invoked")
    """)
    for _ in range(3):
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                              cwd=Path(__file__).resolve().parents[2])
        assert done.returncode == 0 and done.stdout.strip() == "invoked", done.stderr
