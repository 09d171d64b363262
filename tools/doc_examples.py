"""The command outputs README.md and docs/usage.md quote, checked against fresh runs (or rewritten
from them), so that a quoted output cannot go stale.

    python -m gles_delegate.tools.doc_examples            # check every quoted output (exit 1: stale)
    python -m gles_delegate.tools.doc_examples --write    # rewrite the stale ones from fresh runs

A quoted output is the fenced block after a line `<!-- output of: COMMAND -->`: COMMAND is one of
this package's console scripts (setup.cfg), `python -m gles_delegate.tools.NAME`, or `summary
MODEL` (print(delegate.summary()) after one FP32 invoke), each run in a fresh process in a
temporary directory where MODELS are written. The lines a block quotes must appear in the output in
the block's order; the output lines between them are left out (a line `...` marks that for the
reader). Figures that change from run to run (timings, run counts, the process's memory: VOLATILE)
are compared as '#', runs of spaces as one, table rules as '--'. The outputs were made on the
renderer the docs name (DOCS_RENDERER): on another, the figures differ, and the check says so and
compares nothing. They were made with numpy DOCS_NUMPY: under another major version (CI's
lowest allowed numpy) the numpy reference kernels round differently in the last bits on some
CPUs, so the figures with a fraction or an exponent (errors, ratios) are then compared as '#'
(fractions_masked()), the integers (counts, shapes, node numbers) and the words as they are.
"""
import configparser
import dataclasses
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from gles_delegate.tflite import ModelBuilder
from gles_delegate.tools import common

ROOT = Path(__file__).resolve().parents[1]
DOCS = ("README.md", "docs/usage.md")
MARKER = re.compile(r"^<!-- output of: (.+?) -->\n```[a-z]*\n(.*?)^```$", re.M | re.S)
ELISION = "..."
# Where the quoted outputs were made (Mesa's llvmpipe on 2 CPU cores; its figures are the docs').
DOCS_RENDERER = "llvmpipe (LLVM 15.0.6, 256 bits)"
DOCS_GL_VERSION = "OpenGL ES 3.2 Mesa 22.3.6"
DOCS_NUMPY = 2  # the major version of numpy the quoted figures were made with
# The MediaPipe models' directory as the docs show it (gles-fetch-models' cache, as root).
DOCS_MODEL_DIR = "/root/.cache/gles_delegate/mediapipe-0.10.14"
# (pattern, replacement) for the figures that change between runs, applied to each line.
NUMBER = r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?"
FRACTIONAL = r"[-+]?\d+(?:\.\d+(?:e[-+]?\d+)?|e[-+]?\d+)"
VOLATILE = (
    (re.compile(rf"{NUMBER}(?= ?ms\b)"), "#"),                                          # a time in ms
    (re.compile(rf"('init_ms': ){NUMBER}"), r"\1#"),                                    # summary()'s
    (re.compile(rf"{NUMBER} / {NUMBER}"), "# / #"),                                      # gles-bench-invoke's us
    (re.compile(rf"^(?=.*\(ms\)|\s*Init: |Host memory: ).*"), lambda m: re.sub(NUMBER, "#", m[0])),  # benchmark rows
)


def small_model_bytes():
    """small.tflite, a model for the examples (and the tools' tests): x, y [1,8,8,4] -> ADD ->
    LOGISTIC -> MUL by a constant -> RELU (fused into the MUL), then a 3x3 L2_POOL_2D of the
    RELU's output (no GPU kernel: CPU). The ADD reads graph inputs and its output 'sum' is a
    graph output, so no rewrite can fuse it away: a test can break its kernel and expect the
    report to name it."""
    b = ModelBuilder()
    x = b.input("x", (1, 8, 8, 4))
    y = b.input("y", (1, 8, 8, 4))
    scale = b.const("scale", np.array([0.5, -1.0, 2.0, 1.5], np.float32))
    total, gate = b.tensor("sum", (1, 8, 8, 4)), b.tensor("gate", (1, 8, 8, 4))
    scaled, scaled_relu = b.tensor("scaled", (1, 8, 8, 4)), b.tensor("scaled_relu", (1, 8, 8, 4))
    pooled = b.tensor("pooled", (1, 8, 8, 4))
    b.op("ADD", [x, y], [total], fused_activation_function=0)
    b.op("LOGISTIC", [total], [gate])
    b.op("MUL", [gate, scale], [scaled], fused_activation_function=0)
    b.op("RELU", [scaled], [scaled_relu])
    b.op("L2_POOL_2D", [scaled_relu], [pooled], padding=0, stride_w=1, stride_h=1, filter_width=3, filter_height=3,
         fused_activation_function=0)
    b.output(total)
    b.output(pooled)
    return b.build()



RUN_TIMEOUT_S = 300
# Model files a command may name, written where it runs.
MODELS = {"small.tflite": small_model_bytes}


@dataclasses.dataclass
class Example:
    """One quoted output: the file, the command, the block's lines and where they sit in the file."""
    path: Path
    command: str
    lines: list
    span: tuple  # (start, end) character offsets of the block's body in the file


def examples(root=ROOT):
    """Every quoted output of DOCS, in file order."""
    found = []
    for name in DOCS:
        path = root / name
        for match in MARKER.finditer(path.read_text()):
            found.append(Example(path, match[1], match[2].splitlines(), match.span(2)))
    return found


# -- running a command --------------------------------------------------------------------------
def console_scripts():
    """{console script name: module} of setup.cfg."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    scripts = config["options.entry_points"]["console_scripts"].strip().splitlines()
    return {name.strip(): target.split(":")[0].strip() for name, target in (s.split("=") for s in scripts)}


def run(command):
    """The stdout lines of `command`, run as a user would, in a fresh process (what an earlier run
    left in a process, LiteRT's accelerator registry say, changes later outputs) in a temporary
    directory (a tool's default output directory lands there), on this checkout's package and
    tools, the models' directory written as the docs write it."""
    words = shlex.split(command)
    with tempfile.TemporaryDirectory() as temp:
        for name, build in MODELS.items():
            (Path(temp) / name).write_bytes(build())
        done = subprocess.run([sys.executable, "-c", _program(words)], cwd=temp, capture_output=True, text=True,
                              timeout=RUN_TIMEOUT_S)
    if done.returncode not in (0, 1):  # 1: a verdict (gles-parity over tolerance), not a failure
        raise common.ToolError(f"{command!r} failed (exit status {done.returncode}): "
                               f"{done.stderr.strip().splitlines()[-1:]}")
    model_dir = os.path.dirname(common.model_file("selfie_segmentation"))
    return done.stdout.replace(model_dir, DOCS_MODEL_DIR).splitlines()


def _program(words):
    """The Python a fresh process runs for the command `words`: this checkout first on the path,
    gles_delegate.tools mapped to its tools/ (as tests/conftest.py does), then the tool as
    __main__ with its arguments (or print_summary)."""
    setup = (f"import runpy, sys; sys.path.insert(0, {str(ROOT)!r}); import gles_delegate.tools as tools; "
             f"tools.__path__[:] = [{str(ROOT / 'tools')!r}]; ")
    if words[0] == "summary":
        return setup + f"from gles_delegate.tools.doc_examples import print_summary; print_summary({words[1]!r})"
    module, argv = _tool(words)
    return setup + f"sys.argv = {argv!r}; runpy.run_module({module!r}, run_name='__main__')"


def _tool(words):
    """(module, sys.argv) of the tool `words` run: a console script of setup.cfg, or `python -m
    MODULE`."""
    if words[:2] == ["python", "-m"] and len(words) > 2:
        return words[2], words[2:]
    module = console_scripts().get(words[0])
    if module is None:
        raise common.ToolError(f"cannot run {' '.join(words)!r}: not a console script of setup.cfg nor python -m MODULE")
    return module, words


def print_summary(model):
    """print(delegate.summary()) after one FP32 invoke on seeded inputs (docs/usage.md's example)."""
    from gles_delegate import GpuDelegate, Interpreter
    with GpuDelegate() as delegate:
        interpreter = Interpreter(model_path=str(common.model_file(model)), experimental_delegates=[delegate])
        interpreter.allocate_tensors()
        common.set_inputs(interpreter, common.seeded_inputs(interpreter.get_input_details()))
        interpreter.invoke()
        print(delegate.summary())


# -- comparing ----------------------------------------------------------------------------------
def masked(line):
    """`line` with its VOLATILE figures as '#', runs of spaces as one and a table's rules as '--'
    (column widths follow the figures)."""
    for pattern, replacement in VOLATILE:
        line = pattern.sub(replacement, line)
    return re.sub("-{2,}", "--", " ".join(line.split()))


def shape(line):
    """masked(line) with every figure as '#' but node numbers ('#12 (ADD)'): where a line of an
    earlier run sits in a fresh one whose figures changed."""
    return re.sub(rf"(?<!#){NUMBER}", "#", masked(line))


def fractions_masked(line):
    """masked(line) with every figure that has a fraction or an exponent as '#'."""
    return re.sub(FRACTIONAL, "#", masked(line))


def placed(lines, fresh, key):
    """[(quoted line, index of the fresh line it is)] for the lines of a block but its ELISION
    ones, in order, each found after the one before by key(line); the last index is None where a
    line is not found."""
    keys, start, out = [key(line) for line in fresh], 0, []
    for line in lines:
        if line.strip() == ELISION:
            continue
        at = next((k for k in range(start, len(keys)) if keys[k] == key(line)), None)
        out.append((line, at))
        if at is None:
            break
        start = at + 1
    return out


def stale_line(example, fresh):
    """The first quoted line of `example` the fresh output lacks (in the block's order), or None;
    its figures compared only under the numpy the docs were made with (DOCS_NUMPY)."""
    key = masked if int(np.__version__.split(".")[0]) == DOCS_NUMPY else fractions_masked
    return next((line for line, at in placed(example.lines, fresh, key) if at is None), None)


def refreshed(example, fresh):
    """The block's lines, each quoted line replaced by the fresh line where it now sits (found by
    shape), ELISION lines kept; a ToolError naming a line it cannot place."""
    found = iter(placed(example.lines, fresh, shape))
    lines = []
    for line in example.lines:
        if line.strip() == ELISION:
            lines.append(line)
            continue
        _, at = next(found)
        if at is None:
            raise common.ToolError(f"{example.path.name}, output of {example.command!r}: cannot find where {line!r} "
                                   "went in the fresh output; edit that block by hand")
        lines.append(fresh[at])
    return lines


def renderer_mismatch():
    """Why this machine's outputs cannot match the docs' figures (another renderer), or None."""
    device = _device()
    if (device.get("renderer"), device.get("version")) != (DOCS_RENDERER, DOCS_GL_VERSION):
        return (f"the docs' outputs were made on {DOCS_RENDERER} ({DOCS_GL_VERSION}), this GPU is "
                f"{device.get('renderer')} ({device.get('version')}): their figures would differ")
    return None


def _device():
    from gles_delegate import CompatibilityList
    return CompatibilityList().device or {}


# -- main -------------------------------------------------------------------------------------
def build_parser():
    parser = common.tool_parser("python -m gles_delegate.tools.doc_examples", __doc__)
    parser.add_argument("--write", action="store_true",
                        help="rewrite each stale quoted output from a fresh run (the same lines, their new values)")
    return parser


def main(argv=None):
    return common.run_main(build_parser(), check_or_write, argv)


def check_or_write(args):
    """Exit status 0 when every quoted output is current (or, with --write, was rewritten), 1 when
    one is stale (or, with --write, could not be placed in its fresh output)."""
    mismatch = renderer_mismatch()
    if mismatch:
        raise common.ToolError(mismatch)
    outputs, failed = {}, 0
    for example in reversed(examples()):  # from the end: a rewrite keeps earlier offsets valid
        fresh = outputs.setdefault(example.command, run(example.command))
        line = stale_line(example, fresh)
        if line is None:
            continue
        print(f"{example.path.relative_to(ROOT)}: the output of {example.command!r} no longer shows {line!r}")
        try:
            if args.write:
                _rewrite(example, refreshed(example, fresh))
                continue
        except common.ToolError as exc:
            print(exc)
        failed += 1
    if failed and not args.write:
        print("run python -m gles_delegate.tools.doc_examples --write, and read the diff")
    return 1 if failed else 0


def _rewrite(example, lines):
    text = example.path.read_text()
    start, end = example.span
    example.path.write_text(text[:start] + "".join(line + "\n" for line in lines) + text[end:])


if __name__ == "__main__":
    sys.exit(main())
