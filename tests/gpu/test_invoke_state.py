"""The GL state an invoke leaves for the next one (gpu/runtime.py, GlContext.state_owner and
left_bound): a partition skips binding its storage buffers when nothing else ran on the context
since its last invoke, and binds them again after another partition, anything in a plain
GlContext.current() (moderngl, the tools), a failed run, or an invoke on another thread; a plain
current() never finds a program or copy buffer of ours bound. Every case checks the outputs, so
a binding wrongly skipped shows as wrong numbers."""
import ctypes
import threading

import numpy as np
import pytest

from gles_delegate import GpuDelegate, GpuError, Interpreter
from gles_delegate.gpu import gl as G
from gles_delegate.gpu import runtime
from gles_delegate.tflite import ModelBuilder
from tests.threads import run_in_threads

GL_CURRENT_PROGRAM, GL_SHADER_STORAGE_BUFFER_BINDING = 0x8B8D, 0x90D3
SMALL, LARGE = (1, 5, 3, 6), (1, 48, 40, 8)  # I/O direct in the mapped buffer / through device memory


def add_relu_model(shape):
    b = ModelBuilder()
    x, y = b.input("x", shape), b.input("y", shape)
    s, out = b.tensor("s", shape), b.tensor("out", shape)
    b.op("ADD", [x, y], [s], fused_activation_function=0)
    b.op("RELU", [s], [out])
    b.output(out)
    return b.build()


class Model:
    """An interpreter of add_relu_model(shape) on `delegate`, checked against numpy."""

    def __init__(self, delegate, shape, seed):
        before = list(delegate.partitions)
        self.interpreter = Interpreter(model_content=add_relu_model(shape), experimental_delegates=[delegate])
        self.interpreter.allocate_tensors()
        (self.partition,) = [p for p in delegate.partitions if all(p is not q for q in before)]
        self.shape, self.rng = shape, np.random.default_rng(seed)

    def check(self):
        """Invoke on fresh inputs; assert the output is relu(x + y) exactly."""
        x, y = (self.rng.normal(size=self.shape).astype(np.float32) for _ in range(2))
        details = self.interpreter.get_input_details()
        self.interpreter.set_tensor(details[0]["index"], x)
        self.interpreter.set_tensor(details[1]["index"], y)
        self.interpreter.invoke()
        out = self.interpreter.get_tensor(self.interpreter.get_output_details()[0]["index"])
        np.testing.assert_array_equal(out, np.maximum(x + y, 0))


class BindCounter:
    """Counts glBindBufferBase calls of the runtime (the storage-buffer bindings)."""

    def __init__(self, monkeypatch, context):
        self.count = 0
        real = context.gl.bind_buffer_base_fast

        def counted(*args):
            self.count += 1
            return real(*args)
        monkeypatch.setattr(context.gl, "bind_buffer_base_fast", counted)

    def take(self):
        count, self.count = self.count, 0
        return count


@pytest.fixture
def delegate():
    with GpuDelegate() as d:
        d.context.prepare_thread_context()  # this thread's first invoke runs on its own context
        yield d


def test_bindings_skipped_only_while_nothing_else_ran(monkeypatch, delegate):
    small, large = Model(delegate, SMALL, 0), Model(delegate, LARGE, 1)
    assert small.partition is not large.partition
    binds = BindCounter(monkeypatch, delegate.context)
    small.check()
    assert binds.take() == 3  # first invoke after allocate (plain current()s ran in between)
    small.check()
    small.check()
    assert binds.take() == 0  # nothing else ran: the bindings are still the partition's
    large.check()  # another partition, another arena: it binds, and `small` must bind again
    assert binds.take() == 3
    small.check()
    assert binds.take() == 3
    for _ in range(3):  # alternating: every invoke binds, every output right
        large.check()
        small.check()
    assert binds.take() == 18


def test_plain_current_forgets_the_state_and_finds_nothing_of_ours_bound(monkeypatch, delegate):
    small, large = Model(delegate, SMALL, 2), Model(delegate, LARGE, 3)
    context, gl = delegate.context, delegate.context.gl
    for model in (small, large):  # direct I/O, and device I/O (which leaves copy buffers bound)
        model.check()
        assert context.state_owner is model.partition and context.left_bound
        with context.current() as ctx:
            assert context.state_owner is None and not context.left_bound
            for enum in (GL_CURRENT_PROGRAM, G.GL_COPY_READ_BUFFER, G.GL_COPY_WRITE_BUFFER):
                assert gl.integer(enum) == 0, hex(enum)
            # What moderngl or a tool may do here: its own buffers at the runtime's bindings.
            junk = ctx.buffer(np.full(1 << 16, 7.0, np.float32).tobytes())
            for binding in (runtime.ARENA_BINDING, runtime.CONSTS_BINDING, runtime.IO_BINDING):
                junk.bind_to_storage_buffer(binding)
        binds = BindCounter(monkeypatch, context)
        model.check()  # must bind its own buffers again
        assert binds.take() == 3
        with context.current(keep_state=True):  # the context the invoke ran on (this thread's own)
            bound = [gl.integer_indexed(GL_SHADER_STORAGE_BUFFER_BINDING, b) for b in range(3)]
        with context.current():
            junk.release()
        assert bound == [model.partition.arena.glo, model.partition.consts.glo, model.partition.io.handle]
        monkeypatch.undo()


def test_nested_plain_current_inside_a_run_forgets_the_state_but_keeps_the_program(delegate):
    context = delegate.context
    small = Model(delegate, SMALL, 4)
    small.check()
    with context.current(keep_state=True):
        assert context.state_owner is small.partition
        with context.current():  # what code inside a run may enter: it may rebind anything
            assert context.state_owner is None
            assert context.left_bound  # unbinding here would pull the program from under the run
    small.check()
    assert context.state_owner is small.partition


def test_a_failed_run_binds_again_next_time(monkeypatch, delegate):
    small = Model(delegate, SMALL, 5)
    small.check()
    gl = delegate.context.gl
    real = gl.client_wait_sync_fast
    monkeypatch.setattr(gl, "client_wait_sync_fast", lambda *args: G.GL_WAIT_FAILED)
    with pytest.raises(GpuError, match="did not finish"):
        small.check()
    assert delegate.context.state_owner is None
    monkeypatch.setattr(gl, "client_wait_sync_fast", real)
    binds = BindCounter(monkeypatch, delegate.context)
    small.check()
    assert binds.take() == 3


def test_invokes_from_several_threads_share_the_context(delegate):
    models = [Model(delegate, SMALL, 6), Model(delegate, LARGE, 7), Model(delegate, SMALL, 8)]
    locks = [threading.Lock() for _ in models]  # one interpreter is not used by two threads at once

    def work(k):
        for j in range(12):
            m = (k + j) % len(models)
            with locks[m]:
                models[m].check()
    run_in_threads([lambda k=k: work(k) for k in range(4)])
    for model in models:  # and on this thread afterwards
        model.check()


def test_segments_issue_each_program_once_per_run_and_split_at_the_flush():
    steps = [(5, 0, 64, (1, 2, 3), False), (5, 64, 64, (4, 5, 6), True), (7, 128, 64, (1, 1, 1), True),
             (5, 192, 64, (2, 2, 2), False)]
    issued = [(False, 0, 64, 5, 1, 2, 3), (True, 64, 64, 0, 4, 5, 6), (True, 128, 64, 7, 1, 1, 1),
              (False, 192, 64, 5, 2, 2, 2)]
    assert runtime._segments(steps, frozenset()) == [(issued, False)]
    assert runtime._segments(steps, {1}) == [(issued[:2], True), (issued[2:], False)]
    assert runtime._segments(steps, {0, 2}) == [(issued[:1], True), (issued[1:3], True), (issued[3:], False)]


def test_flush_points(monkeypatch):
    monkeypatch.setattr(runtime, "FLUSH_FIRST", 4)
    assert runtime.flush_points(60) == {3}
    assert runtime.flush_points(4) == set()  # never after the last step: the fence flushes
    monkeypatch.setattr(runtime, "FLUSH_EVERY", 8)
    assert runtime.flush_points(30) == {3, 11, 19, 27}
    assert runtime.flush_points(28) == {3, 11, 19}
    monkeypatch.setattr(runtime, "FLUSH_FIRST", 0)
    assert runtime.flush_points(30) == set()


def test_sync_from_the_untyped_fence_is_a_pointer(delegate):
    with delegate.context.current():
        gl = delegate.context.gl
        sync = gl.fence_sync_fast(G.GL_SYNC_GPU_COMMANDS_COMPLETE, 0)
        assert isinstance(sync, G.Sync) and sync.value
        status = gl.client_wait_sync_fast(sync, G.GL_SYNC_FLUSH_COMMANDS_BIT, ctypes.c_uint64(10**9))
        assert status in (G.GL_ALREADY_SIGNALED, G.GL_CONDITION_SATISFIED)
        gl.delete_sync_fast(sync)
