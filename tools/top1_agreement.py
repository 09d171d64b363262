"""Top-1 agreement of a classifier between the GPU delegate and LiteRT on seeded random inputs.

    python -m gles_delegate.tools.top1_agreement MODEL [...] [--seeds 100] [--precision fp32]

For each seed: the same input (uniform [-1, 1) for float inputs, uniform integers over the
type's range for int8 / uint8 inputs) through ours (GpuDelegate) and LiteRT's interpreter;
reports how many top-1 classes agree, the largest output difference (in quantization steps for
integer outputs) and where the model ran (GPU / CPU nodes). A model LiteRT cannot load (an op
it lacks, such as MediaPipe's custom ops), or any model without ai-edge-litert, is compared
with our numpy reference instead: its row's last column says so and why.
"""
import sys

import numpy as np

from gles_delegate import GpuDelegate, Interpreter
from gles_delegate.tools import common


def seeded_input(detail, seed):
    rng = np.random.default_rng(seed)
    dtype, shape = np.dtype(detail["dtype"]), tuple(detail["shape"])
    if dtype.kind == "f":
        return rng.uniform(-1, 1, shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def oracle(path):
    """(interpreter to compare with, what it is): LiteRT's, or where LiteRT cannot load the model
    the numpy reference (LiteRT's kernels only for ops it lacks: cpu_backend 'fallback'), with
    why."""
    litert, why_not = common.litert_loaded(model_path=str(path))
    if litert is not None:
        return litert, "LiteRT"
    reference = Interpreter(model_path=str(path), cpu_backend="fallback")
    reference.allocate_tensors()
    return reference, f"numpy reference ({why_not})"


def agreement(path, seeds, precision):
    """(agreeing, seeds, max |ours - oracle|, delegate summary, what the oracle is) over the first
    output; every input gets its own seeded values."""
    delegate = GpuDelegate(precision=precision)
    ours = Interpreter(model_path=str(path), experimental_delegates=[delegate])
    ours.allocate_tensors()  # first: a malformed model is a ModelError of ours, in one line
    theirs, against = oracle(path)
    details = ours.get_input_details()
    agreeing, worst = 0, 0.0
    for seed in range(seeds):
        inputs = [seeded_input(detail, seed * len(details) + k) for k, detail in enumerate(details)]
        outputs = []
        for interpreter in (ours, theirs):
            for detail, x in zip(details, inputs):
                interpreter.set_tensor(detail["index"], x)
            interpreter.invoke()
            outputs.append(interpreter.get_tensor(interpreter.get_output_details()[0]["index"]))
        a, b = outputs
        agreeing += int(np.argmax(a) == np.argmax(b))
        worst = max(worst, float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))))
    summary = delegate.summary()
    delegate.close()
    return agreeing, seeds, worst, summary, against


def build_parser():
    parser = common.tool_parser("gles-top1", __doc__)
    parser.add_argument("models", nargs="+", type=common.model_file, help=".tflite files or MediaPipe model names")
    parser.add_argument("--seeds", type=common.positive_int, default=100,
                        help="how many seeded inputs to compare on (default 100)")
    common.add_precision(parser)
    return parser


def main(argv=None):
    return common.run_main(build_parser(), run, argv)


def run(args):
    for k, path in enumerate(args.models):
        agreeing, seeds, worst, summary, against = agreement(path, args.seeds, args.precision)
        if k == 0:  # after the first model ran: a malformed one is then a single line on stderr
            print("| model | precision | top-1 agreeing | max output difference | GPU nodes | CPU nodes | compared with |")
            print("|---|---|---|---|---|---|---|")
        print(f"| {path.stem} | {args.precision} | {agreeing}/{seeds} | {worst:.3g} | {summary['gpu_nodes']} | "
              f"{summary['cpu_nodes']} | {against} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
