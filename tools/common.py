"""Helpers the command-line tools share: checked command-line values, model paths, seeded inputs,
where nodes ran, tables, LiteRT loading, native stderr capture, peak RSS and a plain-text
progress bar.

The package itself never imports ai-edge-litert; tools do, lazily, through `litert()`.
"""
import argparse
import ast
import collections
import contextlib
import importlib
import math
import os
import re
import resource
import shlex
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from gles_delegate import GpuError, Interpreter, ModelError, __version__
from gles_delegate.delegate import PRECISIONS
from gles_delegate.gpu import kernels
from gles_delegate.gpu.context import default_gl_api
from gles_delegate.tflite.reader import FILE_IDENTIFIER


def package_version():
    """gles_delegate's version, for the tools' version line."""
    return __version__


# -- command lines --------------------------------------------------------------------------
def tuning_setting(text):
    """argparse type of --set: 'gpu.runtime.FLUSH_FIRST=0' (a module below gles_delegate, one of
    its constants, a value) -> (text, module, attribute, value), the value converted to the
    constant's type when that is a number."""
    target, equals, value = text.partition("=")
    module_name, _, attribute = target.rpartition(".")
    if not equals or not module_name:
        raise argparse.ArgumentTypeError(f"expected MODULE.NAME=VALUE (a module below gles_delegate), got {text!r}")
    try:
        module = importlib.import_module(f"gles_delegate.{module_name}")
    except ModuleNotFoundError:
        raise argparse.ArgumentTypeError(f"no module gles_delegate.{module_name}") from None
    if not hasattr(module, attribute):
        raise argparse.ArgumentTypeError(f"gles_delegate.{module_name} has no {attribute}")
    old = getattr(module, attribute)
    if isinstance(old, (int, float)):
        try:
            value = type(old)(float(value))
        except ValueError:
            raise argparse.ArgumentTypeError(f"gles_delegate.{module_name}.{attribute} is a number, "
                                             f"not {value!r}") from None
    elif isinstance(old, tuple):  # a workgroup shape: '(32, 16)'
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            value = None
        if not isinstance(value, tuple) or len(value) != len(old):
            raise argparse.ArgumentTypeError(f"gles_delegate.{module_name}.{attribute} is a tuple of "
                                             f"{len(old)}, not {text.partition('=')[2]!r}") from None
    return text, module, attribute, value


def apply_setting(setting):
    """Set the constant of a parsed --set (tuning_setting); returns a function restoring it."""
    _, module, attribute, value = setting
    old = getattr(module, attribute)
    setattr(module, attribute, value)
    return lambda: setattr(module, attribute, old)


class ToolError(Exception):
    """A failure a tool states in one line, without a traceback (a missing optional package)."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser with a one-line error, `prog: error: message` and exit status 2 (the
    usage is one --help away rather than repeated above every mistake)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {' '.join(str(message).split())}\n")


def tool_parser(prog, doc):
    """A tool's parser: the description is the first paragraph of the module docstring `doc`
    (whole sentences), the rest of it the epilog, both with their line breaks."""
    description, _, rest = doc.strip().partition("\n\n")
    return ArgumentParser(prog=prog, description=description, epilog=rest or None,
                          formatter_class=argparse.RawDescriptionHelpFormatter)


def command_line(program, argv=None):
    """The command a report quotes: `program` and the arguments it was given (`argv`, else
    sys.argv[1:]), each shell-quoted so the line can be pasted back into a shell."""
    return " ".join([program] + [shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv)])


def run_main(parser, body, argv=None):
    """body(parsed argv)'s exit status. An ordinary mistake ends the tool with one line and exit
    status 2: a bad argument (argparse) or environment variable (GLES_DELEGATE_GL_API), a model
    that turns out malformed (ModelError), a GPU that cannot do the work (GpuError), a file that
    cannot be read or written (OSError), a ToolError. Any other exception is a bug and keeps its
    traceback."""
    args = parser.parse_args(argv)
    try:
        default_gl_api()  # checked before any work: every GpuDelegate would refuse it later
    except ValueError as exc:
        parser.error(str(exc))
    try:
        return body(args)
    except argparse.ArgumentTypeError as exc:  # a check the body made (a derived default path)
        parser.error(str(exc))
    except (ModelError, GpuError, OSError, ToolError) as exc:
        parser.error(f"{type(exc).__name__}: {exc}")


# -- command-line values --------------------------------------------------------------------
def _checked(convert, accept, expected):
    """An argparse type: convert(text), refused unless accept(value); `expected` names what is
    accepted in the error ("argument --runs: expected an integer >= 1, got -3")."""
    def parse(text):
        value = convert(text)
        if not accept(value):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text}")
        return value
    parse.__name__ = convert.__name__  # argparse's "invalid int value: 'x'" names the type by it
    return parse


positive_int = _checked(int, lambda v: v >= 1, "an integer >= 1")
non_negative_int = _checked(int, lambda v: v >= 0, "an integer >= 0")
positive_float = _checked(float, lambda v: 0 < v < math.inf, "a finite number > 0")
non_negative_float = _checked(float, lambda v: 0 <= v < math.inf, "a finite number >= 0")
thread_count = _checked(int, lambda v: v == -1 or v >= 1, "-1 (the runtime's default) or an integer >= 1")


def add_precision(parser, default="fp32"):
    """--precision; default None leaves GpuDelegateOptions to choose (fp32 unless told otherwise)."""
    parser.add_argument("--precision", choices=PRECISIONS, default=default,
                        help="GPU precision: fp32 (float storage and math), fp16 (half storage and math), "
                             "fp16_fp32acc (half storage, float accumulation) or auto (fp16_fp32acc, with the "
                             "tensors a calibration run finds need it stored as float); default: "
                             + (default or "GpuDelegateOptions' default, fp32"))


# A GPU lowers its clocks within seconds of idling and raises them again only under load: on the
# H200 the SM clock idles at 345 MHz, and gles-profile's ssd_mnv2_300 invoke right after precision
# 'auto' calibrated (seconds of a mostly idle GPU) took 1.6-2.5 ms of GPU time after 10 warm-up
# runs, 0.73 ms after 0.5 s of them (docs/performance.md, "GPU clocks"). A warm-up counted in
# runs alone can end before the clocks are up.
WARMUP_SECONDS = 0.5


def add_warmup_secs(parser):
    """--warmup-secs S: the least seconds of back-to-back warm-up runs (warm_up)."""
    parser.add_argument("--warmup-secs", type=non_negative_float, default=WARMUP_SECONDS,
                        help=f"warm up for at least this many seconds of back-to-back runs, whatever the "
                             f"number of warm-up runs, so that a GPU's clocks are up (default {WARMUP_SECONDS:g})")


def warm_up(run_once, runs, seconds):
    """Call run_once() at least `runs` times, back to back, and for at least `seconds`."""
    end = time.perf_counter() + seconds
    count = 0
    while count < runs or time.perf_counter() < end:
        run_once()
        count += 1


def add_max_delegated_partitions(parser):
    """--max_delegated_partitions N, None when not given (GpuDelegateOptions keeps its default)."""
    parser.add_argument("--max_delegated_partitions", type=non_negative_int, default=None, metavar="N",
                        help="GpuDelegateOptions.max_delegated_partitions: keep the largest N GPU partitions "
                             "(0: no limit; default: the option's default, 1)")


def add_placement(parser):
    """--placement gpu|fastest, None when not given (GpuDelegateOptions keeps its default, gpu)."""
    parser.add_argument("--placement", choices=("gpu", "fastest"), default=None,
                        help="GpuDelegateOptions.placement: fastest times each small GPU partition against LiteRT's "
                             "CPU kernels at start-up and leaves it to them where they are faster (default: the "
                             "option's default, gpu)")


def model_file(text):
    """argparse type: a .tflite file (a regular file with the TFL3 flatbuffer identifier) or a
    MediaPipe model name (fetched once, cached); its Path."""
    path = Path(text)
    if not path.exists():
        # Only names need the fetcher, which a source tree without the installed package lacks.
        from gles_delegate.tools.fetch_models import MODEL_NAMES, model_path
        if text in MODEL_NAMES:
            return Path(model_path(text))
        raise argparse.ArgumentTypeError(f"no such model file {text!r} (nor a MediaPipe model name: "
                                         f"{', '.join(MODEL_NAMES)})")
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a directory, not a .tflite model file")
    try:
        with open(path, "rb") as f:
            head = f.read(8)  # a flatbuffer's root offset, then its 4-byte file identifier
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"cannot read {text!r}: {exc.strerror}") from None
    if head[4:8] != FILE_IDENTIFIER:
        raise argparse.ArgumentTypeError(f"{text!r} is not a .tflite model (its file identifier is "
                                         f"{head[4:8]!r}, a .tflite file's is {FILE_IDENTIFIER!r})")
    return path


def model_files(text):
    """argparse type of tools that also take directories: [model_file(text)], or every .tflite
    file in the directory `text` (at least one)."""
    path = Path(text)
    if not path.is_dir():
        return [model_file(text)]
    found = sorted(path.glob("*.tflite"))
    if not found:
        raise argparse.ArgumentTypeError(f"{text!r} is a directory without .tflite files")
    return [model_file(str(p)) for p in found]


def output_file(text):
    """argparse type: a file the tool will write, checked now rather than after the work: its
    directory exists and takes a new file. The text as given."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a directory, not a file")
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: {str(path.parent)!r} is not a directory")
    _check_writable(path.parent, text)
    return text


def output_dir(text):
    """argparse type: a directory the tool will write into (made when missing), checked now: the
    nearest part of the path that exists is a directory that takes a new file. The text as given."""
    path = Path(text)
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        raise argparse.ArgumentTypeError(f"cannot make directory {text!r}: {str(existing)!r} is a file")
    _check_writable(existing, text)
    return text


def _check_writable(directory, text):
    """Create (and remove) a temporary file in `directory`: the one check that also holds for
    root, read-only mounts and /proc, where permission bits say nothing."""
    try:
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: {str(directory)!r} takes no new file "
                                         f"({exc.strerror})") from None


# -- models and inputs ----------------------------------------------------------------------
def seeded_inputs(details, seed=0, ranges=None):
    """One seeded random array per input detail dict: floats uniform in [-1, 1), integers over
    their range clipped to [-1000, 1000], or over [low, high) where `ranges` ({tensor index:
    (low, high)}, index_ranges) bounds them, booleans 0/1 (as benchmark_model does, seeded)."""
    rng = np.random.default_rng(seed)
    values = []
    for d in details:
        dtype, shape = np.dtype(d["dtype"]), tuple(int(s) for s in d["shape"])
        if dtype.kind == "f":
            values.append(rng.uniform(-1, 1, shape).astype(dtype))
        elif dtype == np.bool_:
            values.append(rng.integers(0, 2, shape).astype(bool))
        else:
            info = np.iinfo(dtype)
            low, high = (ranges or {}).get(d["index"], (max(info.min, -1000), min(info.max, 1000) + 1))
            values.append(rng.integers(low, high, shape).astype(dtype))
    return values


# Ops that pass their first input's values on (so an index stays an index), and the ops that read
# indices: {op: (input holding the indices, fn(node) -> the size of the indexed axis)}.
_INDEX_MOVES = ("RESHAPE", "SQUEEZE", "EXPAND_DIMS", "CAST", "TRANSPOSE", "SLICE", "STRIDED_SLICE", "BROADCAST_TO",
                "TILE", "GATHER")
_INDEX_READERS = {
    "GATHER": (1, lambda node: node.inputs[0].shape[node.options.get("axis", 0) % len(node.inputs[0].shape)]),
    "EMBEDDING_LOOKUP": (0, lambda node: node.inputs[1].shape[0]),
    "GATHER_ND": (1, lambda node: min(node.inputs[0].shape[:node.inputs[1].shape[-1]], default=1)),
}


def index_ranges(model):
    """{input tensor index: (0, n)} of the integer model inputs read as indices (token ids into an
    embedding, say), directly or through ops that only move them: n is the smallest axis they
    index, so seeded_inputs draws valid ones. model: a path or .tflite bytes."""
    from gles_delegate.graph import Graph
    from gles_delegate.tflite import read_model
    graph = Graph.from_model(read_model(model if isinstance(model, (bytes, bytearray)) else str(model)))
    ranges = {}
    for tensor in graph.inputs:
        if np.dtype(tensor.dtype).kind not in "iu":
            continue
        sizes, frontier, seen = [], [tensor], set()
        while frontier:
            value = frontier.pop()
            for node in graph.readers_of(value):
                if id(node) in seen:
                    continue
                seen.add(id(node))
                reader = _INDEX_READERS.get(node.op)
                if reader and node.inputs[reader[0]] is value:
                    sizes.append(int(reader[1](node)))
                elif node.op in _INDEX_MOVES and node.inputs[0] is value:
                    frontier.extend(node.outputs)
        if sizes and min(sizes) > 0:
            ranges[tensor.index] = (0, min(sizes))
    return ranges


def set_inputs(interpreter, inputs):
    for detail, value in zip(interpreter.get_input_details(), inputs):
        interpreter.set_tensor(detail["index"], value)


def read_outputs(interpreter):
    return [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]


# -- where nodes ran ------------------------------------------------------------------------
def gpu_partition_of(delegate):
    """{id(node): partition number} of every node the delegate's live partitions run."""
    live = [p for p in delegate.partitions if p.steps] if delegate is not None else []
    return {id(node): k for k, p in enumerate(live) for node in p.nodes}


def cpu_reason(node, delegate, dynamic=frozenset()):
    """Why a node the GPU does not run stays on the CPU (what the partitioner logs). dynamic: ids
    of the interpreter's dynamic tensors (shapes known at invoke only), which no delegate is
    offered."""
    if delegate is None:
        return "no GPU delegate"
    reason = delegate.unsupported_reason(node)
    if reason is not None:
        return reason
    declined = delegate.declined.get(node.label)  # placement='fastest': the CPU ran its partition faster
    if declined is not None:
        return declined
    moving = next((t for t in node.inputs + node.outputs if t is not None and id(t) in dynamic), None)
    if moving is not None:
        return (f"tensor {moving.index} is dynamic (its shape is known only at invoke; a GPU plan is made for "
                "fixed shapes, as in TFLite's GPU delegate)")
    limit = delegate.options.max_delegated_partitions
    return (f"a GPU kernel can run it, but its partition is not among the largest "
            f"max_delegated_partitions={limit}")


def op_counts(graph, on_gpu):
    """{op: [count, on GPU, on CPU]} sorted by op name."""
    counts = collections.defaultdict(lambda: [0, 0, 0])
    for node in graph.nodes:
        row = counts[node.op]
        row[0] += 1
        row[1 if id(node) in on_gpu else 2] += 1
    return dict(sorted(counts.items()))


def rewrite_log(delegate):
    """The delegate's rewrite records (transforms.Record: rule, node label, APPLIED / SKIPPED,
    why), or [] without a delegate."""
    return list(delegate.rewrite_log) if delegate is not None else []


def format_rewrite_record(record):
    return f"{record.status:<8} {record.rule:<28} {record.node:<32} {record.why}".rstrip()


def rewrite_tally(records):
    """'rule STATUS xN, ...' over the records, or '' when there are none."""
    tally = collections.Counter((r.rule, r.status) for r in records)
    return ", ".join(f"{rule} {status} x{k}" for (rule, status), k in sorted(tally.items()))


def json_default(value):
    """json.dump's `default`: numpy scalars as Python numbers, anything else as its str()."""
    if isinstance(value, np.generic):
        return value.item()
    return str(value)


# -- text output ----------------------------------------------------------------------------
def table(rows, headers, align=None):
    """A plain-text table; `align` a string of '<' / '>' per column (default: left)."""
    rows = [[str(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[k]) for r in rows]) for k, h in enumerate(headers)]
    align = align or "<" * len(headers)
    def line(cells):
        return "  ".join(f"{c:{a}{w}}" for c, a, w in zip(cells, align, widths)).rstrip()
    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows])


def mb(nbytes):
    """A byte count for people: MB from 1 MB up, KB from 1 KB up, else bytes."""
    if nbytes >= 1e6:
        return f"{nbytes / 1e6:.2f} MB"
    return f"{nbytes / 1e3:.1f} KB" if nbytes >= 1e3 else f"{int(nbytes)} B"


def shape_text(shape):
    return "x".join(str(int(d)) for d in shape) if len(shape) else "scalar"


# -- LiteRT ---------------------------------------------------------------------------------
LITERT_MISSING = ("ai-edge-litert is not installed: `pip install ai-edge-litert` "
                  "(or this package's `test` extra) to compare against LiteRT")


def write_atomic(path, text):
    """Write `text` to `path` through a temp file beside it and a rename: a reader (or a run cut
    short) sees the old file or the new one, never half of one."""
    path = Path(path)
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_text(text)
    os.replace(temp, path)


def litert():
    """The ai_edge_litert.interpreter module, or None when ai-edge-litert is not installed."""
    try:
        from ai_edge_litert import interpreter
    except ImportError:
        return None
    return interpreter


def litert_loaded(**kwargs):
    """(LiteRT's Interpreter(**kwargs) with its tensors allocated, None), or (None, why not in one
    line): ai-edge-litert is not installed, or LiteRT cannot load the model (an op it lacks, such
    as MediaPipe's custom ops: failure_reason of what it logged). A tool then says why and goes on
    with what it can do without LiteRT."""
    module = litert()
    if module is None:
        return None, LITERT_MISSING
    try:
        return native_call(_allocated, module.Interpreter, kwargs), None
    except RuntimeError as exc:
        return None, f"LiteRT cannot run this model: {exc}"


def litert_delegated(delegate, **kwargs):
    """(LiteRT's Interpreter(**kwargs) with `delegate`, its tensors allocated, None), or (None, why
    not in one line): ai-edge-litert is not installed, or LiteRT cannot load the model even with
    the GPU taking what it can (an op version it does not know, a custom op the GPU does not take).
    Native stderr is not captured, unlike litert_loaded: the delegate's warnings stay visible."""
    module = litert()
    if module is None:
        return None, LITERT_MISSING
    try:
        return _allocated(module.Interpreter, {**kwargs, "experimental_delegates": [delegate]}), None
    except (RuntimeError, ValueError) as exc:  # what LiteRT raises for a model it cannot load
        return None, f"LiteRT cannot run this model: {failure_reason(exc)}"


def delegated_interpreter(runtime, delegate, **kwargs):
    """(the Interpreter of `runtime` made with `delegate` and kwargs, its tensors allocated, None):
    'gles' this package's, 'litert' LiteRT's (litert_delegated: (None, why) where it cannot load
    the model)."""
    if runtime == "litert":
        return litert_delegated(delegate, **kwargs)
    return _allocated(Interpreter, {**kwargs, "experimental_delegates": [delegate]}), None


def _allocated(interpreter_class, kwargs):
    interpreter = interpreter_class(**kwargs)
    interpreter.allocate_tensors()
    return interpreter


@contextlib.contextmanager
def captured_native_stderr():
    """Redirect file descriptor 2 (where native libraries log) to a temporary file; yields a
    list that holds the captured text once the block exits."""
    captured = []
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield captured
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            captured.append(sink.read().decode("utf-8", "replace"))


def native_call(fn, *args):
    """fn(*args) with native stderr captured (LiteRT's exceptions name only a source line; why is
    in what it logged). A failure is raised again as a RuntimeError of one readable line,
    failure_reason(exception, that log), made once the capture is over: only then is the log
    there."""
    with captured_native_stderr() as log:
        try:
            return fn(*args)
        except Exception as exc:  # whatever the native library raises
            failure = exc
    raise RuntimeError(failure_reason(failure, "".join(log))) from None


def failure_reason(exc, native_log=""):
    """A one-line reason from an exception and what native code logged meanwhile: the first
    error line that says something (LiteRT logs 'ERROR: [file:line] message'), plus a
    "Couldn't load ..." warning when there is one (the usual root cause: no Vulkan)."""
    messages = []
    for line in (str(exc) + "\n" + native_log).splitlines():
        line = line.strip(" \u2514")
        if not re.match(r"^(ERROR|E\d{4}|RuntimeError|Error)", line):
            continue
        message = re.sub(r"^\S*\s*(\[[^\]]*\]|\S+\.cc:\d+\])\s*", "", line).strip()
        if message and not re.fullmatch(r"\[[^\]]*\]", message):
            messages.append(message)
    hints = [ln.strip() for ln in native_log.splitlines() if ln.strip().startswith("Warning: Couldn't load")]
    text = messages[0] if messages else (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    if hints:
        text += f" ({hints[0][len('Warning: '):]})"
    return text[:400]


# -- host memory and progress ---------------------------------------------------------------
def peak_rss_mb():
    """The process's peak resident set size so far (MB); ru_maxrss is in KiB on Linux."""
    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 1e6


def current_rss_mb():
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6
    except OSError:
        return peak_rss_mb()


class Progress:
    """A plain-text progress bar on stderr that appears only once a phase has run for
    `after_s` seconds (short runs print nothing)."""

    def __init__(self, label, total, after_s=2.0, stream=None, width=30):
        self.label, self.total, self.after_s, self.width = label, max(total, 1), after_s, width
        self.stream = stream or sys.stderr
        self.start = time.perf_counter()
        self.shown = False
        self.last_draw = 0.0
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.last_quarter = -1

    def update(self, done, total=None):
        if total is not None:
            self.total = max(total, 1)
        now = time.perf_counter()
        if now - self.start < self.after_s:
            return
        if self.tty:
            if now - self.last_draw < 0.1 and done < self.total:
                return
            self.last_draw = now
            self.stream.write("\r" + self._line(done, now))
        else:  # a log file: one line per quarter
            quarter = min(4, done * 4 // self.total)
            if quarter == self.last_quarter:
                return
            self.last_quarter = quarter
            self.stream.write(self._line(done, now) + "\n")
        self.shown = True
        self.stream.flush()

    def _line(self, done, now):
        filled = min(self.width, done * self.width // self.total)
        return (f"{self.label} [{'#' * filled}{'.' * (self.width - filled)}] "
                f"{done}/{self.total} {now - self.start:5.1f}s")

    def close(self):
        if self.shown and self.tty:
            self.stream.write("\n")
            self.stream.flush()
