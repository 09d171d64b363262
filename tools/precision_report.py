"""How far each precision's outputs are from FP32, and what precision 'auto' promoted.

    python -m gles_delegate.tools.precision_report MODEL_OR_DIR [...] [--seed 1] [--samples 1]
                                [--out results.md] [--latency-runs 0] [--warmup 5] [--warmup-secs 0.5]

For every model: the outputs of the GpuDelegate at fp16_fp32acc and at 'auto' (calibrated on
its default seeded inputs, seed 0) against those at fp32, on --samples seeded random inputs
(--seed, default 1: drawn as calibration draws its own, uniform over the input ranges the
model's metadata states, else U(-1, 1); not the calibration's inputs, nor those it holds out),
as the largest max |x - x_fp32| / max |x_fp32| over the outputs and the samples; also auto's
error on its first calibration input, what it promoted (tensors, nodes, float buffer bytes),
its calibration runs and init time (calibrating: the calibration cache is a new temporary
directory, which the second 'auto' start, on the calibration input, loads the choice from; the
tool also measures another source tree's package: PYTHONPATH=TREE),
and with --latency-runs N the median invoke latency (ms) of fp16_fp32acc and
auto and their ratio: both interpreters live at once, --warmup invokes each first (for at least
--warmup-secs seconds), then timed in alternation (A B B A A B ...) so that a clock or load
change falls on both alike. Prints a Markdown table (written to --out too).
"""
import contextlib
import os
import statistics
import sys
import tempfile
import time


from gles_delegate import GpuDelegate, Interpreter
from gles_delegate.calibrate import error, sample_inputs
from gles_delegate.tools import common

# gpu/serialization/calibration.ENV, not imported: the tool also measures trees without it.
ENV = "GLES_DELEGATE_CALIBRATION_CACHE"
HEADERS = ["model", "fp16_fp32acc", "auto", "auto (calib. inputs)", "promoted tensors", "promoted nodes",
           "float MB", "runs", "auto init s", "fp16_fp32acc ms", "auto ms", "auto / fp16_fp32acc"]


class _Loaded:
    """A model's interpreter on a GpuDelegate of one precision, the first of `samples` set;
    init: seconds."""

    def __init__(self, path, precision, samples):
        self.delegate = GpuDelegate(precision=precision)
        start = time.perf_counter()
        self.interpreter = Interpreter(model_path=str(path), experimental_delegates=[self.delegate])
        self.interpreter.allocate_tensors()
        self.init = time.perf_counter() - start
        self.samples = samples
        common.set_inputs(self.interpreter, samples[0])

    def outputs(self):
        """[outputs] per sample (the last one stays set)."""
        out = []
        for inputs in self.samples:
            common.set_inputs(self.interpreter, inputs)
            self.interpreter.invoke()
            out.append([o.copy() for o in common.read_outputs(self.interpreter)])
        return out

    def timed(self):
        """Seconds of one invoke."""
        start = time.perf_counter()
        self.interpreter.invoke()
        return time.perf_counter() - start

    def close(self):
        self.interpreter = None
        self.delegate.close()


def _outputs(path, precision, samples):
    """([outputs] per sample, summary) of one fresh interpreter."""
    loaded = _Loaded(path, precision, samples)
    try:
        return loaded.outputs(), loaded.delegate.summary()
    finally:
        loaded.close()


def alternate(a, b, runs, warmup, warmup_secs=common.WARMUP_SECONDS):
    """(median ms of a(), median ms of b()): warmup calls each (and at least warmup_secs
    seconds of them), then runs calls each in the order A B B A A B ... (a and b return the
    seconds of one call)."""
    common.warm_up(lambda: (a(), b()), warmup, warmup_secs)
    times = ([], [])
    for k in range(runs):
        order = (0, 1) if k % 2 == 0 else (1, 0)
        for which in order:
            times[which].append((a, b)[which]())
    return tuple(statistics.median(t) * 1000 for t in times)


@contextlib.contextmanager
def _calibration_cache():
    """A new empty calibration cache while it lasts (the default calibration_cache_dir, through
    its environment variable: the tool also runs a source tree of a version without one)."""
    saved = os.environ.get(ENV)
    with tempfile.TemporaryDirectory(prefix="precision-report-") as directory:
        os.environ[ENV] = directory
        try:
            yield
        finally:
            if saved is None:
                del os.environ[ENV]
            else:
                os.environ[ENV] = saved


def _worst(per_sample, reference):
    """The largest error over the outputs of every sample."""
    return max((error(a, b) for outputs, ref in zip(per_sample, reference) for a, b in zip(outputs, ref)),
               default=0.0)


def measure(path, seed, runs, warmup=5, warmup_secs=common.WARMUP_SECONDS, samples=1):
    """One table row (a list of cells) for a model."""
    probe = Interpreter(model_path=str(path))
    probe.allocate_tensors()
    graph, indices = probe._main.graph, [d["index"] for d in probe.get_input_details()]
    # Both drawn as calibration draws its own: uniform over the ranges the model states.
    compared = [[drawn[i] for i in indices] for drawn in sample_inputs(graph, seed=seed, count=samples)]
    calibration = [[sample_inputs(graph)[0][i] for i in indices]]
    del probe
    reference, _ = _outputs(path, "fp32", compared)
    with _calibration_cache():
        half, auto = _Loaded(path, "fp16_fp32acc", compared), _Loaded(path, "auto", compared)
        try:
            half_out, auto_out, summary, init = half.outputs(), auto.outputs(), auto.delegate.summary(), auto.init
            half_ms, auto_ms = alternate(half.timed, auto.timed, runs, warmup, warmup_secs) if runs else (None, None)
        finally:
            half.close()
            auto.close()
        calib_reference, _ = _outputs(path, "fp32", calibration)
        calib_auto, _ = _outputs(path, "auto", calibration)
    rounds = "/".join(str(c["rounds"]) for c in summary["calibration"])
    timing = [f"{half_ms:.3g}", f"{auto_ms:.3g}", f"{auto_ms / half_ms:.2f}"] if runs else ["-"] * 3
    return [path.stem, f"{_worst(half_out, reference):.2e}", f"{_worst(auto_out, reference):.2e}",
            f"{_worst(calib_auto, calib_reference):.2e}", str(len(summary["promoted_tensors"])),
            str(len(summary["promoted_nodes"])), f"{summary['float_bytes'] / 1e6:.2f}", rounds, f"{init:.1f}"] + timing


def build_parser():
    p = common.tool_parser("precision_report", __doc__)
    p.add_argument("models", nargs="+", type=common.model_files, help=".tflite files, directories or MediaPipe names")
    p.add_argument("--seed", type=common.non_negative_int, default=1, help="seed of the compared inputs (default 1)")
    p.add_argument("--samples", type=common.positive_int, default=1,
                   help="compare on this many seeded inputs, the largest error over them (default 1)")
    p.add_argument("--latency-runs", type=common.non_negative_int, default=0,
                   help="also time this many invokes of fp16_fp32acc and auto, alternating (default 0: no timing)")
    p.add_argument("--warmup", type=common.non_negative_int, default=5,
                   help="untimed invokes of each before timing (default 5)")
    common.add_warmup_secs(p)
    p.add_argument("--out", type=common.output_file, default=None, help="also write the Markdown table here")
    return p


def main(argv=None):
    return common.run_main(build_parser(), lambda args: run(args, argv), argv)


def run(args, argv=None):
    rows = []
    for path in [p for group in args.models for p in group]:
        rows.append(measure(path, args.seed, args.latency_runs, args.warmup, args.warmup_secs, args.samples))
        print(" | ".join(rows[-1]), flush=True)
    text = "\n".join("| " + " | ".join(cells) + " |" for cells in [HEADERS, ["---"] * len(HEADERS)] + rows)
    print(text)
    if args.out:
        command = common.command_line("python -m gles_delegate.tools.precision_report", argv)
        common.write_atomic(args.out, f"`{command}`\n\n{text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
