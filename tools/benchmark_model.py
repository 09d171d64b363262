"""Benchmark a .tflite model on the GPU delegate, in the manner of TFLite's benchmark_model.

    gles-benchmark --graph=model.tflite [--use_gpu=true] [--precision=fp32|fp16|fp16_fp32acc|auto]
                   [--num_runs=50] [--min_secs=1] [--max_secs=150] [--warmup_runs=1]
                   [--warmup_min_secs=0.5] [--num_threads=-1] [--max_delegated_partitions=1]
                   [--cpu_backend=auto|fallback|litert|reference]
                   [--serialization_dir=DIR] [--model_token=TOKEN] [--compare=litert]
                   [--runtime=gles|litert] [--empty_dispatches] [--seed=0] [--json=FILE]

Like benchmark_model it feeds seeded random inputs, runs a warm-up phase (at least
warmup_runs runs and warmup_min_secs seconds) and then the measured phase (at least num_runs
runs and min_secs seconds, stopping after max_secs). Every timed run is end to end: set the
inputs, invoke, read the outputs. It prints the init time (delegate + interpreter +
allocate_tensors), the first inference, the warm-up average, the inference average / median /
p90 / min, the GPU intermediate memory against its lower bound, the host peak RSS and what the
delegate ran where. --compare=litert runs ai-edge-litert on the same inputs in the same
process: its interpreter (XNNPACK) and its GPU accelerator where one works.

--use_gpu defaults to true here (benchmark_model's default is false: this tool exists to
measure the GPU delegate); --use_gpu=false runs every node on the CPU. --cpu_backend is the
Interpreter's option for the nodes the GPU does not run (default auto: LiteRT's kernels where
ai-edge-litert is installed; reference: the numpy reference kernels). --num_threads is passed
to the interpreters (LiteRT's, and the LiteRT sub-models of ours); the numpy reference kernels
ignore it (numpy decides its own threading).

--empty_dispatches removes every GPU dispatch from the delegate's partitions once they are
compiled: an invoke then uploads the inputs, runs no shader and downloads the outputs, so a
timing is the I/O path alone (with --runtime=litert: LiteRT's Interpreter's against ours). The
outputs are then meaningless, and so is the agreement the report prints.

--json=FILE writes the same numbers: {tool, gles_delegate_version, model, model_size_mb,
params, runtime, init_ms, first_inference_ms, warmup, inference, memory, delegation[, compare]}
where warmup and inference hold {count, first_ms, avg_ms, median_ms, p90_ms, min_ms, max_ms,
std_ms}, memory {gpu_intermediate_bytes, gpu_intermediate_lower_bound_bytes,
gpu_intermediate_naive_bytes, gpu_constant_bytes, host_peak_rss_mb, host_rss_init_delta_mb},
delegation GpuDelegate.summary() plus ops {op: {gpu, cpu}}, and compare {litert_xnnpack,
litert_gpu}, each either the timing keys of a run or {status: "unavailable: why"}.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import numpy as np

from gles_delegate import GpuDelegate, GpuDelegateOptions, Interpreter
from gles_delegate.cpu_litert import BACKENDS
from gles_delegate.tools import common

STATS_KEYS = ("count", "first_ms", "avg_ms", "median_ms", "p90_ms", "min_ms", "max_ms", "std_ms")
MEMORY_KEYS = ("gpu_intermediate_bytes", "gpu_intermediate_lower_bound_bytes", "gpu_intermediate_naive_bytes",
               "gpu_constant_bytes", "host_peak_rss_mb", "host_rss_init_delta_mb")
JSON_KEYS = ("tool", "gles_delegate_version", "model", "model_size_mb", "params", "runtime", "init_ms",
             "first_inference_ms", "warmup", "inference", "memory", "delegation")


def parse_bool(text):
    lowered = str(text).strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def build_parser():
    p = common.tool_parser("gles-benchmark", __doc__)
    p.add_argument("--graph", required=True, type=common.model_file,
                   help="the .tflite model (or a MediaPipe model name)")
    p.add_argument("--use_gpu", type=parse_bool, nargs="?", const=True, default=True,
                   help="run on the GPU delegate (default true); false: the numpy reference kernels")
    common.add_precision(p, None)
    p.add_argument("--num_runs", type=common.positive_int, default=50, help="minimum number of measured runs (default 50)")
    p.add_argument("--min_secs", type=common.non_negative_float, default=1.0, help="minimum seconds of measured runs (default 1)")
    p.add_argument("--max_secs", type=common.positive_float, default=150.0,
                   help="stop starting runs after this many seconds per phase (default 150)")
    p.add_argument("--warmup_runs", type=common.non_negative_int, default=1, help="minimum number of warm-up runs (default 1)")
    p.add_argument("--warmup_min_secs", type=common.non_negative_float, default=0.5, help="minimum seconds of warm-up (default 0.5)")
    p.add_argument("--num_threads", type=common.thread_count, default=-1,
                   help="interpreter threads (-1: default). gles_delegate's numpy reference kernels ignore it; "
                        "LiteRT (--compare) uses it")
    common.add_max_delegated_partitions(p)
    common.add_placement(p)
    p.add_argument("--cpu_backend", choices=BACKENDS, default="auto",
                   help="the Interpreter's cpu_backend for the nodes the GPU does not run (default auto: LiteRT's "
                        "kernels where ai-edge-litert is installed; reference: the numpy reference kernels)")
    p.add_argument("--serialization_dir", "--delegate_serialize_dir", type=common.output_dir, default=None,
                   help="GpuDelegateOptions.serialization_dir (program and plan cache)")
    p.add_argument("--model_token", "--delegate_serialize_token", default=None,
                   help="GpuDelegateOptions.model_token (cache key of the model)")
    p.add_argument("--compare", choices=["litert"], default=None,
                   help="also time ai-edge-litert (XNNPACK, and its GPU accelerator where one works)")
    p.add_argument("--runtime", choices=["gles", "litert"], default="gles",
                   help="litert: also time LiteRT's own Interpreter with this GpuDelegate (its CPU kernels run "
                        "what the GPU does not), beside gles_delegate's Interpreter in this process: each alone, "
                        "then the two in alternation on one delegate (JSON: compare.litert_gles_delegate.interleaved)")
    p.add_argument("--empty_dispatches", action="store_true",
                   help="run without the GPU's compute dispatches (inputs up, outputs down, no shader): the I/O "
                        "path's cost alone; outputs are meaningless")
    p.add_argument("--seed", type=common.non_negative_int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--json", type=common.output_file, default=None, metavar="FILE",
                   help="also write the results as JSON")
    return p


# -- timing ---------------------------------------------------------------------------------
def run_phase(run_once, min_runs, min_secs, max_secs, label):
    """benchmark_model's loop: run until at least min_runs runs and min_secs seconds have
    passed, but start no run after max_secs. Returns the run times in ms."""
    times = []
    start = now = time.perf_counter()
    min_finish, max_finish = start + max(min_secs, 0.0), start + max_secs
    progress = common.Progress(label, max(min_runs, 1))
    while (len(times) < min_runs or now < min_finish) and now <= max_finish:
        times.append(run_once() * 1000.0)
        now = time.perf_counter()
        remaining = math.ceil(max(0.0, min_finish - now) / (statistics.fmean(times) / 1000.0))
        progress.update(len(times), max(min_runs, len(times) + remaining))
    progress.close()
    return times


def stats(times):
    """{count, first_ms, avg_ms, median_ms, p90_ms, min_ms, max_ms, std_ms} (None when empty)."""
    if not times:
        return {key: (0 if key == "count" else None) for key in STATS_KEYS}
    return {"count": len(times), "first_ms": times[0], "avg_ms": statistics.fmean(times),
            "median_ms": statistics.median(times), "p90_ms": float(np.percentile(times, 90)),
            "min_ms": min(times), "max_ms": max(times),
            "std_ms": statistics.pstdev(times) if len(times) > 1 else 0.0}


def benchmark(run_once, args, label):
    """Warm-up and measured phases; returns (first_inference_ms, warmup stats, inference stats)."""
    print(f"Running warm-up for at least {args.warmup_runs} iterations and at least "
          f"{args.warmup_min_secs:g} seconds but terminate if exceeding {args.max_secs:g} seconds.")
    warmup = run_phase(run_once, args.warmup_runs, args.warmup_min_secs, args.max_secs, f"{label} warm-up")
    print(f"  {_stats_line(stats(warmup))}")
    print(f"Running benchmark for at least {args.num_runs} iterations and at least {args.min_secs:g} "
          f"seconds but terminate if exceeding {args.max_secs:g} seconds.")
    measured = run_phase(run_once, args.num_runs, args.min_secs, args.max_secs, label)
    print(f"  {_stats_line(stats(measured))}")
    first = warmup[0] if warmup else (measured[0] if measured else None)
    return first, stats(warmup), stats(measured)


def _stats_line(s):
    if not s["count"]:
        return "count=0"
    return (f"count={s['count']} first={s['first_ms']:.2f} min={s['min_ms']:.2f} max={s['max_ms']:.2f} "
            f"avg={s['avg_ms']:.2f} median={s['median_ms']:.2f} p90={s['p90_ms']:.2f} std={s['std_ms']:.2f} (ms)")


def end_to_end(interpreter, inputs):
    """One timed run: set inputs, invoke, read outputs; returns (seconds, outputs)."""
    input_indices = [d["index"] for d in interpreter.get_input_details()]
    output_indices = [d["index"] for d in interpreter.get_output_details()]
    last = {}

    def run_once():
        start = time.perf_counter()
        for index, value in zip(input_indices, inputs):
            interpreter.set_tensor(index, value)
        interpreter.invoke()
        outputs = [interpreter.get_tensor(index) for index in output_indices]
        elapsed = time.perf_counter() - start
        last["outputs"] = outputs
        return elapsed
    return run_once, last


# -- our runtime ----------------------------------------------------------------------------
def delegate_options(args):
    fields = {"serialization_dir": args.serialization_dir, "model_token": args.model_token}
    if args.precision is not None:
        fields["precision"] = args.precision
    if args.max_delegated_partitions is not None:
        fields["max_delegated_partitions"] = args.max_delegated_partitions
    if args.placement is not None:
        fields["placement"] = args.placement
    return GpuDelegateOptions(**fields)


def bench_ours(path, args):
    rss_before = common.current_rss_mb()
    start = time.perf_counter()
    delegate = GpuDelegate(delegate_options(args)) if args.use_gpu else None
    interpreter = Interpreter(model_path=str(path), experimental_delegates=[delegate] if delegate else None,
                              num_threads=args.num_threads if args.num_threads > 0 else None,
                              cpu_backend=args.cpu_backend)
    interpreter.allocate_tensors()
    init_ms = (time.perf_counter() - start) * 1000.0
    empty_dispatches(delegate, args)
    cpu = interpreter.cpu_summary()
    rss_init = common.current_rss_mb()
    summary = delegate.summary() if delegate else {}
    on_gpu = common.gpu_partition_of(delegate)
    graph = interpreter._main.graph
    ops = {op: {"gpu": g, "cpu": c} for op, (_, g, c) in common.op_counts(graph, on_gpu).items()}
    runtime = "gles_delegate GPU" if delegate else f"gles_delegate CPU ({cpu_kernels(cpu)})"

    print(f"Runtime: {runtime}")
    if delegate:
        print(f"GPU: {summary['renderer']} ({summary['gl_version']}; {summary['gl_api']} on the "
              f"{summary['egl_platform']} EGL display), precision {summary['precision']}")
        print(f"Delegation: {summary['gpu_nodes']} of {len(graph.nodes)} nodes on the GPU in "
              f"{summary['partitions']} partition(s), {summary['cpu_nodes']} on the CPU; "
              f"{summary['dispatches']} dispatches, {summary['programs']} programs; delegate compile "
              f"{summary['init_ms']:.1f} ms, cache hit: {'yes' if summary.get('cache_hit') else 'no'}")
        records = common.rewrite_log(delegate)
        if records:
            print(f"Rewrites: {common.rewrite_tally(records)} (gles-inspect lists them)")
    print(f"CPU nodes: {len(cpu['litert_nodes'])} on LiteRT's kernels in {len(cpu['litert_partitions'])} "
          f"sub-model(s), {len(cpu['reference_nodes'])} on the numpy reference kernels (cpu_backend "
          f"[{args.cpu_backend}])")
    if cpu["reference_nodes"] and (args.num_threads > 0 or not delegate):
        print(f"num_threads: [{args.num_threads}] is ignored by the numpy reference kernels (numpy/BLAS choose "
              "their own threads)")
    print(f"Initialized session in {init_ms:.1f} ms.")

    inputs = common.seeded_inputs(interpreter.get_input_details(), args.seed, common.index_ranges(path))
    run_once, last = end_to_end(interpreter, inputs)
    first, warmup, inference = benchmark(run_once, args, "gles_delegate")
    memory = {
        "gpu_intermediate_bytes": summary.get("intermediate_bytes", 0),
        "gpu_intermediate_lower_bound_bytes": summary.get("intermediate_lower_bound_bytes", 0),
        "gpu_intermediate_naive_bytes": summary.get("intermediate_naive_bytes", 0),
        "gpu_constant_bytes": summary.get("constant_bytes", 0),
        "host_peak_rss_mb": common.peak_rss_mb(),
        "host_rss_init_delta_mb": rss_init - rss_before,
    }
    result = {"runtime": runtime, "init_ms": init_ms, "first_inference_ms": first, "warmup": warmup,
              "inference": inference, "memory": memory, "delegation": {**summary, "ops": ops}}
    outputs = last.get("outputs")
    if delegate:
        delegate.close()
    return result, inputs, outputs


def empty_dispatches(delegate, args):
    """With --empty_dispatches, leave the compiled partitions of `delegate` without dispatches:
    GpuPartition.run then only writes the inputs and reads the outputs (its I/O path)."""
    if args.empty_dispatches and delegate is not None:
        for partition in delegate.partitions:
            partition.segments = []


def cpu_kernels(cpu):
    """What runs the CPU nodes, from Interpreter.cpu_summary() `cpu`."""
    if not cpu["litert_nodes"]:
        return "numpy reference kernels"
    return "LiteRT's kernels" + (" and numpy reference kernels" if cpu["reference_nodes"] else "")


# -- LiteRT ---------------------------------------------------------------------------------
def litert_version():
    try:
        from importlib.metadata import version
        return version("ai-edge-litert")
    except Exception:
        return "unknown"


def agreement(ours, theirs):
    """Max abs error of ours against theirs over all outputs, relative to max |theirs|."""
    worst = 0.0
    for a, b in zip(ours or [], theirs or []):
        b64 = np.asarray(b, np.float64)
        scale = float(np.max(np.abs(b64))) if b64.size else 0.0
        err = float(np.max(np.abs(np.asarray(a, np.float64) - b64))) if b64.size else 0.0
        worst = max(worst, err / scale if scale else err)
    return worst


def litert_interpreter(module, path, num_threads):
    """LiteRT's interpreter (XNNPACK) on the model, tensors allocated; num_threads -1: its default."""
    interpreter = module.Interpreter(model_path=str(path), num_threads=num_threads if num_threads > 0 else None)
    interpreter.allocate_tensors()
    return interpreter


def bench_litert_xnnpack(path, inputs, args, ours):
    module = common.litert()
    if module is None:
        return {"status": f"unavailable: {common.LITERT_MISSING}"}
    try:
        start = time.perf_counter()
        interpreter = common.native_call(litert_interpreter, module, path, args.num_threads)
        init_ms = (time.perf_counter() - start) * 1000.0
        run_once, last = end_to_end(interpreter, inputs)
        common.native_call(run_once)  # fail here, not inside the timing loop
    except RuntimeError as exc:  # a model LiteRT cannot run
        return {"status": f"unavailable: {exc}"}
    print(f"LiteRT {litert_version()} interpreter (XNNPACK): initialized in {init_ms:.1f} ms.")
    first, warmup, inference = benchmark(run_once, args, "LiteRT XNNPACK")
    return {"status": "ok", "runtime": f"ai-edge-litert {litert_version()} Interpreter (XNNPACK)",
            "init_ms": init_ms, "first_inference_ms": first, "warmup": warmup, "inference": inference,
            "max_relative_error_vs_gles_delegate": agreement(ours, last.get("outputs"))}


def bench_litert_delegate(path, inputs, args, ours):
    """LiteRT's Interpreter with our GpuDelegate (--runtime litert), on the same inputs: timings,
    the delegate's summary and the agreement of its outputs with gles_delegate's; where LiteRT
    cannot load the model, why."""
    start = time.perf_counter()
    delegate = GpuDelegate(delegate_options(args))
    interpreter, why_not = common.litert_delegated(delegate, model_path=str(path),
                                                   num_threads=args.num_threads if args.num_threads > 0 else None)
    if interpreter is None:
        delegate.close()
        return {"status": f"unavailable: {why_not}"}
    init_ms = (time.perf_counter() - start) * 1000.0
    empty_dispatches(delegate, args)
    summary = delegate.summary()
    print(f"LiteRT {litert_version()} Interpreter + gles_delegate: {summary['gpu_nodes']} nodes on the GPU in "
          f"{summary['partitions']} partition(s), {summary['cpu_nodes']} on LiteRT's CPU kernels; initialized in "
          f"{init_ms:.1f} ms.")
    run_once, last = end_to_end(interpreter, inputs)
    first, warmup, inference = benchmark(run_once, args, "LiteRT + gles_delegate")
    result = {"status": "ok", "init_ms": init_ms, "first_inference_ms": first, "warmup": warmup,
              "inference": inference, "delegation": summary,
              "interleaved": interleaved(path, inputs, args, delegate, run_once)}
    if ours is not None:
        result["max_relative_error_vs_gles_delegate"] = agreement(ours, last.get("outputs"))
    del interpreter, run_once, last  # the interpreter before its delegate
    delegate.close()
    return result


def interleaved(path, inputs, args, delegate, litert_run_once):
    """The two paths timed in alternation (A B B A ...), so that the machine's drift over the
    measurement falls on both alike: gles_delegate's Interpreter on the same `delegate` (one GL
    context, no context switch between the two) against LiteRT's run `litert_run_once`.
    Returns {gles_median_ms, litert_median_ms, ratio (LiteRT + ours / ours), count}."""
    interpreter = Interpreter(model_path=str(path), experimental_delegates=[delegate])
    interpreter.allocate_tensors()
    empty_dispatches(delegate, args)
    ours_run_once, _ = end_to_end(interpreter, inputs)
    times = {"gles": [], "litert": []}
    pair = (("gles", ours_run_once), ("litert", litert_run_once))
    for k in range(max(args.num_runs, 2) + max(args.warmup_runs, 1)):
        for name, run_once in (pair if k % 2 == 0 else pair[::-1]):
            times[name].append(run_once() * 1000.0)
    warm = max(args.warmup_runs, 1)
    gles, litert = (statistics.median(times[name][warm:]) for name in ("gles", "litert"))
    print(f"Interleaved (A B B A, {len(times['gles']) - warm} runs each): gles_delegate median {gles:.3f} ms, "
          f"LiteRT + gles_delegate median {litert:.3f} ms, ratio {litert / gles:.2f}")
    del interpreter, ours_run_once
    return {"gles_median_ms": gles, "litert_median_ms": litert, "ratio": litert / gles,
            "count": len(times["gles"]) - warm}


def litert_gpu_runner(path, inputs, enforce_f32=False):
    """LiteRT's CompiledModel on its GPU accelerator (WebGPU over Vulkan, or OpenCL), at its
    default precision (half storage where it chooses) or with enforce_f32: returns (run_once,
    init_ms, model, last), run_once timing write + run + read together (its run returns before
    the GPU is done), last["outputs"] the arrays its latest run read. Where the accelerator or
    the model cannot run here it raises a RuntimeError saying why (common.native_call)."""
    start = time.perf_counter()
    model, input_buffers, output_buffers = common.native_call(_compiled_on_gpu, path, enforce_f32)
    init_ms = (time.perf_counter() - start) * 1000.0
    details = [b.get_tensor_details() for b in output_buffers]
    sizes = [(int(np.prod(d["shape"])), d["dtype"], tuple(d["shape"])) for d in details]
    last = {}

    def run_once():
        t0 = time.perf_counter()
        for buffer, value in zip(input_buffers, inputs):
            buffer.write(value)
        model.run_by_index(0, input_buffers, output_buffers)
        outputs = [buffer.read(count, dtype) for buffer, (count, dtype, _) in zip(output_buffers, sizes)]
        elapsed = time.perf_counter() - t0
        last["outputs"] = [np.asarray(o).reshape(shape) for o, (_, _, shape) in zip(outputs, sizes)]
        return elapsed
    return run_once, init_ms, model, last


def _compiled_on_gpu(path, enforce_f32=False):
    """(CompiledModel on LiteRT's GPU accelerator, its input buffers, its output buffers)."""
    from ai_edge_litert.compiled_model import CompiledModel
    from ai_edge_litert.hardware_accelerator import HardwareAccelerator
    from ai_edge_litert.options import GpuOptions, Options
    options = Options(hardware_accelerators=HardwareAccelerator.GPU, gpu_options=GpuOptions(enforce_f32=enforce_f32))
    model = CompiledModel.from_file(str(path), options=options)
    return model, model.create_input_buffers(0), model.create_output_buffers(0)


def bench_litert_gpu(path, inputs, args):
    """LiteRT's GPU accelerator through CompiledModel; where it cannot run, why."""
    if common.litert() is None:
        return {"status": f"unavailable: {common.LITERT_MISSING}"}
    try:
        run_once, init_ms, model, _ = litert_gpu_runner(path, inputs)
    except RuntimeError as exc:
        return {"status": f"unavailable: {exc}"}
    try:
        common.native_call(run_once)
    except RuntimeError as exc:
        return {"status": f"failed: {exc}"}
    print(f"LiteRT {litert_version()} CompiledModel (GPU accelerator): initialized in {init_ms:.1f} ms.")
    first, warmup, inference = benchmark(run_once, args, "LiteRT GPU")
    return {"status": "ok", "runtime": f"ai-edge-litert {litert_version()} CompiledModel (GPU)",
            "fully_accelerated": bool(model.is_fully_accelerated()), "init_ms": init_ms,
            "first_inference_ms": first, "warmup": warmup, "inference": inference}


# -- report ---------------------------------------------------------------------------------
def _timing_line(name, r):
    inf = r["inference"]
    if not inf["count"]:
        return f"  {name:<24} init {r['init_ms']:.1f} ms, no measured runs"
    return (f"  {name:<24} init {r['init_ms']:8.1f}  first {r['first_inference_ms']:8.2f}  "
            f"avg {inf['avg_ms']:8.2f}  median {inf['median_ms']:8.2f}  p90 {inf['p90_ms']:8.2f}  "
            f"min {inf['min_ms']:8.2f}  (ms)")


def print_report(result):
    w, inf, mem = result["warmup"], result["inference"], result["memory"]
    fmt = lambda v: "n/a" if v is None else f"{v:.2f}"  # noqa: E731
    print("Inference timings in ms (end to end: set inputs + invoke + read outputs):")
    print(f"  Init: {result['init_ms']:.2f}, First inference: {fmt(result['first_inference_ms'])}, "
          f"Warmup (avg): {fmt(w['avg_ms'])}, Inference (avg): {fmt(inf['avg_ms'])}, "
          f"median: {fmt(inf['median_ms'])}, p90: {fmt(inf['p90_ms'])}, min: {fmt(inf['min_ms'])}")
    if mem["gpu_intermediate_bytes"]:
        lower, naive = mem["gpu_intermediate_lower_bound_bytes"], mem["gpu_intermediate_naive_bytes"]
        print(f"GPU memory: intermediates {common.mb(mem['gpu_intermediate_bytes'])} (lower bound "
              f"{common.mb(lower)}, naive {common.mb(naive)}), constants {common.mb(mem['gpu_constant_bytes'])}")
    print(f"Host memory: peak RSS {mem['host_peak_rss_mb']:.1f} MB "
          f"(init added {mem['host_rss_init_delta_mb']:+.1f} MB)")
    compare = result.get("compare")
    if compare:
        print("Compared on the same inputs (end-to-end ms):")
        print(_timing_line(result["runtime"], result))
        for key, name in (("litert_xnnpack", "LiteRT XNNPACK"), ("litert_gpu", "LiteRT GPU accelerator"),
                          ("litert_gles_delegate", "LiteRT + gles_delegate")):
            if key not in compare:
                continue
            r = compare[key]
            if r.get("status") != "ok":
                print(f"  {name:<24} {r['status']}")
                continue
            line = _timing_line(name, r)
            if inf["median_ms"] and r["inference"]["median_ms"]:
                line += f"  gles_delegate/LiteRT median: {inf['median_ms'] / r['inference']['median_ms']:.2f}x"
            print(line)
            if "max_relative_error_vs_gles_delegate" in r:
                print(f"  {'':<24} outputs agree with gles_delegate to "
                      f"{r['max_relative_error_vs_gles_delegate']:.2e} (max error / max |LiteRT|)")


def main(argv=None):
    return common.run_main(build_parser(), run, argv)


def run(args):
    path = args.graph
    size_mb = os.path.getsize(path) / 1e6
    print(f"gles-benchmark (gles_delegate {common.package_version()})")
    print(f"Graph: [{path}] ({size_mb:.2f} MB)")
    print(f"Use gpu: [{str(args.use_gpu).lower()}]  precision: [{args.precision or 'default'}]  "
          f"num_runs: [{args.num_runs}]  min_secs: [{args.min_secs:g}]  max_secs: [{args.max_secs:g}]  "
          f"warmup_runs: [{args.warmup_runs}]  warmup_min_secs: [{args.warmup_min_secs:g}]")
    if args.empty_dispatches:
        print("empty_dispatches: no GPU dispatch runs; the timings are the I/O path alone, the outputs meaningless")
    if args.serialization_dir or args.model_token:
        print(f"serialization_dir: [{args.serialization_dir}]  model_token: [{args.model_token}]")

    result, inputs, outputs = bench_ours(path, args)
    params = {k: v for k, v in vars(args).items() if k != "json"}
    result = {"tool": "gles-benchmark", "gles_delegate_version": common.package_version(), "model": str(path),
              "model_size_mb": size_mb, "params": params, **result}
    if args.compare == "litert":
        result["compare"] = {"litert_xnnpack": bench_litert_xnnpack(path, inputs, args, outputs),
                             "litert_gpu": bench_litert_gpu(path, inputs, args)}
    if args.runtime == "litert":
        result.setdefault("compare", {})["litert_gles_delegate"] = bench_litert_delegate(path, inputs, args, outputs)
    print_report(result)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2, default=common.json_default)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
