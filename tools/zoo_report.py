"""What the GPU delegate makes of each model of a model zoo: nodes, GPU nodes, partitions, whether
the model runs fully on the GPU, with CPU nodes (which ops, and why) or fails (the first error),
and the largest error of its outputs against LiteRT.

    python -m gles_delegate.tools.zoo_report ZOO_DIR [--precision P] [--max_delegated_partitions N]
                                             [--seed N] [--no-litert] [--write FILE] [--json FILE]

ZOO_DIR holds .tflite files and, optionally, the manifest.json that tools/build_zoo.py writes
there (each model's source and input shapes, and the models whose conversion failed). Each model
is loaded with a GpuDelegate (max_delegated_partitions 0, no limit, unless told otherwise: the
report is about which ops the GPU lacks, not TFLite's default of one partition), invoked once on
seeded random inputs (common.seeded_inputs) and, unless --no-litert, run by ai-edge-litert on the
same inputs: "max rel vs LiteRT" is max |ours - LiteRT| / max |LiteRT| over all outputs. Ops are
counted over every subgraph (a WHILE body's ops too). Prints Markdown; --write FILE writes it
(docs/model_zoo.md is its output for the zoo tools/build_zoo.py builds), --json FILE every number.
`gles-parity MODEL` then finds the first op of a model whose error is over tolerance.
"""
import collections
import json
import sys
from pathlib import Path

import numpy as np

from gles_delegate import GpuDelegate, GpuDelegateOptions, Interpreter, ops
from gles_delegate.gpu import kernels
from gles_delegate.tflite import read_model
from gles_delegate.tools import common
from gles_delegate.tools.parity_report import TOLERANCES

MANIFEST = "manifest.json"
FULL_GPU, WITH_CPU, FAILS = "runs fully on the GPU", "runs with CPU nodes", "fails"


# -- one model --------------------------------------------------------------------------------
def op_histogram(model):
    """{op: count} over every subgraph of a ModelDef (custom ops as 'CUSTOM:<code>'), most frequent
    first, then by name."""
    counts = collections.Counter(f"CUSTOM:{o.op}" if o.custom else o.op
                                 for subgraph in model.subgraphs for o in subgraph.operators)
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def lacking(histogram):
    """(ops with no reference kernel, ops with no GPU kernel) of an op histogram, each sorted."""
    names = [op for op in histogram if not op.startswith("CUSTOM:")]
    customs = [op for op in histogram if op.startswith("CUSTOM:")]
    no_reference = sorted(op for op in names if op not in ops.KERNELS) + customs
    no_gpu = sorted(op for op in names if op not in kernels.SUPPORT) + customs
    return no_reference, no_gpu


def first_error(exc):
    """An exception as one line: its type and the first line of its message."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]


def examine(path, precision="fp32", max_partitions=0, seed=0, use_litert=True):
    """The report of one model (a dict, see render); never raises for what the model holds."""
    result = {"model": Path(path).stem, "file": Path(path).name, "histogram": {}, "no_reference": [],
              "no_gpu": [], "nodes": None, "gpu_nodes": None, "partitions": None, "cpu_ops": {},
              "error": None, "stage": None, "max_rel": None, "litert": None}
    try:
        model = read_model(str(path))
    except Exception as exc:  # a file the reader refuses is a finding, not a crash of the report
        return {**result, "stage": "read", "error": first_error(exc)}
    result["histogram"] = op_histogram(model)
    result["no_reference"], result["no_gpu"] = lacking(result["histogram"])
    delegate = GpuDelegate(GpuDelegateOptions(precision=precision, max_delegated_partitions=max_partitions))
    try:
        _run_ours(path, delegate, seed, result)
        if use_litert and result["error"] is None:
            _compare_litert(path, seed, result)
    finally:
        delegate.close()
    return result


def _run_ours(path, delegate, seed, result):
    """Load, place and invoke the model on our Interpreter; fills nodes, partitions, cpu_ops,
    outputs (or stage and error)."""
    stage = "load"
    try:
        interpreter = Interpreter(model_path=str(path), experimental_delegates=[delegate])
        interpreter.allocate_tensors()
        graph, on_gpu = interpreter._main.graph, common.gpu_partition_of(delegate)
        result["nodes"] = len(graph.nodes)
        result["gpu_nodes"] = sum(id(n) in on_gpu for n in graph.nodes)
        result["partitions"] = len(set(on_gpu.values()))
        result["cpu_ops"] = cpu_ops(graph, on_gpu, delegate)
        stage = "invoke"
        common.set_inputs(interpreter, common.seeded_inputs(interpreter.get_input_details(), seed))
        interpreter.invoke()
        result["outputs"] = common.read_outputs(interpreter)
    except Exception as exc:  # any failure of ours on a real model is what the report is for
        result["stage"], result["error"] = stage, first_error(exc)


def cpu_ops(graph, on_gpu, delegate):
    """{op: {"count": nodes of it on the CPU, "reason": why the first of them is not on the GPU}}."""
    found = {}
    for node in graph.nodes:
        if id(node) not in on_gpu:
            entry = found.setdefault(node.op, {"count": 0, "reason": common.cpu_reason(node, delegate)})
            entry["count"] += 1
    return found


def _compare_litert(path, seed, result):
    """Run LiteRT on the same seeded inputs; sets max_rel (over all outputs) or why LiteRT did not run."""
    module = common.litert()
    if module is None:
        result["litert"] = common.LITERT_MISSING
        return
    try:
        theirs = common.native_call(_litert_outputs, module, path, seed)
    except RuntimeError as exc:
        result["litert"] = f"LiteRT cannot run it: {exc}"
        return
    result["litert"] = "ok"
    result["max_rel"] = max_relative_error(result["outputs"], theirs)


def _litert_outputs(module, path, seed):
    interpreter = module.Interpreter(model_path=str(path))
    interpreter.allocate_tensors()
    common.set_inputs(interpreter, common.seeded_inputs(interpreter.get_input_details(), seed))
    interpreter.invoke()
    return common.read_outputs(interpreter)


def max_relative_error(ours, theirs):
    """max over outputs of max |ours - theirs| / max |theirs| (a tensor whose max |theirs| is 0 is
    scaled by 1); inf when shapes or output counts differ or a value is NaN only on one side."""
    if len(ours) != len(theirs):
        return float("inf")
    worst = 0.0
    for a, b in zip(ours, theirs):
        if a.shape != b.shape:
            return float("inf")
        if not b.size:
            continue
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        diff = np.where(np.isnan(a64) & np.isnan(b64), 0.0, np.abs(a64 - b64))
        scale = float(np.max(np.abs(np.where(np.isfinite(b64), b64, 0.0))))
        worst = max(worst, float(np.nan_to_num(np.max(diff), nan=np.inf)) / (scale or 1.0))
    return worst


# -- the report ---------------------------------------------------------------------------------
def status(result):
    """(FULL_GPU | WITH_CPU | FAILS, detail)."""
    if result["error"] is not None:
        return FAILS, f"at {result['stage']}: {result['error']}"
    if not result["cpu_ops"]:
        return FULL_GPU, ""
    return WITH_CPU, ", ".join(f"{op} x{e['count']}" for op, e in sorted(result["cpu_ops"].items()))


def _rel_text(result, tolerance):
    if result["max_rel"] is None:
        return "-" if result["litert"] in (None, "ok") else "LiteRT fails"
    verdict = "" if result["max_rel"] <= tolerance else " (over)"
    return f"{result['max_rel']:.2g}{verdict}"


def _cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def _codes(names):
    return ", ".join(f"`{n}`" for n in names) or "-"


def render(results, manifest, precision="fp32", max_partitions=0):
    """The Markdown report of `results` (examine() dicts), with sources and input shapes from the
    build manifest ({} without one) and the models whose conversion failed."""
    tolerance = TOLERANCES[precision]
    entries = manifest.get("models", {})
    tally = collections.Counter(status(r)[0] for r in results)
    out = [f"{len(results)} models: {tally[FULL_GPU]} run fully on the GPU, {tally[WITH_CPU]} run with CPU "
           f"nodes, {tally[FAILS]} fail. Precision {precision}, max_delegated_partitions {max_partitions}"
           f"{' (no limit)' if not max_partitions else ''}; max rel is max |ours - LiteRT| / max |LiteRT| over the "
           f"outputs, \"(over)\" when above {tolerance:g}.", "",
           "| Model | Source | Input | Nodes | GPU nodes | Partitions | Status | Max rel vs LiteRT |",
           "|---|---|---|---|---|---|---|---|"]
    for r in results:
        entry = entries.get(r["model"], {})
        shapes = " ".join(common.shape_text(s) for s in entry.get("inputs", [])) or "-"
        word, detail = status(r)
        text = f"{word}: {detail}" if detail else word
        out.append(f"| {r['model']} | {_cell(entry.get('source', '-'))} | {shapes} | "
                   f"{_none(r['nodes'])} | {_none(r['gpu_nodes'])} | {_none(r['partitions'])} | {_cell(text)} | "
                   f"{_rel_text(r, tolerance)} |")
    out += ["", "## Ops each model needs that we lack", "",
            "No reference kernel: the model cannot load. No GPU kernel: its nodes run on the CPU. GPU kernel "
            "refuses: a GPU kernel exists but not for these nodes (the first node's reason).", "",
            "| Model | No reference kernel | No GPU kernel | GPU kernel refuses |", "|---|---|---|---|"]
    for r in results:
        refused = [f"`{op}`: {e['reason']}" for op, e in sorted(r["cpu_ops"].items()) if op in kernels.SUPPORT]
        out.append(f"| {r['model']} | {_codes(r['no_reference'])} | {_codes(r['no_gpu'])} | "
                   f"{_cell('; '.join(refused) or '-')} |")
    out += ["", "## Op histograms (every subgraph)", ""]
    out += [f"- {r['model']}: " + (", ".join(f"{op} {n}" for op, n in r["histogram"].items()) or "-")
            for r in results]
    skipped = manifest.get("skipped", {})
    if skipped:
        out += ["", "## Not in the zoo: conversion failed", ""]
        out += [f"- {name}: {_cell(why)}" for name, why in sorted(skipped.items())]
    return "\n".join(out) + "\n"


def _none(value):
    return "-" if value is None else value


def load_manifest(directory):
    """The build manifest of a zoo directory, {} when it has none."""
    path = Path(directory) / MANIFEST
    return json.loads(path.read_text()) if path.exists() else {}


# -- main ---------------------------------------------------------------------------------------
def build_parser():
    p = common.tool_parser("python -m gles_delegate.tools.zoo_report", __doc__)
    p.add_argument("zoo", type=common.model_files, help="a directory of .tflite models (or one model)")
    common.add_precision(p)
    p.add_argument("--max_delegated_partitions", type=common.non_negative_int, default=0, metavar="N",
                   help="GpuDelegateOptions.max_delegated_partitions (default 0: no limit)")
    p.add_argument("--seed", type=common.non_negative_int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--no-litert", dest="litert", action="store_false", help="do not compare with LiteRT")
    p.add_argument("--write", type=common.output_file, default=None, metavar="FILE", help="write the Markdown here")
    p.add_argument("--json", type=common.output_file, default=None, metavar="FILE", help="write every number here")
    return p


def main(argv=None):
    return common.run_main(build_parser(), run, argv)


def run(args):
    paths = args.zoo
    manifest = load_manifest(paths[0].parent)
    results = []
    for path in paths:
        print(f"{path.name} ...", file=sys.stderr, flush=True)
        result = examine(path, args.precision, args.max_delegated_partitions, args.seed, args.litert)
        result.pop("outputs", None)
        results.append(result)
    text = render(results, manifest, args.precision, args.max_delegated_partitions)
    if args.write:
        common.write_atomic(args.write, text)
        print(f"wrote {args.write}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    if args.json:
        common.write_atomic(args.json, json.dumps(results, indent=1, default=common.json_default))
    return 0


if __name__ == "__main__":
    sys.exit(main())
