"""Start-up time with and without the serialization cache, each start in a fresh process.

    gles-bench-init --models DIR_OR_FILE [...] [--repeat 3] [--precision fp32] [--gl-api auto]
    python -m gles_delegate.tools.bench_init --models DIR ...      (installed package)
    python tools/bench_init.py --models DIR ...                    (source tree, PYTHONPATH only)
    gles-bench-init --models ... --phases   (also: where a warm start's time goes, phase by phase)
    gles-bench-init --models ... --warm-starts 5   (the warm columns: the median of 5 a repetition)
    gles-bench-init --dispatch      (per-dispatch cost: our ctypes Program vs moderngl's)
    gles-bench-init --merge H200=a.md,b.md llvmpipe=c.md   (one table of earlier runs' --out files)
    gles-bench-init --models ... --against OLD_TREE   (an A/B: each repetition also runs the
                    gles_delegate of another source tree, in alternating order, so that a machine
                    drifting between minutes moves both sides alike)

For every model and repetition, with a new empty serialization_dir and a new empty driver
shader cache (MESA_SHADER_CACHE_DIR / __GL_SHADER_DISK_CACHE_PATH point into a temp dir):
  cold    first start: nothing cached anywhere; builds and stores the entry
  driver  second start without serialization_dir: only the driver's own shader cache helps, and
          in precision 'auto' the calibration cache (the choice the cold start stored there)
  warm    third start with the entry the cold start stored
Each start is its own Python process, so the process-wide program cache never helps. It times
GpuDelegate.partition() (summary()['init_ms']), Interpreter(...) + allocate_tensors() (the GL
context is created before, by GpuDelegate(), and is not counted), the first invoke() and then
STEADY_INVOKES more, and checks that every start gives the same output bytes. "Start-up" is
Interpreter + allocate_tensors + the first invoke, less the median of the steady invokes: all a
start costs before results come at the steady rate, including work a driver defers to the first
dispatch (Mesa's llvmpipe compiles each shader to machine code there). Prints a Markdown table
(medians over the repetitions) under the command line that produced it.
"""
import argparse
import cProfile
import hashlib
import io
import json
import os
import pstats
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, "") and (Path(__file__).resolve().parents[1] / "gles_delegate").is_dir():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file from a source tree
    from tools import common
else:
    from . import common

WORKER_TIMEOUT_S = 900
STEADY_INVOKES = 5  # invokes after the first, whose median is the steady invoke time


# --phases: the functions of a warm start whose wall time is reported, as (label, module, attribute).
# A label with "{what}" takes create_buffer's `what` argument (which buffer). Module-level
# functions are wrapped where their caller looks them up (read_model in interpreter, ...).
PHASES = (("read + parse the model", "gles_delegate.interpreter", "read_model"),
          ("graph", "gles_delegate.graph", "Graph.from_model"),
          ("partition()", "gles_delegate.delegate", "GpuDelegate.partition"),
          ("entry key", "gles_delegate.gpu.serialization.cache", "PlanCache.__init__"),
          ("read entry", "gles_delegate.gpu.serialization.cache", "read_entry"),
          ("unpack header", "gles_delegate.gpu.serialization.cache", "unpack_entry"),
          ("decode + check plans", "gles_delegate.gpu.serialization.cache", "PlanCache._decode"),
          ("buffer {what}", "gles_delegate.gpu.runtime", "create_buffer"),
          ("I/O staging", "gles_delegate.gpu.runtime", "MappedIo.__init__"),
          ("programs", "gles_delegate.gpu.context", "GlContext.program"),
          ("check programs", "gles_delegate.gpu.serialization.cache", "PlanCache._check_programs"))


def time_phases(phases_ms):
    """Wrap every PHASES function so that its wall time (ms) adds up in phases_ms[label]
    (nested phases count in both: 'partition()' holds the ones below it)."""
    import importlib
    for label, module, attribute in PHASES:
        owner = importlib.import_module(module)
        *path, name = attribute.split(".")
        for part in path:
            owner = getattr(owner, part)
        setattr(owner, name, _timed(getattr(owner, name), label, phases_ms))


def _timed(function, label, phases_ms):
    def timed(*args, **kwargs):
        begin = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            key = label.format(what=args[3]) if "{what}" in label else label
            phases_ms[key] = phases_ms.get(key, 0.0) + (time.perf_counter() - begin) * 1e3
    return timed


def worker(model, serialization_dir, precision, gl_api, profile=0, phases=False):
    """One start in this process: JSON with the timings, on stdout. profile > 0: the start runs
    under cProfile (its timings are inflated) and 'profile' holds the `profile` functions with
    the most own time in Interpreter + allocate_tensors + the first invoke. phases: 'phases'
    holds {label: ms} of the PHASES functions (time_phases)."""
    import numpy as np
    from gles_delegate import GpuDelegate, Interpreter
    from gles_delegate.gpu.serialization import PlanCache
    store_ms = []
    store = PlanCache.store

    def timed_store(*args, **kwargs):  # what writing the entry adds to a cold start
        begin = time.perf_counter()
        store(*args, **kwargs)
        store_ms.append((time.perf_counter() - begin) * 1e3)
    PlanCache.store = timed_store
    phases_ms = {}
    if phases:
        time_phases(phases_ms)
    options = {"precision": precision, "gl_api": gl_api}
    if serialization_dir:
        options["serialization_dir"] = serialization_dir
    start = time.perf_counter()
    delegate = GpuDelegate(**options)
    context_ms = (time.perf_counter() - start) * 1e3
    profiler = cProfile.Profile() if profile else None
    if profiler:
        profiler.enable()
    start = time.perf_counter()
    interpreter = Interpreter(model_path=model, experimental_delegates=[delegate])
    interpreter.allocate_tensors()
    init_ms = (time.perf_counter() - start) * 1e3
    if profiler:
        profiler.disable()
    rng = np.random.default_rng(0)
    for detail in interpreter.get_input_details():
        shape, dtype = detail["shape"], np.dtype(detail["dtype"])
        if dtype.kind == "f":
            value = rng.uniform(-1, 1, shape).astype(dtype)
        else:
            info = np.iinfo(dtype)
            value = rng.integers(max(info.min, -128), min(info.max, 127) + 1, shape).astype(dtype)
        interpreter.set_tensor(detail["index"], value)
    if profiler:
        profiler.enable()
    start = time.perf_counter()
    interpreter.invoke()
    invoke_ms = (time.perf_counter() - start) * 1e3
    if profiler:
        profiler.disable()
    steady = []
    for _ in range(STEADY_INVOKES):
        start = time.perf_counter()
        interpreter.invoke()
        steady.append((time.perf_counter() - start) * 1e3)
    digest = hashlib.sha256()
    for detail in interpreter.get_output_details():
        digest.update(np.ascontiguousarray(interpreter.get_tensor(detail["index"])).tobytes())
    summary = delegate.summary()
    profile_text = None
    if profiler:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).strip_dirs().sort_stats("tottime").print_stats(profile)
        profile_text = out.getvalue()[out.getvalue().find("   ncalls"):].rstrip()
    return {"profile": profile_text, "phases": phases_ms,
            "partition_ms": summary["init_ms"], "init_ms": init_ms, "context_ms": context_ms,
            "store_ms": sum(store_ms),
            "invoke_ms": invoke_ms, "steady_ms": statistics.median(steady), "cache_hit": summary["cache_hit"], "outputs": digest.hexdigest(),
            "renderer": summary["renderer"], "gl_version": summary["gl_version"], "package": _package_root(),
            "gpu_nodes": summary["gpu_nodes"], "cpu_nodes": summary["cpu_nodes"]}


def _start(model, serialization_dir, driver_cache, args, profile=0, phases=False, package_root=None):
    """One start in a fresh worker process (JSON of worker()); package_root: another source tree
    (--against), whose own tools/bench_init.py worker runs its own gles_delegate (None: this
    tool's worker and package)."""
    env = dict(os.environ)
    env.update({"MESA_SHADER_CACHE_DIR": driver_cache, "__GL_SHADER_DISK_CACHE_PATH": driver_cache,
                "__GL_SHADER_DISK_CACHE": "1", "XDG_CACHE_HOME": driver_cache,
                "GLES_DELEGATE_CALIBRATION_CACHE": os.path.join(driver_cache, "calibration")})
    env.pop("MESA_SHADER_CACHE_DISABLE", None)  # Mesa gives no program binaries without its cache
    worker_command = [sys.executable, os.path.join(package_root, "tools", "bench_init.py")] if package_root \
        else _worker_command()
    package_root = package_root or _package_root()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    command = worker_command + ["--worker", model, "--precision", args.precision, "--gl-api", args.gl_api]
    if profile:
        command += ["--profile", str(profile)]
    if phases:
        command += ["--phases"]
    if serialization_dir:
        command += ["--serialization-dir", serialization_dir]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=WORKER_TIMEOUT_S)
    if done.returncode == 2:  # the worker's run_main stated an ordinary failure (a malformed model) in one line
        raise common.ToolError(f"{model}: {done.stderr.strip().splitlines()[-1].split(' error: ', 1)[-1]}")
    if done.returncode != 0:  # a bug, or a crash: everything it said
        raise RuntimeError(f"{' '.join(map(shlex.quote, command))} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _worker_command():
    """How to run this tool again: as the module it was imported as (the console script, -m;
    an installed copy's tools/ has no source tree around it), else as this file."""
    if __spec__ is not None and __spec__.name.endswith(".bench_init"):
        return [sys.executable, "-m", __spec__.name]
    return [sys.executable, str(Path(__file__).resolve())]


def _package_root():
    import importlib.util
    spec = importlib.util.find_spec("gles_delegate")
    return str(Path(spec.origin).resolve().parents[1]) if spec and spec.origin else ""


def measure(model, args):
    """{'cold' | 'driver' | 'warm': [result per repetition]}, 'entry_bytes': [...], and with
    --profile the 'profile' of the last repetition's extra warm start, with --phases 'phases':
    [result of each repetition's extra warm start with its phases timed]. With --against, also
    'against': the same of the other tree's package (no profile or phases: its functions may
    differ), each repetition running both, this tree first in even repetitions."""
    runs = _empty_runs()
    other = _empty_runs() if args.against else None
    for k in range(args.repeat):
        sides = [(runs, None), (other, args.against)] if other is not None else [(runs, None)]
        for side, root in sides if k % 2 == 0 else sides[::-1]:
            _repetition(model, args, side, root)
    if other is not None:
        runs["against"] = other
        other["tree"] = args.against
    return runs


def _empty_runs():
    return {"cold": [], "driver": [], "warm": [], "entry_bytes": []}


def _repetition(model, args, runs, package_root=None):
    """One repetition's starts (cold, driver cache only, the warm ones) into `runs`, in fresh
    caches; the extra profiled and phased warm starts only for this tree (package_root None)."""
    with tempfile.TemporaryDirectory(prefix="gles-bench-init-") as temp:
        cache, driver = os.path.join(temp, "entries"), os.path.join(temp, "driver")
        os.makedirs(driver)
        runs["cold"].append(_start(model, cache, driver, args, package_root=package_root))
        runs["driver"].append(_start(model, None, driver, args, package_root=package_root))
        for _ in range(args.warm_starts):
            runs["warm"].append(_start(model, cache, driver, args, package_root=package_root))
        runs["entry_bytes"].append(sum(p.stat().st_size for p in Path(cache).glob("*") if p.is_file()))
        if package_root is not None:
            return
        if args.profile:  # one more warm start, under cProfile: not in the table
            runs["profile"] = _start(model, cache, driver, args, args.profile)["profile"]
        if args.phases:  # and one with its phases timed (a few wrapped calls): not in the table either
            runs.setdefault("phases", []).append(_start(model, cache, driver, args, phases=True))


def _median(runs, key):
    return statistics.median(r[key] for r in runs)


def _startup(run):
    """Interpreter + allocate + first invoke, less a steady invoke (ms)."""
    return run["init_ms"] + run["invoke_ms"] - run["steady_ms"]


def table(results, command, args):
    any_run = next(iter(results.values()))["cold"][0]
    lines = [f"`{command}`", "",
             f"{any_run['renderer']}, {any_run['gl_version']}; precision {args.precision}; milliseconds, "
             f"median of {args.repeat}{_warm_count(args)}. Each repetition: a cold start (empty serialization_dir, "
             "empty driver shader cache), a start without serialization_dir (only the driver's shader cache "
             "helps, and in precision 'auto' the calibration cache), a warm start from the entry the cold start "
             "wrote; each in a fresh process. "
             "partition(): GpuDelegate.partition (summary()['init_ms']); 'store': what writing the "
             "entry added to the cold start; warm/cold compares with the cold start minus that. "
             "Interpreter+allocate: Interpreter(...) + allocate_tensors(), the GL context made before. "
             "Start-up: Interpreter+allocate + the first invoke - a steady invoke (the median of the "
             f"{STEADY_INVOKES} after it).", "",
             "| model | partition() cold | store | driver cache only | warm | warm/cold "
             "| Interpreter+allocate cold | driver cache only | warm | warm/cold "
             "| start-up cold | driver cache only | warm | warm/cold "
             "| first invoke cold | warm | steady invoke | entry MB | same outputs |",
             "|---|" + "---:|" * 17 + "---|"]
    for name, runs in results.items():
        cold, driver, warm = runs["cold"], runs["driver"], runs["warm"]
        p = [_median(r, "partition_ms") for r in (cold, driver, warm)]
        i = [_median(r, "init_ms") for r in (cold, driver, warm)]
        store = _median(cold, "store_ms")
        s = [statistics.median(_startup(r) for r in runs) for runs in (cold, driver, warm)]
        same = all(r["outputs"] == cold[0]["outputs"] for r in cold + driver + warm)
        hits = all(r["cache_hit"] for r in warm) and not any(r["cache_hit"] for r in cold)
        lines.append(f"| {name} | {p[0]:.0f} | {store:.0f} | {p[1]:.0f} | {p[2]:.1f} | {100 * p[2] / (p[0] - store):.1f}% "
                     f"| {i[0]:.0f} | {i[1]:.0f} | {i[2]:.0f} | {100 * i[2] / (i[0] - store):.1f}% "
                     f"| {s[0]:.0f} | {s[1]:.0f} | {s[2]:.0f} | {100 * s[2] / (s[0] - store):.1f}% "
                     f"| {_median(cold, 'invoke_ms'):.0f} | {_median(warm, 'invoke_ms'):.0f} "
                     f"| {_median(warm, 'steady_ms'):.1f} "
                     f"| {statistics.median(runs['entry_bytes']) / 1e6:.1f} "
                     f"| {'yes' if same else 'NO'}{'' if hits else ' (cache not hit!)'} |")
    if any(runs.get("against") for runs in results.values()):
        lines += ["", *against_table(results)]
    if any(runs.get("phases") for runs in results.values()):
        lines += ["", *phases_table(results)]
    for name, runs in results.items():
        if runs.get("profile"):
            lines += ["", f"A warm start of {name} under cProfile (Interpreter + allocate_tensors + the first "
                      "invoke; the functions with the most own time):", "", "```", runs["profile"], "```"]
    return "\n".join(lines)


def against_table(results):
    """Markdown lines of an --against run: per model, this tree's and the other tree's medians of
    warm start-up, Interpreter + allocate and partition() and cold start-up, and the median of
    the per-repetition ratios this / other of warm start-up (each repetition ran both sides
    back to back, so the ratio holds where the machine drifts between repetitions)."""
    # Where the other side's worker found gles_delegate (older workers do not say: its tree then).
    other_root = next(runs["against"]["cold"][0].get("package", runs["against"]["tree"])
                      for runs in results.values() if runs.get("against"))
    lines = [f"A/B (`--against`): this tree's package ({_package_root()}) / the other tree's ({other_root}), "
             "medians, ms; 'ratio' is the median over repetitions of this / other warm start-up, each "
             "repetition having run both:", "",
             "| model | start-up warm | ratio | Interpreter+allocate warm | partition() warm | start-up cold "
             "| same outputs |", "|---|---:|---:|---:|---:|---:|---|"]
    for name, runs in results.items():
        other = runs.get("against")
        if not other:
            continue
        warm_pairs = list(zip(_per_repetition(runs), _per_repetition(other)))
        ratio = statistics.median(a / b for a, b in warm_pairs)
        same = {r["outputs"] for r in runs["cold"] + other["cold"]}
        pair = [(statistics.median(_startup(r) for r in side["warm"]), _median(side["warm"], "init_ms"),
                 _median(side["warm"], "partition_ms"), statistics.median(_startup(r) for r in side["cold"]))
                for side in (runs, other)]
        cells = [f"{a:.1f} / {b:.1f}" for a, b in zip(*pair)]
        lines.append(f"| {name} | {cells[0]} | {ratio:.2f} | {cells[1]} | {cells[2]} | {cells[3]} "
                     f"| {'yes' if len(same) == 1 else 'NO'} |")
    return lines


def _per_repetition(runs):
    """The median warm start-up of each repetition (its --warm-starts consecutive warm runs)."""
    warm = runs["warm"]
    per = len(warm) // len(runs["cold"])
    return [statistics.median(_startup(r) for r in warm[k:k + per]) for k in range(0, len(warm), per)]


def _warm_count(args):
    """What the warm columns are the median of, where --warm-starts made more than one a repetition."""
    starts = getattr(args, "warm_starts", 1)
    return "" if starts == 1 else f" (the warm columns: of {args.repeat * starts} warm starts, {starts} a repetition)"


def phases_table(results):
    """Markdown lines: per model, the medians over repetitions of an extra warm start's
    start-up, Interpreter + allocate, first invoke less a steady one, and each phase (ms)."""
    labels = sorted({label for runs in results.values() for run in runs.get("phases", []) for label in run["phases"]},
                    key=lambda label: (_phase_index(label), label))
    lines = ["Where a warm start goes (`--phases`: one more warm start per repetition with these functions "
             "timed, medians, ms; 'partition()' holds the phases below it, which can nest: "
             "'I/O staging' holds 'buffer I/O' where the I/O has a device buffer):", "",
             "| model | start-up | Interpreter+allocate | first invoke - steady | " + " | ".join(labels) + " |",
             "|---|" + "---:|" * (3 + len(labels))]
    for name, runs in results.items():
        done = runs.get("phases", [])
        if not done:
            continue
        cells = [statistics.median(_startup(r) for r in done), _median(done, "init_ms"),
                 statistics.median(r["invoke_ms"] - r["steady_ms"] for r in done)]
        cells += [statistics.median(r["phases"].get(label, 0.0) for r in done) for label in labels]
        lines.append(f"| {name} | " + " | ".join(f"{c:.1f}" for c in cells) + " |")
    return lines


def _phase_index(label):
    """Where a phase's column goes: PHASES order ('buffer arena' at 'buffer {what}')."""
    return next(i for i, (pattern, _, _) in enumerate(PHASES)
                if label == pattern or ("{what}" in pattern and label.startswith(pattern.split("{")[0])))


# Columns of a table() row that merge_tables() shows per platform: start-up cold, warm, warm/cold,
# Interpreter+allocate warm/cold, partition() warm/cold, same outputs.
MERGED_COLUMNS = (("start-up cold", 10), ("start-up warm", 12), ("start-up warm/cold", 13),
                  ("Interpreter+allocate warm/cold", 9), ("partition() warm/cold", 5), ("same outputs", 18))


def merge_tables(groups):
    """One table of several platforms' runs: `groups` is [(label, [paths of table() outputs])];
    a row per model, MERGED_COLUMNS per label, then each source's command and device line."""
    rows, notes = {}, []
    for label, paths in groups:
        for path in paths:
            text = Path(path).read_text().splitlines()
            notes.append(f"- {label}: {text[0]} ({text[2].split(';')[0]})")
            for line in text:
                cells = [c.strip() for c in line.strip().strip("|").split("|")]
                if len(cells) == 19 and line.startswith("| ") and not line.startswith("| model |"):
                    rows.setdefault(cells[0], {})[label] = [cells[i] for _, i in MERGED_COLUMNS]
    labels = [label for label, _ in groups]
    header = "| model | " + " | ".join(f"{label} {name}" for label in labels for name, _ in MERGED_COLUMNS) + " |"
    lines = [header, "|---|" + "---:|" * (len(labels) * len(MERGED_COLUMNS))]
    for model in sorted(rows):
        cells = [c for label in labels for c in rows[model].get(label, ["-"] * len(MERGED_COLUMNS))]
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    return "\n".join(lines + [""] + notes)


DISPATCH_SOURCE = """#version 310 es
layout(local_size_x = 1) in;
layout(std430, binding = 0) buffer Data { float data[]; };
void main() { data[0] += 1.0; }
"""


def dispatch_benchmark(rounds=15, count=1000):
    """Markdown rows: `count` dispatches of a one-invocation program through moderngl's
    ComputeShader.run and through our Program.run (gpu/gl.py), 1x1x1 groups and empty 0x0x0
    ones (the call cost alone), per GL API; best / median of `rounds` interleaved rounds, ms."""
    from gles_delegate.errors import GpuError
    from gles_delegate.gpu.context import acquire_shared, release_shared
    results = {}
    for api in ("gles", "gl"):
        try:
            context = acquire_shared(None, api)
        except GpuError:
            continue
        try:
            with context.current() as ctx:
                data = ctx.buffer(reserve=16)
                data.clear()
                data.bind_to_storage_buffer(0)
                ours, theirs = context.program(DISPATCH_SOURCE), ctx.compute_shader(DISPATCH_SOURCE)
                for groups in ((1, 1, 1), (0, 0, 0)):
                    times = {"moderngl": [], "ours": []}
                    for k in range(rounds):
                        order = (("moderngl", theirs.run), ("ours", ours.run))
                        for name, run in order if k % 2 else order[::-1]:
                            ctx.finish()
                            begin = time.perf_counter()
                            for _ in range(count):
                                run(*groups)
                            ctx.finish()
                            times[name].append((time.perf_counter() - begin) * 1e3)
                    for name, values in times.items():
                        results[(name, groups, api)] = (min(values), statistics.median(values))
                theirs.release()
                data.release()
                renderer = context.renderer
        finally:
            release_shared(context)
    apis = sorted({api for _, _, api in results}, key=("gles", "gl").index)
    lines = [f"{renderer}; {count} dispatches, best / median of {rounds} rounds, ms; columns per API: "
             + ", ".join(apis), "",
             "| program | " + " | ".join(f"1x1x1 groups ({a}) | empty 0x0x0 ({a})" for a in apis) + " |",
             "|---|" + "---:|" * (2 * len(apis))]
    for name, label in (("moderngl", "moderngl `ComputeShader.run`"), ("ours", "ours: `Program.run` (ctypes)")):
        cells = [f"{results[(name, g, a)][0]:.2f} / {results[(name, g, a)][1]:.2f}"
                 for a in apis for g in ((1, 1, 1), (0, 0, 0))]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def merge_group(text):
    """argparse type of --merge: 'LABEL=TABLE[,TABLE...]' -> (label, [paths]), every path a file."""
    label, _, paths = text.partition("=")
    if not label or not paths:
        raise argparse.ArgumentTypeError(f"expected LABEL=TABLE[,TABLE...], got {text!r}")
    missing = [path for path in paths.split(",") if not Path(path).is_file()]
    if missing:
        raise argparse.ArgumentTypeError(f"{text!r}: no such file {missing[0]!r}")
    return label, paths.split(",")


def source_tree(text):
    """argparse type of --against: a source tree (its gles_delegate package and its
    tools/bench_init.py, whose worker measures it), as an absolute path."""
    path = Path(text).resolve()
    for needed in ("gles_delegate/__init__.py", "tools/bench_init.py"):
        if not (path / needed).is_file():
            raise argparse.ArgumentTypeError(f"{text!r} is not a gles_delegate source tree: it has no {needed}")
    return str(path)


def build_parser():
    parser = common.tool_parser("gles-bench-init", __doc__)
    parser.add_argument("--models", nargs="+", type=common.model_files,
                        help=".tflite files, directories of them or MediaPipe model names")
    parser.add_argument("--repeat", type=common.positive_int, default=3,
                        help="repetitions of the three starts per model; the table holds their medians (default 3)")
    parser.add_argument("--warm-starts", type=common.positive_int, default=1,
                        help="warm starts per repetition (default 1); the warm columns are the median of all: "
                             "more of them steady a comparison of warm start-up, which moves by 10-20 %% "
                             "between starts on a shared machine")
    common.add_precision(parser)
    parser.add_argument("--gl-api", default="auto", choices=("auto", "gles", "gl"),
                        help="GpuDelegateOptions.gl_api: OpenGL ES, desktop OpenGL, or auto (default)")
    parser.add_argument("--out", type=common.output_file, help="also write the table to this file")
    parser.add_argument("--dispatch", action="store_true",
                        help="instead: the per-dispatch cost of our ctypes Program against moderngl's")
    parser.add_argument("--merge", nargs="+", type=merge_group, metavar="LABEL=TABLE[,TABLE...]",
                        help="instead: one table of the start-up columns of earlier runs' --out files, "
                             "a column group per LABEL (a platform)")
    parser.add_argument("--profile", type=common.positive_int, metavar="N",
                        help="also profile one more warm start per model with cProfile, and print its N "
                             "functions with the most own time after the table")
    parser.add_argument("--phases", action="store_true",
                        help="also time one more warm start per repetition phase by phase (reading the model, "
                             "the entry, buffers, programs, ...) and print their medians after the table")
    parser.add_argument("--against", type=source_tree, metavar="TREE",
                        help="also run, in every repetition and in alternating order, the starts of the "
                             "gles_delegate in this source tree (a checkout of another commit: "
                             "`git archive REV | tar -x -C TREE`) and print an A/B table of the two")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # MODEL: one start in this process, JSON out
    parser.add_argument("--serialization-dir", help=argparse.SUPPRESS)  # the worker's
    return parser


def main(argv=None):
    return common.run_main(build_parser(), lambda args: run(args, argv), argv)


def run(args, argv):
    if args.worker:
        print(json.dumps(worker(args.worker, args.serialization_dir, args.precision, args.gl_api, args.profile or 0,
                                args.phases)))
        return 0
    if args.merge:
        text = merge_tables(args.merge)
    elif args.dispatch:
        text = f"`gles-bench-init --dispatch`\n\n{dispatch_benchmark()}"
    elif args.models:
        text = start_up_table(args, argv)
    else:
        raise argparse.ArgumentTypeError("one of --models, --dispatch or --merge is needed")
    print(text)
    if args.out:
        common.write_atomic(args.out, text + "\n")
    return 0


def start_up_table(args, argv):
    """table() of every model of --models, written to --out after each model too."""
    command = common.command_line("gles-bench-init", argv)
    results = {}
    for model in [model for group in args.models for model in group]:
        print(f"{model.stem} ...", file=sys.stderr, flush=True)
        results[model.stem] = measure(str(model), args)
        text = table(results, command, args)
        if args.out:  # after every model, replaced whole: a cut-short run keeps its rows
            common.write_atomic(args.out, text + "\n")
    return text


if __name__ == "__main__":
    sys.exit(main())
