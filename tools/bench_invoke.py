"""The per-invoke floor: end-to-end latency of tiny models, where the fixed cost of an invoke
(Python, ctypes, GL calls, the fence) is most of it.

    gles-bench-invoke [--models add conv10] [--graph MODEL ...] [--runs 2000] [--warmup 200] [--warmup-secs 0.5]
        [--precision fp32] [--placement gpu] [--gl-calls] [--breakdown] [--empty-dispatches] [--litert] [--cprofile N]

Builds its models itself with our writer: `add`, one ADD of two [1,8,8,4] float32 inputs; `conv10`,
ten chained 3x3 CONV_2D (SAME, RELU, 16 -> 16 channels) on [1,32,32,16]; --graph adds model
files (or MediaPipe names) of the user's. End-to-end is what a user
pays per inference: set_tensor of each input + invoke() + get_tensor of each output. For each
model it reports the median and 10th percentile of the wall time and of the calling thread's CPU
time (time.thread_time_ns: on llvmpipe, whose shaders run on the driver's own threads, this is the
Python / ctypes / driver-call cost of the invoke without the shader work), the dispatches, and
with --gl-calls the GL and EGL calls one invoke makes; --breakdown times the pieces of the
fixed cost one by one (set_tensor, get_tensor, invoke, making the context current and back, a
fence round trip on an idle GPU). --empty-dispatches gives every dispatch 0x0x0 workgroups: every
GL call is still made but no shader runs (outputs are then meaningless), which on llvmpipe leaves
the CPU cost of an invoke without the shader work. --litert adds LiteRT's interpreter (XNNPACK,
one thread) on the same model and inputs. --cprofile N prints the functions of N end-to-end runs
under cProfile (the slowest by own time). --placement fastest times the delegate with
placement='fastest': a model it leaves to the CPU then shows what this package's Interpreter
costs over LiteRT's own (the dispatches column counts what stayed on the GPU).
"""
import contextlib
import cProfile
import io
import pstats
import statistics
import threading
import time

import numpy as np

from gles_delegate import GpuDelegate, GpuDelegateOptions, Interpreter
from gles_delegate.gpu import context as gpu_context
from gles_delegate.gpu import egl as gpu_egl
from gles_delegate.gpu import gl as G
from gles_delegate.tflite import ModelBuilder
from gles_delegate.tools import common

RELU, SAME = 1, 0  # the schema's ActivationFunctionType and Padding
NEW_THREAD_RUNS = 30  # --breakdown's invokes on new threads (each makes and drops an EGL context)


def add_model():
    """One ADD of two [1,8,8,4] float32 inputs."""
    b = ModelBuilder()
    x, y = b.input("x", (1, 8, 8, 4)), b.input("y", (1, 8, 8, 4))
    out = b.tensor("out", (1, 8, 8, 4))
    b.op("ADD", [x, y], [out], fused_activation_function=0)
    b.output(out)
    return b.build()


def conv10_model(layers=10, size=32, channels=16):
    """`layers` chained 3x3 CONV_2D (SAME, RELU) on [1,size,size,channels], seeded weights."""
    rng = np.random.default_rng(0)
    b = ModelBuilder()
    x = b.input("x", (1, size, size, channels))
    for k in range(layers):
        w = b.const(f"w{k}", rng.uniform(-0.2, 0.2, (channels, 3, 3, channels)).astype(np.float32))
        bias = b.const(f"b{k}", rng.uniform(-0.1, 0.1, channels).astype(np.float32))
        y = b.tensor(f"y{k}", (1, size, size, channels))
        b.op("CONV_2D", [x, w, bias], [y], padding=SAME, stride_w=1, stride_h=1,
             dilation_w_factor=1, dilation_h_factor=1, fused_activation_function=RELU)
        x = y
    b.output(x)
    return b.build()


MODELS = {"add": add_model, "conv10": conv10_model}


def end_to_end_runner(interpreter, inputs):
    """A function doing one end-to-end run (set inputs, invoke, read outputs) and returning
    (wall ns, calling thread CPU ns, outputs)."""
    input_indices = [d["index"] for d in interpreter.get_input_details()]
    output_indices = [d["index"] for d in interpreter.get_output_details()]
    feeds = list(zip(input_indices, inputs))
    set_tensor, invoke, get_tensor = interpreter.set_tensor, interpreter.invoke, interpreter.get_tensor
    clock, cpu = time.perf_counter_ns, time.thread_time_ns

    def run():
        start, start_cpu = clock(), cpu()
        for index, value in feeds:
            set_tensor(index, value)
        invoke()
        outputs = [get_tensor(index) for index in output_indices]
        return clock() - start, cpu() - start_cpu, outputs
    return run


def measure(run, runs, warmup, warmup_secs):
    """{wall_us, cpu_us: (median, p10)} over `runs` runs after `warmup` runs (and at least
    `warmup_secs` seconds of them)."""
    common.warm_up(run, warmup, warmup_secs)
    walls, cpus = [], []
    for _ in range(runs):
        wall, cpu, _ = run()
        walls.append(wall / 1e3)
        cpus.append(cpu / 1e3)
    return {"wall_us": _stats(walls), "cpu_us": _stats(cpus)}


def _stats(values):
    values = sorted(values)
    return statistics.median(values), values[len(values) // 10]


class CallCounter:
    """Counts the calls made through the GL function table of `context` (gpu/gl.py GlFunctions)
    and through the EGL library while active: `with CallCounter(context) as counts: ...`."""

    def __init__(self, context):
        self.targets = [context.gl, gpu_egl.library()]
        self.counts = {}
        self.saved = []

    def __enter__(self):
        for target in self.targets:
            for name, value in list(vars(target).items()):
                if callable(value) and not name.startswith("_"):
                    self.saved.append((target, name, value))
                    setattr(target, name, self._counting(name, value))
        return self.counts

    def _counting(self, name, function):
        counts = self.counts

        def call(*args):
            counts[name] = counts.get(name, 0) + 1
            return function(*args)
        return call

    def __exit__(self, *exc):
        for target, name, value in reversed(self.saved):
            setattr(target, name, value)
        self.saved = []


class EmptyDispatches:
    """While active, every glDispatchCompute through the context's untyped entry point runs
    0x0x0 workgroups (the call is made, no shader runs)."""

    def __init__(self, context):
        self.gl = context.gl

    def __enter__(self):
        dispatch = self.real = self.gl.dispatch_compute_fast
        self.gl.dispatch_compute_fast = lambda x, y, z: dispatch(0, 0, 0)

    def __exit__(self, *exc):
        self.gl.dispatch_compute_fast = self.real


def bench_model(name, data, args):
    """One row of the report for model `name` (.tflite bytes `data`)."""
    delegate = GpuDelegate(GpuDelegateOptions(precision=args.precision, placement=args.placement))
    try:
        interpreter = Interpreter(model_content=data, experimental_delegates=[delegate])
        interpreter.allocate_tensors()
        delegate.context.prepare_thread_context()  # the steady state: this thread's own context made
        inputs = common.seeded_inputs(interpreter.get_input_details(), 0, common.index_ranges(data))
        run = end_to_end_runner(interpreter, inputs)
        row = {"model": name, "dispatches": sum(len(p.steps) for p in delegate.partitions)}
        ours = run()[2]
        if args.litert:
            row["litert"] = bench_litert(data, inputs, ours, args)
        with EmptyDispatches(delegate.context) if args.empty_dispatches else contextlib.nullcontext():
            row.update(measure(run, args.runs, args.warmup, args.warmup_secs))
            if args.gl_calls:
                with CallCounter(delegate.context) as counts:
                    run()
                row["gl_calls"] = dict(sorted(counts.items()))
            if args.breakdown:
                row["breakdown"] = breakdown(interpreter, delegate.context, inputs, args)
            if args.cprofile:
                row["cprofile"] = profile(run, args.cprofile)
        return row
    finally:
        delegate.close()


def breakdown(interpreter, context, inputs, args):
    """{piece: (median us, p10 us) of wall time} for the pieces of an end-to-end run."""
    input_indices = [d["index"] for d in interpreter.get_input_details()]
    output_indices = [d["index"] for d in interpreter.get_output_details()]
    gl, egl = context.gl, context.egl

    def set_inputs():
        for index, value in zip(input_indices, inputs):
            interpreter.set_tensor(index, value)

    def get_outputs():
        for index in output_indices:
            interpreter.get_tensor(index)

    def current():
        with context.current():
            pass

    def make_current():
        egl.exit(egl.enter())

    def fence():
        with context.current():
            sync = gl.fence_sync(G.GL_SYNC_GPU_COMMANDS_COMPLETE, 0)
            gl.client_wait_sync(sync, G.GL_SYNC_FLUSH_COMMANDS_BIT, 10**9)
            gl.delete_sync(sync)
    pieces = {f"set_tensor x{len(input_indices)}": set_inputs, f"get_tensor x{len(output_indices)}": get_outputs,
              "invoke": interpreter.invoke, "context.current() enter + exit": current,
              "eglMakeCurrent there and back": make_current,
              "current() + fence + glClientWaitSync + delete": fence}
    out = {}
    for piece, function in pieces.items():
        def timed(function=function):
            start = time.perf_counter_ns()
            function()
            return time.perf_counter_ns() - start, 0, None
        out[piece] = measure(timed, args.runs, args.warmup, args.warmup_secs)["wall_us"]
    out.update(new_thread_pieces(interpreter, context))
    return out


def new_thread_pieces(interpreter, context, runs=NEW_THREAD_RUNS):
    """{piece: (median us, p10 us)} of an invoke on a thread started for it (its first invoke,
    on the EGL context made ahead for it by prepare_thread_context: gpu/context.py KEEP_CURRENT),
    and the same with KEEP_CURRENT off (the thread's start and join, and the shared context's
    make-current)."""
    out = {}
    for keep, piece in ((True, "invoke on a new thread (its own context's first)"),
                        (False, "invoke on a new thread, KEEP_CURRENT off")):
        def timed():
            context.prepare_thread_context()  # made ahead: the thread's first invoke runs on it
            thread = threading.Thread(target=interpreter.invoke)
            start = time.perf_counter_ns()
            thread.start()
            thread.join()
            return time.perf_counter_ns() - start, 0, None
        saved, gpu_context.KEEP_CURRENT = gpu_context.KEEP_CURRENT, keep
        try:
            out[piece] = measure(timed, runs, 2, common.WARMUP_SECONDS)["wall_us"]
        finally:
            gpu_context.KEEP_CURRENT = saved
    return out


def bench_litert(data, inputs, ours, args):
    """LiteRT's interpreter (XNNPACK, one thread) on the same model: its times, and the largest
    absolute difference of its first outputs from `ours` (our first); {"error": why} where LiteRT cannot load the model."""
    interpreter, why_not = common.litert_loaded(model_content=data, num_threads=1)
    if interpreter is None:
        return {"error": why_not}
    run = end_to_end_runner(interpreter, inputs)
    # The first run of each, as `ours` is: a model with state (resource variables, LSTM state
    # tensors) answers differently on every later invoke.
    theirs = run()[2]
    result = measure(run, args.runs, args.warmup, args.warmup_secs)
    result["max_abs_diff"] = max(float(np.max(np.abs(a - b))) for a, b in zip(ours, theirs))
    return result


def profile(run, runs):
    """cProfile's table of `runs` end-to-end runs, the 25 functions with the most own time."""
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(runs):
        run()
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(25)
    return text.getvalue()


def report(rows, context_line, args):
    lines = [f"{context_line}; precision {args.precision}; microseconds, median / 10th percentile of "
             f"{args.runs} end-to-end runs (set inputs + invoke + read outputs) after {args.warmup}"
             + (f"; placement {args.placement}" if args.placement != "gpu" else "")
             + ("; every dispatch 0x0x0 workgroups (--empty-dispatches)" if args.empty_dispatches else ""),
             ""]
    headers = ["model", "dispatches", "wall", "calling thread CPU"]
    if args.litert:
        headers += ["LiteRT 1t wall", "LiteRT max |diff|"]
    table = []
    for row in rows:
        cells = [row["model"], str(row["dispatches"]), "%.1f / %.1f" % row["wall_us"], "%.1f / %.1f" % row["cpu_us"]]
        if args.litert:
            litert = row["litert"]
            cells += ["n/a", "n/a"] if "error" in litert else \
                ["%.1f / %.1f" % litert["wall_us"], "%.3g" % litert["max_abs_diff"]]
        table.append(cells)
    lines.append(common.table(table, headers))
    for row in rows:
        if "error" in row.get("litert", {}):
            lines.append(f"{row['model']}: {row['litert']['error']}")
        if "gl_calls" in row:
            calls = row["gl_calls"]
            lines.append(f"\n{row['model']}: {sum(calls.values())} GL/EGL calls per end-to-end run: "
                         + ", ".join(f"{k} {v}" for k, v in calls.items()))
        if "breakdown" in row:
            lines.append(f"\n{row['model']}: pieces of an end-to-end run, wall us (median / 10th percentile)")
            lines += [f"  {piece:48} {median:8.1f} / {p10:.1f}" for piece, (median, p10) in row["breakdown"].items()]
        if "cprofile" in row:
            lines.append(f"\n{row['model']} under cProfile:\n{row['cprofile']}")
    return "\n".join(lines)


def build_parser():
    parser = common.tool_parser("gles-bench-invoke", __doc__)
    parser.add_argument("--models", nargs="*", choices=sorted(MODELS), default=None,
                        help="the built-in models (default: add conv10, unless --graph is given)")
    parser.add_argument("--graph", nargs="+", type=common.model_file, default=[], metavar="MODEL",
                        help=".tflite files or MediaPipe model names to time as well (the breakdown's set_tensor "
                             "and get_tensor then show what their I/O costs)")
    parser.add_argument("--runs", type=common.positive_int, default=2000,
                        help="end-to-end runs timed per model (default 2000)")
    parser.add_argument("--warmup", type=common.non_negative_int, default=200,
                        help="runs before them, not timed (default 200; see --warmup-secs)")
    common.add_warmup_secs(parser)
    common.add_precision(parser)
    parser.add_argument("--placement", choices=("gpu", "fastest"), default="gpu",
                        help="GpuDelegateOptions.placement (default gpu; fastest: a partition LiteRT's CPU kernels run "
                             "faster is left to them)")
    parser.add_argument("--gl-calls", action="store_true", help="count the GL and EGL calls of one end-to-end run")
    parser.add_argument("--breakdown", action="store_true", help="time the pieces of an end-to-end run one by one")
    parser.add_argument("--empty-dispatches", action="store_true",
                        help="time with every dispatch of 0x0x0 workgroups (no shader work; outputs meaningless)")
    parser.add_argument("--litert", action="store_true", help="also time LiteRT's interpreter (XNNPACK, 1 thread)")
    parser.add_argument("--cprofile", type=common.non_negative_int, default=0, metavar="N",
                        help="profile N end-to-end runs per model with cProfile")
    return parser


def main(argv=None):
    return common.run_main(build_parser(), run, argv)


def run(args):
    names = args.models if args.models is not None else ([] if args.graph else ["add", "conv10"])
    rows = [bench_model(name, MODELS[name](), args) for name in names]
    rows += [bench_model(path.stem, path.read_bytes(), args) for path in args.graph]
    delegate = GpuDelegate()
    try:
        context = delegate.context
        context_line = f"{context.renderer}, {context.version}"
    finally:
        delegate.close()
    print(report(rows, context_line, args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
