"""How far each precision's outputs are from FP32, and what precision 'auto' promoted.

    python -m gles_delegate.tools.precision_report MODEL_OR_DIR [...] [--seed 1] [--out results.md]
                                                   [--latency-runs 0]

For every model: the outputs of the GpuDelegate at fp16_fp32acc and at 'auto' (calibrated on
its default seeded inputs, seed 0) against those at fp32, on seeded random inputs (--seed,
default 1: not the calibration's inputs), as the largest max |x - x_fp32| / max |x_fp32| over
the outputs; also auto's error on its calibration inputs, what it promoted (tensors, nodes,
float buffer bytes), its calibration rounds and init time, and with --latency-runs N the median
invoke latency (ms) of fp16_fp32acc and auto. Prints a Markdown table (written to --out too).
"""
import statistics
import sys
import time


from gles_delegate import GpuDelegate, Interpreter
from gles_delegate.calibrate import error, sample_inputs
from gles_delegate.tools import common

HEADERS = ["model", "fp16_fp32acc", "auto", "auto (calib. inputs)", "promoted tensors", "promoted nodes",
           "float MB", "rounds", "auto init s", "fp16_fp32acc ms", "auto ms"]


def _run(path, precision, inputs, runs):
    """(outputs, summary, init seconds, median invoke ms or None)."""
    delegate = GpuDelegate(precision=precision)
    start = time.perf_counter()
    interpreter = Interpreter(model_path=str(path), experimental_delegates=[delegate])
    interpreter.allocate_tensors()
    init = time.perf_counter() - start
    common.set_inputs(interpreter, inputs)
    interpreter.invoke()
    outputs = [o.copy() for o in common.read_outputs(interpreter)]
    latency = None
    if runs:
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            interpreter.invoke()
            times.append(time.perf_counter() - start)
        latency = statistics.median(times) * 1000
    summary = delegate.summary()
    del interpreter
    delegate.close()
    return outputs, summary, init, latency


def _worst(outputs, reference):
    return max((error(a, b) for a, b in zip(outputs, reference)), default=0.0)


def measure(path, seed, runs):
    """One table row (a list of cells) for a model."""
    probe = Interpreter(model_path=str(path))
    probe.allocate_tensors()
    inputs = common.seeded_inputs(probe.get_input_details(), seed)
    calibration = sample_inputs(probe._main.graph)[0]
    calibration = [calibration[d["index"]] for d in probe.get_input_details()]
    del probe
    reference, _, _, _ = _run(path, "fp32", inputs, 0)
    half, _, _, half_ms = _run(path, "fp16_fp32acc", inputs, runs)
    auto, summary, init, auto_ms = _run(path, "auto", inputs, runs)
    calib_reference, _, _, _ = _run(path, "fp32", calibration, 0)
    calib_auto, _, _, _ = _run(path, "auto", calibration, 0)
    rounds = "/".join(str(c["rounds"]) for c in summary["calibration"])
    return [path.stem, f"{_worst(half, reference):.2e}", f"{_worst(auto, reference):.2e}",
            f"{_worst(calib_auto, calib_reference):.2e}", str(len(summary["promoted_tensors"])),
            str(len(summary["promoted_nodes"])), f"{summary['float_bytes'] / 1e6:.2f}", rounds, f"{init:.1f}",
            f"{half_ms:.1f}" if half_ms is not None else "-", f"{auto_ms:.1f}" if auto_ms is not None else "-"]


def build_parser():
    p = common.tool_parser("precision_report", __doc__)
    p.add_argument("models", nargs="+", type=common.model_files, help=".tflite files, directories or MediaPipe names")
    p.add_argument("--seed", type=common.non_negative_int, default=1, help="seed of the compared inputs (default 1)")
    p.add_argument("--latency-runs", type=common.non_negative_int, default=0,
                   help="also time this many invokes of fp16_fp32acc and auto (default 0: no timing)")
    p.add_argument("--out", type=common.output_file, default=None, help="also write the Markdown table here")
    return p


def main(argv=None):
    return common.run_main(build_parser(), run, argv)


def run(args):
    rows = []
    for path in [p for group in args.models for p in group]:
        rows.append(measure(path, args.seed, args.latency_runs))
        print(" | ".join(rows[-1]), flush=True)
    text = "\n".join("| " + " | ".join(cells) + " |" for cells in [HEADERS, ["---"] * len(HEADERS)] + rows)
    print(text)
    if args.out:
        common.write_atomic(args.out, "`python -m gles_delegate.tools.precision_report " + " ".join(sys.argv[1:])
                            + "`\n\n" + text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
