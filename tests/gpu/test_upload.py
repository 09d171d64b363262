"""upload.StagingRing: data of any size reaches the buffer whole, through every slot and around
the ring more than once; a partition's constants are the same through the ring and through
glBufferData; a context whose driver refuses the ring uploads without it."""
import numpy as np
import pytest

from gles_delegate.gpu import runtime, upload


def _uploaded(context, data):
    with context.current() as ctx:
        ring = context.staging_ring()
        assert ring is not None, "every context the tests run on has glBufferStorage"
        buffer = ctx.buffer(reserve=max(len(data), 4))
        ring.upload(buffer.glo, data)
        back = buffer.read(len(data))
        buffer.release()
    return back


@pytest.mark.parametrize("size", [1, 4099, upload.SLOT_BYTES, upload.SLOT_BYTES + 1,
                                  upload.SLOTS * upload.SLOT_BYTES * 2 + 12345])
def test_every_byte_arrives(shared_context, size):
    data = np.random.default_rng(size).integers(0, 256, size, np.uint8).tobytes()
    assert _uploaded(shared_context, data) == data


def test_a_numpy_array_and_an_upload_right_after_another(shared_context):
    """Two uploads back to back reuse the slots: the second must not overwrite a slot whose copy
    the GPU has not made yet."""
    first = np.arange(3 * upload.SLOT_BYTES // 4, dtype=np.float32)
    second = -first[::-1].copy()
    with shared_context.current() as ctx:
        ring = shared_context.staging_ring()
        a, b = ctx.buffer(reserve=first.nbytes), ctx.buffer(reserve=second.nbytes)
        ring.upload(a.glo, first)
        ring.upload(b.glo, second)
        got_a, got_b = np.frombuffer(a.read(), np.float32), np.frombuffer(b.read(), np.float32)
        a.release(), b.release()
    np.testing.assert_array_equal(got_a, first)
    np.testing.assert_array_equal(got_b, second)


def test_create_buffer_without_a_ring(shared_context, monkeypatch):
    """Where the driver refused the ring, large data still arrives (glBufferData)."""
    data = np.random.default_rng(1).standard_normal(upload.STAGED_MIN_BYTES // 4 + 7).astype(np.float32)
    monkeypatch.setattr(shared_context, "staging_ring", lambda: None)
    with shared_context.current() as ctx:
        buffer = runtime.create_buffer(shared_context, ctx, None, "constants", data.nbytes, data)
        back = np.frombuffer(buffer.read(), np.float32)
        buffer.release()
    np.testing.assert_array_equal(back, data)


def test_create_buffer_through_the_ring(shared_context, monkeypatch):
    data = np.random.default_rng(2).standard_normal(upload.STAGED_MIN_BYTES // 4 + 7).astype(np.float32)
    used = []
    ring = shared_context.staging_ring
    monkeypatch.setattr(shared_context, "staging_ring", lambda: used.append(1) or ring())
    with shared_context.current() as ctx:
        buffer = runtime.create_buffer(shared_context, ctx, None, "constants", data.nbytes, data)
        back = np.frombuffer(buffer.read(), np.float32)
        buffer.release()
    assert used
    np.testing.assert_array_equal(back, data)


def test_a_context_releases_its_ring():
    from gles_delegate.gpu.context import GlContext
    context = GlContext()
    data = bytes(range(256)) * 9000
    assert _uploaded(context, data) == data
    context.release()
    assert context._staging is None


def test_a_refused_mapping_gives_no_ring_and_no_pending_error(monkeypatch):
    """StagingRing.create when the driver maps nothing: None, the buffer freed, no GL error left
    (the conftest fails a test that leaves one)."""
    from gles_delegate.gpu.context import GlContext
    context = GlContext()
    try:
        with context.current():
            monkeypatch.setattr(context.gl, "map_buffer_range", lambda *args: 0)
            assert upload.StagingRing.create(context.gl) is None
            context._staging = None
            assert context.staging_ring() is None
            assert context._staging is False  # not tried again
            assert context.gl.get_error() == 0
    finally:
        context.release()


def test_releasing_the_ring_with_copies_in_flight():
    """release() right after an upload waits for nothing and leaves the uploaded buffer whole
    (GL keeps the deleted staging buffer until its copies are done)."""
    from gles_delegate.gpu.context import GlContext
    context = GlContext()
    data = np.random.default_rng(3).integers(0, 256, 3 * upload.SLOT_BYTES + 5, np.uint8).tobytes()
    try:
        with context.current() as ctx:
            ring = context.staging_ring()
            buffer = ctx.buffer(reserve=len(data))
            ring.upload(buffer.glo, data)
            ring.release()
            assert ring.fences == [None] * upload.SLOTS
            assert buffer.read() == data
            context._staging = None  # released above
            buffer.release()
    finally:
        context.release()


def test_a_failed_upload_frees_its_buffer(shared_context, monkeypatch):
    """create_buffer whose ring upload fails (a fence that never signals: GpuError) raises and
    leaves no buffer behind."""
    from gles_delegate.errors import GpuError
    data = np.zeros(upload.STAGED_MIN_BYTES // 4, np.float32)

    class FailingRing:
        def upload(self, target, source):
            raise GpuError("the GPU did not finish")
    monkeypatch.setattr(shared_context, "staging_ring", lambda: FailingRing())
    with shared_context.current() as ctx:
        made = []
        make = ctx.buffer
        monkeypatch.setattr(ctx, "buffer", lambda *a, **k: made.append(make(*a, **k)) or made[-1])
        with pytest.raises(GpuError):
            runtime.create_buffer(shared_context, ctx, None, "constants", data.nbytes, data)
        assert len(made) == 1 and type(made[0].mglo).__name__ == "InvalidObject"  # released
