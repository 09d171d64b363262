"""CalibrationCache: what precision 'auto' chose for the GPU partitions of one partition() call
(per partition its Promotion and its summary()['calibration'] entry), so that a later start of
the same model with the same options on the same GPU builds the calibrated plans without
calibrating (selfie_segmentation: 1.3 s of a 1.5 s start on llvmpipe). It is used wherever
options.calibration_cache_dir is set (by default the user's cache directory: see
default_calibration_cache_dir), serialization_dir or not: a serialization entry holds the whole
plans, promotions included, but only where the user gave a serialization_dir.

An entry is a JSON header in the entry format (entry.py: the HMAC under this user's key, written
atomically in a directory of this user's alone), named by the hash of everything the choice
depends on, which it also holds and which must equal the present one to be used: the model's
sha256, the subgraph, the graph as the delegate is given it (input shapes, nodes) and the nodes
of each partition, every compile option (calibration_inputs by their bytes, auto_tolerance, the
precision), the GPU (renderer, vendor, GL version and API), the package's version and the
fingerprint of its sources, and calibrate.py's settings. Another model, other options, another
GPU or driver, or other code is another name, so it calibrates (and stores) anew, never loads a
stale choice. A file that is there but cannot be used (corrupt, forged, another owner) is a
CacheWarning and a recalibration that rewrites it.
"""
import hashlib
import json
import math
import os

from ..storage import Promotion
from .cache import _entry_key, _warn, _warn_once, safe_directory
from .entry import SUFFIX, EntryError, pack_entry, read_entry, unpack_entry, write_atomic
from .codec import Blobs
from .key import code_fingerprint, graph_signature, options_fingerprint

MAX_ENTRY_BYTES = 16 << 20  # a few KB per partition; anything larger is not ours
ENV = "GLES_DELEGATE_CALIBRATION_CACHE"  # a directory; empty: no calibration cache


def default_calibration_cache_dir():
    """$GLES_DELEGATE_CALIBRATION_CACHE (empty: None, no cache), else
    $XDG_CACHE_HOME/gles_delegate/calibration, else ~/.cache/gles_delegate/calibration."""
    if ENV in os.environ:
        return os.environ[ENV] or None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "gles_delegate", "calibration")


class CalibrationCache:
    """The calibration cache for one partition() call in precision 'auto' (inert without
    options.calibration_cache_dir, or for a graph that does not come from a model file).

        cache = CalibrationCache(options, context, graph, specs, package, settings)
        stored = cache.load()          # [(Promotion, calibration dict)] per partition, or None
        cache.store(choices)           # the same, after calibrating
    """

    def __init__(self, options, context, graph, specs, package, settings):
        self.directory = options.calibration_cache_dir
        self.count = len(specs)
        self.enabled = bool(self.directory) and graph.source_model is not None and \
            safe_directory(self.directory, "calibration_cache_dir")
        if self.enabled:
            self.entry_key = _entry_key()
            self.enabled = self.entry_key is not None
        if not self.enabled:
            return
        nodes = [n for spec in specs for n in spec.nodes]
        self.key = {"model_digest": graph.model_digest, "subgraph": graph.subgraph_index,
                    "graph": graph_signature(graph, nodes), "partitions": [[n.index for n in s.nodes] for s in specs],
                    "options": options_fingerprint(options), "gl_api": context.gl_api,
                    "renderer": context.renderer, "gl_version": context.version, "vendor": context.vendor,
                    "package_version": package.version, "code": code_fingerprint(package.root),
                    "settings": settings}
        name = json.dumps(self.key, sort_keys=True, separators=(",", ":"), allow_nan=False)
        self.path = os.path.join(self.directory, hashlib.sha256(name.encode()).hexdigest()[:40] + SUFFIX)

    def load(self):
        """[(Promotion, calibration dict)] per partition from the entry, or None (a miss, or a
        warning)."""
        if not self.enabled or not os.path.isdir(self.directory):  # none yet (or no directory: store() says so)
            return None
        try:
            data = read_entry(self.path, MAX_ENTRY_BYTES)
            if data is None:
                return None
            header, _ = unpack_entry(data, self.entry_key)
            if header.get("key") != self.key:  # the same name for another key: a hash collision, or forged
                raise EntryError("it was made for another model, options, GPU or code")
            return self._decode(header.get("partitions"))
        except EntryError as exc:
            _warn(f"ignoring calibration cache entry {self.path}: {exc}; calibrating again")
            return None

    def _decode(self, parts):
        """The stored choices, each value checked for its type (EntryError otherwise)."""
        if not isinstance(parts, list) or len(parts) != self.count:
            raise EntryError("its partitions are not those of this graph")
        return [(Promotion(_reasons(part, "tensors"), _reasons(part, "nodes")), _calibration(part)) for part in parts]

    def store(self, choices):
        """Write the entry of [(Promotion, calibration dict)] per partition (warns instead of
        raising)."""
        if not self.enabled or not all(_finite(c) for _, c in choices):
            return  # an infinite error (an output non-finite in half storage) JSON cannot hold: calibrate again
        parts = [{"tensors": sorted(p.tensors.items()), "nodes": sorted(p.nodes.items()), "calibration": c}
                 for p, c in choices]
        try:
            pieces, _ = pack_entry({"key": self.key, "partitions": parts}, Blobs(), self.entry_key)
            write_atomic(self.directory, self.path, pieces)
        except (OSError, ValueError) as exc:
            _warn_once(self.directory, f"cannot write to calibration_cache_dir {self.directory!r} "
                                       f"({getattr(exc, 'strerror', None) or exc}); calibrating at every start (pass "
                                       "a directory this process can write, or calibration_cache_dir=None)")


def _finite(calibration):
    """Whether every number of a calibration summary is finite."""
    return all(not isinstance(v, float) or math.isfinite(v) for v in calibration.values())


def _reasons(part, field):
    """{int: str} from a stored list of [index, why] pairs."""
    pairs = part.get(field) if isinstance(part, dict) else None
    if not isinstance(pairs, list) or not all(
            isinstance(p, list) and len(p) == 2 and type(p[0]) is int and p[0] >= 0 and isinstance(p[1], str)
            for p in pairs):
        raise EntryError(f"its {field} are not [index, reason] pairs")
    return dict(pairs)


def _calibration(part):
    """The stored summary()['calibration'] entry: names to numbers, booleans or None."""
    value = part.get("calibration")
    if not isinstance(value, dict) or not all(
            isinstance(k, str) and (v is None or isinstance(v, (int, float))) for k, v in value.items()):
        raise EntryError("its calibration summary is not a dict of numbers")
    return value
