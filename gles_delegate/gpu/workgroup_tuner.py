"""Workgroup tuning: time the candidate workgroups of every dispatch of a plan on the GPU with GL
timer queries and keep the fastest (workgroups.py holds the heuristic and the candidates, with no
GL of its own).

Tuning (GpuDelegateOptions.tune_workgroups, or inference_preference='sustained_speed') measures
each candidate with GL_TIME_ELAPSED (core in desktop GL 3.3, on GLES through
EXT_disjoint_timer_query); without it, or with a timer that does not time compute work, it logs
why and keeps the heuristic. The winners live in the Plan (its sources and group counts, and
Plan.workgroups), so a serialized plan keeps them.
"""
import ctypes
import logging

from ..errors import GpuError
from . import gl as G
from .gl import Program
from .runtime import ARENA_BINDING, CONSTS_BINDING, IO_BINDING
from .shader import PARAMS_BINDING

log = logging.getLogger("gles_delegate")

GL_TIME_ELAPSED = 0x88BF        # = GL_TIME_ELAPSED_EXT
GL_QUERY_RESULT = 0x8866
GL_GPU_DISJOINT_EXT = 0x8FBB
TIMER_EXTENSION = "GL_EXT_disjoint_timer_query"
REPEATS = 3                     # timings per candidate; the minimum counts
MIN_MEASURABLE_NS = 1000        # a timer reporting less for the largest dispatch does not time it
MIN_GAIN = 0.03                 # a candidate replaces the heuristic's only when this much faster (noise)
WARM_UP_PASSES = 3              # runs of the whole plan before timing, so the GPU clocks up


class _TimerFunctions:
    """glBeginQuery & co. through ctypes, from the context's own loader (desktop names, or the
    EXT_disjoint_timer_query names on GLES where the 64-bit result call exists only there); the
    other GL calls timing needs are the context's (GlContext.gl)."""

    def __init__(self, proc_address, gles):
        def function(names, restype, *argtypes):
            for name in names:
                address = proc_address(name)
                if address:
                    return ctypes.CFUNCTYPE(restype, *argtypes)(address)
            raise GpuError(f"the GL driver has no {names[0]}")
        suffixes = ("EXT", "") if gles else ("",)
        u, p = ctypes.c_uint, ctypes.POINTER
        self.gen = function([f"glGenQueries{s}" for s in suffixes], None, ctypes.c_int, p(u))
        self.delete = function([f"glDeleteQueries{s}" for s in suffixes], None, ctypes.c_int, p(u))
        self.begin = function([f"glBeginQuery{s}" for s in suffixes], None, u, u)
        self.end = function([f"glEndQuery{s}" for s in suffixes], None, u)
        self.result64 = function([f"glGetQueryObjectui64v{s}" for s in suffixes], None, u, u, p(ctypes.c_uint64))


def timer_unavailable(context):
    """Why GL timer queries cannot be used on `context`, or None."""
    if context.gl_api == "gles" and TIMER_EXTENSION not in context.extensions:
        return f"{context.renderer} ({context.version}) has no {TIMER_EXTENSION}"
    return None


def elapsed_ns(context, work):
    """GPU time (ns) of the GL commands that `work()` issues on `context`, by GL_TIME_ELAPSED;
    None where there is no timer query or it does not time compute work."""
    if timer_unavailable(context) is not None:
        return None
    with context.current():
        timers = _TimerFunctions(context.egl.proc_address, context.gl_api == "gles")
        query = ctypes.c_uint(0)
        timers.gen(1, ctypes.byref(query))
        try:
            timers.begin(GL_TIME_ELAPSED, query.value)
            work()
            timers.end(GL_TIME_ELAPSED)
            elapsed = ctypes.c_uint64(0)
            timers.result64(query.value, GL_QUERY_RESULT, ctypes.byref(elapsed))
        finally:
            timers.delete(1, ctypes.byref(query))
    return elapsed.value if elapsed.value >= MIN_MEASURABLE_NS else None


class WorkgroupTuner:
    """Times candidate workgroups of a Plan's dispatches on a GlContext (see compiler.compile_plan,
    which asks `choose`). Programs compiled for timing are released afterwards."""

    def __init__(self, context):
        self.context = context

    def choose(self, plan, variants):
        """Index of the fastest variant per step; variants[i] is a list of (workgroup, source,
        group counts), the heuristic's first (a step with one variant is not timed). None when
        nothing can be timed here (logged; the caller keeps the heuristic): no timer query, or
        a timer that does not time compute work (Mesa's llvmpipe reports 1 ns for any dispatch)."""
        reason = timer_unavailable(self.context)
        if reason is not None:
            log.warning("workgroup tuning skipped: %s; keeping the heuristic workgroups", reason)
            return None
        with self.context.current() as ctx:
            timers = _TimerFunctions(self.context.egl.proc_address, self.context.gl_api == "gles")
            session = _Session(self.context, ctx, timers, plan)
            try:
                session.warm_up(plan.steps, variants)
                largest = max(range(len(variants)), key=lambda i: _invocations(variants[i][0][2], variants[i][0][0]))
                probe = session.time(plan.steps[largest], *variants[largest][0][1:])
                if probe < MIN_MEASURABLE_NS:
                    log.warning("workgroup tuning skipped: GL_TIME_ELAPSED measured %d ns for the largest "
                                "dispatch on %s, so it does not time compute work; keeping the heuristic "
                                "workgroups", probe, self.context.renderer)
                    return None
                # Compile every candidate, then keep the GPU busy again before timing: a GPU left
                # idle while programs compile clocks down and would time the first ones slow.
                session.compile([source for options in variants if len(options) > 1 for _, source, _ in options])
                session.warm_up(plan.steps, variants)
                return [session.fastest(step, options) if len(options) > 1 else 0
                        for step, options in zip(plan.steps, variants)]
            finally:
                session.release()


def _invocations(groups, workgroup):
    return groups[0] * groups[1] * groups[2] * workgroup[0] * workgroup[1] * workgroup[2]


class _Session:
    """GL objects for timing one plan: its buffers bound as the runtime binds them, one query,
    and the programs compiled so far (by source)."""

    def __init__(self, context, ctx, timers, plan):
        self.context, self.timers = context, timers
        sizes = plan.buffer_bytes()
        self.buffers = [ctx.buffer(reserve=max(sizes[name], 16)) for name in ("arena", "constants", "I/O")]
        self.buffers.append(ctx.buffer(plan.params))
        for buffer in self.buffers[:3]:
            buffer.clear()
        for buffer, binding in zip(self.buffers, (ARENA_BINDING, CONSTS_BINDING, IO_BINDING)):
            buffer.bind_to_storage_buffer(binding)
        self.params = self.buffers[3]
        query = ctypes.c_uint(0)
        timers.gen(1, ctypes.byref(query))
        self.query = query
        self.programs = {}

    def compile(self, sources):
        new = [s for s in dict.fromkeys(sources) if s not in self.programs]
        started = Program.start(self.context.gl, new, retrievable=False, renderer=self.context.renderer)
        try:
            for pending in started:  # compiled at once where the driver can (GlContext.compiler_threads)
                self.programs[pending.source] = pending.finish()
        finally:
            for pending in started:
                pending.release()  # those a failure left unfinished (a finished one holds nothing)

    def _bind_params(self, step):
        """Bind a plan step's params block; none where its program bakes them in (size 0)."""
        if step[2]:
            self.params.bind_to_uniform_block(PARAMS_BINDING, step[1], step[2])

    def warm_up(self, steps, variants, passes=WARM_UP_PASSES):
        """Run the plan (every step's first variant) a few times."""
        self.compile([options[0][1] for options in variants])
        for _ in range(passes):
            for step, options in zip(steps, variants):
                self._bind_params(step)
                self.programs[options[0][1]].run(*options[0][2])
        self.context.gl.memory_barrier_fast(G.GL_SHADER_STORAGE_BARRIER_BIT)

    def fastest(self, step, options):
        """Index of the fastest option; the heuristic's (0) unless another beats it by MIN_GAIN.
        The options take turns, REPEATS rounds, so a drifting clock slows them all alike."""
        times = [float("inf")] * len(options)
        for _ in range(REPEATS):
            for k, (_, source, groups) in enumerate(options):
                times[k] = min(times[k], self.time(step, source, groups, repeats=1))
        best = min(range(len(options)), key=lambda k: (times[k], k))
        return best if times[best] < (1 - MIN_GAIN) * times[0] else 0

    def time(self, step, source, groups, repeats=REPEATS):
        """Fastest of `repeats` timed runs of one dispatch (with the params block of `step`), in
        ns; inf when the driver reports a disjoint timer (a meaningless result)."""
        self._bind_params(step)
        self.compile([source])
        program, timers, best = self.programs[source], self.timers, float("inf")
        barrier = self.context.gl.memory_barrier_fast
        for _ in range(repeats):
            barrier(G.GL_SHADER_STORAGE_BARRIER_BIT)
            timers.begin(GL_TIME_ELAPSED, self.query.value)
            program.run(*groups)
            timers.end(GL_TIME_ELAPSED)
            elapsed = ctypes.c_uint64(0)
            timers.result64(self.query.value, GL_QUERY_RESULT, ctypes.byref(elapsed))
            if not self._disjoint():
                best = min(best, float(elapsed.value))
        return best

    def _disjoint(self):
        if self.context.gl_api != "gles":
            return False
        return bool(self.context.gl.integer(GL_GPU_DISJOINT_EXT))

    def release(self):
        self.context.gl.use_program_fast(0)  # what the timing left bound: no plain current() may find it
        for program in self.programs.values():
            program.release()
        self.timers.delete(1, ctypes.byref(self.query))
        for buffer in self.buffers:
            buffer.release()
        error = self.context.ctx.error
        if error != "GL_NO_ERROR":
            log.warning("workgroup tuning left GL error %s (cleared)", error)
            self.context.clear_errors()
