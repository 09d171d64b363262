"""The quick-start demo: run a real model on the GPU delegate and say how it went.

    python -m gles_delegate.tools.demo [--model NAME_OR_PATH] [--precision fp32] [--runs 20]

Fetches MediaPipe's selfie_segmentation (from the mediapipe wheel on PyPI) unless given a
model, runs it on the GPU delegate, and prints what ran where, each output's agreement with
the reference runtime (ai-edge-litert, where it can load the model: it says why not in one line
otherwise) and with our numpy reference, and timings.
"""
import statistics
import sys
import time

import numpy as np

from gles_delegate import GpuDelegate, Interpreter
from gles_delegate.tools import common
from gles_delegate.tools.fetch_models import MODEL_NAMES


def run(interpreter, inputs):
    """set inputs, invoke, read outputs; returns (outputs, seconds)."""
    start = time.perf_counter()
    common.set_inputs(interpreter, inputs)
    interpreter.invoke()
    outputs = common.read_outputs(interpreter)
    return outputs, time.perf_counter() - start


def median_ms(interpreter, inputs, runs):
    return statistics.median(run(interpreter, inputs)[1] for _ in range(runs)) * 1000


def gpu_interpreter(path, delegate, runtime):
    """The interpreter the delegate runs in, its tensors allocated: ours, or LiteRT's (--runtime
    litert: a model LiteRT cannot load even with the GPU taking what it can is a ToolError)."""
    interpreter, why_not = common.delegated_interpreter(runtime, delegate, model_path=str(path))
    if interpreter is None:
        raise common.ToolError(f"--runtime litert: {why_not}")
    return interpreter


def where_ops_ran(interpreter, delegate):
    """{op: (on GPU, on CPU)} counts over the executed graph."""
    counts = common.op_counts(interpreter._main.graph, common.gpu_partition_of(delegate))
    return {op: (on_gpu, on_cpu) for op, (_, on_gpu, on_cpu) in counts.items()}


def agreement(ours, theirs):
    scale = float(np.max(np.abs(theirs)))
    err = float(np.max(np.abs(ours.astype(np.float64) - theirs)))
    return err, err / scale if scale else err


def build_parser():
    parser = common.tool_parser("python -m gles_delegate.tools.demo", __doc__)
    parser.add_argument("--model", type=common.model_file, default="selfie_segmentation", help=f"a path or one of {', '.join(MODEL_NAMES)}")
    common.add_precision(parser)
    parser.add_argument("--runs", type=common.positive_int, default=20,
                        help="timed runs on the GPU delegate and on LiteRT (a quarter of them on the numpy "
                             "reference); default 20")
    parser.add_argument("--runtime", choices=["gles", "litert"], default="gles",
                        help="the interpreter the GPU delegate runs in: gles_delegate's (default) or LiteRT's own "
                             "(ai_edge_litert; its CPU kernels run what the GPU does not)")
    return parser


def main(argv=None):
    return common.run_main(build_parser(), demo, argv)


def demo(args):
    path = args.model
    print(f"model: {path}")

    delegate = GpuDelegate(precision=args.precision)
    start = time.perf_counter()
    gpu = gpu_interpreter(path, delegate, args.runtime)
    init_ms = (time.perf_counter() - start) * 1000
    summary = delegate.summary()
    print(f"GPU: {summary['renderer']} ({summary['gl_version']}), precision {summary['precision']}")
    print(f"{summary['gpu_nodes']} nodes on the GPU in {summary['partitions']} partition(s), "
          f"{summary['cpu_nodes']} on the CPU; {summary['dispatches']} dispatches, {summary['programs']} programs, "
          f"{summary['intermediate_bytes'] / 1e6:.2f} MB intermediates "
          f"(lower bound {summary['intermediate_lower_bound_bytes'] / 1e6:.2f} MB)")
    for op, (on_gpu, on_cpu) in (where_ops_ran(gpu, delegate) if args.runtime == "gles" else {}).items():
        print(f"  {op:<28} GPU {on_gpu:>3}   CPU {on_cpu:>3}")

    inputs = common.seeded_inputs(gpu.get_input_details())
    first_start = time.perf_counter()
    ours, _ = run(gpu, inputs)
    first_ms = (time.perf_counter() - first_start) * 1000
    reference = Interpreter(model_path=str(path), cpu_backend="fallback")  # the numpy oracle
    reference.allocate_tensors()
    numpy_outputs, _ = run(reference, inputs)
    litert, why_not = common.litert_loaded(model_path=str(path))  # default resolver: XNNPACK
    if litert is None:
        print(f"{why_not}: compared with the numpy reference only")
    litert_results = run(litert, inputs)[0] if litert is not None else None

    print("agreement per output (max abs error, and relative to max|reference|):")
    for k, detail in enumerate(gpu.get_output_details()):
        oracles = ([("LiteRT", litert_results[k])] if litert_results is not None else []) + \
            [("numpy reference", numpy_outputs[k])]
        said = ["vs {} {:.2e} ({:.2e})".format(name, *agreement(ours[k], theirs)) for name, theirs in oracles]
        print(f"  {detail['name']} {detail['shape'].tolist()}: " + "   ".join(said))

    print(f"timings: init {init_ms:.0f} ms, first invoke {first_ms:.1f} ms")
    print(f"  GPU delegate       median {median_ms(gpu, inputs, args.runs):8.2f} ms over {args.runs} runs")
    print(f"  numpy reference    median {median_ms(reference, inputs, max(3, args.runs // 4)):8.2f} ms")
    if litert is not None:
        print(f"  LiteRT (XNNPACK)   median {median_ms(litert, inputs, args.runs):8.2f} ms")
    delegate.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
