"""Uploading megabytes (a partition's constants) through a small persistently mapped staging ring.

glBufferData with the data makes the driver stage it in fresh memory of its own, whose first
touch in a fresh process is most of the cost; a ring of two 1 MiB slots that stay mapped (a
memcpy into a slot, then glCopyBufferSubData into the destination, a fence per slot before it is
written again) is touched once. On the H200 the constants of ssd_mnv2_300 (25.9 MB) took 6.0-7.2
ms of a warm start this way against 21.5 ms before (`gles-bench-init --phases`,
docs/performance.md, round 13). The ring belongs to the GlContext (GlContext.staging_ring) and
lives as long as it; contexts without glBufferStorage upload with glBufferData as before.
"""
import ctypes

import numpy as np

from . import gl as G

SLOT_BYTES = 1 << 20
SLOTS = 2
# Uploads smaller than this go through glBufferData: one call, no ring to make for a small model.
STAGED_MIN_BYTES = SLOT_BYTES
_FLAGS = G.GL_MAP_WRITE_BIT | G.GL_MAP_PERSISTENT_BIT | G.GL_MAP_COHERENT_BIT


class StagingRing:
    """SLOTS slots of SLOT_BYTES in one persistently, coherently mapped buffer. Use it inside
    the owning context's current()."""

    def __init__(self, gl, handle, address):
        self.gl, self.handle, self.address = gl, handle, address
        self.fences = [None] * SLOTS  # the copy out of each slot, which its next memcpy must wait for

    @classmethod
    def create(cls, gl):
        """A ring on the current context, or None when the driver refuses the buffer or its
        mapping (no GL error is left pending then)."""
        handle, address, _ = G.mapped_buffer(gl, SLOTS * SLOT_BYTES, _FLAGS)
        return cls(gl, handle, address) if address else None

    def upload(self, target, data):
        """Copy the bytes of `data` (a C-contiguous numpy array or a bytes-like object) to the
        start of buffer `target` (a GL buffer name at least that large). The copies are queued
        and flushed, not waited for: commands after them on any context of the share group see
        the data."""
        gl = self.gl
        source = np.frombuffer(data, np.uint8)
        gl.bind_buffer(G.GL_COPY_READ_BUFFER, self.handle)
        gl.bind_buffer(G.GL_COPY_WRITE_BUFFER, target)
        for chunk, offset in enumerate(range(0, source.nbytes, SLOT_BYTES)):
            slot = chunk % SLOTS
            self._wait(slot)
            count = min(SLOT_BYTES, source.nbytes - offset)
            ctypes.memmove(self.address + slot * SLOT_BYTES, source.ctypes.data + offset, count)
            gl.copy_buffer_sub_data(G.GL_COPY_READ_BUFFER, G.GL_COPY_WRITE_BUFFER, slot * SLOT_BYTES, offset, count)
            self.fences[slot] = gl.fence_sync_fast(G.GL_SYNC_GPU_COMMANDS_COMPLETE, 0)
        gl.bind_buffer(G.GL_COPY_READ_BUFFER, 0)
        gl.bind_buffer(G.GL_COPY_WRITE_BUFFER, 0)
        gl.flush()  # another context's wait on these fences cannot flush this one's commands

    def _wait(self, slot):
        fence, self.fences[slot] = self.fences[slot], None
        if fence is not None:
            try:
                G.wait_sync(self.gl, fence)
            finally:
                self.gl.delete_sync_fast(fence)

    def release(self):
        """Free the fences and the buffer (its mapping goes with it). Nothing is waited for: GL
        keeps a deleted buffer until the copies queued from it are done."""
        fences, self.fences = self.fences, [None] * SLOTS
        for fence in fences:
            if fence is not None:
                self.gl.delete_sync_fast(fence)
        self.gl.delete_buffers(1, ctypes.byref(ctypes.c_uint(self.handle)))
