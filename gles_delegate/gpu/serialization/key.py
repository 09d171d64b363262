"""What selects an entry and what it depends on.

The file name hashes what selects the entry: model_token (else the model's size and ends),
subgraph, input shapes, the compile options (GpuDelegateOptions fields minus
NOT_COMPILE_OPTIONS, so new options count by default) and the context's gl_api. Inside, the
entry records everything else it depends on, checked on load (check_key): the model's sha256,
what else decides the graph (graph_signature), GL renderer / version / vendor, the package
version and a fingerprint of the package's source files (a kernel edited without a version
bump must not serve stale plans).
"""
import dataclasses
import hashlib
import json
import os
import threading

import numpy as np

from .. import shader
from .entry import SUFFIX, EntryError

# GpuDelegateOptions fields that do not change what is compiled; every other field does.
# placement: applied after an entry is loaded or stored (delegate._place), never part of one.
NOT_COMPILE_OPTIONS = frozenset({"serialization_dir", "model_token", "device_index", "debug_nonfinite",
                                 "calibration_cache_dir", "placement"})
NAME_SAMPLE_BYTES = 1 << 16  # of each end of the model, hashed into the file name (the digest is checked inside)
# Why an entry whose key field differs cannot serve (the CacheWarning says it).
MISMATCHES = {"model_digest": "another model (same model_token, other bytes: give each model its own "
                              "model_token, or leave it None, the model's hash)",
              "renderer": "another GPU", "vendor": "another GPU vendor",
              "gl_version": "another GL driver version", "gl_api": "another GL API",
              "package_version": "another gles_delegate version",
              "code": "another build of gles_delegate (its source files changed)",
              "graph": "another graph (other input shapes, or other nodes left to this delegate)",
              "options": "other delegate options"}

_fingerprints = {}
_fingerprints_lock = threading.Lock()


def options_fingerprint(options):
    """{field: value} of every GpuDelegateOptions field that changes compilation (all fields but
    NOT_COMPILE_OPTIONS), plus the precision the options resolve to."""
    out = {}
    for f in dataclasses.fields(options):
        if f.name not in NOT_COMPILE_OPTIONS:
            value = getattr(options, f.name)
            if f.name == "calibration_inputs" and value is not None:  # arrays: their bytes, not a clipped repr
                value = _arrays_digest(value)
            out[f.name] = value if value is None or isinstance(value, (bool, int, float, str)) else repr(value)
    out["resolved_precision"] = options.resolved_precision
    return out


def _arrays_digest(value):
    """sha256 of the dtypes, shapes and bytes of nested sequences of arrays."""
    digest = hashlib.sha256()

    def add(item):
        if isinstance(item, (list, tuple)):
            digest.update(b"[%d" % len(item))
            for part in item:
                add(part)
        else:
            array = np.ascontiguousarray(item)
            digest.update(f"{array.dtype.str}{array.shape}".encode())
            digest.update(array.tobytes())
    add(value)
    return digest.hexdigest()


def code_fingerprint(root):
    """sha256 of (path, size, mtime) of every .py under `root` (the package's directory) and
    every kernel template: changes whenever the code that builds plans changes, version bump
    or not. Once per process and root (about 1 ms: a stat per file)."""
    with _fingerprints_lock:
        if root not in _fingerprints:
            glsl = str(shader.SOURCE_TREE) if shader.SOURCE_TREE.is_dir() else os.path.join(root, "kernels_glsl")
            lines = [line for top, suffix in ((root, ".py"), (glsl, ".glsl")) for line in _stat_lines(top, suffix)]
            _fingerprints[root] = hashlib.sha256("\n".join(sorted(lines)).encode()).hexdigest()
        return _fingerprints[root]


def _stat_lines(top, suffix):
    """'relative path, size, mtime (ns)' of every file under `top` whose name ends in `suffix`."""
    pending = [top]
    while pending:
        try:
            entries = list(os.scandir(pending.pop()))
        except OSError:
            continue
        for item in entries:
            if item.is_dir(follow_symlinks=False):
                if item.name != "__pycache__":
                    pending.append(item.path)
            elif item.name.endswith(suffix):
                st = item.stat()
                yield f"{os.path.relpath(item.path, top)}\0{st.st_size}\0{st.st_mtime_ns}"


def graph_signature(graph, candidates):
    """sha256 of what, besides the model's bytes and the code, decides the graph the delegate
    is given: the input shapes (resize_tensor_input), the nodes left after constant folding,
    and which of them are left to this delegate (earlier delegates took the others). The rest
    of the graph is a function of these, the model (its sha256 is in the key) and the code (its
    fingerprint is in the key)."""
    inputs = [(t.index, tuple(int(d) for d in t.shape), str(t.dtype)) for t in graph.inputs]
    nodes = [(n.index, n.op) for n in graph.nodes]
    return hashlib.sha256(repr((inputs, nodes, sorted(n.index for n in candidates))).encode()).hexdigest()


def file_name(source, token, graph, options, gl_api):
    """The entry's file name: a hash of what selects it. `source`: the model's bytes; the name
    needs no full digest of them (that is checked inside): their size and ends do."""
    quick = None if token is not None else \
        f"{len(source)}:{hashlib.sha256(source[:NAME_SAMPLE_BYTES] + source[-NAME_SAMPLE_BYTES:]).hexdigest()}"
    name = json.dumps([token, quick, graph.subgraph_index, [[int(d) for d in t.shape] for t in graph.inputs],
                       options, gl_api], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(name.encode()).hexdigest()[:40] + SUFFIX


def check_key(found, expected):
    """EntryError unless the key an entry holds (`found`) is `expected`, naming the first field
    that differs and what that means."""
    if not isinstance(found, dict):
        raise EntryError("the entry has no key")
    for field, value in expected.items():
        if found.get(field) != value:
            why = MISMATCHES.get(field, f"another {field}")
            raise EntryError(f"it was made for {why}: {field} is {found.get(field)!r}, now {value!r}")
    if set(found) != set(expected):
        raise EntryError("its key has other fields")
