"""The serialization cache: compiled partitions (plans) and program binaries on disk, so that a
later start of the same model skips graph rewriting, kernel building, memory planning, weight
packing and shader compilation.

GpuDelegate.partition asks a PlanCache (made per call) to load an entry; on a miss it builds the
partitions as usual and stores them. One entry file holds everything one partition() call made:

    prefix   magic b"GLESDLGC", u32 format version, u32 header length, u64 payload length,
             CRC-32 of the payload                                         (little endian)
    payload  the header (UTF-8 JSON), zero padding to 64 bytes, then the blobs, each 64-aligned:
             raw bytes (Plan.params, program binaries) and numpy arrays (Plan.constants, ...)

The header holds the entry's key, and per partition: its Plan (every dataclass field, encoded
generically, so fields the compiler adds are carried without a change here; see encode()), the
indices and ops of the graph nodes it replaces, the model tensors a rewrite fused away, one
program binary per GLSL source (or null: the source is compiled, which is also what happens
where GL_NUM_PROGRAM_BINARY_FORMATS is 0); then the rewrite log and the partitioner's log lines.
Nothing is pickled and nothing read is executed: JSON, then type and bounds checks of every
value (as tflite/reader.py does for models), then checks of the plan against the graph.

Keys. The file name hashes what selects the entry: model_token (else the model's sha256),
subgraph, input shapes, the compile options (GpuDelegateOptions fields minus NOT_COMPILE_OPTIONS,
so new options count by default) and the context's gl_api. Inside, the entry records everything
else it depends on, checked on load: the model's sha256, what else decides the graph (input
shapes, the nodes left after constant folding and those left to this delegate), GL renderer /
version / vendor, the package version and a fingerprint of the package's source files (a
kernel edited without a version bump must not serve stale plans). A mismatch (another model under the same token, another driver, another
version), a corrupt or truncated file, or a program binary the driver refuses is a warning
(CacheWarning) and a clean rebuild that rewrites the entry, never an exception.

Files: the directory is created 0700; entries are written to a temp file in the same
directory and renamed over the old one (os.replace: readers see the old or the new file, never
a mix, and concurrent writers just race to the last rename). An entry that is not a regular
file, is owned by another user or is writable by others is ignored with a warning. A directory
we cannot write warns once and the delegate runs without storing (it still reads entries
there). The checksum catches corruption, not forgery: whoever can write the directory as this
user can make the delegate run any shader, which is why entries of other users are ignored.
"""
import contextlib
import dataclasses
import hashlib
import importlib
import json
import logging
import math
import mmap
import os
import stat
import struct
import sys
import tempfile
import threading
import time
import warnings
import zlib

import numpy as np

from .. import partition as partitioning
from .. import quant
from ..tflite.model import BackgroundDigest


MAGIC = b"GLESDLGC"
FORMAT_VERSION = 2
PREFIX = struct.Struct("<8sIIQI")
SUFFIX = ".gdcache"
BLOB_ALIGN = 64
MAX_HEADER_BYTES = 256 << 20
MAX_DEPTH = 32
MAX_BLOB_COUNT = 1 << 20
ENTRY_SLACK_BYTES = 64 << 20      # an entry may exceed 32x the model's constants by this much
ARENA_SLACK_ELEMENTS = 1 << 22    # and a plan's arena 64x the graph's activations by this much
MAX_GROUPS = 1 << 31              # workgroups of one dispatch (the reader's element limit)
BACKGROUND_DIGEST_BYTES = 1 << 20  # smaller models are hashed in the calling thread
BACKGROUND_CHECK_BYTES = 1 << 20   # and smaller entries checked

# GpuDelegateOptions fields that do not change what is compiled; every other field does.
NOT_COMPILE_OPTIONS = frozenset({"serialization_dir", "model_token", "device_index", "debug_nonfinite"})
# Modules whose dataclasses an entry may contain (the Plan, IoSlot, rewrite Records, ...).
DATACLASS_MODULES = ("gles_delegate.gpu.compiler", "gles_delegate.gpu.kernels.base",
                     "gles_delegate.transforms", "gles_delegate.gpu.memory", "gles_delegate.gpu.layout")
NUMPY_DTYPES = frozenset({"bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
                          "uint64", "float16", "float32", "float64"})

log = logging.getLogger("gles_delegate")


class CacheWarning(UserWarning):
    """A serialization entry could not be used or stored; the delegate built (or ran) without it."""


class EntryError(Exception):
    """Why an entry cannot be used (becomes a CacheWarning)."""


# -- key ---------------------------------------------------------------------------------------
def options_fingerprint(options):
    """{field: value} of every GpuDelegateOptions field that changes compilation (all fields but
    NOT_COMPILE_OPTIONS), plus the precision the options resolve to."""
    out = {}
    for f in dataclasses.fields(options):
        if f.name not in NOT_COMPILE_OPTIONS:
            value = getattr(options, f.name)
            out[f.name] = value if value is None or isinstance(value, (bool, int, float, str)) else repr(value)
    out["resolved_precision"] = options.resolved_precision
    return out


_fingerprints = {}
_fingerprints_lock = threading.Lock()
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../gles_delegate


def package_version():
    """The package's version (gles_delegate.__version__, which setup.cfg also reads: looking it
    up through importlib.metadata would cost 5-30 ms of a warm start)."""
    from .. import __version__
    return __version__


def code_fingerprint():
    """sha256 of (path, size, mtime) of every .py of the package and every kernel template:
    changes whenever the code that builds plans changes, version bump or not. Once per process
    (about 1 ms: a stat per file)."""
    with _fingerprints_lock:
        if "code" not in _fingerprints:
            from . import shader
            root = _PACKAGE_DIR
            glsl = str(shader.SOURCE_TREE) if shader.SOURCE_TREE.is_dir() else os.path.join(root, "kernels_glsl")
            lines = []
            for top, suffix in ((root, ".py"), (glsl, ".glsl")):
                pending = [top]
                while pending:
                    try:
                        entries = list(os.scandir(pending.pop()))
                    except OSError:
                        continue
                    for entry in entries:
                        if entry.is_dir(follow_symlinks=False):
                            if entry.name != "__pycache__":
                                pending.append(entry.path)
                        elif entry.name.endswith(suffix):
                            st = entry.stat()
                            lines.append(f"{os.path.relpath(entry.path, top)}\0{st.st_size}\0{st.st_mtime_ns}")
            _fingerprints["code"] = hashlib.sha256("\n".join(sorted(lines)).encode()).hexdigest()
        return _fingerprints["code"]


def graph_signature(graph, candidates):
    """sha256 of what, besides the model's bytes and the code, decides the graph the delegate
    is given: the input shapes (resize_tensor_input), the nodes left after constant folding,
    and which of them are left to this delegate (earlier delegates took the others). The rest
    of the graph is a function of these, the model (its sha256 is in the key) and the code (its
    fingerprint is in the key)."""
    inputs = [(t.index, tuple(int(d) for d in t.shape), str(t.dtype)) for t in graph.inputs]
    nodes = [(n.index, n.op) for n in graph.nodes]
    return hashlib.sha256(repr((inputs, nodes, sorted(n.index for n in candidates))).encode()).hexdigest()


# -- generic encoding of plain data ------------------------------------------------------------
class Blobs:
    """The raw byte blobs of an entry being written."""

    def __init__(self):
        self.items = []

    def add(self, data):
        self.items.append(memoryview(data).cast("B"))
        return len(self.items) - 1


def encode(value, blobs):
    """A JSON-able form of `value`. Supported: None, bool, int, float (NaN / inf too), str,
    bytes, bytearray, list, tuple, dict, set, frozenset, numpy arrays (NUMPY_DTYPES, any shape)
    and scalars, and instances of dataclasses defined in DATACLASS_MODULES, nested freely.
    Anything else raises TypeError (the entry is then not stored)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, list):
        return [encode(v, blobs) for v in value]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return {"tuple": [encode(v, blobs) for v in value]}
    if isinstance(value, (set, frozenset)):
        return {type(value).__name__: [encode(v, blobs) for v in value]}
    if isinstance(value, dict):
        return {"dict": [[encode(k, blobs), encode(v, blobs)] for k, v in value.items()]}
    if isinstance(value, (bytes, bytearray)):
        return {type(value).__name__: blobs.add(value)}
    if isinstance(value, np.ndarray):
        if value.dtype.name not in NUMPY_DTYPES:
            raise TypeError(f"numpy arrays of {value.dtype} are not serialized")
        data = np.ascontiguousarray(value)
        return {"ndarray": blobs.add(data.reshape(-1).view(np.uint8)), "dtype": value.dtype.name,
                "shape": list(value.shape)}
    if isinstance(value, np.generic) and value.dtype.name in NUMPY_DTYPES:
        return {"scalar": value.dtype.name, "value": encode(value.item(), blobs)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        cls = type(value)
        if cls.__module__ not in DATACLASS_MODULES:
            raise TypeError(f"dataclass {cls.__module__}.{cls.__qualname__} is not in DATACLASS_MODULES")
        return {"dataclass": f"{cls.__module__}:{cls.__qualname__}",
                "fields": {f.name: encode(getattr(value, f.name), blobs) for f in dataclasses.fields(value)}}
    raise TypeError(f"values of type {type(value).__name__} are not serialized")


_SCALARS = frozenset({int, float, str, bool, type(None)})


class Decoder:
    """The inverse of encode(), checking every value: unknown tags, wrong JSON types, blob
    references out of range, array sizes that do not match their blob, unknown classes or fields
    raise EntryError."""

    def __init__(self, blobs):
        self.blobs = blobs  # list of memoryviews into the entry

    def __call__(self, value, depth=0):
        if depth > MAX_DEPTH:
            raise EntryError("values nested too deeply")
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, list):
            return [v if type(v) in _SCALARS else self(v, depth + 1) for v in value]
        if not isinstance(value, dict) or not value:
            raise EntryError(f"unexpected JSON value of type {type(value).__name__}")
        tag = next(iter(value))
        body = value[tag]
        expected = {"ndarray": {"ndarray", "dtype", "shape"}, "scalar": {"scalar", "value"},
                    "dataclass": {"dataclass", "fields"}}.get(tag, {tag})
        if set(value) != expected:
            raise EntryError(f"malformed {tag!r} value")
        if tag == "float":
            if body not in ("nan", "inf", "-inf"):
                raise EntryError("malformed float")
            return float(body)
        if tag in ("tuple", "set", "frozenset"):
            items = self(self.list(body), depth + 1)
            try:
                return {"tuple": tuple, "set": set, "frozenset": frozenset}[tag](items)
            except TypeError:
                raise EntryError(f"unhashable item in a {tag}") from None
        if tag == "dict":
            out = {}
            for pair in self.list(body):
                if not isinstance(pair, list) or len(pair) != 2:
                    raise EntryError("malformed dict item")
                key = self(pair[0], depth + 1)
                try:
                    out[key] = self(pair[1], depth + 1)
                except TypeError:
                    raise EntryError("unhashable dict key") from None
            return out
        if tag in ("bytes", "bytearray"):
            return (bytes if tag == "bytes" else bytearray)(self.blob(body))
        if tag == "ndarray":
            return self.array(body, value["dtype"], value["shape"])
        if tag == "scalar":
            if body not in NUMPY_DTYPES or not isinstance(value["value"], (bool, int, float, dict)):
                raise EntryError("malformed numpy scalar")
            try:
                return np.dtype(body).type(self(value["value"], depth + 1))
            except (OverflowError, ValueError, TypeError):
                raise EntryError("numpy scalar out of range") from None
        if tag == "dataclass":
            return self.dataclass(body, value["fields"], depth)
        raise EntryError(f"unknown value tag {tag!r}")

    @staticmethod
    def list(value):
        if not isinstance(value, list):
            raise EntryError(f"expected a JSON list, got {type(value).__name__}")
        return value

    def blob(self, index):
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(self.blobs):
            raise EntryError(f"blob reference {index!r} out of range [0, {len(self.blobs)})")
        return self.blobs[index]

    def array(self, index, dtype, shape):
        if dtype not in NUMPY_DTYPES:
            raise EntryError(f"array dtype {dtype!r} not allowed")
        if not isinstance(shape, list) or len(shape) > 16 or \
                any(isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in shape):
            raise EntryError(f"malformed array shape {shape!r}")
        raw = self.blob(index)
        dt = np.dtype(dtype)
        if math.prod(shape) * dt.itemsize != len(raw):
            raise EntryError(f"array of shape {shape} and dtype {dtype} does not fit its blob of {len(raw)} bytes")
        array = np.frombuffer(raw, dt).reshape(shape)
        return array  # read-only view into the entry's bytes

    def dataclass(self, name, fields, depth):
        if not isinstance(name, str) or name.count(":") != 1 or not isinstance(fields, dict):
            raise EntryError("malformed dataclass value")
        module_name, qualname = name.split(":")
        if module_name not in DATACLASS_MODULES:
            raise EntryError(f"dataclass module {module_name!r} not allowed")
        module = sys.modules.get(module_name) or importlib.import_module(module_name)
        cls = getattr(module, qualname, None) if qualname.isidentifier() else None
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__module__ == module_name):
            raise EntryError(f"{name} is not a dataclass")
        known = dataclasses.fields(cls)
        if set(fields) != {f.name for f in known}:
            raise EntryError(f"{qualname} fields changed: entry has {sorted(fields)}, "
                             f"the code has {sorted(f.name for f in known)}")
        values = {f.name: self(fields[f.name], depth + 1) for f in known}
        try:
            obj = cls(**{f.name: values[f.name] for f in known if f.init})
        except Exception as exc:  # the dataclass's own __post_init__ checks
            raise EntryError(f"{qualname}: {exc}") from None
        for f in known:
            if not f.init:
                object.__setattr__(obj, f.name, values[f.name])
        return obj


# -- the file format ---------------------------------------------------------------------------
def pack_entry(header, blobs):
    """(list of byte pieces to write in order, total size) of an entry; `header` is a JSON-able
    dict, blobs a Blobs. Blob offsets are added to the header as header['blobs']."""
    spans, offset = [], 0
    for item in blobs.items:
        spans.append([offset, len(item)])
        offset += -(-len(item) // BLOB_ALIGN) * BLOB_ALIGN
    header = {**header, "blobs": spans}
    text = json.dumps(header, separators=(",", ":"), allow_nan=False).encode()
    pieces = [text, b"\0" * (-(PREFIX.size + len(text)) % BLOB_ALIGN)]
    for item in blobs.items:
        pieces += [item, b"\0" * (-len(item) % BLOB_ALIGN)]
    checksum = 0
    for piece in pieces:
        checksum = zlib.crc32(piece, checksum)
    payload = sum(len(p) for p in pieces)
    prefix = PREFIX.pack(MAGIC, FORMAT_VERSION, len(text), payload, checksum)
    return [prefix] + pieces, PREFIX.size + payload


def unpack_entry(data, checked=True):
    """(header dict, list of blob memoryviews) of an entry's bytes; EntryError if anything is off.
    The checksum is a CRC-32 of the payload: it is there to catch corruption (a byte flipped, a
    torn copy), which it does as well as a cryptographic hash would, at under half of sha256's
    cost (zlib's CRC-32 against hashlib's sha256, in a scratch timing on the H200 machine's
    CPU); forgery is out of its scope (see above).
    checked=False leaves the checksum to a PayloadCheck of the caller, which must not hand the
    driver anything from the entry before it passes (the header's decoding is safe without it:
    it checks every value it reads)."""
    view = memoryview(data)
    if len(view) < PREFIX.size:
        raise EntryError(f"truncated: {len(view)} bytes")
    magic, version, header_bytes, payload_bytes, checksum = PREFIX.unpack_from(view)
    if magic != MAGIC:
        raise EntryError("not a gles_delegate cache entry (bad magic)")
    if version != FORMAT_VERSION:
        raise EntryError(f"entry format {version}, this version reads format {FORMAT_VERSION}")
    if payload_bytes != len(view) - PREFIX.size:
        raise EntryError(f"truncated or padded: payload of {len(view) - PREFIX.size} bytes, "
                         f"the prefix says {payload_bytes}")
    if header_bytes > min(payload_bytes, MAX_HEADER_BYTES):
        raise EntryError(f"header length {header_bytes} does not fit the entry")
    payload = view[PREFIX.size:]
    if checked:
        PayloadCheck(data, background=False).wait()
    try:
        header = json.loads(bytes(payload[:header_bytes]))
    except (ValueError, RecursionError) as exc:
        raise EntryError(f"header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise EntryError("header is not a JSON object")
    start = PREFIX.size + header_bytes + (-(PREFIX.size + header_bytes) % BLOB_ALIGN)
    spans = header.get("blobs")
    if not isinstance(spans, list) or len(spans) > MAX_BLOB_COUNT:
        raise EntryError("malformed blob table")
    blobs = []
    for span in spans:
        if not (isinstance(span, list) and len(span) == 2
                and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in span)):
            raise EntryError(f"malformed blob span {span!r}")
        offset, length = span
        if start + offset + length > len(view):
            raise EntryError(f"blob [{offset}, +{length}) is beyond the end of the entry")
        blobs.append(view[start + offset:start + offset + length])
    return header, blobs


class PayloadCheck:
    """An entry's checksum, computed in a thread when the entry is large (zlib releases the GIL:
    the constants upload runs meanwhile); wait() raises EntryError on a mismatch. Call it with
    the bytes unpack_entry(checked=False) accepted (their prefix is well-formed)."""

    def __init__(self, data, background=True):
        self._payload, self._expected = memoryview(data)[PREFIX.size:], PREFIX.unpack_from(data)[4]
        self._crc, self._thread = None, None
        if background and len(self._payload) >= BACKGROUND_CHECK_BYTES:
            self._thread = threading.Thread(target=self._compute, name="gles_delegate entry check", daemon=True)
            self._thread.start()

    def _compute(self):
        self._crc = zlib.crc32(self._payload)

    def join(self):
        """Wait for the thread, if any (it reads the entry's map)."""
        if self._thread is not None:
            self._thread.join()

    def wait(self):
        self.join()
        if self._crc is None:
            self._compute()
        if self._crc != self._expected:
            raise EntryError("checksum mismatch (corrupt entry)")


# -- the cache ---------------------------------------------------------------------------------
_warned_dirs = set()
_warned_lock = threading.Lock()


def _warn(message):
    warnings.warn(f"gles_delegate serialization: {message}", CacheWarning, stacklevel=4)


def _warn_once(directory, message):
    with _warned_lock:
        if directory in _warned_dirs:
            return
        _warned_dirs.add(directory)
    _warn(message)


class _LogRecorder(logging.Handler):
    """Keeps the partitioner's log lines (format and args) so that a warm start repeats them."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines = []

    def emit(self, record):
        args = record.args if isinstance(record.args, tuple) else ()
        if all(isinstance(a, (str, int, float)) and not isinstance(a, bool) for a in args):
            self.lines.append([record.levelno, str(record.msg), list(args)])


class PlanCache:
    """The serialization cache for one GpuDelegate.partition call (disabled without
    options.serialization_dir, or for a graph that does not come from a model file).

        cache = PlanCache(options, context, graph, candidates)
        loaded = cache.load()                  # (partitions, rewrite_log) or None
        with cache.recording():                # the partitioner's log lines, to replay
            ...build partitions...
        cache.store(partitions, rewrite_log)
    """

    def __init__(self, options, context, graph, candidates):
        self.options, self.context, self.graph = options, context, graph
        self.candidates = list(candidates)
        self.directory = options.serialization_dir
        model = graph.source_model
        source = None if model is None else model.source_bytes
        self.enabled = bool(self.directory) and source is not None
        self._recorder = self._check = None
        if not self.enabled:
            return
        if not model.digest_ready and model.digest_job is None and len(source) >= BACKGROUND_DIGEST_BYTES:
            # The model's sha256 (10 ms per 17 MB) runs beside the entry's read and checksum.
            model.digest_job = BackgroundDigest(source)
        token = options.model_token
        fingerprint = options_fingerprint(options)
        # The name needs no full digest of the model (that is checked inside): its size and ends.
        quick = None if token is not None else \
            f"{len(source)}:{hashlib.sha256(source[:1 << 18] + source[-(1 << 18):]).hexdigest()}"
        name = json.dumps([token, quick, graph.subgraph_index, [[int(d) for d in t.shape] for t in graph.inputs],
                           fingerprint, context.gl_api], sort_keys=True, separators=(",", ":"))
        self.path = os.path.join(self.directory, hashlib.sha256(name.encode()).hexdigest()[:40] + SUFFIX)
        self._key = {"model_digest": None, "model_token": token,
                     "subgraph": graph.subgraph_index, "graph": graph_signature(graph, self.candidates),
                     "options": fingerprint, "gl_api": context.gl_api, "renderer": context.renderer,
                     "gl_version": context.version, "vendor": context.vendor,
                     "package_version": package_version(), "code": code_fingerprint()}

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
        self._check = None
        try:
            return self._load()
        finally:
            if self._check is not None:
                self._check.join()  # the map is read only while load() runs (see _map_file)

    def _load(self):
        try:
            read = self._read()
            if read is None:
                return None
            header, blobs = unpack_entry(read, checked=False)
            check = self._check = PayloadCheck(read)
            self._check_key(header.get("key"))
            parts, rewrite_log, lines = self._decode(header, Decoder(blobs))
        except EntryError as exc:
            _warn(f"ignoring cache entry {self.path}: {exc}; rebuilding it")
            return None
        except Exception as exc:  # a bug here must not break the user's start-up
            _warn(f"ignoring cache entry {self.path} ({type(exc).__name__}: {exc}); rebuilding it")
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

    def _read(self):
        """The entry's bytes (a read-only map of the file), or None when there is none;
        EntryError when it must be ignored (not a regular file, another owner, writable by
        others, too big)."""
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(self.path, flags)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise EntryError(f"cannot open it ({exc.strerror})") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise EntryError("not a regular file")
            uid = os.getuid() if hasattr(os, "getuid") else st.st_uid
            if st.st_uid != uid:
                raise EntryError(f"owned by uid {st.st_uid}, not by this user ({uid})")
            if st.st_mode & (stat.S_IWOTH | stat.S_IWGRP):
                raise EntryError(f"writable by others (mode {stat.S_IMODE(st.st_mode):o})")
            limit = ENTRY_SLACK_BYTES + 32 * sum(t.size * np.dtype(t.dtype).itemsize for t in self.graph.tensors if t.is_const)
            if st.st_size > limit:
                raise EntryError(f"{st.st_size} bytes, more than an entry of this model can hold ({limit})")
            return _map_file(fd)
        finally:
            os.close(fd)

    def _check_key(self, key):
        if not isinstance(key, dict):
            raise EntryError("the entry has no key")
        reasons = {"model_digest": "another model (same model_token, other bytes)",
                   "renderer": "another GPU", "vendor": "another GPU vendor",
                   "gl_version": "another GL driver version", "gl_api": "another GL API",
                   "package_version": "another gles_delegate version",
                   "code": "another build of gles_delegate (its source files changed)",
                   "graph": "another graph (other input shapes, or other nodes left to this delegate)",
                   "options": "other delegate options"}
        for field, expected in self.key.items():
            if key.get(field) != expected:
                why = reasons.get(field, f"another {field}")
                raise EntryError(f"it was made for {why}: {field} is {key.get(field)!r}, now {expected!r}")
        if set(key) != set(self.key):
            raise EntryError("its key has other fields")

    def _decode(self, header, decode):
        from .compiler import Plan
        parts_json = header.get("partitions")
        if not isinstance(parts_json, list):
            raise EntryError("no partition list")
        by_index = {n.index: n for n in self.graph.nodes}
        candidates = {id(n) for n in self.candidates}
        parts, claimed = [], set()
        for k, part in enumerate(parts_json):
            if not isinstance(part, dict) or set(part) != {"plan", "nodes", "ops", "fused_away", "binaries"}:
                raise EntryError(f"partition {k}: malformed")
            plan = decode(part["plan"])
            if not isinstance(plan, Plan):
                raise EntryError(f"partition {k}: no Plan")
            indices, ops = decode(part["nodes"]), decode(part["ops"])
            if not (isinstance(indices, list) and isinstance(ops, list) and len(indices) == len(ops) and indices):
                raise EntryError(f"partition {k}: malformed node list")
            nodes = []
            for index, op in zip(indices, ops):
                node = by_index.get(index) if isinstance(index, int) and not isinstance(index, bool) else None
                if node is None or node.op != op or id(node) not in candidates or id(node) in claimed:
                    raise EntryError(f"partition {k}: node {index!r} ({op!r}) is not a free node of the graph")
                claimed.add(id(node))
                nodes.append(node)
            fused = decode(part["fused_away"])
            if not isinstance(fused, set) or not all(_is_index(i, len(self.graph.tensors)) for i in fused):
                raise EntryError(f"partition {k}: malformed fused_away")
            binaries = self._binaries(decode, part["binaries"], len(plan.sources) if isinstance(plan.sources, list) else -1)
            check_plan(plan, self.graph, self.context.limits)
            parts.append((plan, nodes, fused, binaries))
        rewrite_log = decode(header.get("rewrite_log"))
        from ..transforms import Record
        if not isinstance(rewrite_log, list) or not all(isinstance(r, Record) for r in rewrite_log):
            raise EntryError("malformed rewrite log")
        lines = header.get("log")
        if not isinstance(lines, list):
            raise EntryError("malformed log lines")
        for line in lines:
            if not (isinstance(line, list) and len(line) == 3 and isinstance(line[0], int)
                    and isinstance(line[1], str) and isinstance(line[2], list)
                    and all(isinstance(a, (str, int, float)) and not isinstance(a, bool) for a in line[2])):
                raise EntryError("malformed log line")
            try:
                line[1] % tuple(line[2])
            except (TypeError, ValueError, KeyError):
                raise EntryError("log line does not format") from None
        return parts, rewrite_log, lines

    @staticmethod
    def _binaries(decode, value, count):
        if not isinstance(value, list) or len(value) != count:
            raise EntryError("program binary list does not match the sources")
        out = []
        for item in value:
            if item is None:
                out.append(None)
                continue
            if not (isinstance(item, list) and len(item) == 2 and _is_index(item[0], 1 << 32)):
                raise EntryError("malformed program binary")
            out.append((item[0], decode.blob(item[1])))
        return out

    def _realize(self, parts, check):
        """GpuPartitions of decoded parts; None (after a warning) when the entry's checksum
        fails or GL refuses them. A partition uploads its constants before it loads its programs:
        the checksum runs beside the upload, and no binary reaches the driver before it passed."""
        from .runtime import GpuPartition
        made = []
        try:
            for plan, nodes, fused, binaries in parts:
                made.append(GpuPartition(self.context, plan, nodes, binaries=_CheckedBinaries(binaries, check),
                                         view=self._view(nodes), fused_away=fused))
            check.wait()  # also when no partition has binaries
            return made
        except EntryError as exc:
            for partition in made:
                partition.release()
            _warn(f"ignoring cache entry {self.path}: {exc}; rebuilding it")
            return None
        except Exception as exc:  # GpuError, or a GL object moderngl refuses
            for partition in made:
                partition.release()
            if self.context.ctx is not None:
                with self.context.current():
                    self.context.clear_errors()
            _warn(f"ignoring cache entry {self.path}: its partitions could not be created "
                  f"({type(exc).__name__}: {exc}); rebuilding it")
            return None

    def _view(self, nodes):
        """The quantized float view of a partition (what maps its captured values back to the
        model's integers), rebuilt from the nodes: cheap, and no part of the entry."""
        if not any(quant.touches_quantized(n) for n in nodes):
            return None
        spec = partitioning.boundary(self.graph, nodes)
        return quant.float_view(spec.nodes, spec.inputs, spec.outputs, next_index=len(self.graph.tensors))

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
            pieces, size = self._encode(made, rewrite_log, lines)
        except Exception as exc:
            _warn(f"not storing {self.path}: {type(exc).__name__}: {exc}")
            return
        try:
            _write_atomic(self.directory, self.path, pieces)
        except OSError as exc:
            _warn_once(self.directory, f"cannot write to serialization_dir {self.directory!r} "
                                       f"({exc.strerror or exc}); running without storing entries there")

    def _encode(self, made, rewrite_log, lines):
        blobs = Blobs()
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
                parts.append({"plan": encode(partition.plan, blobs),
                              "nodes": [n.index for n in partition.nodes],
                              "ops": [n.op for n in partition.nodes],
                              "fused_away": encode(set(partition.fused_away), blobs), "binaries": binaries})
        header = {"key": self.key, "partitions": parts, "rewrite_log": encode(list(rewrite_log), blobs),
                  "log": lines}
        return pack_entry(header, blobs)


class _CheckedBinaries:
    """A partition's program binaries, handed out only once the entry's checksum passed."""

    def __init__(self, binaries, check):
        self._binaries, self._check = binaries, check

    def __len__(self):
        return len(self._binaries)

    def __iter__(self):
        self._check.wait()
        return iter(self._binaries)


class _Recording:
    def __init__(self, recorder):
        self.recorder = recorder

    def __enter__(self):
        log.addHandler(self.recorder)
        return self.recorder

    def __exit__(self, *exc):
        log.removeHandler(self.recorder)
        return False


def _map_file(fd):
    """A read-only map of the whole file `fd` (its size when mapped), its pages mapped in one
    call (MAP_POPULATE): no copy, and none of the page by page first-touch faults that reading
    into fresh memory costs (see tflite/reader.py's _read_file).
    The map stays valid when the file is replaced or unlinked (entries are only ever written by
    rename). Truncating it in place (`cp` over it) would make reading the truncated part fault
    (SIGBUS), so nothing reads the map after PlanCache.load() returns: load() waits for its
    checksum thread, and the constants the plans keep (views of the map) are read only to
    upload them, inside load()."""
    flags = mmap.MAP_PRIVATE | getattr(mmap, "MAP_POPULATE", 0)
    try:
        return mmap.mmap(fd, 0, flags=flags, prot=mmap.PROT_READ)
    except ValueError:  # an empty file cannot be mapped
        return b""
    except OSError:  # a file system that cannot map files: read it
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read()


def _write_atomic(directory, path, pieces):
    """Write pieces to a temp file in `directory` and rename it to `path` (OSError on failure)."""
    os.makedirs(directory, mode=0o700, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=".tmp-", suffix=SUFFIX, dir=directory)  # mode 0600
    try:
        with os.fdopen(fd, "wb") as f:
            for piece in pieces:
                f.write(piece)
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise
    _remove_stale_temps(directory)


def _remove_stale_temps(directory, age_s=3600):
    """Temp files a killed writer left behind (ours: same prefix and suffix, over an hour old)."""
    now = time.time()
    try:
        for entry in os.scandir(directory):
            if entry.name.startswith(".tmp-") and entry.name.endswith(SUFFIX) \
                    and entry.is_file(follow_symlinks=False) and now - entry.stat().st_mtime > age_s:
                os.unlink(entry.path)
    except OSError:
        pass


def _is_index(value, count):
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) and 0 <= value < count


def _is_count(value, low=0):
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) and value >= low


def _vec4_elements(shape):
    """bhwc(shape).elements without building a Shape4 (rank <= 4, checked by the caller)."""
    if not shape:
        return 1
    return math.prod(shape[:-1]) * -(-shape[-1] // 4)


def check_plan(plan, graph, limits):
    """EntryError unless a decoded Plan is consistent with itself and with the graph: every
    index in range, every offset and size inside its buffer, dispatch sizes within the GPU's
    limits, I/O shapes equal to the graph's. Fields this does not know are only type-checked
    by the decoder (update this when the compiler changes what a field means)."""
    def fail(what):
        raise EntryError(f"plan: {what}")
    if not isinstance(plan.sources, list) or not all(isinstance(s, str) for s in plan.sources):
        fail("sources")
    if not isinstance(plan.params, bytes):
        fail("params")
    constants = plan.constants
    if not isinstance(plan.storage_half, bool):
        fail("storage_half")
    if not isinstance(constants, np.ndarray) or constants.ndim != 2 or constants.shape[1] != 4 \
            or constants.dtype != (np.float16 if plan.storage_half else np.float32):
        fail("constants")
    for name in ("arena_elements", "arena_lower_bound", "arena_naive", "io_bytes"):
        if not _is_count(getattr(plan, name)):
            fail(name)
    activations = sum(math.prod(t.shape) for t in graph.tensors if not t.is_const) + len(graph.tensors)
    if not 1 <= plan.arena_elements <= max(plan.arena_naive, 1) <= 64 * activations + ARENA_SLACK_ELEMENTS:
        fail(f"arena of {plan.arena_elements} elements (naive {plan.arena_naive})")
    max_groups = limits.get("max_workgroup_count", (1 << 31,) * 3)
    if not isinstance(plan.steps, list):
        fail("steps")
    for step in plan.steps:
        if not isinstance(step, tuple) or len(step) < 5:
            fail("malformed step")
        source, offset, size, groups, barrier = step[:5]
        if not _is_index(source, len(plan.sources)):
            fail(f"step source {source!r}")
        if not (_is_count(offset) and _is_count(size, 1) and offset + size <= len(plan.params)):
            fail(f"step params range {offset!r} +{size!r}")
        if not (isinstance(groups, tuple) and len(groups) == 3
                and all(_is_count(g) and g <= m for g, m in zip(groups, max_groups))
                and math.prod(groups) <= MAX_GROUPS):
            fail(f"step groups {groups!r}")
        if not isinstance(barrier, bool):
            fail("step barrier")
    for name in ("labels", "writes"):
        value = getattr(plan, name)
        if not isinstance(value, list) or len(value) != len(plan.steps):
            fail(f"{name} does not match the steps")
    if not all(isinstance(label, str) for label in plan.labels):
        fail("labels")
    for written in plan.writes:
        if not isinstance(written, list):
            fail("writes")
        for item in written:
            if not (isinstance(item, tuple) and len(item) == 3 and _is_count(item[0]) and _is_count(item[1])
                    and isinstance(item[2], tuple) and len(item[2]) <= 4 and all(_is_count(d) for d in item[2])):
                fail(f"write {item!r}")
            if item[1] + _vec4_elements(item[2]) > plan.arena_elements:
                fail(f"write {item!r} beyond the arena")
    if plan.io_bytes > 2 * sum(getattr(s, "nbytes", 0) for s in list(plan.inputs) + list(plan.outputs)) \
            + 64 * (len(plan.inputs) + len(plan.outputs) + 1):
        fail(f"io_bytes {plan.io_bytes}")
    from .compiler import IoSlot
    for slots in (plan.inputs, plan.outputs):
        if not isinstance(slots, list):
            fail("I/O slots")
        for slot in slots:
            if not isinstance(slot, IoSlot) or not _is_index(slot.tensor_index, len(graph.tensors)):
                fail(f"I/O slot {slot!r}")
            tensor = graph.tensors[slot.tensor_index]
            if slot.shape != tuple(tensor.shape) or slot.nbytes != tensor.size * 4 \
                    or not _is_count(slot.offset) or slot.offset + slot.nbytes > plan.io_bytes:
                fail(f"I/O slot {slot!r} does not fit tensor {tensor.index} {list(tensor.shape)}")
