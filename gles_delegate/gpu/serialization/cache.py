"""PlanCache: load the entry of one GpuDelegate.partition() call, or store what it built.

One entry holds everything one partition() call made: its key (key.py), and per partition its
Plan (codec.py), the indices and ops of the graph nodes it replaces, the model tensors a rewrite
fused away, one program binary per GLSL source (or null: the source is compiled, which is also
what happens where GL_NUM_PROGRAM_BINARY_FORMATS is 0); then the rewrite log and the
partitioner's log lines. A mismatch, a corrupt or truncated file, or a program binary the driver
refuses is a CacheWarning and a clean rebuild that rewrites the entry, never an exception. A
directory we cannot write warns once and the delegate runs without storing (it still reads
entries there).
"""
import contextlib
import dataclasses
import logging
import os
import stat
import sys
import threading
import warnings
from collections.abc import Callable

import numpy as np

from .. import compiler, memory, phwc4, variables
from ..kernels import base
from ..runtime import GpuPartition
from . import secret, validate
from .codec import Blobs, Decoder, Encoder
from .entry import EntryError, PayloadCheck, pack_entry, read_entry, unpack_entry, write_atomic
from .key import check_key, code_fingerprint, file_name, graph_signature, options_fingerprint

ENTRY_SLACK_BYTES = 64 << 20       # an entry may exceed 32x the model's constants by this much
BACKGROUND_DIGEST_BYTES = 1 << 20  # smaller models are hashed in the calling thread
# Modules of gpu/ whose dataclasses a plan may contain (Plan, IoSlot, VariableSlot, ...).
PLAN_MODULES = (compiler, base, memory, phwc4, variables)

log = logging.getLogger("gles_delegate")
# What a warning about an entry it could not use says happens next (nothing to do but wait once).
REBUILT = "rebuilding it (this start is a cold one; the next loads the rewritten entry)"
# Top-level packages whose frames a warning skips, so that it names the caller's line (GpuDelegate(...),
# allocate_tensors()), also through a runtime's Interpreter that calls the delegate from native code.
INTERNAL_PACKAGES = ("gles_delegate", "ai_edge_litert", "tflite_runtime", "tensorflow")


class CacheWarning(UserWarning):
    """A serialization entry could not be used or stored; the delegate built (or ran) without it."""


@dataclasses.dataclass(frozen=True)
class Package:
    """What the cache needs from the package above gpu/, which it does not import: the
    delegate hands it in."""
    version: str            # the package's version: an entry of another version is rebuilt
    root: str               # the package's directory: the fingerprint of its sources is in the key
    record_type: type       # the dataclass of the rewrite log's items (transforms.Record)
    float_view: Callable    # (graph, nodes) -> what a loaded partition keeps as its `view` (runtime.py)


class PlanCache:
    """The serialization cache for one GpuDelegate.partition call (disabled without
    options.serialization_dir, or for a graph that does not come from a model file).

        cache = PlanCache(options, context, graph, candidates, package)
        loaded = cache.load()                  # (partitions, rewrite_log) or None
        with cache.recording():                # the partitioner's log lines, to replay
            ...build partitions...
        cache.store(partitions, rewrite_log)
    """

    def __init__(self, options, context, graph, candidates, package):
        self.options, self.context, self.graph, self.package = options, context, graph, package
        self.candidates = list(candidates)
        self.directory = options.serialization_dir
        model = graph.source_model
        source = None if model is None else model.source_bytes
        self.enabled = bool(self.directory) and source is not None and safe_directory(self.directory)
        self._recorder = None
        if self.enabled:
            self.entry_key = _entry_key()
            self.enabled = self.entry_key is not None
        if not self.enabled:
            return
        if len(source) >= BACKGROUND_DIGEST_BYTES:
            model.start_digest()  # the model's sha256 (10 ms per 17 MB) runs beside the entry's read
        modules = [*PLAN_MODULES, sys.modules[package.record_type.__module__]]
        self.modules = {m.__name__: m for m in modules}
        fingerprint = options_fingerprint(options)
        self.path = os.path.join(self.directory, file_name(source, options.model_token, graph, fingerprint,
                                                           context.gl_api))
        self._key = {"model_digest": None, "model_token": options.model_token,
                     "subgraph": graph.subgraph_index, "graph": graph_signature(graph, self.candidates),
                     "options": fingerprint, "gl_api": context.gl_api, "renderer": context.renderer,
                     "gl_version": context.version, "vendor": context.vendor,
                     "package_version": package.version, "code": code_fingerprint(package.root)}

    @property
    def key(self):
        """Everything the entry depends on (the model's digest is waited for here)."""
        if self._key["model_digest"] is None:
            self._key["model_digest"] = self.graph.model_digest
        return self._key

    # -- load -------------------------------------------------------------------------------
    def load(self):
        """(list of GpuPartition, rewrite log) from the entry, or None (miss, or a warning)."""
        if not self.enabled:
            return None
        return self._load()

    def _load(self):
        try:
            read = read_entry(self.path, self._max_entry_bytes())
            if read is None:
                return None
            header, blobs = unpack_entry(read)
            check = PayloadCheck(read, self.entry_key)
            check_key(header.get("key"), self.key)
            parts, rewrite_log, lines = self._decode(header, Decoder(blobs, self.modules))
        except EntryError as exc:
            _warn(f"ignoring cache entry {self.path}: {exc}; {REBUILT}")
            return None
        except Exception as exc:  # a bug here must not break the user's start-up
            _warn(f"ignoring cache entry {self.path} ({type(exc).__name__}: {exc}); {REBUILT}")
            return None
        made = self._realize(parts, check)
        if made is None:
            return None
        for level, msg, args in lines:
            log.log(level, msg, *args)
        refused = [p.refused for p in self._programs(made) if p.refused]
        if refused:
            _warn(f"the driver refused {len(refused)} program binaries of {self.path} ({refused[0]}); "
                  "compiled them from source and rewrote the entry")
            self.store(made, rewrite_log, lines)
        return made, rewrite_log

    def _max_entry_bytes(self):
        """The largest entry this graph can have: 32x its constants, plus slack."""
        constants = sum(t.size * np.dtype(t.dtype).itemsize for t in self.graph.tensors if t.is_const)
        return ENTRY_SLACK_BYTES + 32 * constants

    def _decode(self, header, decode):
        """([(Plan, nodes, fused_away, binaries)], rewrite log, log lines) of a header, checked."""
        parts_json = header.get("partitions")
        if not isinstance(parts_json, list):
            raise EntryError("no partition list")
        by_index = {n.index: n for n in self.graph.nodes}
        free = {id(n) for n in self.candidates}
        parts = []
        for k, part in enumerate(parts_json):
            try:
                parts.append(self._decode_partition(part, decode, by_index, free))
            except EntryError as exc:
                raise EntryError(f"partition {k}: {exc}") from None
        rewrite_log = decode(header.get("rewrite_log"))
        if not isinstance(rewrite_log, list) or not all(isinstance(r, self.package.record_type) for r in rewrite_log):
            raise EntryError("malformed rewrite log")
        lines = header.get("log")
        validate.check_log_lines(lines)
        return parts, rewrite_log, lines

    def _decode_partition(self, part, decode, by_index, free):
        if not isinstance(part, dict) or set(part) != {"plan", "nodes", "ops", "fused_away", "binaries"}:
            raise EntryError("malformed")
        plan = decode(part["plan"])
        if not isinstance(plan, compiler.Plan):
            raise EntryError("no Plan")
        nodes = validate.claim_nodes(decode(part["nodes"]), decode(part["ops"]), by_index, free)
        fused = decode(part["fused_away"])
        validate.check_fused_away(fused, len(self.graph.tensors))
        count = len(plan.sources) if isinstance(plan.sources, list) else -1
        binaries = validate.program_binaries(part["binaries"], count, decode.blob)
        validate.check_plan(plan, self.graph, self.context.limits)
        return plan, nodes, fused, binaries

    def _realize(self, parts, check):
        """GpuPartitions of decoded parts; None (after a warning) when the entry's HMAC fails
        or GL refuses them. A partition uploads its constants before it loads its programs: the
        HMAC runs beside the upload, and no binary reaches the driver before it passed."""
        made = []
        try:
            for plan, nodes, fused, binaries in parts:
                made.append(GpuPartition(self.context, plan, nodes, binaries=_CheckedBinaries(binaries, check),
                                         view=self.package.float_view(self.graph, nodes), fused_away=fused))
            check.wait()  # also when no partition has binaries
            self._check_programs(made)
            return made
        except EntryError as exc:
            for partition in made:
                partition.release()
            _warn(f"ignoring cache entry {self.path}: {exc}; {REBUILT}")
            return None
        except Exception as exc:  # GpuError, or a GL object moderngl refuses
            for partition in made:
                partition.release()
            if self.context.ctx is not None:
                with self.context.current():
                    self.context.clear_errors()
            _warn(f"ignoring cache entry {self.path}: its partitions could not be created "
                  f"({type(exc).__name__}: {exc}); {REBUILT}")
            return None

    def _check_programs(self, made):
        """Each loaded program's interface against the runtime's (validate.check_program); a
        program that fails is dropped from the context's cache, or the rebuild would reuse it."""
        with self.context.current():
            for source in {s for p in made for s in p.plan.sources}:
                try:
                    validate.check_program(self.context.program(source))
                except EntryError:
                    self.context.forget_program(source)
                    raise

    def _programs(self, made):
        with self.context.current():
            return [self.context.program(s) for p in made for s in p.plan.sources]

    # -- store ------------------------------------------------------------------------------
    def recording(self):
        """Context manager that keeps the partitioner's log lines for the entry."""
        if not self.enabled:
            return contextlib.nullcontext()
        recorder = self._recorder = _LogRecorder()
        return _Recording(recorder)

    def store(self, made, rewrite_log, lines=None):
        """Write the entry for the partitions just built (warns instead of raising)."""
        if not self.enabled:
            return
        if lines is None:
            lines = self._recorder.lines if self._recorder is not None else []
        try:
            pieces, _ = self._encode(made, rewrite_log, lines)
        except Exception as exc:
            _warn(f"not storing {self.path}: {type(exc).__name__}: {exc}")
            return
        try:
            write_atomic(self.directory, self.path, pieces)
        except OSError as exc:
            _warn_once(self.directory, f"cannot write to serialization_dir {self.directory!r} "
                                       f"({exc.strerror or exc}); running without storing entries there (pass a "
                                       "directory this process can write, or serialization_dir=None)")

    def _encode(self, made, rewrite_log, lines):
        blobs = Blobs()
        encode = Encoder(blobs, self.modules)
        known = {}
        parts = []
        with self.context.current():
            for partition in made:
                binaries = []
                for source in partition.plan.sources:
                    if source not in known:
                        binary = self.context.program(source).binary() if self.context.binary_formats else None
                        known[source] = None if binary is None else [binary[0], blobs.add(binary[1])]
                    binaries.append(known[source])
                parts.append({"plan": encode(partition.plan),
                              "nodes": [n.index for n in partition.nodes],
                              "ops": [n.op for n in partition.nodes],
                              "fused_away": encode(set(partition.fused_away)), "binaries": binaries})
        header = {"key": self.key, "partitions": parts, "rewrite_log": encode(list(rewrite_log)), "log": lines}
        return pack_entry(header, blobs, self.entry_key)


class _CheckedBinaries:
    """A partition's program binaries, handed out only once the entry's HMAC passed."""

    def __init__(self, binaries, check):
        self._binaries, self._check = binaries, check

    def __len__(self):
        return len(self._binaries)

    def __iter__(self):
        self._check.wait()
        return iter(self._binaries)


class _LogRecorder(logging.Handler):
    """Keeps the partitioner's log lines (format and args) so that a warm start repeats them."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines = []

    def emit(self, record):
        args = record.args if isinstance(record.args, tuple) else ()
        if all(isinstance(a, (str, int, float)) and not isinstance(a, bool) for a in args):
            self.lines.append([record.levelno, str(record.msg), list(args)])


class _Recording:
    def __init__(self, recorder):
        self.recorder = recorder

    def __enter__(self):
        log.addHandler(self.recorder)
        return self.recorder

    def __exit__(self, *exc):
        log.removeHandler(self.recorder)
        return False


def safe_directory(directory, option="serialization_dir"):
    """Whether `directory` is ours alone (as ssh asks of its key directories): an entry is code
    the delegate runs, so one that another user could have written or replaced (the directory
    owned by them, or writable by group or others) must not be run. A directory that does not
    exist yet is safe: write_atomic creates it 0700. Warns once when not."""
    try:
        st = os.stat(directory)
    except OSError:
        return True
    uid = os.getuid() if hasattr(os, "getuid") else st.st_uid
    if st.st_uid not in (uid, 0):
        why = f"owned by uid {st.st_uid}, not by this user ({uid})"
    elif st.st_mode & (stat.S_IWOTH | stat.S_IWGRP):
        why = f"writable by other users (mode {stat.S_IMODE(st.st_mode):o})"
    else:
        return True
    _warn_once(directory, f"{option} {directory!r} is {why}: its entries could be someone "
                          "else's; running without the cache (make it private: chmod 700)")
    return False


def _entry_key():
    """This user's entry key (secret.py), or None after a warning (once): without it the cache
    can neither trust an entry nor write one another start would trust."""
    try:
        return secret.entry_key()
    except EntryError as exc:
        _warn_once(secret.key_path(), f"{exc}; running without the cache")
        return None


_warned_dirs = set()
_warned_lock = threading.Lock()


def _warn(message):
    warnings.warn(f"gles_delegate serialization: {message}", CacheWarning, stacklevel=_caller_level())


def _caller_level():
    """warnings.warn's stacklevel, in _warn, of the first frame outside INTERNAL_PACKAGES: the
    call depth from the user's line varies (a start, a store, the LiteRT path's callbacks), and a
    warning that shows one of our own lines tells the user nothing."""
    level, frame = 1, sys._getframe(2)  # level 1: _warn itself; sys._getframe(2): its caller
    while frame is not None and frame.f_globals.get("__name__", "").split(".")[0] in INTERNAL_PACKAGES:
        level, frame = level + 1, frame.f_back
    return level + 1 if frame is not None else level


def _warn_once(directory, message):
    with _warned_lock:
        if directory in _warned_dirs:
            return
        _warned_dirs.add(directory)
    _warn(message)
