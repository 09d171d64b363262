"""Side-by-side latency of gles_delegate and ai-edge-litert on the same inputs, in one process.

    python -m gles_delegate.tools.bench_compare MODEL_OR_DIR [...] [--runs 50] [--out results] [--fastest]
    python -m gles_delegate.tools.bench_compare --merge A/results.json --merge B/results.json --out all

For every model: ours at FP32, fp16_fp32acc and auto (with --fastest also ours with
placement='fastest' at fp16_fp32acc or the precision given, whose "fastest on" column says where
its partitions ran: GPU, CPU, or both; with --sustained also ours with
inference_preference='sustained_speed', which "best ours" then counts), LiteRT's interpreter (XNNPACK) at 1 and 16
threads, and LiteRT's GPU accelerator (CompiledModel) where it works, at its default precision
and with enforce_f32 (--skip leaves any of these but XNNPACK at 16 threads out, to save a lent
GPU's time). End-to-end latency is set inputs + invoke + read outputs, the median of
--runs runs after --warmup runs (and at least --warmup-secs seconds of them); throughput is
back-to-back invokes on fixed inputs. Each GPU runtime's outputs are compared with XNNPACK's (16 threads) on the same inputs: the largest
max|a - b| / max|b| over the outputs. Writes results.md (a Markdown table, with the command
that produced it) and results.json.
"""
import numpy as np
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

PRECISIONS = ("fp32", "fp16_fp32acc", "auto")
LITERT_GPU = {"litert_gpu": False, "litert_gpu_f32": True}  # row key -> enforce_f32
SKIPPABLE = ("litert_gpu", "litert_gpu_f32", "xnnpack_1")  # --skip: baselines a table may go without


def median_ms(run_once, args):
    """Median ms of args.runs calls of run_once() (which returns seconds), after the warm-up."""
    common.warm_up(run_once, args.warmup, args.warmup_secs)
    return statistics.median(run_once() for _ in range(args.runs)) * 1000.0


def throughput(interpreter, runs):
    """Invokes per second, back to back, inputs already set."""
    start = time.perf_counter()
    for _ in range(runs):
        interpreter.invoke()
    return runs / (time.perf_counter() - start)


def ours(path, inputs, precision, args, placement="gpu", preference="fast_single_answer"):
    start = time.perf_counter()
    delegate = GpuDelegate(precision=precision, placement=placement, inference_preference=preference)
    interpreter = Interpreter(model_path=str(path), experimental_delegates=[delegate])
    interpreter.allocate_tensors()
    init_ms = (time.perf_counter() - start) * 1000.0
    run_once, last = end_to_end(interpreter, inputs)
    result = {"init_ms": init_ms, "median_ms": median_ms(run_once, args),
              "invokes_per_s": throughput(interpreter, args.runs), "outputs": last["outputs"], **delegate.summary()}
    delegate.close()
    return result


def litert_cpu(path, inputs, threads, args):
    interpreter = litert_interpreter(common.litert(), path, threads)
    run_once, last = end_to_end(interpreter, inputs)
    return {"median_ms": median_ms(run_once, args), "outputs": last["outputs"]}


def litert_gpu(path, inputs, args, enforce_f32=False):
    """LiteRT's CompiledModel on its GPU accelerator (benchmark_model.litert_gpu_runner)."""
    run_once, init_ms, model, last = litert_gpu_runner(path, inputs, enforce_f32)
    return {"init_ms": init_ms, "median_ms": median_ms(run_once, args),
            "fully_accelerated": bool(model.is_fully_accelerated()), "outputs": last["outputs"]}


def relative_error(outputs, reference):
    """The largest max|a - b| / max|b| over the outputs (float64; inf where shapes differ)."""
    worst = 0.0
    for a, b in zip(outputs, reference):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        if a.shape != b.shape:
            return float("inf")
        worst = max(worst, float(np.max(np.abs(a - b), initial=0.0)) / max(float(np.max(np.abs(b), initial=0.0)), 1e-30))
    return worst


def add_errors(row):
    """Each GPU runtime's relative_error against XNNPACK-16's outputs (as "error_vs_xnnpack"),
    then drop the outputs (results.json keeps numbers, not arrays)."""
    reference = (row.get("xnnpack_16") or {}).get("outputs")
    for entry in row.values():
        if isinstance(entry, dict) and "outputs" in entry:
            outputs = entry.pop("outputs")
            if reference is not None and entry is not row.get("xnnpack_16"):
                entry["error_vs_xnnpack"] = relative_error(outputs, reference)
    if reference is not None:
        row["xnnpack_16"].pop("outputs", None)
    return row


def guarded(fn, *a):
    """fn(*a), or {"error": why} where that runtime cannot run the model here."""
    try:
        return common.native_call(fn, *a)
    except RuntimeError as exc:
        return {"error": str(exc)}


def bench_model(path, args):
    details = Interpreter(model_path=str(path)).get_input_details()
    inputs = common.seeded_inputs(details, 0, common.index_ranges(path))
    row = {"model": path.stem}
    for precision in PRECISIONS:
        row[f"ours_{precision}"] = guarded(ours, path, inputs, precision, args)
    if args.fastest:
        row["ours_fastest"] = guarded(ours, path, inputs, args.fastest, args, "fastest")
    if args.sustained:
        row["ours_sustained"] = guarded(ours, path, inputs, args.sustained, args, "gpu", "sustained_speed")
    if common.litert() is not None:
        for key, enforce_f32 in LITERT_GPU.items():
            if key not in args.skip:
                row[key] = guarded(litert_gpu, path, inputs, args, enforce_f32)
        for threads in (1, 16):
            if f"xnnpack_{threads}" not in args.skip:
                row[f"xnnpack_{threads}"] = guarded(litert_cpu, path, inputs, threads, args)
    return add_errors(row)


def cell(entry, key="median_ms", spec=".2f"):
    if entry is None:
        return "-"
    if "error" in entry or key not in entry:
        return "n/a"
    return f"{entry[key]:{spec}}"


def best_ms(row, keys):
    """The fastest median of the entries `keys` of a row (inf where none ran)."""
    return min((row.get(k) or {}).get("median_ms", float("inf")) for k in keys)


def ratio(row, baseline_keys):
    return _ratio(best_ms(row, [f"ours_{p}" for p in PRECISIONS] + ["ours_sustained"]), best_ms(row, baseline_keys))


def _ratio(ms, base_ms):
    return f"{ms / base_ms:.2f}" if base_ms != float("inf") and ms != float("inf") else "-"


COLUMNS = [("ours fp32", "ours_fp32"), ("ours fp16_fp32acc", "ours_fp16_fp32acc"), ("ours auto", "ours_auto"),
           ("LiteRT GPU", "litert_gpu"), ("LiteRT GPU f32", "litert_gpu_f32"),
           ("XNNPACK 1t", "xnnpack_1"), ("XNNPACK 16t", "xnnpack_16")]
ERROR_COLUMNS = [("ours fp32", "ours_fp32"), ("ours fp16_fp32acc", "ours_fp16_fp32acc"), ("ours auto", "ours_auto"),
                 ("LiteRT GPU", "litert_gpu"), ("LiteRT GPU f32", "litert_gpu_f32")]


def placed_on(entry):
    """Where placement='fastest' left the partitions of a row's "ours_fastest" entry: 'GPU',
    'CPU', 'GPU+CPU' ('-' where it found none, 'n/a' where it did not run)."""
    if entry is None or "error" in entry:
        return "n/a"
    places = {record["on"].upper() for record in entry.get("placements", [])}
    return "+".join(sorted(places, key=["GPU", "CPU"].index)) or "-"


def fastest_columns(rows):
    """(header cells, row -> its cells) of the --fastest columns, none when no row has them."""
    if not any("ours_fastest" in row for row in rows):
        return [], lambda row: []
    return (["ours fastest", "fastest on", "ours fastest / XNNPACK 16t"],
            lambda row: [cell(row.get("ours_fastest")), placed_on(row.get("ours_fastest")),
                         _ratio(best_ms(row, ["ours_fastest"]), best_ms(row, ["xnnpack_16"]))])


def markdown(rows, command, device):
    extra_header, extra = fastest_columns(rows)
    columns = COLUMNS[:3] + ([("ours sustained", "ours_sustained")] if any("ours_sustained" in r for r in rows) else []) \
        + COLUMNS[3:]
    header = ([name for name, _ in columns] + ["best ours / best LiteRT GPU", "best ours / XNNPACK 16t"]
              + extra_header + [f"error {name}" for name, _ in ERROR_COLUMNS] + ["dispatches", "ours init ms"])
    lines = [f"Measured on {device} with `{command}` (ms, median end-to-end: set inputs + invoke + read outputs; "
             "error: max|a - XNNPACK 16t| / max|XNNPACK 16t| over the outputs).",
             "", "| model | " + " | ".join(header) + " |", "|---" * (len(header) + 1) + "|"]
    for row in rows:
        cells = ([cell(row.get(key)) for _, key in columns]
                 + [ratio(row, list(LITERT_GPU)), ratio(row, ["xnnpack_16"])] + extra(row)
                 + [cell(row.get(key), "error_vs_xnnpack", ".1e") for _, key in ERROR_COLUMNS]
                 + [str(row["ours_fp32"].get("dispatches", "-")), cell(row["ours_fp32"], "init_ms")])
        lines.append(f"| {row['model']} | " + " | ".join(cells) + " |")
    errors = [f"- {row['model']} {name}: {entry['error']}" for row in rows for name, entry in row.items()
              if isinstance(entry, dict) and "error" in entry]
    return "\n".join(lines + ([""] + errors if errors else [])) + "\n"


def build_parser():
    parser = common.tool_parser("gles-bench-compare", __doc__)
    parser.add_argument("models", nargs="*", type=common.model_files,
                        help="model files, directories of them, or MediaPipe model names")
    parser.add_argument("--models-dir", type=common.model_files, action="append", default=[],
                        help="a folder whose every .tflite file is measured (repeatable; with or instead of models)")
    parser.add_argument("--runs", type=common.positive_int, default=50,
                        help="timed runs per runtime, whose median is reported (default 50)")
    parser.add_argument("--warmup", type=common.non_negative_int, default=10,
                        help="untimed runs before them (default 10)")
    common.add_warmup_secs(parser)
    parser.add_argument("--fastest", nargs="?", const="fp16_fp32acc", default=None, choices=common.PRECISIONS,
                        metavar="PRECISION",
                        help="also time ours with placement='fastest' (each small GPU partition timed against "
                             "LiteRT's CPU kernels at start-up, the faster kept) at PRECISION (default "
                             "fp16_fp32acc)")
    parser.add_argument("--sustained", nargs="?", const="fp16_fp32acc", default=None, choices=common.PRECISIONS,
                        metavar="PRECISION",
                        help="also time ours with inference_preference='sustained_speed' (workgroups tuned, "
                             "every dispatch's params compiled into its program: a longer init) at PRECISION "
                             "(default fp16_fp32acc); 'best ours' counts it")
    parser.add_argument("--skip", action="append", default=[], choices=SKIPPABLE, metavar="BASELINE",
                        help=f"leave out a baseline (repeatable; one of {', '.join(SKIPPABLE)}): its column "
                             "reads '-'; xnnpack_16 stays, the errors are measured against it")
    parser.add_argument("--merge", action="append", default=[], metavar="RESULTS_JSON",
                        help="measure nothing: merge the rows of earlier runs' results.json files (repeatable, "
                             "in order) into one table")
    parser.add_argument("--out", type=common.output_dir, default="bench_compare", help="directory for results.md and results.json")
    return parser


def main(argv=None):
    return common.run_main(build_parser(), lambda args: run(args, argv), argv)


def run(args, argv):
    command = common.command_line("python -m gles_delegate.tools.bench_compare", argv)
    rows, text = [], ""
    groups = args.models + args.models_dir
    if args.merge:
        if groups:
            raise common.ToolError("--merge measures nothing: give it no models")
        rows = [row for path in args.merge for row in merged_rows(path)]
        print(write_results(rows, command, Path(args.out), "earlier runs' machine (each run's results.md names it)"))
        return 0
    if not groups:
        raise common.ToolError("give models, --models-dir DIR, or --merge RESULTS_JSON")
    for path in [path for group in groups for path in group]:
        print(f"{path.stem} ...", file=sys.stderr, flush=True)
        rows.append(bench_model(path, args))
        text = write_results(rows, command, Path(args.out))  # after every model: a cut-short run keeps its rows
    print(text)
    return 0


def merged_rows(path):
    """The rows of a results.json this tool wrote; a ToolError naming `path` for anything else."""
    try:
        rows = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise common.ToolError(f"--merge {path}: {exc}") from None
    if not isinstance(rows, list) or not all(isinstance(r, dict) and "model" in r and isinstance(r.get("ours_fp32"), dict)
                                             for r in rows):
        raise common.ToolError(f"--merge {path}: not a results.json of bench_compare (a list of rows with "
                               "'model' and 'ours_fp32')")
    return rows


def write_results(rows, command, out, host=None):
    """Write results.md and results.json into `out` (each replaced whole, never half-written);
    returns the Markdown. host: where the rows were measured (default: this machine)."""
    device = next((r["ours_fp32"]["renderer"] for r in rows if "renderer" in r["ours_fp32"]), "?")
    text = markdown(rows, command, f"{device} ({host or f'{platform.node()}, {os.cpu_count()} CPUs'})")
    out.mkdir(parents=True, exist_ok=True)
    common.write_atomic(out / "results.md", text)
    common.write_atomic(out / "results.json", json.dumps(rows, indent=1, default=str))
    return text


if __name__ == "__main__":
    sys.exit(main())
