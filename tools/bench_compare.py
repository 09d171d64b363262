"""Side-by-side latency of gles_delegate and ai-edge-litert on the same inputs, in one process.

    python -m gles_delegate.tools.bench_compare MODEL_OR_DIR [...] [--runs 50] [--out results]

For every model: ours at FP32 and fp16_fp32acc, LiteRT's interpreter (XNNPACK) at 1 and 16
threads, and LiteRT's GPU accelerator (CompiledModel) where it works. End-to-end latency is set
inputs + invoke + read outputs, the median of --runs runs after --warmup runs; throughput is
back-to-back invokes on fixed inputs. Writes results.md (a Markdown table, with the command that
produced it) and results.json.
"""
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from gles_delegate import GpuDelegate, Interpreter
from gles_delegate.tools import common
from gles_delegate.tools.benchmark_model import end_to_end, litert_gpu_runner, litert_interpreter

PRECISIONS = ("fp32", "fp16_fp32acc")


def median_ms(run_once, runs, warmup):
    for _ in range(warmup):
        run_once()
    return statistics.median(run_once() for _ in range(runs)) * 1000.0


def throughput(interpreter, runs):
    """Invokes per second, back to back, inputs already set."""
    start = time.perf_counter()
    for _ in range(runs):
        interpreter.invoke()
    return runs / (time.perf_counter() - start)


def ours(path, inputs, precision, args):
    start = time.perf_counter()
    delegate = GpuDelegate(precision=precision)
    interpreter = Interpreter(model_path=str(path), experimental_delegates=[delegate])
    interpreter.allocate_tensors()
    init_ms = (time.perf_counter() - start) * 1000.0
    run_once, _ = end_to_end(interpreter, inputs)
    result = {"init_ms": init_ms, "median_ms": median_ms(run_once, args.runs, args.warmup),
              "invokes_per_s": throughput(interpreter, args.runs), **delegate.summary()}
    delegate.close()
    return result


def litert_cpu(path, inputs, threads, args):
    interpreter = litert_interpreter(common.litert(), path, threads)
    run_once, _ = end_to_end(interpreter, inputs)
    return {"median_ms": median_ms(run_once, args.runs, args.warmup)}


def litert_gpu(path, inputs, args):
    """LiteRT's CompiledModel on its GPU accelerator (benchmark_model.litert_gpu_runner)."""
    run_once, init_ms, model = litert_gpu_runner(path, inputs)
    return {"init_ms": init_ms, "median_ms": median_ms(run_once, args.runs, args.warmup),
            "fully_accelerated": bool(model.is_fully_accelerated())}


def guarded(fn, *a):
    """fn(*a), or {"error": why} where that runtime cannot run the model here."""
    try:
        return common.native_call(fn, *a)
    except RuntimeError as exc:
        return {"error": str(exc)}


def bench_model(path, args):
    details = Interpreter(model_path=str(path)).get_input_details()
    inputs = common.seeded_inputs(details, 0)
    row = {"model": path.stem}
    for precision in PRECISIONS:
        row[f"ours_{precision}"] = guarded(ours, path, inputs, precision, args)
    if common.litert() is not None:
        row["litert_gpu"] = guarded(litert_gpu, path, inputs, args)
        for threads in (1, 16):
            row[f"xnnpack_{threads}"] = guarded(litert_cpu, path, inputs, threads, args)
    return row


def cell(entry, key="median_ms"):
    if entry is None:
        return "-"
    if "error" in entry:
        return "n/a"
    return f"{entry[key]:.2f}"


def ratio(row, baseline):
    best = min((row[f"ours_{p}"].get("median_ms", float("inf")) for p in PRECISIONS))
    base = row.get(baseline, {}).get("median_ms") if row.get(baseline) else None
    return f"{best / base:.2f}" if base and best != float("inf") else "-"


def markdown(rows, command, device):
    lines = [f"Measured on {device} with `{command}` (ms, median end-to-end: set inputs + invoke + read outputs).",
             "", "| model | ours fp32 | ours fp16_fp32acc | LiteRT GPU | XNNPACK 1t | XNNPACK 16t | "
             "best ours / LiteRT GPU | best ours / XNNPACK 16t | dispatches | ours init ms |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        fp32 = row["ours_fp32"]
        lines.append(f"| {row['model']} | {cell(fp32)} | {cell(row['ours_fp16_fp32acc'])} | "
                     f"{cell(row.get('litert_gpu'))} | {cell(row.get('xnnpack_1'))} | {cell(row.get('xnnpack_16'))} | "
                     f"{ratio(row, 'litert_gpu')} | {ratio(row, 'xnnpack_16')} | {fp32.get('dispatches', '-')} | "
                     f"{cell(fp32, 'init_ms')} |")
    errors = [f"- {row['model']} {name}: {entry['error']}" for row in rows for name, entry in row.items()
              if isinstance(entry, dict) and "error" in entry]
    return "\n".join(lines + ([""] + errors if errors else [])) + "\n"


def build_parser():
    parser = common.tool_parser("gles-bench-compare", __doc__)
    parser.add_argument("models", nargs="+", type=common.model_files, help="model files, directories of them, or MediaPipe model names")
    parser.add_argument("--runs", type=common.positive_int, default=50,
                        help="timed runs per runtime, whose median is reported (default 50)")
    parser.add_argument("--warmup", type=common.non_negative_int, default=10,
                        help="untimed runs before them (default 10)")
    parser.add_argument("--out", type=common.output_dir, default="bench_compare", help="directory for results.md and results.json")
    return parser


def main(argv=None):
    return common.run_main(build_parser(), lambda args: run(args, argv), argv)


def run(args, argv):
    command = "python -m gles_delegate.tools.bench_compare " + " ".join(argv if argv is not None else sys.argv[1:])
    rows, text = [], ""
    for path in [path for group in args.models for path in group]:
        print(f"{path.stem} ...", file=sys.stderr, flush=True)
        rows.append(bench_model(path, args))
        text = write_results(rows, command, Path(args.out))  # after every model: a cut-short run keeps its rows
    print(text)
    return 0


def write_results(rows, command, out):
    """Write results.md and results.json into `out` (each replaced whole, never half-written);
    returns the Markdown."""
    device = next((r["ours_fp32"]["renderer"] for r in rows if "renderer" in r["ours_fp32"]), "?")
    text = markdown(rows, command, f"{device} ({platform.node()}, {os.cpu_count()} CPUs)")
    out.mkdir(parents=True, exist_ok=True)
    common.write_atomic(out / "results.md", text)
    common.write_atomic(out / "results.json", json.dumps(rows, indent=1, default=str))
    return text


if __name__ == "__main__":
    sys.exit(main())
