"""What the graph compiler makes of models: dispatches per invoke with the rewrite rules off and
on, distinct programs, barriers, and the GPU intermediate memory against its lower bound and the
naive plan (one buffer per tensor).

    gles-compiler-report [MODEL ...] [--mediapipe] [--precision=fp32] [--markdown=FILE] [--rules] [--parity]
                         [--gpu-time]

MODEL: .tflite paths or MediaPipe model names; --mediapipe adds the 14 MediaPipe models (the
default when no model is named). Each model is
compiled (allocate_tensors) twice, rewrite_rules False then True; memory and barriers are the
rules-on plan's. --parity also runs the rules-on delegate on seeded uniform [-1, 1) inputs and
reports its largest relative error (max |ours - theirs| / max |theirs| over each output) against
LiteRT, or against this package's reference interpreter for a model LiteRT cannot run.
--gpu-time compiles each model three ways (rules off, on, on with tuned workgroups), runs them in
turns after a warm-up and reports the GPU time of one invoke (GL_TIME_ELAPSED, minimum of
GPU_ROUNDS; n/a on a GPU whose timer does not time compute work, such as llvmpipe) and the init
time. --markdown writes the table as Markdown (docs/compiler.md holds one). --rules prints, per
model, how often each rule applied and was skipped.
"""
import collections
import sys
import time
from pathlib import Path

import numpy as np

from gles_delegate import GpuDelegate, Interpreter
from gles_delegate.gpu.workgroup_tuner import elapsed_ns
from gles_delegate.tools import common

GPU_CONFIGS = {"rules off": {"rewrite_rules": False}, "rules on": {}, "tuned": {"tune_workgroups": True}}
GPU_WARM_UP, GPU_ROUNDS = 20, 15

HEADERS = ["model", "GPU nodes", "dispatches (rules off)", "dispatches (rules on)", "programs (off)",
           "programs (on)", "barriers", "intermediate", "lower bound", "naive", "plan / bound", "plan / naive"]


def compile_summary(path, precision, rewrite_rules):
    """(the delegate's summary, its rewrite log, barriers per invoke) after compiling the model."""
    with GpuDelegate(precision=precision, rewrite_rules=rewrite_rules) as delegate:
        interpreter = Interpreter(model_path=str(path), experimental_delegates=[delegate])
        interpreter.allocate_tensors()
        barriers = sum(step[4] for p in delegate.partitions for step in p.plan.steps)
        return delegate.summary(), list(delegate.rewrite_log), barriers


def measure(path, precision):
    """One row of figures for a model: {key: value}."""
    off, _, _ = compile_summary(path, precision, False)
    on, log, barriers = compile_summary(path, precision, True)
    plan, bound, naive = (on[k] for k in ("intermediate_bytes", "intermediate_lower_bound_bytes",
                                          "intermediate_naive_bytes"))
    return {"model": Path(path).stem, "gpu_nodes": on["gpu_nodes"], "dispatches_off": off["dispatches"],
            "dispatches_on": on["dispatches"], "programs_off": off["programs"], "programs_on": on["programs"],
            "barriers": barriers, "intermediate": plan, "lower_bound": bound, "naive": naive,
            "over_bound": plan / bound - 1 if bound else 0.0, "of_naive": plan / naive if naive else 0.0,
            "rules": collections.Counter((r.rule, r.status) for r in log)}


def parity(path, precision):
    """(largest relative error of the rules-on delegate over the outputs, what it was compared
    with: 'LiteRT' or 'reference')."""
    details = Interpreter(model_path=str(path)).get_input_details()
    values = common.seeded_inputs(details, 0, common.index_ranges(path))
    theirs, against = None, "LiteRT"
    module = common.litert()
    if module is not None:
        try:
            with common.captured_native_stderr():
                theirs = _run(module.Interpreter(model_path=str(path)), values)
        except (RuntimeError, ValueError):
            theirs = None
    if theirs is None:
        theirs, against = _run(Interpreter(model_path=str(path), cpu_backend="fallback"), values), "reference"
    with GpuDelegate(precision=precision) as delegate:
        ours = _run(Interpreter(model_path=str(path), experimental_delegates=[delegate]), values)
    errors = [float(np.max(np.abs(a.astype(np.float64) - b), initial=0.0)) / max(float(np.max(np.abs(b))), 1e-30)
              for a, b in zip(ours, theirs)]
    return max(errors, default=0.0), against


def gpu_time(path, precision):
    """{config: (GPU us per invoke or None, init s)} for GPU_CONFIGS, measured in turns."""
    values = common.seeded_inputs(Interpreter(model_path=str(path)).get_input_details(), 0,
                                  common.index_ranges(path))
    runs = {}
    for name, options in GPU_CONFIGS.items():
        delegate = GpuDelegate(precision=precision, **options)
        start = time.perf_counter()
        interpreter = Interpreter(model_path=str(path), experimental_delegates=[delegate])
        interpreter.allocate_tensors()
        common.set_inputs(interpreter, values)
        runs[name] = (delegate, interpreter, time.perf_counter() - start)
    best = {name: None for name in runs}
    for round_ in range(GPU_WARM_UP + GPU_ROUNDS):
        for name, (delegate, interpreter, _) in runs.items():
            ns = elapsed_ns(delegate.context, interpreter.invoke)
            if round_ >= GPU_WARM_UP and ns is not None:
                best[name] = ns if best[name] is None else min(best[name], ns)
    out = {name: (None if best[name] is None else best[name] / 1e3, runs[name][2]) for name in runs}
    for delegate, _, _ in runs.values():
        delegate.close()
    return out


def _run(interpreter, values):
    interpreter.allocate_tensors()
    common.set_inputs(interpreter, values)
    interpreter.invoke()
    return [np.array(x) for x in common.read_outputs(interpreter)]


def cells(row, size=common.mb):
    out = [row["model"], row["gpu_nodes"], row["dispatches_off"], row["dispatches_on"], row["programs_off"],
           row["programs_on"], row["barriers"], size(row["intermediate"]), size(row["lower_bound"]),
           size(row["naive"]), f"+{100 * row['over_bound']:.1f}%", f"{row['of_naive']:.3f}"]
    if "parity" in row:
        out.append(f"{row['parity'][0]:.1e} ({row['parity'][1]})")
    for name in GPU_CONFIGS if "gpu_time" in row else ():
        us, init = row["gpu_time"][name]
        out.append(("n/a" if us is None else f"{us:.0f} us") + f", init {init:.1f} s")
    return out


def headers(rows):
    extra = (["max relative error"] if rows and "parity" in rows[0] else []) + \
        ([f"GPU time ({name})" for name in GPU_CONFIGS] if rows and "gpu_time" in rows[0] else [])
    return HEADERS + extra


def markdown(rows, command):
    """The rows as a Markdown table, with the command that produced them and the totals."""
    names = headers(rows)
    lines = [f"Produced by `{command}`.", "",
             "| " + " | ".join(names) + " |", "|" + "|".join(["---"] + ["---:"] * (len(names) - 1)) + "|"]
    lines += ["| " + " | ".join(str(c) for c in cells(row)) + " |" for row in rows]
    total_off = sum(r["dispatches_off"] for r in rows)
    total_on = sum(r["dispatches_on"] for r in rows)
    worst = max((r["over_bound"] for r in rows), default=0.0)
    worst_naive = max((r["of_naive"] for r in rows), default=0.0)
    lines += ["", f"Dispatches over all models: {total_off} with the rules off, {total_on} with them on "
                  f"({100 * (1 - total_on / max(total_off, 1)):.0f}% fewer). Memory: at most "
                  f"+{100 * worst:.1f}% over the lower bound, at most {worst_naive:.3f} of naive."]
    return "\n".join(lines) + "\n"


def build_parser():
    parser = common.tool_parser("gles-compiler-report", __doc__)
    parser.add_argument("models", nargs="*", type=common.model_file, help="model paths or MediaPipe names (default: the 14 MediaPipe models)")
    parser.add_argument("--mediapipe", action="store_true", help="also the 14 MediaPipe models")
    common.add_precision(parser)
    parser.add_argument("--markdown", metavar="FILE", type=common.output_file, help="also write the table as Markdown")
    parser.add_argument("--rules", action="store_true", help="print each model's rule tally")
    parser.add_argument("--parity", action="store_true", help="also run each model and report its error")
    parser.add_argument("--gpu-time", action="store_true", help="also time one invoke on the GPU, three ways")
    return parser


def main(argv=None):
    return common.run_main(build_parser(), lambda args: run(args, argv), argv)


def run(args, argv):
    from gles_delegate.tools.fetch_models import MODEL_NAMES
    rows = []
    mediapipe = [common.model_file(name) for name in MODEL_NAMES] if args.mediapipe or not args.models else []
    for path in mediapipe + args.models:
        row = measure(path, args.precision)
        if args.parity:
            row["parity"] = parity(path, args.precision)
        if args.gpu_time:
            row["gpu_time"] = gpu_time(path, args.precision)
        rows.append(row)
        print(f"{row['model']}: {row['dispatches_off']} -> {row['dispatches_on']} dispatches", file=sys.stderr)
        if args.rules:
            print("  " + ", ".join(f"{rule} {status} x{k}" for (rule, status), k in sorted(row["rules"].items())),
                  file=sys.stderr)
    print(common.table([cells(row) for row in rows], headers(rows), "<" + ">" * (len(headers(rows)) - 1)))
    if args.markdown:
        command = common.command_line("gles-compiler-report", argv)
        Path(args.markdown).write_text(markdown(rows, command.strip()))
        print(f"wrote {args.markdown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
