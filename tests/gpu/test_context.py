"""The EGL context: both APIs, display selection, threads, options and their errors; the
delegate's documentation of its options and summary()."""
import dataclasses
import inspect
import re
import threading
import weakref

import numpy as np
import pytest

from gles_delegate import CompatibilityList, GpuDelegate, GpuDelegateOptions, GpuError, Interpreter
from gles_delegate.delegate import (OBJECT_TYPES, PRECISIONS, PREFERENCES, PRIORITIES, load_delegate,
                                    parse_plugin_options)
from gles_delegate.gpu import egl
from gles_delegate.gpu.context import (COMPILER_THREADS, GL_API_ENV, GL_APIS, GlContext, acquire_shared, default_gl_api,
                                       release_shared)
from gles_delegate.gpu.memory import STRATEGIES
from tests.oplib import In, single_op_model
from tests.refcount import collector_disabled

APIS = ("gles", "gl")

# Doubles every element and adds Params.bias: touches SSBOs, a UBO range, dispatch and reads.
SHADER = """#version 310 es
precision highp float;
layout(local_size_x = 8) in;
layout(std430, binding = 0) buffer Data { float data[]; };
layout(std140, binding = 1) uniform Params { float bias; int count; };
void main() {
  uint i = gl_GlobalInvocationID.x;
  if (int(i) < count) data[i] = 2.0 * data[i] + bias;
}
"""


def _params(bias, count):
    block = np.zeros(4, np.float32)
    block[0] = bias
    block[1:2].view(np.int32)[0] = count
    return block.tobytes()


@pytest.fixture(scope="module", params=APIS)
def context(request):
    made = GlContext(gl_api=request.param)
    yield made
    made.release()


def run_shader(context, values, bias=1.0):
    """values -> 2 * values + bias on the GPU, through every moderngl buffer call runtime.py uses."""
    values = np.asarray(values, np.float32)
    with context.current() as ctx:
        data = ctx.buffer(reserve=values.nbytes + 64)
        data.clear()
        data.write(values.tobytes(), 64)
        params = ctx.buffer(reserve=512)
        params.write(_params(bias, len(values)), 256)  # at an offset: bind_to_uniform_block's range
        program = context.program(SHADER)
        data.bind_to_storage_buffer(0, offset=64, size=values.nbytes)
        params.bind_to_uniform_block(1, offset=256, size=16)
        program.run((len(values) + 7) // 8)
        ctx.memory_barrier()
        out = np.empty_like(values)
        data.read_into(out, values.nbytes, 64)
        head = np.frombuffer(data.read(64, 0), np.float32)
        context.check_error("run_shader")
        for buffer in (data, params):
            buffer.release()
    assert not head.any(), "clear() or the offset binding wrote outside the bound range"
    return out


# -- both APIs --------------------------------------------------------------------------------
def test_context_api_and_version(context):
    assert context.gl_api in APIS
    if context.gl_api == "gles":
        assert context.version.startswith("OpenGL ES 3."), context.version
        assert "GLSL ES" in context.glsl_version
    else:
        assert not context.version.startswith("OpenGL ES"), context.version
    assert egl.version_ok(context.gl_api, context.version)
    assert context.renderer and context.renderer != "?"
    described = context.describe()
    assert described["gl_api"] == context.gl_api
    assert described["egl_platform"] in egl.PLATFORMS
    assert described["renderer"] == context.renderer


def test_limits_are_real(context):
    # OpenGL ES 3.1 minimums (section 20 of the spec): queried, not defaults.
    limits = context.limits
    assert limits["max_workgroup_invocations"] >= 128
    assert min(limits["max_workgroup_size"]) >= 64
    assert min(limits["max_workgroup_count"]) >= 65535
    assert limits["max_compute_ssbos"] >= 4
    assert limits["max_ssbo_bytes"] >= 1 << 27
    assert limits["max_ubo_bytes"] >= 16384
    assert limits["ubo_offset_alignment"] >= 1
    with context.current() as ctx:
        assert ctx.error == "GL_NO_ERROR"


def test_compute_shader_runs(context):
    values = np.arange(37, dtype=np.float32) - 5
    np.testing.assert_array_equal(run_shader(context, values, bias=0.5), 2 * values + 0.5)


def test_program_cache(context):
    before = context.program_count
    with context.current():
        assert context.program(SHADER) is context.program(SHADER)
    assert context.program_count <= before + 1


def test_compile_error_names_renderer(context):
    with context.current():
        with pytest.raises(GpuError, match="failed to compile"):
            context.program("#version 310 es\nlayout(local_size_x = 1) in;\nvoid main() { nope; }\n")
        context.clear_errors()


def test_started_programs_finish_at_first_use():
    """start_programs compiles without waiting (all at once where the driver compiles in
    parallel); program() finishes each: a good source runs, a bad one raises its driver log
    there and is not kept, and release() frees what was never finished."""
    bad = "#version 310 es\nlayout(local_size_x = 1) in;\nvoid main() { nope; }\n"
    tripled = SHADER.replace("2.0 * data[i]", "3.0 * data[i]")
    made = GlContext()
    try:
        parallel = {"GL_KHR_parallel_shader_compile", "GL_ARB_parallel_shader_compile"} & made.extensions
        assert made.compiler_threads >= 1 and (made.compiler_threads > 1) == (bool(parallel) and COMPILER_THREADS > 1)
        with made.current():
            made.start_programs([SHADER, bad, tripled, SHADER])
            assert made.program_count == 3
            with pytest.raises(GpuError, match="failed to compile"):
                made.program(bad)
            made.clear_errors()
            assert made.program_count == 2
            assert made.program(tripled) is made.program(tripled)
        values = np.arange(21, dtype=np.float32)
        np.testing.assert_array_equal(run_shader(made, values, bias=0.5), 2 * values + 0.5)
    finally:
        made.release()
    assert made.program_count == 0


def test_gles_is_an_es_context():
    made = GlContext(gl_api="gles")
    try:
        assert made.gl_api == "gles"
        assert made.version.startswith("OpenGL ES 3.")
        with made.current() as ctx:
            assert ctx.version_code >= 310
    finally:
        made.release()


def test_auto_prefers_gles():
    made = GlContext(gl_api="auto")
    try:
        assert made.requested_gl_api == "auto"
        assert made.gl_api == "gles"  # Mesa, NVIDIA and the boards all have ES 3.1+
    finally:
        made.release()


# -- EGL platforms and surfaces ---------------------------------------------------------------
@pytest.mark.parametrize("platform", egl.PLATFORMS)
@pytest.mark.parametrize("api", APIS)
def test_each_platform(platform, api):
    try:
        made = GlContext(gl_api=api, platforms=(platform,))
    except GpuError as exc:
        pytest.skip(f"{platform} display not usable here: {exc}")
    try:
        assert made.egl_platform == platform
        assert (made.device_index is not None) == (platform == "device")
        np.testing.assert_array_equal(run_shader(made, [1, 2, 3]), [3, 5, 7])
    finally:
        made.release()


def test_device_platform_is_first_choice():
    if egl.enumerate_devices() is None:
        pytest.skip("this EGL cannot enumerate devices")
    made = GlContext()
    try:
        assert made.egl_platform == "device"
    finally:
        made.release()


@pytest.mark.parametrize("api", APIS)
def test_pbuffer_fallback(api):
    made = GlContext(gl_api=api, use_pbuffer=True)
    try:
        assert made.egl.surface is not None
        np.testing.assert_array_equal(run_shader(made, [0, 1]), [1, 3])
    finally:
        made.release()


def test_release_is_final_and_idempotent():
    made = GlContext()
    made.release()
    made.release()
    with pytest.raises(GpuError, match="released"):
        with made.current():
            pass


def test_a_dropped_context_goes_by_reference_counting():
    """current()'s context managers, which the context holds, refer to it weakly: a released
    context that is dropped goes at once, not at the cyclic collector's next full collection
    (a strong reference made a cycle of them); a manager kept beyond it says it was released."""
    made = GlContext()
    made.release()
    manager, gone = made.current(), weakref.ref(made)
    with collector_disabled():
        del made
        assert gone() is None
    with pytest.raises(GpuError, match="released"):
        with manager:
            pass


# -- threads ----------------------------------------------------------------------------------
def test_usable_from_another_thread(context):
    result = {}

    def work():
        try:
            result["out"] = run_shader(context, [1, 2, 3, 4])
        except BaseException as exc:  # reported below, not swallowed by the thread
            result["error"] = exc

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert "error" not in result, result.get("error")
    np.testing.assert_array_equal(result["out"], [3, 5, 7, 9])
    np.testing.assert_array_equal(run_shader(context, [1]), [3])  # and again from this thread


def counters(context, n):
    """A buffer of n zero floats and a program whose one workgroup adds 1 to each."""
    with context.current() as ctx:
        data = ctx.buffer(np.zeros(n, np.float32).tobytes())
        add = context.program(f"""#version 310 es
layout(local_size_x = {n}) in;
layout(std430, binding = 0) buffer Data {{ float data[]; }};
void main() {{ data[gl_GlobalInvocationID.x] += 1.0; }}
""")
    return data, add


def test_two_threads_alternately(context):
    """Two threads take turns on one context, each turn reading what the other wrote."""
    data, add = counters(context, 8)
    turns = [threading.Event(), threading.Event()]
    seen, errors = [], []

    def player(me, rounds=5):
        try:
            for _ in range(rounds):
                assert turns[me].wait(10), "the other thread never handed over"
                turns[me].clear()
                with context.current() as ctx:
                    seen.append(float(np.frombuffer(data.read(4), np.float32)[0]))
                    data.bind_to_storage_buffer(0)
                    add.run(1)
                    ctx.memory_barrier()
                    context.check_error(f"turn of thread {me}")
                turns[1 - me].set()
        except BaseException as exc:
            errors.append(exc)
            turns[1 - me].set()

    threads = [threading.Thread(target=player, args=(k,)) for k in (0, 1)]
    for thread in threads:
        thread.start()
    turns[0].set()
    for thread in threads:
        thread.join(30)
    assert not errors, errors
    assert seen == [float(k) for k in range(10)]
    with context.current():
        np.testing.assert_array_equal(np.frombuffer(data.read(), np.float32), np.full(8, 10))
        data.release()


def test_concurrent_threads_serialize(context):
    data, add = counters(context, 64)
    errors = []

    def work():
        try:
            for _ in range(25):
                with context.current() as ctx:
                    data.bind_to_storage_buffer(0)
                    add.run(1)
                    ctx.memory_barrier()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    with context.current():
        np.testing.assert_array_equal(np.frombuffer(data.read(), np.float32), np.full(64, 100))
        data.release()


def test_nested_contexts_restore_the_outer_one():
    outer, inner = GlContext(gl_api="gles"), GlContext(gl_api="gl")
    try:
        with outer.current():
            assert outer.egl.is_current()
            with inner.current():
                assert inner.egl.is_current()
                np.testing.assert_array_equal(run_shader(inner, [1]), [3])
            assert outer.egl.is_current()
            np.testing.assert_array_equal(run_shader(outer, [2]), [5])
        assert not outer.egl.is_current() and not inner.egl.is_current()
    finally:
        inner.release()
        outer.release()


# -- options and errors -----------------------------------------------------------------------
def test_bad_gl_api():
    with pytest.raises(ValueError, match="gl_api"):
        GpuDelegateOptions(gl_api="vulkan")
    with pytest.raises(ValueError, match="gl_api"):
        GlContext(gl_api="opengl")
    with pytest.raises(ValueError, match="gl_api"):
        parse_plugin_options({"gl_api": "metal"})


@pytest.mark.parametrize("bad", [-1, "0", 1.0, True])
def test_bad_device_index_type(bad):
    with pytest.raises(ValueError, match="device_index"):
        GpuDelegateOptions(device_index=bad)
    with pytest.raises(ValueError, match="device_index"):
        GlContext(device_index=bad)


def test_missing_device_names_what_was_found():
    devices = egl.enumerate_devices()
    index = len(devices) if devices is not None else 3
    with pytest.raises(GpuError, match=f"device_index {index} requested") as raised:
        GlContext(device_index=index)
    message = str(raised.value)
    if devices is not None:
        assert f"{len(devices)} EGL device" in message
        renderers = [entry["renderer"] for entry in egl.probe() if entry["platform"] == "device"]
        assert all(renderer in message for renderer in renderers if renderer)


def test_existing_device_index():
    if not egl.enumerate_devices():
        pytest.skip("this EGL cannot enumerate devices")
    made = GlContext(device_index=0, gl_api="gles")
    try:
        assert made.device_index == 0 and made.egl_platform == "device"
    finally:
        made.release()


def test_missing_api_names_what_was_found(monkeypatch):
    # An EGL that cannot make ES contexts: every gles attempt fails as on a GL-only driver.
    real = egl.Context.__init__

    def no_es(self, display, api, use_pbuffer=None, share=None):
        if api == "gles":
            raise GpuError(f"{display.label}: eglCreateContext(OpenGL ES 3.1) failed (EGL_BAD_MATCH)")
        real(self, display, api, use_pbuffer, share)

    monkeypatch.setattr(egl.Context, "__init__", no_es)
    with pytest.raises(GpuError, match="no OpenGL ES 3.1 context could be created") as raised:
        GlContext(gl_api="gles")
    assert "EGL_BAD_MATCH" in str(raised.value) and "Found:" in str(raised.value)
    made = GlContext(gl_api="auto")  # falls back to desktop GL
    try:
        assert made.gl_api == "gl"
    finally:
        made.release()


def test_env_sets_the_default(monkeypatch):
    monkeypatch.setenv(GL_API_ENV, "gl")
    assert default_gl_api() == "gl"
    assert GpuDelegateOptions().gl_api == "gl"
    assert GpuDelegateOptions(gl_api="gles").gl_api == "gles"
    shared = acquire_shared()
    try:
        assert shared.gl_api == "gl"
    finally:
        release_shared(shared)
    monkeypatch.setenv(GL_API_ENV, "directx")
    with pytest.raises(ValueError, match=GL_API_ENV):
        GpuDelegateOptions()
    monkeypatch.delenv(GL_API_ENV)
    assert default_gl_api() == "auto"


def test_shared_contexts_per_api(shared_context):
    gles, gl = acquire_shared(None, "gles"), acquire_shared(None, "gl")
    again = acquire_shared(None, "gles")
    try:
        assert gles is again and gles is not gl
        assert (gles.gl_api, gl.gl_api) == ("gles", "gl")
    finally:
        for context in (again, gles, gl):
            release_shared(context)
    for context in (gles, gl):  # the last release frees it, unless the session fixture holds it
        assert (context.ctx is None) == (context is not shared_context)


def test_load_delegate_parses_gl_api():
    assert parse_plugin_options({"gl_api": " GLES "}).gl_api == "gles"
    assert parse_plugin_options({"gl_api": "gl", "device_index": "0"}).gl_api == "gl"
    delegate = load_delegate("gles", {"gl_api": "gl"})
    try:
        assert delegate.options.gl_api == "gl"
    finally:
        delegate.close()


@pytest.mark.parametrize("cls", [GpuDelegate, GpuDelegateOptions])
def test_help_documents_every_option(cls):
    """help() shows each option on a line of its own ('name: type, default. meaning'), and every
    value a choice option takes."""
    doc = inspect.getdoc(cls)
    for option in dataclasses.fields(GpuDelegateOptions):
        assert re.search(rf"^{option.name}: \S", doc, re.M), f"{cls.__name__} does not document {option.name}"
    for choice in PRECISIONS + PREFERENCES + PRIORITIES + OBJECT_TYPES + STRATEGIES + GL_APIS:
        assert repr(choice) in doc, f"{cls.__name__} does not name {choice!r}"


def test_summary_documents_the_keys_it_returns():
    """summary()'s docstring is all an installed package says about it (docs/ is not installed):
    one line per key ('key: meaning'), exactly the keys summary() returns."""
    documented = set(re.findall(r"^(\w+): ", inspect.getdoc(GpuDelegate.summary), re.M))
    x = In(np.ones((1, 4, 4, 3), np.float32))
    with GpuDelegate() as delegate:
        assert delegate.summary() == {}
        Interpreter(model_content=single_op_model("ADD", [x, x]), experimental_delegates=[delegate]).allocate_tensors()
        assert delegate.summary()["gpu_nodes"] == 1
        assert set(delegate.summary()) == documented


@pytest.mark.parametrize("api", APIS)
def test_delegate_runs_on_the_requested_api(api):
    from gles_delegate import GpuDelegate
    with GpuDelegate(gl_api=api) as delegate:
        assert delegate.context.gl_api == api, \
            "GpuDelegate must pass options.gl_api to acquire_shared (see the context issue note)"


# -- CompatibilityList ------------------------------------------------------------------------
def test_devices_lists_renderers():
    found = CompatibilityList.devices()
    assert found, "no EGL display found"
    usable = [entry for entry in found if entry["apis"]]
    assert usable and all(entry["renderer"] for entry in usable)
    for entry in found:
        assert entry["platform"] in egl.PLATFORMS
        assert (entry["index"] is not None) == (entry["platform"] == "device")
        assert set(entry["apis"]) <= set(APIS)
    assert any("gles" in entry["apis"] for entry in usable)
    assert any(entry["software"] for entry in usable) == any(
        "llvmpipe" in entry["renderer"].lower() for entry in usable)


@pytest.mark.parametrize("api", APIS)
def test_compatibility_list_per_api(api):
    compat = CompatibilityList(gl_api=api)
    assert compat.is_delegate_supported_on_this_device(), compat.reason
    assert compat.device["gl_api"] == api
    assert compat.best_options_for_this_device().gl_api == api
