"""Inspect what the GPU delegate makes of a model: ops, where each node runs and why, the rewrite
rules applied, partitions, kernels, programs, dispatches and the memory plan.

    gles-inspect MODEL [--precision fp32|fp16|fp16_fp32acc|auto] [--max_delegated_partitions N]
                       [--memory_strategy S] [--nodes] [--dot FILE] [--svg]

MODEL is a .tflite file or a MediaPipe model name. Nothing is invoked: the model is loaded,
its constants folded and its GPU partitions compiled, as allocate_tensors() does.
--nodes lists every node (where it runs: a GPU partition, the CPU's reference kernels or, for
the CPU nodes the Interpreter's cpu_backend gives LiteRT, LiteRT's; its dispatches and their
templates, output shape).
--dot FILE writes a Graphviz graph coloured by where each node runs; --svg also renders
FILE.svg when Graphviz's `dot` is on PATH.
"""
import collections
import logging
import os
import shutil
import subprocess
import sys

from gles_delegate import GpuDelegate, GpuDelegateOptions, Interpreter
from gles_delegate.gpu.memory import STRATEGIES
from gles_delegate.tools import common

GPU_COLOURS = ("#a5d6a7", "#90caf9", "#ce93d8", "#80cbc4", "#c5e1a5")  # one per partition
CPU_COLOUR = "#ffcc80"
IO_COLOUR = "#eeeeee"


def build_parser():
    p = common.tool_parser("gles-inspect", __doc__)
    p.add_argument("model", type=common.model_file, help="a .tflite file or a MediaPipe model name")
    common.add_precision(p, None)
    common.add_max_delegated_partitions(p)
    common.add_placement(p)
    p.add_argument("--memory_strategy", choices=STRATEGIES, default=None,
                   help="GpuDelegateOptions.memory_strategy: how intermediates share GPU memory "
                        "(default: the option's default, best)")
    p.add_argument("--nodes", action="store_true", help="list every node")
    p.add_argument("--dot", metavar="FILE", type=common.output_file, default=None, help="write a Graphviz DOT graph")
    p.add_argument("--svg", action="store_true", help="also render FILE.svg with Graphviz's dot")
    return p


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.records = []

    def emit(self, record):
        self.records.append(record.getMessage())


def load(path, args):
    """(interpreter, delegate, the partitioner's log lines) after allocate_tensors()."""
    fields = {}
    for name in ("precision", "max_delegated_partitions", "memory_strategy", "placement"):
        if getattr(args, name) is not None:
            fields[name] = getattr(args, name)
    delegate = GpuDelegate(GpuDelegateOptions(**fields))
    logger, handler = logging.getLogger("gles_delegate"), _Collect()
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        interpreter = Interpreter(model_path=str(path), experimental_delegates=[delegate])
        interpreter.allocate_tensors()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return interpreter, delegate, handler.records


def report(path, interpreter, delegate, log_lines, show_nodes=False):
    """The inspector's text."""
    graph = interpreter._main.graph
    model = interpreter._model
    summary = delegate.summary()
    live = [p for p in delegate.partitions if p.steps]
    on_gpu = common.gpu_partition_of(delegate)
    original_ops = len(model.subgraphs[0].operators)
    out = []
    w = out.append
    w(f"model: {path} ({os.path.getsize(path) / 1e6:.2f} MB): {len(model.subgraphs)} subgraph(s), "
      f"{original_ops} operators, {len(model.subgraphs[0].tensors)} tensors")
    w("inputs:  " + ", ".join(f"{t.index} {t.name!r} {common.shape_text(t.shape)} {t.dtype}" for t in graph.inputs))
    w("outputs: " + ", ".join(f"{t.index} {t.name!r} {common.shape_text(t.shape)} {t.dtype}" for t in graph.outputs))
    w(f"GPU: {summary['renderer']} ({summary['gl_version']}; {summary['gl_api']} on the {summary['egl_platform']} "
      f"EGL display), precision {summary['precision']}, max_delegated_partitions "
      f"{delegate.options.max_delegated_partitions}, memory strategy {delegate.options.memory_strategy}")
    w("")
    folded = original_ops - len(graph.nodes)
    w(f"== Ops ({len(graph.nodes)} nodes executed; {folded} constant-only nodes folded away at load) ==")
    counts = common.op_counts(graph, on_gpu)
    w(common.table([[op, n, g, c] for op, (n, g, c) in counts.items()], ["op", "count", "GPU", "CPU"], "<>>>"))
    w("")
    cpu_nodes = [n for n in graph.nodes if id(n) not in on_gpu]
    cpu = interpreter.cpu_summary()
    on_litert = set(cpu["litert_nodes"])
    w(f"== Where nodes run: {len(graph.nodes) - len(cpu_nodes)} on the GPU in {len(live)} partition(s), "
      f"{len(cpu_nodes)} on the CPU" + (f" ({len(on_litert)} of them through LiteRT's kernels in "
                                        f"{len(cpu['litert_partitions'])} sub-model(s))" if on_litert else "") + " ==")
    if cpu_nodes:
        w(common.table([[n.label, _cpu_kernels(n, cpu), common.cpu_reason(n, delegate, interpreter._main.dynamic)]
                        for n in cpu_nodes],
                       ["CPU node", "kernels", "why not on the GPU"]))
    else:
        w("every node runs on the GPU")
    warnings = [line for line in log_lines if "cannot be handled" in line]
    if warnings:
        w(f"(the partitioner logged {len(warnings)} 'cannot be handled by this delegate' line(s), as TFLite does)")
    w("")
    w("== Rewrite rules applied ==")
    records = common.rewrite_log(delegate)
    if records:
        w(common.rewrite_tally(records))
        w("\n".join("  " + common.format_rewrite_record(r) for r in records))
    else:
        w("none recorded (no rule considered a node)")
    w("")
    w("== Partitions ==")
    for k, partition in enumerate(live):
        plan = partition.plan
        nodes = partition.nodes
        barriers = sum(1 for step in plan.steps if step[4])
        w(f"partition {k}: {len(nodes)} nodes, {nodes[0].label} .. {nodes[-1].label}")
        w("  inputs:  " + ", ".join(f"{s.tensor_index} {common.shape_text(s.shape)}" for s in plan.inputs))
        w("  outputs: " + ", ".join(f"{s.tensor_index} {common.shape_text(s.shape)}" for s in plan.outputs))
        fused = sorted(partition.fused_away)
        w(f"  {len(plan.steps)} dispatches ({barriers} behind a barrier), {len(plan.sources)} programs"
          + (f", {len(fused)} tensors fused away by rewrites" if fused else ""))
        tally = collections.Counter(plan.templates)
        w("  kernels (template x dispatches): " + ", ".join(f"{t} x{n}" for t, n in sorted(tally.items())))
        element = plan.element_bytes
        arena, lower = plan.arena_elements * element, plan.arena_lower_bound * element
        naive = plan.arena_naive * element
        ratio = f"{arena / lower:.2f}x the lower bound" if lower else "no lower bound"
        w(f"  memory plan: arena {common.mb(arena)} ({ratio}; lower bound {common.mb(lower)}, naive "
          f"{common.mb(naive)}, saving {1 - arena / naive:.0%} of naive)" if naive else "  memory plan: empty")
        w(f"  constants {common.mb(plan.buffer_bytes()['constants'])}, I/O buffer {common.mb(plan.io_bytes)}, "
          f"{'half' if plan.storage_half else 'float'} storage")
        if plan.promoted_tensors or plan.promoted_nodes:
            _promotions(w, plan)
    if not live:
        w("no GPU partitions")
    w(f"total: {summary['dispatches']} dispatches, {summary['programs']} distinct programs, intermediates "
      f"{common.mb(summary['intermediate_bytes'])} "
      f"(lower bound {common.mb(summary['intermediate_lower_bound_bytes'])}, "
      f"naive {common.mb(summary['intermediate_naive_bytes'])}), delegate compile {summary['init_ms']:.1f} ms")
    if show_nodes:
        w("")
        w("== Nodes ==")
        w(common.table(node_rows(graph, live, on_gpu, delegate, on_litert, interpreter._main.dynamic),
                       ["node", "on", "dispatches", "templates", "output", "note"]))
    return "\n".join(out)


def _promotions(w, plan):
    """Precision 'auto': per dispatch of a node, its storage mode (gpu/storage.py) and what was
    promoted: the tensors it writes, its node's weights."""
    w(f"  precision 'auto': float buffer {common.mb(plan.buffer_bytes().get('float', 0))}, "
      f"{len(plan.promoted_tensors)} tensor(s) and the weights of {len(plan.promoted_nodes)} node(s) promoted; "
      f"calibration {plan.calibration}")
    rows = []
    for label, mode, written in zip(plan.labels, plan.step_storage, plan.writes):
        promoted = [f"{index}: {plan.promoted_tensors[index]}" for index, _, _ in written
                    if index in plan.promoted_tensors]
        weights = plan.promoted_nodes.get(label)
        if mode != "plain" or promoted or weights:
            rows.append([label, mode, "; ".join(promoted + ([f"weights: {weights}"] if weights else []))])
    w(common.table(rows, ["dispatch", "storage", "promoted (tensor it writes: why)"]))


def _cpu_kernels(node, cpu):
    """Which kernels run a CPU node, from Interpreter.cpu_summary() `cpu`: 'LiteRT' (a sub-model,
    gles_delegate/cpu_litert.py), or 'reference' and why LiteRT does not run it."""
    if node.label in cpu["litert_nodes"]:
        return "LiteRT"
    why = cpu["reference_reasons"].get(node.label)
    return f"reference ({why})" if why else "reference"


def node_rows(graph, live, on_gpu, delegate, on_litert=frozenset(), dynamic=frozenset()):
    """One row per node: where it runs ('CPU' on the reference, 'LiteRT' through LiteRT's
    kernels), its dispatches (by label) and their templates."""
    per_label = collections.defaultdict(list)
    for k, partition in enumerate(live):
        for label, template in zip(partition.plan.labels, partition.plan.templates):
            per_label[(k, label)].append(template)
    rewritten = {r.node: f"{r.rule} {r.why}".strip() for r in common.rewrite_log(delegate) if r.status == "APPLIED"}
    rows = []
    for node in graph.nodes:
        k = on_gpu.get(id(node))
        outputs = ", ".join(common.shape_text(t.shape) for t in node.outputs)
        if k is None:
            where = "LiteRT" if node.label in on_litert else "CPU"
            rows.append([node.label, where, "", "", outputs, common.cpu_reason(node, delegate, dynamic)])
            continue
        templates = per_label.get((k, node.label), [])
        note = f"rewritten: {rewritten[node.label]}" if node.label in rewritten else ""
        if not templates and not note:
            note = "no dispatch of its own"
        rows.append([node.label, f"GPU p{k}", len(templates), ",".join(sorted(set(templates))), outputs, note])
    return rows


# -- Graphviz -------------------------------------------------------------------------------
def _quote(text):
    """A DOT string: backslashes and quotes escaped, newlines as DOT's \\n line breaks."""
    escaped = str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def dot_graph(interpreter, delegate):
    """Graphviz DOT text: one box per node, coloured by partition (GPU) or orange (CPU); graph
    inputs and outputs as grey ellipses; edges labelled with tensor shapes."""
    graph = interpreter._main.graph
    on_gpu = common.gpu_partition_of(delegate)
    producer = {id(t): n for n in graph.nodes for t in n.outputs}
    lines = ["digraph model {", '  rankdir=TB; node [fontname="Helvetica", fontsize=10, style=filled];',
             '  edge [fontname="Helvetica", fontsize=8];']
    legend = [f'  legend_cpu [shape=box, fillcolor="{CPU_COLOUR}", label="CPU (numpy reference)"];']
    for k in sorted(set(on_gpu.values())):
        legend.append(f'  legend_gpu{k} [shape=box, fillcolor="{GPU_COLOURS[k % len(GPU_COLOURS)]}", '
                      f'label="GPU partition {k}"];')
    lines += ["  subgraph cluster_legend { label=\"where nodes run\"; fontsize=10;"] + legend + ["  }"]
    for t in graph.inputs:
        label = _quote(f"input {t.name}\n{common.shape_text(t.shape)}")
        lines.append(f'  t{t.index} [shape=ellipse, fillcolor="{IO_COLOUR}", label={label}];')
    for node in graph.nodes:
        k = on_gpu.get(id(node))
        colour = CPU_COLOUR if k is None else GPU_COLOURS[k % len(GPU_COLOURS)]
        where = "CPU" if k is None else f"GPU p{k}"
        tooltip = common.cpu_reason(node, delegate, interpreter._main.dynamic) if k is None else where
        label = _quote(f"{node.label}\n{where}")
        lines.append(f'  n{node.index} [shape=box, fillcolor="{colour}", label={label}, tooltip={_quote(tooltip)}];')
        for t in node.inputs:
            if t is None or t.is_const:
                continue
            source = producer.get(id(t))
            tail = f"n{source.index}" if source is not None else f"t{t.index}"
            lines.append(f'  {tail} -> n{node.index} [label={_quote(common.shape_text(t.shape))}];')
    for t in graph.outputs:
        label = _quote(f"output {t.name}\n{common.shape_text(t.shape)}")
        lines.append(f'  o{t.index} [shape=ellipse, fillcolor="{IO_COLOUR}", label={label}];')
        source = producer.get(id(t))
        tail = f"n{source.index}" if source is not None else f"t{t.index}"
        lines.append(f"  {tail} -> o{t.index};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv=None):
    return common.run_main(build_parser(), run, argv)


def run(args):
    path = args.model
    interpreter, delegate, log_lines = load(path, args)
    print(report(path, interpreter, delegate, log_lines, args.nodes))
    if args.dot:
        with open(args.dot, "w") as f:
            f.write(dot_graph(interpreter, delegate))
        print(f"wrote {args.dot}")
        if args.svg:
            dot = shutil.which("dot")
            if dot is None:
                print("--svg: Graphviz's `dot` is not on PATH (apt-get install graphviz); wrote only the DOT file")
            else:
                subprocess.run([dot, "-Tsvg", args.dot, "-o", args.dot + ".svg"], check=True)
                print(f"wrote {args.dot}.svg")
    elif args.svg:
        print("--svg needs --dot FILE")
    delegate.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
