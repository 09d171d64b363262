"""Start-up at scale: reading, allocate_tensors() and the first invoke of models of many nodes,
in our Interpreter and in LiteRT's with our GpuDelegate, each start in a fresh process.

    gles-bench-scale [--nodes 25000 50000 100000] [--cases ours/outputs litert/chain]
        [--repeat 1] [--against TREE] [--json FILE]

The models (scale_model, built with our writer): 'chain', x + 1 + 1 + ... (N ADDs on
[1, 2, 2, 4] float32 and one output: the GPU fuses the ADDs into a few dispatches), and
'outputs', the same with every ADD's output a graph output too (N outputs, N - 1 of them read
inside the partition: N dispatches and N output copies). A case is RUNTIME/MODEL, RUNTIME
'ours' (our Interpreter) or 'litert' (LiteRT's), both with a GpuDelegate; issue 40 timed
ours/outputs and litert/chain, the default.

Each start is a fresh Python process (tools/bench_scale_worker.py) that makes the GpuDelegate
(not timed), then times: load, making the Interpreter from the file (LiteRT's calls our
delegate's Prepare there: reading, partitioning, compiling); allocate, allocate_tensors(); and
the first invoke(); in wall-clock seconds and in CPU seconds of the process (on a shared machine
the wall clock stretches with the load, CPU seconds less). It checks the last output against
x + N. Printed per case and N, medians over --repeat: each phase, start-up (load + allocate),
and start-up's growth per doubling of N, (t(N2) / t(N1)) ** (1 / log2(N2 / N1)): 2 is linear,
4 quadratic. --against TREE also starts another source tree's gles_delegate in every repetition
(the two take turns going first) and adds its start-up and the ratio this / TREE: on a shared
machine, compare ratios from one run.
"""
import argparse
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from gles_delegate.tflite import ModelBuilder
from gles_delegate.tools import common

MODELS = ("chain", "outputs")
RUNTIMES = ("ours", "litert")
CASES = tuple(f"{runtime}/{model}" for runtime in RUNTIMES for model in MODELS)
DEFAULT_CASES = ("ours/outputs", "litert/chain")
PHASES = ("load", "allocate", "invoke")
SHAPE = (1, 2, 2, 4)
WORKER = Path(__file__).resolve().with_name("bench_scale_worker.py")
WORKER_TIMEOUT_S = 1800


def scale_model(nodes, every_output=False, shape=SHAPE):
    """.tflite bytes of x + 1 + 1 ... (`nodes` ADDs of a constant [C] of ones on float32 `shape`):
    one output, the last sum; with every_output, each ADD's output is a graph output too."""
    b = ModelBuilder()
    x = b.input("x", shape)
    one = b.const("one", np.ones(shape[-1:], np.float32))
    value = x
    for k in range(nodes):
        out = b.tensor(f"t{k}", shape)
        b.op("ADD", [value, one], [out])
        value = out
        if every_output:
            b.output(out)
    if not every_output:
        b.output(value)
    return b.build()


def start(runtime, model_path, nodes, tree=None):
    """The worker's JSON for one start in a fresh process, of this tree's gles_delegate or, with
    `tree`, of that source tree's."""
    env = dict(os.environ)
    root = tree or _package_root()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    command = [sys.executable, "-P", str(WORKER), runtime, str(model_path), str(nodes)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=WORKER_TIMEOUT_S)
    if done.returncode != 0:
        raise common.ToolError(f"{' '.join(map(shlex.quote, command))} (PYTHONPATH {root}) failed: "
                               + (done.stderr.strip().splitlines() or ["no output"])[-1])
    return json.loads(done.stdout.strip().splitlines()[-1])


def _package_root():
    """The directory this process imports gles_delegate from (a source tree or site-packages)."""
    import gles_delegate
    return str(Path(gles_delegate.__file__).resolve().parents[1])


def measure(args, directory):
    """{case: {nodes: {'this': [start per repetition], 'against': [...]}}} ('against' with --against only)."""
    results = {}
    for nodes in sorted(set(args.nodes)):
        paths = {}
        for model in sorted({case.split("/")[1] for case in args.cases}):
            paths[model] = Path(directory) / f"{model}_{nodes}.tflite"
            paths[model].write_bytes(scale_model(nodes, every_output=model == "outputs"))
        for case in args.cases:
            runtime, model = case.split("/")
            sides = {"this": None, "against": args.against} if args.against else {"this": None}
            runs = results.setdefault(case, {}).setdefault(nodes, {side: [] for side in sides})
            for k in range(args.repeat):
                order = list(sides) if k % 2 == 0 else list(sides)[::-1]
                for side in order:
                    print(f"{case} {nodes:,} nodes, {side} ({k + 1}/{args.repeat}) ...", file=sys.stderr, flush=True)
                    runs[side].append(start(runtime, paths[model], nodes, sides[side]))
    return results


def _median(runs, phase, clock="wall"):
    """The median of `clock` seconds of `phase` ('startup': load + allocate) over `runs`."""
    parts = ("load", "allocate") if phase == "startup" else (phase,)
    return statistics.median(sum(r["phases"][p][clock] for p in parts) for r in runs)


def per_doubling(times):
    """[growth of each (nodes, seconds) over the one before it, per doubling of nodes]: None first."""
    out = [None]
    for (n1, t1), (n2, t2) in zip(times, times[1:]):
        out.append((t2 / t1) ** (1 / math.log2(n2 / n1)) if t1 > 0 and t2 > 0 else None)
    return out


def table(results, args, command):
    """The Markdown report of `results` (measure())."""
    lines = [f"`{command}`", "",
             "seconds, wall clock (CPU of the process in brackets), median of "
             f"{args.repeat} start(s) in fresh processes; start-up = load + allocate_tensors(); growth: "
             "start-up's factor per doubling of the nodes (2 linear, 4 quadratic)", ""]
    headers = ["case", "nodes", "load", "allocate", "start-up", "growth", "first invoke", "max rel. error"]
    if args.against:
        headers += ["start-up, --against", "this / against"]
    rows = []
    for case, by_nodes in results.items():
        sizes = sorted(by_nodes)
        growth = per_doubling([(n, _median(by_nodes[n]["this"], "startup")) for n in sizes])
        for n, factor in zip(sizes, growth):
            runs = by_nodes[n]["this"]
            row = [case, f"{n:,}", *(_cell(runs, p) for p in ("load", "allocate", "startup")),
                   "-" if factor is None else f"{factor:.2f}", _cell(runs, "invoke"),
                   "%.2g" % max(r["error"] for r in runs)]
            if args.against:
                other = by_nodes[n]["against"]
                row += [_cell(other, "startup"), "%.2f" % (_median(runs, "startup") / _median(other, "startup"))]
            rows.append(row)
    lines += [_markdown_row(headers), _markdown_row(["---"] * len(headers))] + [_markdown_row(r) for r in rows]
    first = next(iter(next(iter(results.values())).values()))  # {side: [starts]} of the first case and size
    lines += [""] + [f"{side}: {Path(starts[0]['package']).parents[1]}" for side, starts in first.items()]
    return "\n".join(lines)


def _markdown_row(cells):
    return "| " + " | ".join(cells) + " |"


def _cell(runs, phase):
    return "%.2f (%.2f)" % (_median(runs, phase), _median(runs, phase, "cpu"))


def source_tree(text):
    """argparse type of --against: a source tree holding a gles_delegate package, as an absolute path."""
    path = Path(text).resolve()
    if not (path / "gles_delegate" / "__init__.py").is_file():
        raise argparse.ArgumentTypeError(f"{text!r} is not a gles_delegate source tree: it has no "
                                         "gles_delegate/__init__.py")
    return str(path)


def build_parser():
    parser = common.tool_parser("gles-bench-scale", __doc__)
    parser.add_argument("--nodes", nargs="+", type=common.positive_int, default=[25000, 50000, 100000],
                        metavar="N", help="model sizes in ADD nodes (default 25000 50000 100000)")
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(DEFAULT_CASES), metavar="CASE",
                        help=f"RUNTIME/MODEL pairs, of {', '.join(CASES)} (default: {' '.join(DEFAULT_CASES)})")
    parser.add_argument("--repeat", type=common.positive_int, default=1,
                        help="starts per case and size; the table holds their medians (default 1)")
    parser.add_argument("--against", type=source_tree, metavar="TREE",
                        help="also start the gles_delegate of this source tree (another commit: "
                             "`git worktree add` or `git archive REV | tar -x -C TREE`) in every repetition")
    parser.add_argument("--json", type=common.output_file, metavar="FILE", help="also write every start as JSON")
    return parser


def main(argv=None):
    return common.run_main(build_parser(), lambda args: run(args, argv), argv)


def run(args, argv):
    if "litert" in {case.split("/")[0] for case in args.cases} and common.litert() is None:
        raise common.ToolError(f"the litert cases need ai-edge-litert: {common.LITERT_MISSING}")
    command = common.command_line("gles-bench-scale", argv)
    with tempfile.TemporaryDirectory(prefix="gles-bench-scale-") as directory:
        results = measure(args, directory)
    print(table(results, args, command))
    if args.json:
        common.write_atomic(args.json, json.dumps({"command": command, "results": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
