"""runtime.fill_zeros: a buffer's prefix zeroed on the GPU (one seed upload, then doubling
copies), checked on buffers full of another value, at sizes around the seed and its doublings."""
import numpy as np
import pytest

from gles_delegate.gpu import context as gl
from gles_delegate.gpu import runtime
from gles_delegate.gpu.gl import GL_COPY_READ_BUFFER, GL_COPY_WRITE_BUFFER

SEED = runtime.ZERO_SEED_BYTES


@pytest.mark.parametrize("nbytes", [0, 4, 1000, SEED - 4, SEED, SEED + 4, 2 * SEED, 3 * SEED + 12, 37 * SEED + 20])
def test_prefix_is_zero_and_the_rest_untouched(nbytes):
    context = gl.acquire_shared()
    try:
        with context.current() as ctx:
            total = nbytes + 64
            buffer = ctx.buffer(np.full(total, 0xA5, np.uint8))
            try:
                runtime.fill_zeros(context.gl, buffer.glo, nbytes)
                got = np.frombuffer(buffer.read(), np.uint8)
                # GL_COPY_*_BUFFER doubles as its binding's query enum
                bound = [context.gl.integer(GL_COPY_READ_BUFFER), context.gl.integer(GL_COPY_WRITE_BUFFER)]
            finally:
                buffer.release()
    finally:
        gl.release_shared(context)
    assert bound == [0, 0], "fill_zeros left a buffer bound to a copy target"
    assert not got[:nbytes].any(), f"non-zero bytes at {np.flatnonzero(got[:nbytes])[:5]}"
    assert (got[nbytes:] == 0xA5).all(), "bytes past the prefix changed"
