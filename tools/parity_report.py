"""Per-op parity of the GPU delegate against the numpy reference, and of the reference against
LiteRT: where error first appears and how it grows along the graph.

    gles-parity MODEL [--precision fp32|fp16|fp16_fp32acc|auto] [--out DIR] [--seed N]
                      [--max_delegated_partitions N] [--no-litert] [--runtime gles|litert]
                      [--table all|over|none]

The model runs on seeded random inputs three times, each keeping every intermediate
(experimental_preserve_all_tensors=True): on the GPU delegate (each dispatch's output is read
back), on our numpy reference kernels, and on ai-edge-litert where it can run the model. For
every output tensor of every operator (named by the model's tensor names) it reports max abs
error, max error relative to max |reference|, RMSE, cosine similarity, the index of the worst
element and whether that is within the precision's tolerance (TOLERANCES below), for GPU vs
reference and reference vs LiteRT. "local" is the GPU node's error given the GPU's own inputs
(the reference kernel re-run on what the GPU fed the node): it separates an op that is wrong
from one that inherits error. Tensors a rewrite fused away are listed as such.
Where LiteRT's own kernel sets (its builtin, reference and XNNPACK kernels) disagree on a tensor
by more than the tolerance allows, the report says so and judges that tensor against twice their
spread (SPREAD_FACTOR) instead ('spread' in the table): no implementation can be held closer.
Both our runs use cpu_backend='fallback': the reference kernels stay the oracle wherever they
exist, and only a node they lack runs through LiteRT's kernels (where "LiteRT" in the table;
the report's summary lists them as litert_nodes: LiteRT is their only oracle).

Writes to --out (default ./parity_<model>): report.html (self-contained, with a plot of the
relative error along the graph), parity.json (every number), and
model_explorer_gpu_vs_reference.json / model_explorer_reference_vs_litert.json: node data
that Google's Model Explorer loads as an overlay ({"results": {tensor name: {"value": relative
error}}, "thresholds": [...]}; keys are each node's output tensor name).

Exit status: 0 when every compared op is within tolerance (or LiteRT's own spread), 1 when one is
not, 2 on bad usage.
"""
import base64
import collections
import html
import io
import json
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from gles_delegate import GpuDelegate, GpuDelegateOptions, Interpreter
from gles_delegate import ops
from gles_delegate.graph import Graph
from gles_delegate.tflite import read_model
from gles_delegate.tools import common

# Tolerance of a float tensor: max abs error <= TOLERANCES[precision] * max |reference|.
# fp32 storage and math: 1e-4; half storage (fp16, fp16_fp32acc): 1e-2. The reference itself
# is checked against LiteRT at the fp32 tolerance.
TOLERANCES = {"fp32": 1e-4, "fp16": 1e-2, "fp16_fp32acc": 1e-2, "auto": 1e-2}
REFERENCE_TOLERANCE = TOLERANCES["fp32"]
# Below this max |reference| a tensor counts as all-zero: its tolerance is relative to this.
MIN_SCALE = 1e-6
# Integer tensors: a quantized tensor may differ by one step (rounding), others must be exact.
QUANTIZED_STEPS = 1
# Where LiteRT's own kernel sets (litert_spread) disagree on a tensor by more than the tolerance
# allows, no implementation can be held to it there: the tensor is judged against SPREAD_FACTOR x
# their largest difference instead. 2: an implementation as close to one of LiteRT's kernel sets
# as they are to each other is within twice that of the other (the triangle inequality).
SPREAD_FACTOR = 2
# LiteRT's kernel sets besides the run that keeps every tensor (its default resolver, in 2.3 its
# builtin kernels while tensors are kept): (op resolver, keep every tensor). Its reference kernels
# keep every tensor; XNNPACK (its default resolver's delegate) hides intermediates, its outputs count.
SPREAD_RUNS = (("BUILTIN_REF", True), ("AUTO", False))
# Model Explorer colours: within tolerance, within 10x tolerance, beyond.
COLOURS = ("#a5d6a7", "#ffe082", "#ef9a9a")
ORACLE_BACKEND = "fallback"  # the reference where it has a kernel, LiteRT's kernels only where it has none
NODE_DATA_CAP = 1e30  # JSON has no inf / NaN: worse values are written as this

# Status of a tensor: compared, or why not ("folded": constant folding made it a constant, which
# LiteRT does not keep either).
FUSED_AWAY, FOLDED, NOT_CAPTURED, COMPARED = "fused away", "folded", "not captured", "compared"


# -- metrics --------------------------------------------------------------------------------
def compare(value, reference, rel_tol, quantized=False, spread=0.0):
    """Metrics of `value` against `reference`: {max_abs, max_rel, rmse, cosine, worst_index,
    tolerance (the absolute bound), within, spread_rel, by_spread}. spread: the largest absolute
    difference between LiteRT's own kernel sets on this tensor (litert_spread): the bound is at
    least SPREAD_FACTOR x that; by_spread: within only through it; spread_rel: it relative to
    max |reference|."""
    a = np.asarray(value)
    b = np.asarray(reference)
    if a.shape != b.shape:
        return {"error": f"shape {list(a.shape)} vs reference {list(b.shape)}", "within": False,
                "max_abs": math.inf, "max_rel": math.inf, "rmse": math.inf, "cosine": 0.0,
                "worst_index": None, "tolerance": 0.0}
    integer = b.dtype.kind in "iub"
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    if a64.size == 0:
        return {"max_abs": 0.0, "max_rel": 0.0, "rmse": 0.0, "cosine": 1.0, "worst_index": None,
                "tolerance": 0.0, "within": True}
    both_nan = np.isnan(a64) & np.isnan(b64)
    diff = np.where(both_nan, 0.0, np.abs(a64 - b64))
    diff = np.where(np.isnan(diff), np.inf, diff)
    worst = int(np.argmax(diff))
    max_abs = float(diff.reshape(-1)[worst])
    finite_b = np.where(np.isfinite(b64), b64, 0.0)
    scale = float(np.max(np.abs(finite_b)))
    max_rel = max_abs / max(scale, MIN_SCALE) if not integer else max_abs / max(scale, 1.0)
    rmse = float(np.sqrt(np.mean(np.square(diff)))) if np.all(np.isfinite(diff)) else math.inf
    fa, fb = np.nan_to_num(a64, posinf=0, neginf=0).reshape(-1), finite_b.reshape(-1)
    na, nb = float(np.linalg.norm(fa)), float(np.linalg.norm(fb))
    cosine = 1.0 if na == 0 and nb == 0 else (float(np.dot(fa, fb) / (na * nb)) if na and nb else 0.0)
    if integer:
        tol = float(QUANTIZED_STEPS if quantized else 0)
    else:
        tol = rel_tol * max(scale, MIN_SCALE)
    bound = max(tol, SPREAD_FACTOR * spread)
    return {"max_abs": max_abs, "max_rel": max_rel, "rmse": rmse, "cosine": cosine,
            "worst_index": [int(i) for i in np.unravel_index(worst, a.shape)] if a.ndim else [],
            "tolerance": bound, "within": bool(max_abs <= bound),
            "spread_rel": spread / max(scale, 1.0 if integer else MIN_SCALE), "by_spread": bool(tol < max_abs <= bound)}


# -- runs -----------------------------------------------------------------------------------
def run_ours(path, inputs, delegate=None):
    """Our Interpreter keeping every tensor after one invoke; CPU nodes on the reference, except
    those it lacks (cpu_backend='fallback')."""
    interpreter = Interpreter(model_path=str(path), experimental_delegates=[delegate] if delegate else None,
                              experimental_preserve_all_tensors=True, cpu_backend=ORACLE_BACKEND)
    interpreter.allocate_tensors()
    common.set_inputs(interpreter, inputs)
    interpreter.invoke()
    return interpreter


def run_litert(path, inputs):
    """(interpreter, None) after one invoke keeping all tensors, or (None, why not)."""
    module = common.litert()
    if module is None:
        return None, common.LITERT_MISSING
    try:
        return common.native_call(_litert_invoked, module, path, inputs), None
    except RuntimeError as exc:  # ops LiteRT lacks (MediaPipe custom ops), or anything it rejects
        return None, f"LiteRT cannot run this model: {exc}"


def _litert_invoked(module, path, inputs, resolver="AUTO", keep_all=True):
    """LiteRT's interpreter with op resolver `resolver` (an OpResolverType name), keeping every
    tensor unless told not to, after one invoke on `inputs`."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "preserve_all_tensors is for debugging": we are
        interpreter = module.Interpreter(model_path=str(path), experimental_preserve_all_tensors=keep_all,
                                         experimental_op_resolver_type=module.OpResolverType[resolver])
    interpreter.allocate_tensors()
    common.set_inputs(interpreter, inputs)
    interpreter.invoke()
    return interpreter


def litert_spread(path, inputs, litert):
    """{tensor index: the largest absolute difference between LiteRT's own kernel sets on it}:
    `litert` (the run keeping every tensor) against each of SPREAD_RUNS, on every tensor both
    keep (a run that does not keep them only on the model's outputs: its other tensors' memory
    is reused). A kernel set that cannot run the model adds nothing."""
    module, spread = common.litert(), {}
    for resolver, keep_all in SPREAD_RUNS:
        try:
            other = common.native_call(_litert_invoked, module, path, inputs, resolver, keep_all)
        except RuntimeError:  # an op one kernel set lacks: the others still say something
            continue
        details = other.get_tensor_details() if keep_all else other.get_output_details()
        for detail in details:
            difference = _largest_difference(litert_tensor(litert, detail["index"]),
                                             litert_tensor(other, detail["index"]))
            if difference is not None:
                spread[detail["index"]] = max(spread.get(detail["index"], 0.0), difference)
    return spread


def _largest_difference(a, b):
    """max |a - b| over the elements finite in both (None where either is missing, empty, not
    numeric or of another shape)."""
    if a is None or b is None or a.shape != b.shape or not a.size or a.dtype.kind not in "fiu":
        return None
    difference = np.abs(a.astype(np.float64) - b.astype(np.float64))
    return float(np.max(difference, where=np.isfinite(difference), initial=0.0))


def litert_delegate_parity(path, args):
    """--runtime litert: the outputs of LiteRT's Interpreter with a GpuDelegate against those of
    our Interpreter with one (same options and inputs): {outputs: [{name, max_abs, relative}],
    delegation: the LiteRT delegate's summary()}, or {error: why} where LiteRT cannot load the
    model; printed as it goes."""
    fields = {"precision": args.precision}
    if args.max_delegated_partitions is not None:
        fields["max_delegated_partitions"] = args.max_delegated_partitions
    outputs = []
    for runtime in ("gles", "litert"):
        delegate = GpuDelegate(GpuDelegateOptions(**fields))
        interpreter, why_not = common.delegated_interpreter(runtime, delegate, model_path=str(path))
        if interpreter is None:
            delegate.close()
            print(f"LiteRT Interpreter + gles_delegate: {why_not}")
            return {"error": why_not}
        common.set_inputs(interpreter, common.seeded_inputs(interpreter.get_input_details(), args.seed, common.index_ranges(path)))
        interpreter.invoke()
        outputs.append([(d["name"], interpreter.get_tensor(d["index"])) for d in interpreter.get_output_details()])
        summary = delegate.summary()
        del interpreter  # before its delegate
        delegate.close()
    rows = []
    print(f"LiteRT Interpreter + gles_delegate ({summary['gpu_nodes']} nodes on the GPU, {summary['cpu_nodes']} on "
          "LiteRT's CPU kernels) against gles_delegate's Interpreter + delegate:")
    for (name, ours), (_, theirs) in zip(*outputs):
        max_abs = float(np.max(np.abs(theirs.astype(np.float64) - ours))) if ours.size else 0.0
        scale = float(np.max(np.abs(ours))) if ours.size else 0.0
        rows.append({"name": name, "max_abs": max_abs, "relative": max_abs / scale if scale else max_abs})
        print(f"  {name}: max abs difference {max_abs:.3g} ({rows[-1]['relative']:.3g} of max |ours|)")
    return {"outputs": rows, "delegation": summary}


def litert_tensor(interpreter, index):
    try:
        return interpreter.get_tensor(index)
    except Exception:  # a tensor LiteRT did not keep
        return None


def local_value_fn(graph, available, fused):
    """value(tensor): what the GPU fed or computed for it; a fused-away tensor is recomputed
    with the reference kernels from the GPU's values upstream (so a fused group is judged as
    one kernel)."""
    producers = {t.index: n for n in graph.nodes for t in n.outputs}

    def value(tensor, memo):
        if tensor is None:
            return None
        if tensor.is_const:
            return tensor.data
        if tensor.index in available:
            return available[tensor.index]
        if tensor.index in memo:
            return memo[tensor.index]
        node = producers.get(tensor.index)
        if tensor.index not in fused or node is None:
            raise KeyError(tensor.index)
        outputs = ops.run_node(node, [None if t is None else np.array(value(t, memo), copy=True)
                                      for t in node.inputs])
        for t, v in zip(node.outputs, outputs):
            memo[t.index] = v
        return memo[tensor.index]
    return value


def analyse(path, precision, seed, max_partitions=None, use_litert=True):
    """Run everything and compare; returns the report dict (see main)."""
    model = read_model(str(path))
    original = Graph.from_model(model, 0)
    fields = {"precision": precision}
    if max_partitions is not None:
        fields["max_delegated_partitions"] = max_partitions
    delegate = GpuDelegate(GpuDelegateOptions(**fields))
    timings = {}
    start = time.perf_counter()
    reference = Interpreter(model_path=str(path), experimental_preserve_all_tensors=True,
                            cpu_backend=ORACLE_BACKEND)
    reference.allocate_tensors()
    inputs = common.seeded_inputs(reference.get_input_details(), seed, common.index_ranges(path))
    common.set_inputs(reference, inputs)
    reference.invoke()
    timings["reference_s"] = time.perf_counter() - start
    start = time.perf_counter()
    gpu = run_ours(path, inputs, delegate)
    timings["gpu_s"] = time.perf_counter() - start
    start = time.perf_counter()
    litert, litert_status = run_litert(path, inputs) if use_litert else (None, "skipped (--no-litert)")
    spread = litert_spread(path, inputs, litert) if litert is not None else {}
    timings["litert_s"] = time.perf_counter() - start

    tol = TOLERANCES[delegate.options.resolved_precision]
    gpu_graph, ref_graph = gpu._main.graph, reference._main.graph
    live = [p for p in delegate.partitions if p.steps]
    on_gpu = common.gpu_partition_of(delegate)
    fused = set().union(*(p.fused_away for p in live))
    captured = {index for p in live for written in p.plan.writes for index, _, _ in written}
    gpu_producer = {t.index: n for n in gpu_graph.nodes for t in n.outputs}
    ref_producer = {t.index: n for n in ref_graph.nodes for t in n.outputs}

    # What the GPU run holds for each tensor it computed (or was given).
    available = {t.index: gpu.get_tensor(t.index) for t in gpu_graph.inputs}
    for index, node in gpu_producer.items():
        if id(node) not in on_gpu or index in captured:
            available[index] = gpu.get_tensor(index)
    value = local_value_fn(gpu_graph, available, fused)
    on_litert = set(gpu.cpu_summary()["litert_nodes"])

    rows, local_cache = [], {}
    for position, node in enumerate(original.nodes):
        for tensor in node.outputs:
            index = tensor.index
            gpu_node = gpu_producer.get(index)
            where = ("GPU" if gpu_node is not None and id(gpu_node) in on_gpu else
                     "LiteRT" if gpu_node is not None and gpu_node.label in on_litert else
                     "CPU" if gpu_node is not None else "-")
            row = {"position": position, "node_index": node.index, "node": node.label, "op": node.op,
                   "tensor_index": index, "tensor": tensor.name, "shape": list(tensor.shape),
                   "dtype": str(np.dtype(tensor.dtype)) if tensor.dtype is not None else None, "where": where,
                   "partition": on_gpu.get(id(gpu_node)) if gpu_node is not None else None,
                   "status": COMPARED, "gpu_vs_reference": None, "local": None, "reference_vs_litert": None}
            quantized = tensor.quantization is not None and tensor.quantization.scales.size > 0
            ref_tensor = ref_graph.tensors[index] if index < len(ref_graph.tensors) else None
            ref_value = None
            if index in ref_producer:
                ref_value = reference.get_tensor(index)
            elif ref_tensor is not None and ref_tensor.is_const:
                ref_value = ref_tensor.data
            if gpu_node is None:
                row["status"] = FOLDED if gpu_graph.tensors[index].is_const else FUSED_AWAY
            elif index in fused:
                row["status"] = FUSED_AWAY
            elif where == "GPU" and index not in captured:
                row["status"] = NOT_CAPTURED
            elif ref_value is not None:
                row["gpu_vs_reference"] = compare(gpu.get_tensor(index), ref_value, tol, quantized,
                                                  spread.get(index, 0.0))
                if where == "GPU":
                    row["local"] = _local(gpu_node, index, value, tol, quantized, local_cache)
            if litert is not None and ref_value is not None and row["status"] != FOLDED:
                theirs = litert_tensor(litert, index)
                if theirs is not None:
                    row["reference_vs_litert"] = compare(ref_value, theirs, REFERENCE_TOLERANCE, quantized,
                                                         spread.get(index, 0.0))
            rows.append(row)

    summary = summarize(rows)
    summary["litert_nodes"] = reference.cpu_summary()["litert_nodes"]
    report = {
        "tool": "gles-parity", "gles_delegate_version": common.package_version(), "model": str(path),
        "seed": seed, "precision": delegate.options.resolved_precision, "tolerance": tol,
        "reference_tolerance": REFERENCE_TOLERANCE, "renderer": delegate.summary().get("renderer"),
        "gl_version": delegate.summary().get("gl_version"),
        "litert": "ok" if litert is not None else litert_status, "timings": timings,
        "rewrites": [common.format_rewrite_record(r) for r in common.rewrite_log(delegate)],
        "summary": summary, "rows": rows,
        # precision 'auto': {tensor index: why} stored as float, {node label: why} with float weights.
        "promoted_tensors": delegate.summary().get("promoted_tensors", {}),
        "promoted_nodes": delegate.summary().get("promoted_nodes", {}),
    }
    delegate.close()
    return report


def _local(node, index, value, tol, quantized, cache):
    """The GPU node's own error: the reference kernel on the GPU's inputs vs the GPU output."""
    if any(t is not None and t.is_variable for t in node.inputs):
        return None
    key = id(node)
    if key not in cache:
        try:
            outputs = ops.run_node(node, [None if t is None else np.array(value(t, {}), copy=True)
                                          for t in node.inputs])
            cache[key] = {t.index: v for t, v in zip(node.outputs, outputs)}
        except Exception:  # an input the GPU run did not keep, or the kernel rejects what the GPU fed it
            cache[key] = {}
    expected = cache[key].get(index)
    output = next(t for t in node.outputs if t.index == index)
    return None if expected is None else compare(value(output, {}), expected, tol, quantized)


def summarize(rows):
    def over(row, key):
        return row[key] is not None and not row[key]["within"]
    compared = [r for r in rows if r["gpu_vs_reference"] is not None]
    first = next((r for r in rows if over(r, "gpu_vs_reference")), None)
    first_litert = next((r for r in rows if over(r, "reference_vs_litert")), None)
    own = [r for r in rows if over(r, "local")]
    litert_compared = [r for r in rows if r["reference_vs_litert"] is not None]
    return {
        "tensors": len(rows), "compared": len(compared),
        "over_tolerance": sum(over(r, "gpu_vs_reference") for r in rows),
        "fused_away": [r["tensor"] for r in rows if r["status"] == FUSED_AWAY],
        "folded": sum(r["status"] == FOLDED for r in rows),
        "not_captured": [r["tensor"] for r in rows if r["status"] == NOT_CAPTURED],
        "first_over_tolerance": _brief(first, "gpu_vs_reference"),
        "kernels_over_tolerance": [_brief(r, "local") for r in own],
        "max_relative_error": max((r["gpu_vs_reference"]["max_rel"] for r in compared), default=0.0),
        "output_relative_error": _outputs_error(rows),
        "litert_compared": len(litert_compared),
        "litert_over_tolerance": sum(over(r, "reference_vs_litert") for r in rows),
        "first_litert_over_tolerance": _brief(first_litert, "reference_vs_litert"),
        "error_growth": _growth(rows),
        "within_by_spread": sum(bool(r[k] and r[k].get("by_spread")) for r in rows
                                for k in ("gpu_vs_reference", "reference_vs_litert")),
        "largest_litert_spread": _largest_spread(rows),
    }


def _largest_spread(rows):
    """{node, tensor, tensor_index, spread_rel} of the tensor LiteRT's own kernel sets disagree on
    most (relative to max |reference|), or None where they were not compared."""
    spreads = [(r["reference_vs_litert"].get("spread_rel", 0.0), r) for r in rows if r["reference_vs_litert"]]
    if not spreads:
        return None
    value, row = max(spreads, key=lambda pair: pair[0])
    return {"node": row["node"], "tensor": row["tensor"], "tensor_index": row["tensor_index"], "spread_rel": value}


def _brief(row, key):
    if row is None:
        return None
    m = row[key]
    return {"node": row["node"], "op": row["op"], "node_index": row["node_index"], "tensor": row["tensor"],
            "tensor_index": row["tensor_index"], "max_abs": m["max_abs"], "max_rel": m["max_rel"],
            "worst_index": m["worst_index"]}


def _outputs_error(rows):
    """Relative error of the last compared row (the graph's end)."""
    compared = [r for r in rows if r["gpu_vs_reference"] is not None]
    return compared[-1]["gpu_vs_reference"]["max_rel"] if compared else None


def _growth(rows, parts=10):
    """The largest relative error (GPU vs reference) in each tenth of the execution order."""
    compared = [r for r in rows if r["gpu_vs_reference"] is not None]
    if not compared:
        return []
    positions = max(r["position"] for r in rows) + 1
    parts = min(parts, positions)
    out = []
    for k in range(parts):
        lo, hi = k * positions / parts, (k + 1) * positions / parts
        values = [r["gpu_vs_reference"]["max_rel"] for r in compared if lo <= r["position"] < hi]
        out.append(max(values) if values else None)
    return out


# -- output: terminal -----------------------------------------------------------------------
def _e(value):
    if value is None:
        return "-"
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    return f"{value:.1e}"


def _short(text, width=36):
    return text if len(text) <= width else "..." + text[-(width - 3):]


def _verdict_cell(metrics):
    """'ok', 'spread' (over the fixed tolerance, within LiteRT's own spread: compare) or 'OVER'."""
    return "OVER" if not metrics["within"] else "spread" if metrics.get("by_spread") else "ok"


def _by_spread(summary):
    """' or LiteRT's own spread' where a comparison passed only through it, else ''."""
    return " or LiteRT's own spread" if summary.get("within_by_spread") else ""


def _spread_line(summary, tolerance):
    """What LiteRT's own kernel sets' disagreement did to the verdicts, or None where it is too
    small to change one (SPREAD_FACTOR x it within `tolerance`, the tightest one)."""
    largest = summary.get("largest_litert_spread")
    if not largest or SPREAD_FACTOR * largest["spread_rel"] <= tolerance:
        return None
    return (f"LiteRT's own kernel sets disagree (its builtin, reference and XNNPACK kernels: up to "
            f"{_e(largest['spread_rel'])} relative, at {largest['node']} tensor {largest['tensor_index']}): a tensor "
            f"is judged against {SPREAD_FACTOR}x their spread on it where that exceeds the tolerance; "
            f"{summary['within_by_spread']} comparison(s) within only so (marked 'spread')")


def print_report(report, table_mode="all"):
    s = report["summary"]
    print(f"gles-parity: {report['model']}")
    print(f"GPU: {report['renderer']} ({report['gl_version']}), precision {report['precision']}: tolerance "
          f"{report['tolerance']:g} x max|reference| (reference vs LiteRT: {report['reference_tolerance']:g}); "
          f"seed {report['seed']}; LiteRT: {report['litert']}")
    rows = report["rows"]
    if table_mode != "none":
        # Folded constants (fp16 weights' DEQUANTIZE...) have nothing to compare: counted, not listed.
        shown = [r for r in rows if r["status"] != FOLDED] if table_mode == "all" else [
            r for r in rows if any(r[k] is not None and (not r[k]["within"] or r[k].get("by_spread"))
                                   for k in ("gpu_vs_reference", "local", "reference_vs_litert"))]
        body = []
        for r in shown:
            g, loc, lr = r["gpu_vs_reference"], r["local"], r["reference_vs_litert"]
            if g is None:
                cells = [r["status"], "", "", "", "", ""]
            else:
                cells = [_e(g["max_abs"]), _e(g["max_rel"]), _e(g["rmse"]), f"{g['cosine']:.6f}",
                         _e(loc["max_rel"]) if loc else "-", _verdict_cell(g)]
            cells += ([_e(lr["max_rel"]), _verdict_cell(lr)] if lr else ["-", ""])
            body.append([r["node"], _short(r["tensor"]), r["where"], common.shape_text(r["shape"])] + cells)
        print(common.table(body, ["node", "tensor", "on", "shape", "max abs", "rel", "rmse", "cosine", "local",
                                  "gpu", "LiteRT rel", "ref"], align="<<<<>>>>>><<"))
    print(f"{s['compared']} tensors compared, {s['over_tolerance']} over tolerance; "
          f"{len(s['fused_away'])} fused away, {s['folded']} folded into constants"
          + (f", {len(s['not_captured'])} not captured" if s["not_captured"] else ""))
    spread_line = _spread_line(s, report["reference_tolerance"])
    if spread_line:
        print(spread_line)
    if s["fused_away"]:
        names = [_short(t, 60) for t in s["fused_away"]]
        more = f" ... ({len(names) - 12} more)" if len(names) > 12 else ""
        print("fused away (no GPU value to compare): " + ", ".join(names[:12]) + more)
    first = s["first_over_tolerance"]
    if first:
        print(f"first op over tolerance: {first['node']} tensor {first['tensor_index']} {first['tensor']!r}: "
              f"max abs {_e(first['max_abs'])}, relative {_e(first['max_rel'])} at {first['worst_index']}")
    else:
        print(f"every compared op is within tolerance{_by_spread(s)} (largest relative error "
              f"{_e(s['max_relative_error'])})")
    if s["kernels_over_tolerance"]:
        print("ops whose own GPU kernel is over tolerance (given the GPU's inputs): "
              + ", ".join(k["node"] for k in s["kernels_over_tolerance"]))
    if s["error_growth"]:
        print(f"relative error along the graph (largest per 1/{len(s['error_growth'])} of the execution order): "
              + " ".join(_e(v) for v in s["error_growth"]))
    if s.get("litert_nodes"):
        print(f"{len(s['litert_nodes'])} node(s) have no reference kernel and ran through LiteRT's kernels in both "
              "runs (LiteRT is their only oracle): " + ", ".join(s["litert_nodes"]))
    promoted = report.get("promoted_tensors") or {}
    if promoted or report.get("promoted_nodes"):
        names = {r["tensor_index"]: r["tensor"] for r in rows}
        print(f"precision 'auto' promoted {len(promoted)} tensor(s) to float storage and the weights of "
              f"{len(report['promoted_nodes'])} node(s):")
        for index, why in promoted.items():
            print(f"  tensor {index} {names.get(index, '(made by a rewrite)')!r}: {why}")
        for label, why in report["promoted_nodes"].items():
            print(f"  weights of {label}: {why}")
    if s["litert_compared"]:
        fl = s["first_litert_over_tolerance"]
        print(f"reference vs LiteRT: {s['litert_compared']} tensors compared, {s['litert_over_tolerance']} over "
              + (f"tolerance; first: {fl['node']} {fl['tensor']!r} relative {_e(fl['max_rel'])}" if fl
                 else "tolerance"))


# -- output: Model Explorer node data ---------------------------------------------------------
def node_data(rows, key, tolerance):
    """Model Explorer GraphNodeData: {"results": {output tensor name: {"value": worst relative
    error of the node}}, "thresholds": [...]} (see model_explorer/node_data_builder.py)."""
    worst = {}
    for r in rows:
        metrics = r[key]
        if metrics is None:
            continue
        value = metrics["max_rel"]
        value = NODE_DATA_CAP if not math.isfinite(value) else min(value, NODE_DATA_CAP)
        name = _node_key(rows, r)
        if name:  # an unnamed tensor cannot be matched to a node
            worst[name] = max(worst.get(name, 0.0), value)
    return {
        "results": {name: {"value": value} for name, value in worst.items()},
        "thresholds": [{"value": tolerance, "bgColor": COLOURS[0]},
                       {"value": tolerance * 10, "bgColor": COLOURS[1]},
                       {"value": NODE_DATA_CAP, "bgColor": COLOURS[2]}],
    }


def _node_key(rows, row):
    """A node's key: the name of its first output tensor that has a value (rows of one node are
    adjacent and share node_index)."""
    for r in rows:
        if r["node_index"] == row["node_index"] and r["status"] == COMPARED:
            return r["tensor"]
    return row["tensor"]


# -- output: HTML ----------------------------------------------------------------------------
def plot_figure(report):
    """A matplotlib Figure of relative error along the execution order, its legend beside the
    axes (inside, it hid points); None without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    rows = report["rows"]
    fig, ax = plt.subplots(figsize=(11, 4), dpi=100, layout="constrained")  # room for the legend
    floor = 1e-12  # exact agreement (0) is drawn here on the log scale
    for key, label, style in (("gpu_vs_reference", "GPU vs reference", "-o"),
                              ("reference_vs_litert", "reference vs LiteRT", "--s")):
        points = [(r["position"], min(max(r[key]["max_rel"], floor), 1e6)) for r in rows if r[key] is not None]
        if points:
            xs, ys = zip(*points)
            ax.plot(xs, ys, style, markersize=3, linewidth=1, label=label)
    local = [(r["position"], min(r["local"]["max_rel"], 1e6)) for r in rows
             if r["local"] is not None and r["local"]["max_rel"] > 0]
    if local:
        xs, ys = zip(*local)
        ax.plot(xs, ys, "x", markersize=4, label="GPU kernel alone\n(local; exact ones omitted)")
    ax.axhline(report["tolerance"], color="red", linewidth=1, linestyle="--",
               label=f"tolerance ({report['precision']})")
    first = report["summary"]["first_over_tolerance"]
    if first:
        position = next(r["position"] for r in rows if r["tensor_index"] == first["tensor_index"])
        ax.axvline(position, color="red", alpha=0.4, linewidth=6, label=f"first over: {first['node']}")
    ax.set_yscale("log")
    ax.set_xlabel("operator (execution order)")
    ax.set_ylabel("max abs error / max |reference|")
    ax.set_title(f"Relative error along the graph: {Path(report['model']).name}")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, fontsize=8)
    return fig


def plot_png(report):
    """PNG bytes of plot_figure(report), or None without matplotlib."""
    fig = plot_figure(report)
    if fig is None:
        return None
    import matplotlib.pyplot as plt
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()


# Columns of the HTML table; "rel" is max abs error / max |reference|.
HTML_COLUMNS = ("#", "node", "tensor", "on", "shape", "GPU vs ref rel", "GPU vs ref max abs", "rmse", "cosine",
                "worst index", "local rel", "local max abs", "ref vs LiteRT rel", "ref vs LiteRT max abs")


def _row_id(tensor_index):
    """The HTML id of a tensor's table row (the verdict links to it)."""
    return f"tensor-{tensor_index}"


def _html_cells(metrics):
    """The rel and max abs cells of a comparison ('-' across both without one)."""
    if metrics is None:
        return '<td colspan="2">-</td>'
    cls = "good" if metrics["within"] else "bad"
    return f'<td class="{cls}">{_e(metrics["max_rel"])}</td><td>{_e(metrics["max_abs"])}</td>'


def _html_row(r):
    esc, g = html.escape, r["gpu_vs_reference"]
    extra = (f'<td>{_e(g["rmse"])}</td><td>{g["cosine"]:.6f}</td><td>{g["worst_index"]}</td>' if g
             else f'<td colspan="3">{esc(r["status"])}</td>')
    return (f'<tr id="{_row_id(r["tensor_index"])}"><td>{r["position"]}</td><td>{esc(r["node"])}</td>'
            f'<td title="{esc(r["tensor"])}">{esc(_short(r["tensor"], 48))}</td><td>{r["where"]}</td>'
            f'<td>{common.shape_text(r["shape"])}</td>{_html_cells(g)}{extra}{_html_cells(r["local"])}'
            f'{_html_cells(r["reference_vs_litert"])}</tr>')


def _folded_row(rows):
    """One row for all tensors constant folding made constants (nothing to compare: the fp16
    weights' DEQUANTIZE nodes, say), or '' when there are none."""
    folded = collections.Counter(r["op"] for r in rows if r["status"] == FOLDED)
    if not folded:
        return ""
    ops = ", ".join(f"{op} x{n}" for op, n in sorted(folded.items()))
    return (f'<tr class="folded"><td colspan="{len(HTML_COLUMNS)}">{sum(folded.values())} tensors folded into '
            f'constants at load ({ops}): nothing to compare, and LiteRT does not keep them either; their rows '
            f'are in parity.json</td></tr>')


def _verdict(s):
    """The banner: the first op over tolerance, linked to its row, or that every op is within."""
    first, esc = s["first_over_tolerance"], html.escape
    if not first:
        return (f'<p class="good">Every compared op is within tolerance{_by_spread(s)} (largest relative error '
                f'{_e(s["max_relative_error"])}).</p>')
    return (f'<p class="bad">First op over tolerance: <a href="#{_row_id(first["tensor_index"])}"><b>'
            f'{esc(first["node"])}</b> tensor {first["tensor_index"]} <code>{esc(first["tensor"])}</code></a>: '
            f'relative error {_e(first["max_rel"])} at {first["worst_index"]}</p>')


def write_html(report, path):
    s, esc = report["summary"], html.escape
    png = plot_png(report)
    plot = (f'<img alt="relative error along the graph" src="data:image/png;base64,'
            f'{base64.b64encode(png).decode()}">' if png else
            "<p><em>matplotlib is not installed: no plot (pip install matplotlib).</em></p>")
    kernels = ", ".join(esc(k["node"]) for k in s["kernels_over_tolerance"]) or "none"
    body = [_folded_row(report["rows"])] + [_html_row(r) for r in report["rows"] if r["status"] != FOLDED]
    header = "".join(f"<th>{esc(name)}</th>" for name in HTML_COLUMNS)
    fused = "".join(f"<li><code>{esc(t)}</code></li>" for t in s["fused_away"]) or "<li>none</li>"
    rewrites = "".join(f"<li><code>{esc(t)}</code></li>" for t in report["rewrites"]) or "<li>none</li>"
    text = f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>gles-parity: {esc(Path(report['model']).name)}</title>
<style>
body {{ font-family: sans-serif; margin: 1.5em; }} table {{ border-collapse: collapse; font-size: 12px; }}
td, th {{ border: 1px solid #ccc; padding: 2px 6px; text-align: right; white-space: nowrap; }}
td:nth-child(2), td:nth-child(3), tr.folded td {{ text-align: left; }}
tr.folded td {{ color: #555; font-style: italic; }} tr:target td {{ outline: 2px solid #c62828; }}
.good {{ background: {COLOURS[0]}; }} .bad {{ background: {COLOURS[2]}; }} img {{ max-width: 100%; }}
</style></head><body>
<h1>Parity report: {esc(Path(report['model']).name)}</h1>
<p>Model <code>{esc(report['model'])}</code>; GPU {esc(str(report['renderer']))} ({esc(str(report['gl_version']))}),
precision <b>{report['precision']}</b>; tolerance {report['tolerance']:g} &times; max|reference|
(reference vs LiteRT: {report['reference_tolerance']:g}); inputs: seeded uniform [-1, 1), seed {report['seed']};
LiteRT: {esc(report['litert'])}; gles_delegate {esc(report['gles_delegate_version'])}.</p>
{_verdict(s)}
<p>{esc(_spread_line(s, report['reference_tolerance']) or '')}</p>
<p>{s['compared']} tensors compared, {s['over_tolerance']} over tolerance; {len(s['fused_away'])} fused away;
{s['folded']} folded into constants. Ops whose own GPU kernel is over tolerance (given the GPU's inputs): {kernels}.
Reference vs LiteRT: {s['litert_compared']} compared, {s['litert_over_tolerance']} over tolerance.
Nodes without a reference kernel, run through LiteRT's kernels in both runs: {esc(", ".join(s.get("litert_nodes", [])) or "none")}.</p>
<h2>Relative error along the graph</h2>
{plot}
<h2>Per tensor (execution order)</h2>
<p>rel = max abs error / max |reference|. "GPU vs ref": the GPU delegate against the numpy reference;
"local": the GPU node's error given the GPU's own inputs; "ref vs LiteRT": the reference against LiteRT.</p>
<table><tr>{header}</tr>
{''.join(body)}
</table>
<h2>Fused away</h2><ul>{fused}</ul>
<h2>Rewrite rules applied</h2><ul>{rewrites}</ul>
</body></html>
"""
    Path(path).write_text(text)


# -- main -------------------------------------------------------------------------------------
def build_parser():
    p = common.tool_parser("gles-parity", __doc__)
    p.add_argument("model", type=common.model_file, help="a .tflite file or a MediaPipe model name")
    common.add_precision(p)
    p.add_argument("--out", type=common.output_dir, default=None,
                   help="report directory (default: ./parity_<model name>)")
    p.add_argument("--seed", type=common.non_negative_int, default=0, help="seed of the random inputs (default 0)")
    common.add_max_delegated_partitions(p)
    p.add_argument("--no-litert", dest="litert", action="store_false", help="do not run LiteRT")
    p.add_argument("--runtime", choices=["gles", "litert"], default="gles",
                   help="litert: also run LiteRT's own Interpreter with this GpuDelegate and compare its outputs "
                        "with gles_delegate's Interpreter and delegate (same inputs)")
    p.add_argument("--table", choices=["all", "over", "none"], default="all",
                   help="terminal table rows: all, only those over tolerance, or none")
    return p


def main(argv=None):
    return common.run_main(build_parser(), run, argv)


def run(args):
    path = args.model
    out = Path(args.out or common.output_dir(f"parity_{path.stem}"))  # checked before the runs
    report = analyse(path, args.precision, args.seed, args.max_delegated_partitions, args.litert)
    if args.runtime == "litert":
        report["litert_delegate"] = litert_delegate_parity(path, args)
    out.mkdir(parents=True, exist_ok=True)
    print_report(report, args.table)
    (out / "parity.json").write_text(json.dumps(_finite(report), indent=1, default=common.json_default))
    with open(out / "model_explorer_gpu_vs_reference.json", "w") as f:
        json.dump(node_data(report["rows"], "gpu_vs_reference", report["tolerance"]), f, indent=1, allow_nan=False)
    if report["summary"]["litert_compared"]:
        with open(out / "model_explorer_reference_vs_litert.json", "w") as f:
            json.dump(node_data(report["rows"], "reference_vs_litert", report["reference_tolerance"]), f,
                      indent=1, allow_nan=False)
    write_html(report, out / "report.html")
    print(f"wrote {out / 'report.html'}, {out / 'parity.json'} and the Model Explorer node data in {out}")
    s = report["summary"]
    return 1 if s["over_tolerance"] or s["litert_over_tolerance"] else 0


def _finite(value):
    """JSON has no inf / NaN: write them as the strings "inf", "-inf", "nan"."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


if __name__ == "__main__":
    sys.exit(main())
