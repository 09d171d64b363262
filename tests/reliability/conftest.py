"""Helpers of the reliability tests: small models, invoking and comparing, live GL object counts,
host RSS."""
import ctypes
import os

import numpy as np
import pytest

from gles_delegate import GpuError
from gles_delegate.gpu import context as gl
from gles_delegate.tflite import ModelBuilder
from tests.oplib import assert_close

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes():
    """Resident set size of this process, from /proc/self/statm."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def live_gl_objects(context, names=1 << 16):
    """{'buffers', 'programs', 'shaders'}: how many of the first `names` GL names of each kind
    are live in `context` (Mesa hands out the lowest free name, so a leak shows as growth)."""
    counts = {}
    with context.current():
        for kind, function in (("buffers", "glIsBuffer"), ("programs", "glIsProgram"), ("shaders", "glIsShader")):
            is_live = ctypes.CFUNCTYPE(ctypes.c_ubyte, ctypes.c_uint)(context.egl.proc_address(function))
            counts[kind] = sum(1 for name in range(1, names) if is_live(name))
    return counts


def partition_buffer_names(delegate):
    """The GL names of the buffers of a delegate's live partitions."""
    return [name for p in delegate.partitions if p.steps
            for name in (p.arena.glo, p.consts.glo, p.io.handle, p.params.glo)]


def live_buffer_names(context, names):
    with context.current():
        is_buffer = ctypes.CFUNCTYPE(ctypes.c_ubyte, ctypes.c_uint)(context.egl.proc_address("glIsBuffer"))
        return [name for name in names if is_buffer(name)]


def pending_gl_error(context):
    with context.current() as ctx:
        return ctx.error


def shared_refcount():
    """Reference count of every shared GL context, {(gl_api, device_index): count}."""
    with gl._shared_lock:
        return {key: entry[1] for key, entry in gl._shared.items()}


@pytest.fixture(scope="session")
def gpu_available():
    """A GL context can be made here. GPU tests never skip for want of one: the README's setup
    installs EGL and Mesa, so a missing context is a failure that says why."""
    try:
        context = gl.acquire_shared()
    except GpuError as exc:
        pytest.fail(f"no GL context could be made (install EGL and Mesa as the README says): {exc}")
    gl.release_shared(context)


def invoke(interpreter, x):
    """Set the one input to x, invoke, return the outputs."""
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    interpreter.invoke()
    return [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]


def assert_same(got, want):
    for g, w in zip(got, want):
        assert_close(g, w)


def conv_model(shape=(1, 8, 8, 3), seed=0):
    """x [N, H, W, 3] -> CONV_2D 3x3 (4 channels, RELU) -> DEPTHWISE 3x3 -> ADD x-branch (1x1
    conv) -> MEAN over H, W (keep dims): every node runs on the GPU, any N, H, W works."""
    rng = np.random.default_rng(seed)
    b = ModelBuilder()
    x = b.input("x", shape, shape_signature=(-1, -1, -1, shape[3]))
    w = b.const("w", rng.uniform(-1, 1, (4, 3, 3, shape[3])).astype(np.float32))
    bias = b.const("bias", rng.uniform(-1, 1, 4).astype(np.float32))
    c = b.tensor("conv", shape[:3] + (4,))
    b.op("CONV_2D", [x, w, bias], [c], padding=0, stride_w=1, stride_h=1, fused_activation_function=1)
    dw = b.const("dw", rng.uniform(-1, 1, (1, 3, 3, 4)).astype(np.float32))
    d = b.tensor("dw_out", shape[:3] + (4,))
    b.op("DEPTHWISE_CONV_2D", [c, dw, -1], [d], padding=0, stride_w=1, stride_h=1, depth_multiplier=1)
    w1 = b.const("w1", rng.uniform(-1, 1, (4, 1, 1, shape[3])).astype(np.float32))
    s = b.tensor("skip", shape[:3] + (4,))
    b.op("CONV_2D", [x, w1, -1], [s], padding=0, stride_w=1, stride_h=1)
    a = b.tensor("sum", shape[:3] + (4,))
    b.op("ADD", [d, s], [a], fused_activation_function=0)
    axes = b.const("axes", np.array([1, 2], np.int32))
    m = b.tensor("mean", (shape[0], 1, 1, 4))
    b.op("MEAN", [a, axes], [m], keep_dims=True)
    b.output(a)
    b.output(m)
    return b.build()
