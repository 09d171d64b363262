"""Generate docs/supported_ops.md from the registries: the numpy reference kernels (gles_delegate.ops,
the CPU path) and the GPU kernels (gles_delegate.gpu.kernels), and every other builtin op of the schema
with what runs it (LiteRT's kernels, or nothing).

    python -m gles_delegate.tools.supported_ops            # print the Markdown
    python -m gles_delegate.tools.supported_ops --write    # rewrite docs/supported_ops.md
    python -m gles_delegate.tools.supported_ops --check    # exit 1 if the file is stale

A test fails when the committed file differs from what this prints, so adding an op to a
registry means running --write.
"""
import sys
from pathlib import Path

from gles_delegate import ops
from gles_delegate.gpu import kernels
from gles_delegate.tflite import schema
from gles_delegate.tools import common

DOC_PATH = Path(__file__).resolve().parents[1] / "docs" / "supported_ops.md"
# The builtin ops LiteRT 2.3's builtin resolver registers at no version (derived once by building a
# one-op model of each builtin; tests/tools/test_supported_ops.py checks it against LiteRT). A node
# of one of them runs nowhere unless the reference has a kernel for it.
LITERT_UNREGISTERED = frozenset({
    "CALL", "CONCAT_EMBEDDINGS", "DELEGATE", "PLACEHOLDER_FOR_GREATER_OP_CODES",
    "STABLEHLO_ABS", "STABLEHLO_BROADCAST_IN_DIM", "STABLEHLO_CBRT", "STABLEHLO_CLAMP", "STABLEHLO_COMPARE",
    "STABLEHLO_CONCATENATE", "STABLEHLO_CONVERT", "STABLEHLO_CONVOLUTION", "STABLEHLO_COSINE",
    "STABLEHLO_CUSTOM_CALL", "STABLEHLO_DIVIDE", "STABLEHLO_DOT_GENERAL", "STABLEHLO_DYNAMIC_SLICE",
    "STABLEHLO_DYNAMIC_UPDATE_SLICE", "STABLEHLO_EXPONENTIAL", "STABLEHLO_FLOOR", "STABLEHLO_IOTA", "STABLEHLO_LOG",
    "STABLEHLO_LOGISTIC", "STABLEHLO_NEGATE", "STABLEHLO_OR", "STABLEHLO_POWER", "STABLEHLO_REDUCE",
    "STABLEHLO_REMAINDER", "STABLEHLO_RESHAPE", "STABLEHLO_RSQRT", "STABLEHLO_SELECT", "STABLEHLO_SLICE",
    "STABLEHLO_SORT", "STABLEHLO_SUBTRACT", "STABLEHLO_TANH", "STABLEHLO_TRANSPOSE", "STABLEHLO_WHILE",
})
# Builtin op codes that name no op of their own: CUSTOM marks a custom op (named by its custom
# code: those with a reference kernel are rows of the table), the others are schema placeholders.
NOT_OPS = ("CUSTOM", "DELEGATE", "PLACEHOLDER_FOR_GREATER_OP_CODES")
STABLEHLO_PREFIX = "STABLEHLO_"
# Why the builtins LiteRT runs have no reference kernel, by group (the rest: not written yet).
NO_REFERENCE_GROUPS = (
    ("Random generators (their outputs depend on LiteRT's generator, so no reference could be checked "
     "against it)", ("MULTINOMIAL", "RANDOM_STANDARD_NORMAL", "RANDOM_UNIFORM")),
    ("Resource hash tables (string or resource tensors)",
     ("HASHTABLE", "HASHTABLE_FIND", "HASHTABLE_IMPORT", "HASHTABLE_SIZE")),
    ("Strings and fingerprints (SKIP_GRAM reads strings, LSH_PROJECTION farmhash fingerprints of bytes)",
     ("LSH_PROJECTION", "SKIP_GRAM")),
)


def registry(modules, attribute):
    """{op: module} over the modules of a registry (each module's dict `attribute`)."""
    owners = {}
    for module in modules:
        for op in getattr(module, attribute, {}):
            owners.setdefault(op, module)
    return owners


def summary(module):
    """The first line of the module's docstring (an ellipsis marks a sentence it cuts)."""
    lines = (module.__doc__ or "").strip().splitlines()
    if not lines:
        return ""
    first = lines[0].strip()
    return first if first.endswith(".") or len(lines) == 1 else first.rstrip(":") + " ..."


def _file(module, root):
    return f"`{root}/{module.__name__.rsplit('.', 1)[-1]}.py`"


def builtin_status():
    """{builtin op name: status} of the schema's builtins that have no reference kernel, except
    NOT_OPS and the STABLEHLO_ family: 'litert' (LiteRT's builtin resolver registers it: it runs
    through LiteRT's kernels when ai-edge-litert is installed) or 'none'."""
    return {op: "none" if op in LITERT_UNREGISTERED else "litert"
            for op in schema.BUILTIN_OP_CODES
            if op not in ops.KERNELS and op not in NOT_OPS and not op.startswith(STABLEHLO_PREFIX)}


def _ops_line(names):
    return ", ".join(f"`{op}`" for op in sorted(names)) or "none"


def _ours_table(cpu, gpu, names):
    """The rows of the table of ops with a reference or a GPU kernel."""
    rows = ["| Op | CPU reference | GPU kernel | Note |", "|---|---|---|---|"]
    for op in names:
        note = summary(gpu.get(op) or cpu.get(op)).replace("|", "\\|")
        rows.append(f"| `{op}` | {_file(cpu[op], 'ops') if op in cpu else '-'} | "
                    f"{_file(gpu[op], 'gpu/kernels') if op in gpu else '-'} | {note} |")
    return rows


def _without_reference(status):
    """The section on the builtins without a reference kernel: LiteRT's, grouped by why, then the
    ones nothing runs, then the STABLEHLO_ family in one line."""
    litert = {op for op, where in status.items() if where == "litert"}
    out = ["", "## Builtin ops without a reference kernel", "",
           "A node of one of these ops has no GPU kernel either. With ai-edge-litert installed, LiteRT 2.3's",
           "builtin resolver registers them and the Interpreter runs the node through LiteRT's kernels",
           "(`cpu_backend='auto'` or `'fallback'`, gles_delegate/cpu_litert.py, docs/usage.md); without it, or with",
           "`cpu_backend='reference'`, the node is a ModelError at `allocate_tensors()` naming it.", ""]
    grouped = set()
    for title, group in NO_REFERENCE_GROUPS:
        members = litert & set(group)
        grouped |= members
        out += [f"- {title}: {_ops_line(members)}."]
    out += [f"- Not written yet: {_ops_line(litert - grouped)}.", ""]
    nothing = {op for op, where in status.items() if where == "none"}
    stablehlo = sorted(op for op in schema.BUILTIN_OP_CODES if op.startswith(STABLEHLO_PREFIX))
    ours = [op for op in stablehlo if op in ops.KERNELS]
    stablehlo_litert = [op for op in stablehlo if op not in LITERT_UNREGISTERED and op not in ours]
    out += [f"LiteRT 2.3's builtin resolver does not register these, so nothing runs them: {_ops_line(nothing)}.",
            "`CUSTOM` is the code of every custom op (those the reference has are rows of the table, by their",
            "custom code); " + " and ".join(f"`{op}`" for op in NOT_OPS if op != "CUSTOM") + " name no op.", "",
            f"The {len(stablehlo)} `{STABLEHLO_PREFIX}*` builtins (StableHLO ops in .tflite files) are not listed "
            f"one by one: {len(ours)} {'has' if len(ours) == 1 else 'have'}",
            f"kernels of ours (rows of the table above: {_ops_line(ours)}); LiteRT 2.3 registers "
            f"{len(stablehlo_litert)} others, which run through LiteRT like the ops above",
            "(those that call subgraphs, a scatter's update computation, a composite's decomposition, with their",
            "callees copied into the LiteRT sub-model: callee_subgraphs.py): "
            f"{_ops_line(stablehlo_litert)}. Our Interpreter replaces a `STABLEHLO_COMPOSITE` by the nodes of its",
            "decomposition wherever its signature allows (composites.py: litert-torch's RMS norms, layer norms and",
            "attention blocks then run on the GPU); inside LiteRT's Interpreter the delegate claims the composite",
            "node whole where every node of its decomposition runs on the GPU.", ""]
    return out


def render():
    """The Markdown of docs/supported_ops.md."""
    cpu = registry(ops.MODULES, "KERNELS")
    gpu = registry(kernels.MODULES, "BUILD")
    names = sorted(set(cpu) | set(gpu), key=lambda op: (op.upper(), op))
    both = sum(op in cpu and op in gpu for op in names)
    status = builtin_status()
    builtins = [op for op in schema.BUILTIN_OP_CODES if op not in NOT_OPS and not op.startswith(STABLEHLO_PREFIX)]
    out = [
        "# Supported ops",
        "",
        "<!-- Generated by `python -m gles_delegate.tools.supported_ops --write` from the kernel registries;",
        "     do not edit by hand (tests/tools/test_supported_ops.py fails when this file is stale). -->",
        "",
        f"{len(names)} ops: {len(cpu)} run on the CPU reference kernels (numpy, TFLite semantics: the fallback",
        f"and the parity oracle), {len(gpu)} have a GPU kernel ({both} both). Of the schema's {len(builtins)} builtin",
        f"ops (not counting `{STABLEHLO_PREFIX}*`), {sum(op in cpu for op in builtins)} have a reference kernel, "
        f"{sum(where == 'litert' for where in status.values())} run only through LiteRT's kernels",
        f"and {sum(where == 'none' for where in status.values())} run nowhere (the last section).",
        "",
        "A GPU kernel runs a node only when it says it can run that exact node (op, version, options,",
        "shapes, float32 tensors of rank <= 4, or <= 6 for the ops that docs/compiler.md lists; complex64",
        "ones through the complex view, int64 ones that hold int32 values (ARG_MAX / ARG_MIN's indices,",
        "CASTs of narrower ints, moves of those: gles_delegate/int32_values.py) as int32 through the",
        "index view); every other node runs on the CPU reference. `gles-inspect",
        "MODEL` prints, per node, where it runs and why not on the GPU. The note is the summary line of",
        "the GPU kernel's module (else the reference module's).",
        "",
        "A node with a dynamic tensor (a shape known only at invoke: a SLICE of run-time sizes, the",
        "outputs of a WHILE whose body makes one, as in the Keras GRU and LSTM of the zoo) runs on the",
        "CPU: a GPU plan is made for fixed shapes. TFLite's GPU delegate does not take such nodes either:",
        "it does not declare `kTfLiteDelegateFlagsAllowDynamicTensors`, and TFLite applies a delegate",
        "without that flag only to a graph with no dynamic tensor. WHILE and IF run on the CPU too (no",
        "GPU kernel runs a subgraph; TFLite's GPU delegate has none either): with ai-edge-litert",
        "installed, a loop and the nodes of dynamic tensors after it run as one LiteRT sub-model, its",
        "subgraphs copied in, so the loop runs in LiteRT's C++ rather than our Python per iteration",
        "(docs/architecture.md, \"Loops on LiteRT's kernels\"); a loop whose subgraphs are large stays",
        "ours, their nodes in GPU partitions.",
        "",
        "Which real models run fully on the GPU: [model_zoo.md](model_zoo.md), a zoo of torchvision, timm",
        "and Keras models with random weights that `tools/build_zoo.py` builds outside CI, reported by",
        "`python -m gles_delegate.tools.zoo_report` (per model: GPU nodes, the ops it lacks, error vs LiteRT).",
        "",
    ] + _ours_table(cpu, gpu, names)
    cpu_only = [op for op in names if op in cpu and op not in gpu]
    out += ["", "## CPU only", "",
            "These ops have a reference kernel but no GPU kernel: a node of one of them splits a GPU",
            "partition (constant-only nodes are folded before partitioning and cost nothing; so is `SHAPE`",
            "of a tensor whose shape the allocation fixes, with what computes only on it: the `SHAPE` ->",
            "`STRIDED_SLICE` -> `PACK` chain a dynamic-batch Keras 3 model builds a `RESHAPE`'s target with).",
            "",
            ", ".join(f"`{op}`" for op in cpu_only) or "none"]
    whys = [f"- `{op}`: {CPU_ONLY_WHY[op]}" for op in cpu_only if op in CPU_ONLY_WHY]
    if whys:
        out += ["", "Some stay on the CPU by their nature (TFLite's own GPU delegate takes none of these either):",
                ""] + whys
    return "\n".join(out + _without_reference(status))


# Why an op with a reference kernel has no GPU kernel, where that is its nature rather than work
# not done yet (a kernel of one of these would not save a crossing between CPU and GPU).
CPU_ONLY_WHY = {
    "CALL_ONCE": "runs its initializer subgraph at the first invoke only (it then costs nothing); the "
                 "values it assigns move to the GPU once, where a partition holds the variables "
                 "(docs/architecture.md, resource variables on the GPU)",
    "WHILE": "control flow: the loop's condition decides on the CPU; its body's nodes get GPU partitions of their own",
    "IF": "control flow: the branch is chosen on the CPU; each branch's nodes get GPU partitions of their own",
    "SHAPE": "a tensor's shape, known before invoke: folded at allocation wherever the shape is fixed",
    "ZEROS_LIKE": "zeros of a tensor's shape: folded at allocation into a constant wherever the shape is fixed",
    "RANK": "a tensor's rank, known before invoke: folded as a constant",
    "BROADCAST_ARGS": "shape arithmetic on shape tensors, folded where its inputs are fixed",
    "WHERE": "an output whose shape depends on the values (a dynamic tensor)",
    "UNIQUE": "an output whose shape depends on the values (a dynamic tensor)",
    "NON_MAX_SUPPRESSION_V4": "a sequential, data-dependent selection with a dynamic number of boxes",
    "NON_MAX_SUPPRESSION_V5": "a sequential, data-dependent selection with a dynamic number of boxes",
}


def build_parser():
    parser = common.tool_parser("python -m gles_delegate.tools.supported_ops", __doc__)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", action="store_true", help=f"write {DOC_PATH}")
    group.add_argument("--check", action="store_true", help="exit 1 if the committed file is stale")
    return parser


def main(argv=None):
    return common.run_main(build_parser(), run, argv)


def run(args):
    text = render()
    if args.write:
        DOC_PATH.write_text(text)
        print(f"wrote {DOC_PATH}")
    elif args.check:
        current = DOC_PATH.read_text() if DOC_PATH.exists() else ""
        if current != text:
            print(f"{DOC_PATH} is stale: run python -m gles_delegate.tools.supported_ops --write")
            return 1
        print(f"{DOC_PATH} is up to date")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
