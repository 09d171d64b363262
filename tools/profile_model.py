"""Where an invoke's time goes: end-to-end latency, GPU time, CPU time of the dispatch loop, and
the slowest dispatches by GPU time.

    gles-profile MODEL [...] [--precision fp32] [--top 6] [--warmup-secs 0.5] [--floor]
        [--set gpu.runtime.FLUSH_FIRST=0 ...]     (A/B a tuning constant: each setting in turn)
        [--paired]                                (... or interleaved with the defaults)

--set profiles the model again with each setting in turn, after the defaults; a GPU machine's
speed drifts by 10-30 % between such runs a few seconds apart. --paired instead loads the model
twice in one process, with the defaults (A) and with the setting (B, applied while B loads and
runs), and times them in alternating blocks of PAIRED_BLOCK end-to-end runs (A B, then B A):
it reports each side's median, the median of the blocks' B / A ratios and in how many blocks B
was faster, so the drift falls on both sides alike. The first run of a block rebinds the
partition's buffers (the other side ran last); the medians leave it out.

--floor also times each partition's dispatch loop (the invoke's dispatches, without its I/O and
fence) as planned and altered, to split a dispatch's fixed cost: without the barriers, with every
dispatch cut to one workgroup (with and without the barriers), with the params buffer bound twice
per dispatch and with the program switched away and back per dispatch. The altered loops leave
wrong values in the arena (races, missing workgroups); the next invoke overwrites them.

GPU times come from GL timer queries (GL_TIME_ELAPSED; on GLES, EXT_disjoint_timer_query), so
they need a real GPU: llvmpipe's timer does not time compute work, and GPU times are then n/a with
that reason.
"""
import argparse
import statistics
import sys
import time

from gles_delegate import GpuDelegate, Interpreter
from gles_delegate.gpu import gl as G
from gles_delegate.gpu.runtime import ARENA_BINDING, CONSTS_BINDING, IO_BINDING
from gles_delegate.gpu.workgroup_tuner import MIN_MEASURABLE_NS, elapsed_ns, timer_unavailable
from gles_delegate.tools import common
from gles_delegate.tools.benchmark_model import end_to_end


def gpu_ms(context, work, tries=3):
    """Shortest GPU time of `work()` over `tries` (ms), or None without timer queries."""
    times = [elapsed_ns(context, work) for _ in range(tries)]
    return None if None in times else min(times) / 1e6


def no_gpu_time_reason(context):
    """Why GPU times are n/a on `context`: no timer query, or a timer that does not time compute
    work (llvmpipe's reports next to nothing for any dispatch)."""
    return timer_unavailable(context) or (f"the GL timer of {context.renderer} does not time compute "
                                          f"work: it reports under {MIN_MEASURABLE_NS / 1e3:g} us")


def dispatch_runner(partition, step):
    """A function issuing one dispatch of `partition` (with its buffers and a barrier before)."""
    gl, (program, offset, size, groups, _) = partition.context.gl, step

    def run():
        for binding, handle in ((ARENA_BINDING, partition.arena.glo), (CONSTS_BINDING, partition.consts.glo),
                                (IO_BINDING, partition.io.handle)):
            gl.bind_buffer_base_fast(G.GL_SHADER_STORAGE_BUFFER, binding, handle)
        gl.memory_barrier_fast(G.GL_SHADER_STORAGE_BARRIER_BIT)
        partition.bind_params(offset, size)
        gl.use_program_fast(program)
        gl.dispatch_compute_fast(*groups)
        gl.use_program_fast(0)
    return run


def _altered(segments, barriers=True, one_group=False):
    """The partition's segments with the barriers dropped and / or every dispatch one workgroup."""
    return [([(barrier and barriers, offset, size, program, *((1, 1, 1) if one_group else (x, y, z)))
              for barrier, offset, size, program, x, y, z in steps], then_flush) for steps, then_flush in segments]


def _doubled_binds(partition, params=False, program=False):
    """A dispatch loop like Partition._dispatch that binds the params range (or the program)
    twice per dispatch: first another one, then the right one (a step whose params are baked into
    its program binds none)."""
    gl, ssbo_bit = partition.context.gl, G.GL_SHADER_STORAGE_BARRIER_BIT
    programs = [p for p, *_ in partition.steps]

    def run():
        for k, (handle, offset, size, groups, barrier) in enumerate(partition.steps):
            if barrier:
                gl.memory_barrier_fast(ssbo_bit)
            if params:
                partition.bind_params(*partition.steps[k - 1][1:3])
            partition.bind_params(offset, size)
            if program:
                gl.use_program_fast(programs[k - 1] if programs[k - 1] != handle else 0)
            gl.use_program_fast(handle)
            gl.dispatch_compute_fast(*groups)
    return run


def floor_line(partition, interpreter):
    """GPU times (ms) of the partition's dispatch loop as planned and altered (--floor)."""
    planned = partition.segments
    times = {}
    try:
        for name, barriers, one_group in (("as planned", True, False), ("no barriers", False, False),
                                          ("one workgroup each", True, True),
                                          ("one workgroup, no barriers", False, True)):
            partition.segments = _altered(planned, barriers, one_group)
            times[name] = gpu_ms(partition.context, partition._dispatch)
    finally:
        partition.segments = planned
    times["params bound twice"] = gpu_ms(partition.context, _doubled_binds(partition, params=True))
    times["program switched twice"] = gpu_ms(partition.context, _doubled_binds(partition, program=True))
    interpreter.invoke()  # leaves the arena as a planned run does
    cells = "; ".join(f"{name} {'n/a' if ms is None else f'{ms:.3f}'}" for name, ms in times.items())
    return f"  dispatch loop GPU time (ms): {cells}"


def issue_ms(partition, repeats=20):
    """CPU time (ms) of issuing every dispatch of the partition, without waiting for the GPU."""
    runs = [dispatch_runner(partition, step) for step in partition.steps]
    with partition.context.current():
        start = time.perf_counter()
        for _ in range(repeats):
            for run in runs:
                run()
        elapsed = (time.perf_counter() - start) / repeats * 1e3
    return elapsed


def profile(path, precision, runs, top, tune=False, warmup_secs=common.WARMUP_SECONDS, floor=False):
    delegate = GpuDelegate(precision=precision, tune_workgroups=tune)
    interpreter = Interpreter(model_path=str(path), experimental_delegates=[delegate])
    interpreter.allocate_tensors()
    run_once, _ = end_to_end(interpreter, common.seeded_inputs(interpreter.get_input_details(), 0, common.index_ranges(path)))
    common.warm_up(run_once, 10, warmup_secs)
    e2e = statistics.median(run_once() for _ in range(runs)) * 1e3
    invoke_gpu = gpu_ms(delegate.context, interpreter.invoke)
    gpu_text = (f"{invoke_gpu:.3f} ms" if invoke_gpu is not None else
                f"n/a ({no_gpu_time_reason(delegate.context)})")
    tuned = ", workgroups tuned" if any(p.plan.tuned for p in delegate.partitions) else ""
    lines = [f"{path.stem} [{precision}{tuned}]: end-to-end median {e2e:.3f} ms, invoke GPU time {gpu_text}"]
    for partition in delegate.partitions:
        per = [(gpu_ms(delegate.context, dispatch_runner(partition, step)), k) for k, step in enumerate(partition.steps)]
        known = [(ms, k) for ms, k in per if ms is not None]
        total = f"{sum(ms for ms, _ in known):.3f} ms" if known else "n/a"
        lines.append(f"  {len(partition.steps)} dispatches: sum of GPU times {total}, CPU issue loop "
                     f"{issue_ms(partition):.3f} ms")
        if floor:
            lines.append(floor_line(partition, interpreter))
        for ms, k in sorted(known, reverse=True)[:top]:
            shapes = " ".join(str(list(shape)) for _, _, shape in partition.plan.writes[k])
            lines.append(f"    {ms * 1e3:8.1f} us  {partition.plan.labels[k]}  {partition.plan.templates[k]}  "
                         f"groups {partition.steps[k][3]}  workgroup {partition.plan.workgroups[k]}  writes {shapes}")
    delegate.close()
    return "\n".join(lines)


PAIRED_BLOCK = 20  # end-to-end runs of one side before the other's (--paired)


def _loaded(path, precision):
    """(delegate, interpreter, run_once) of `path` on a new GpuDelegate, allocated."""
    delegate = GpuDelegate(precision=precision)
    interpreter = Interpreter(model_path=str(path), experimental_delegates=[delegate])
    interpreter.allocate_tensors()
    run_once, _ = end_to_end(interpreter, common.seeded_inputs(interpreter.get_input_details(), 0, common.index_ranges(path)))
    return delegate, interpreter, run_once


def paired(path, precision, runs, setting, warmup_secs=common.WARMUP_SECONDS, block=PAIRED_BLOCK):
    """The defaults (A) against `setting` (B, a parsed --set) on one model, interleaved in blocks
    of `block` end-to-end runs (about `runs` per side, after `warmup_secs` of both alternating):
    one line with each side's median (ms), the median of the blocks' B / A median ratios and
    the number of blocks where B's median was lower."""
    delegate_a, _, run_a = _loaded(path, precision)
    restore = common.apply_setting(setting)
    try:
        delegate_b, _, run_b = _loaded(path, precision)
    finally:
        restore()

    def run_b_set():
        undo = common.apply_setting(setting)
        try:
            return run_b()
        finally:
            undo()
    sides = {"A": run_a, "B": run_b_set}
    common.warm_up(lambda: (run_a(), run_b_set()), 10, warmup_secs)
    times = {"A": [], "B": []}
    ratios = []
    for k in range(max(1, -(-runs // block))):
        medians = {}
        for side in ("AB" if k % 2 == 0 else "BA"):
            block_times = [sides[side]() for _ in range(block)][1:]  # the first one rebinds
            times[side] += block_times
            medians[side] = statistics.median(block_times)
        ratios.append(medians["B"] / medians["A"])
    delegate_a.close()
    delegate_b.close()
    a_ms, b_ms = (statistics.median(times[side]) * 1e3 for side in "AB")
    faster = sum(r < 1 for r in ratios)
    return (f"{path.stem} [{precision}] A (defaults) {a_ms:.3f} ms, B ({setting[0]}) {b_ms:.3f} ms: "
            f"B / A {statistics.median(ratios):.3f} (median of {len(ratios)} blocks of {block - 1} runs; "
            f"B faster in {faster})")


def build_parser():
    parser = common.tool_parser("gles-profile", __doc__)
    parser.add_argument("models", nargs="+", type=common.model_file, help="model files or MediaPipe model names")
    common.add_precision(parser)  # fp32, as every tool
    parser.add_argument("--tune-workgroups", action="store_true",
                        help="GpuDelegateOptions.tune_workgroups: time candidate workgroups at init")
    parser.add_argument("--runs", type=common.positive_int, default=30,
                        help="end-to-end runs whose median is reported, after 10 warm-up runs (default 30)")
    common.add_warmup_secs(parser)
    parser.add_argument("--top", type=common.non_negative_int, default=6,
                        help="how many of the slowest dispatches to list (default 6)")
    parser.add_argument("--floor", action="store_true",
                        help="also time each dispatch loop altered: no barriers, one workgroup per dispatch, "
                             "binds doubled (what a dispatch's fixed cost is made of)")
    parser.add_argument("--set", action="append", type=common.tuning_setting, default=[], metavar="MODULE.NAME=VALUE",
                        help="profile again with this tuning constant changed (repeatable: one run per setting; "
                             "a tuple constant takes a tuple: gpu.kernels.reduce.PARALLEL_LANES='(32, 16)'")
    parser.add_argument("--paired", action="store_true",
                        help="time each --set setting against the defaults interleaved in one process, "
                             f"in alternating blocks of {PAIRED_BLOCK} runs (end-to-end only; see above)")
    return parser


def main(argv=None):
    return common.run_main(build_parser(), run, argv)


def run(args):
    if args.paired:
        if not args.set:
            raise argparse.ArgumentTypeError("--paired compares settings with the defaults: give at least one --set")
        for path in args.models:
            for setting in args.set:
                print(paired(path, args.precision, args.runs, setting, args.warmup_secs), flush=True)
        return 0
    for path in args.models:
        for setting in [None] + args.set:  # the defaults first, then each setting alone
            restore = common.apply_setting(setting) if setting else None
            try:
                text = profile(path, args.precision, args.runs, args.top, args.tune_workgroups, args.warmup_secs,
                               args.floor)
            finally:
                if restore:
                    restore()
            print(f"[{setting[0] if setting else 'defaults'}] {text}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
