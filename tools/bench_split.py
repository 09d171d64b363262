"""A model split between the GPU and the CPU: our Interpreter against LiteRT's Interpreter with
the same GpuDelegate, side by side in one process.

    gles-bench-split [--graph MODEL] [--blocks 6] [--size 32] [--channels 32]
        [--cpu-ops L2_POOL_2D] [--max_delegated_partitions 0] [--num_threads 1]
        [--runs 50] [--warmup 5] [--warmup-secs 0.5] [--precision fp32] [--empty-dispatches]
        [--json FILE]

Builds its model with our writer unless --graph names one: `blocks` ConvNeXt-like blocks on
[1, size, size, channels] float32 (3x3 DEPTHWISE_CONV_2D, 1x1 CONV_2D to 4x the channels with
RELU, 1x1 CONV_2D back, ADD of the block's input), each followed by the --cpu-ops, ops with no
GPU kernel (docs/supported_ops.md "CPU only"): the GPU runs each block as a partition of its own
(max_delegated_partitions 0: no limit), the CPU the runs of --cpu-ops between them.

Three runtimes share one GpuDelegate (one GL context, the same compiled kernels for the GPU
nodes) and differ in what runs the CPU nodes: our Interpreter with cpu_backend 'auto' (LiteRT's
kernels when ai-edge-litert is installed, each CPU run one LiteRT sub-model), our Interpreter with
cpu_backend 'reference' (the numpy kernels), and LiteRT's own Interpreter (its CPU kernels, which
call our delegate for the GPU partitions). Each timed run is end to end (set the inputs, invoke,
read the outputs); the runtimes take turns run after run, in an order that rotates (A B C, B C A,
...), so that the drift of a shared machine falls on all of them alike. It prints, per runtime,
the median and 10th percentile of the wall time and of the calling thread's CPU time, the ratio
of its median to LiteRT's, and the largest difference of its outputs from LiteRT's.
--num_threads goes to every interpreter (LiteRT's, and the LiteRT sub-models of ours); on a
machine whose GPU is a software renderer (llvmpipe), more than one CPU thread competes with the
renderer's own threads. --empty-dispatches gives every dispatch 0x0x0 workgroups: every GL call
is still made but no shader runs (outputs meaningless), which leaves what the runtimes differ
in (the CPU nodes, copies, Python) without the renderer's shader time.
"""
import contextlib
import json

import numpy as np

from gles_delegate import GpuDelegate, GpuDelegateOptions, Interpreter
from gles_delegate.tflite import ModelBuilder
from gles_delegate.tools import common
from gles_delegate.tools.bench_invoke import EmptyDispatches, end_to_end_runner

SAME, NONE, RELU = 0, 0, 1  # the schema's Padding and ActivationFunctionType
# (CUMSUM, then LOCAL_RESPONSE_NORMALIZATION ran before it until each got a GPU kernel:
# docs/performance.md's earlier runs name them)
CPU_OPS = ("L2_POOL_2D",)
RUNTIMES = ("ours (auto)", "ours (reference)", "LiteRT + delegate")


def split_model(blocks=6, size=32, channels=32, cpu_ops=CPU_OPS):
    """.tflite bytes of `blocks` blocks on [1, size, size, channels] float32, each followed by
    `cpu_ops` (ops without a GPU kernel), seeded weights (see the module docstring)."""
    rng = np.random.default_rng(0)
    b = ModelBuilder()
    shape, wide = (1, size, size, channels), (1, size, size, 4 * channels)
    x = b.input("x", shape)
    for k in range(blocks):
        y = _conv(b, rng, f"dw{k}", x, (1, 3, 3, channels), shape, depthwise=True)
        y = _conv(b, rng, f"expand{k}", y, (4 * channels, 1, 1, channels), wide, activation=RELU)
        y = _conv(b, rng, f"project{k}", y, (channels, 1, 1, 4 * channels), shape)
        x = _node(b, "ADD", f"add{k}", [x, y], shape, fused_activation_function=NONE)
        for op in cpu_ops:
            x = _cpu_op(b, op, f"{op.lower()}{k}", x, shape)
    b.output(x)
    return b.build()


def _conv(b, rng, name, x, weight_shape, out_shape, depthwise=False, activation=NONE):
    """A 1-stride SAME CONV_2D (DEPTHWISE_CONV_2D) of seeded weights, U(-s, s) with s = 1 / sqrt(taps
    per output) so that the values keep their scale block after block."""
    scale = 1.0 / np.sqrt(np.prod(weight_shape[1:]) if not depthwise else 9)
    weights = b.const(f"{name}_w", rng.uniform(-scale, scale, weight_shape).astype(np.float32))
    bias = b.const(f"{name}_b", rng.uniform(-0.1, 0.1, weight_shape[0 if not depthwise else 3]).astype(np.float32))
    options = dict(padding=SAME, stride_w=1, stride_h=1, dilation_w_factor=1, dilation_h_factor=1,
                   fused_activation_function=activation)
    if depthwise:
        return _node(b, "DEPTHWISE_CONV_2D", name, [x, weights, bias], out_shape, depth_multiplier=1, **options)
    return _node(b, "CONV_2D", name, [x, weights, bias], out_shape, **options)


def _cpu_op(b, op, name, x, shape):
    """One of CPU_OPS on x: a 3x3 SAME L2 pool."""
    return _node(b, op, name, [x], shape, padding=SAME, stride_w=1, stride_h=1, filter_width=3, filter_height=3,
                 fused_activation_function=NONE)


def _node(b, op, name, inputs, shape, **options):
    out = b.tensor(name, shape)
    b.op(op, inputs, [out], **options)
    return out


# -- the runtimes -----------------------------------------------------------------------------
def runtimes(data, delegate, num_threads):
    """{name: allocated interpreter} of RUNTIMES on model bytes `data`, one `delegate` for all
    (LiteRT's is left out when ai-edge-litert is not installed)."""
    made = {name: Interpreter(model_content=data, experimental_delegates=[delegate], num_threads=num_threads,
                              cpu_backend=backend)
            for name, backend in zip(RUNTIMES, ("auto", "reference"))}
    litert = common.litert()
    if litert is not None:
        made[RUNTIMES[2]] = litert.Interpreter(model_content=data, experimental_delegates=[delegate],
                                               num_threads=num_threads)
    for interpreter in made.values():
        interpreter.allocate_tensors()
    return made


def interleaved(runs, count, warmup, warmup_secs):
    """{name: {wall_us, cpu_us: (median, p10)}} of `count` end-to-end runs of each of
    {name: run} (bench_invoke.end_to_end_runner), the runtimes in a rotating order."""
    for run in runs.values():
        common.warm_up(run, warmup, warmup_secs)
    names = list(runs)
    walls, cpus = {n: [] for n in names}, {n: [] for n in names}
    for k in range(count):
        for name in names[k % len(names):] + names[:k % len(names)]:
            wall, cpu, _ = runs[name]()
            walls[name].append(wall / 1e3)
            cpus[name].append(cpu / 1e3)
    return {n: {"wall_us": _median_p10(walls[n]), "cpu_us": _median_p10(cpus[n])} for n in names}


def _median_p10(values):
    values = sorted(values)
    return float(np.median(values)), values[len(values) // 10]


def bench(data, args):
    """The report's numbers for model bytes `data`: the split, the times, the ratios, the
    differences of the outputs."""
    options = GpuDelegateOptions(precision=args.precision, max_delegated_partitions=args.max_delegated_partitions)
    with GpuDelegate(options) as delegate:
        made = runtimes(data, delegate, args.num_threads)
        inputs = common.seeded_inputs(made[RUNTIMES[0]].get_input_details())
        runs = {name: end_to_end_runner(interpreter, inputs) for name, interpreter in made.items()}
        outputs = {name: run()[2] for name, run in runs.items()}
        summary = delegate.summary()
        cpu = made[RUNTIMES[0]].cpu_summary()
        with EmptyDispatches(delegate.context) if args.empty_dispatches else contextlib.nullcontext():
            times = interleaved(runs, args.runs, args.warmup, args.warmup_secs)
        result = {"gpu_partitions": summary["partitions"], "gpu_nodes": summary["gpu_nodes"],
                  "cpu_nodes": summary["cpu_nodes"], "litert_sub_models": len(cpu["litert_partitions"]),
                  "litert": cpu["litert"], "renderer": summary["renderer"], "times": times}
        against = RUNTIMES[2] if RUNTIMES[2] in made else None
        if against is not None:
            result["ratio_to_litert"] = {n: times[n]["wall_us"][0] / times[against]["wall_us"][0] for n in times}
            result["max_abs_diff_from_litert"] = {n: _max_diff(outputs[n], outputs[against]) for n in outputs}
        del made, runs  # the interpreters before their delegate
    return result


def _max_diff(ours, theirs):
    return max(float(np.max(np.abs(a.astype(np.float64) - b))) if a.size else 0.0 for a, b in zip(ours, theirs))


def report(result, args, what):
    lines = [f"{what}", f"GPU: {result['renderer']}, precision {args.precision}; {result['gpu_nodes']} nodes on the "
             f"GPU in {result['gpu_partitions']} partitions, {result['cpu_nodes']} on the CPU (ours, 'auto': "
             f"{result['litert_sub_models']} LiteRT sub-models; ai-edge-litert {result['litert'] or 'not installed'})"
             f"; num_threads {args.num_threads}"
             + ("; every dispatch 0x0x0 workgroups (--empty-dispatches)" if args.empty_dispatches else ""),
             f"microseconds, median / 10th percentile of {args.runs} end-to-end runs each (set inputs + invoke + "
             "read outputs), the runtimes taking turns", ""]
    rows = []
    for name, t in result["times"].items():
        row = [name, "%.0f / %.0f" % t["wall_us"], "%.0f / %.0f" % t["cpu_us"]]
        if "ratio_to_litert" in result:
            row += ["%.2fx" % result["ratio_to_litert"][name], "%.3g" % result["max_abs_diff_from_litert"][name]]
        rows.append(row)
    headers = ["runtime", "wall", "calling thread CPU"]
    if "ratio_to_litert" in result:
        headers += ["/ LiteRT + delegate", "max |diff| from it"]
    lines.append(common.table(rows, headers, "<>>>>"))
    return "\n".join(lines)


def main(argv=None):
    parser = common.tool_parser("gles-bench-split", __doc__)
    parser.add_argument("--graph", type=common.model_file, default=None, metavar="MODEL",
                        help="a .tflite file or MediaPipe model name instead of the built model")
    parser.add_argument("--blocks", type=common.positive_int, default=6)
    parser.add_argument("--size", type=common.positive_int, default=32)
    parser.add_argument("--channels", type=common.positive_int, default=32)
    parser.add_argument("--cpu-ops", nargs="+", choices=CPU_OPS, default=list(CPU_OPS),
                        help="the ops without a GPU kernel after each block (default: both)")
    parser.add_argument("--max_delegated_partitions", type=common.non_negative_int, default=0,
                        help="GpuDelegateOptions.max_delegated_partitions (default 0: no limit)")
    parser.add_argument("--num_threads", type=common.positive_int, default=1,
                        help="threads of LiteRT's interpreters (default 1)")
    parser.add_argument("--runs", type=common.positive_int, default=50)
    parser.add_argument("--warmup", type=common.non_negative_int, default=5)
    common.add_warmup_secs(parser)
    common.add_precision(parser)
    parser.add_argument("--empty-dispatches", action="store_true",
                        help="time with every dispatch of 0x0x0 workgroups (no shader work; outputs meaningless)")
    parser.add_argument("--json", type=common.output_file, default=None, metavar="FILE",
                        help="also write the results as JSON")

    def body(args):
        if args.graph is not None:
            data, what = args.graph.read_bytes(), f"model: {args.graph}"
        else:
            data = split_model(args.blocks, args.size, args.channels, args.cpu_ops)
            what = (f"model: {args.blocks} blocks on [1, {args.size}, {args.size}, {args.channels}], each followed "
                    f"by {' + '.join(args.cpu_ops)} (no GPU kernel)")
        result = bench(data, args)
        print(report(result, args, what))
        if args.json:
            common.write_atomic(args.json, json.dumps(result, indent=2, default=common.json_default))
        return 0
    return common.run_main(parser, body, argv)


if __name__ == "__main__":
    raise SystemExit(main())
