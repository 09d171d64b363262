"""The serialization cache: compiled partitions (plans) and program binaries on disk, so that a
later start of the same model skips graph rewriting, kernel building, memory planning, weight
packing and shader compilation.

GpuDelegate.partition asks a PlanCache (made per call) to load an entry; on a miss it builds the
partitions as usual and stores them. Nothing is pickled and nothing read is executed: JSON, then
type and bounds checks of every value (as tflite/reader.py does for models), then checks of the
plan against the graph.

    key.py       what selects an entry (its file name) and what it depends on (its key)
    codec.py     plain data and dataclasses <-> JSON + raw blobs
    entry.py     the file format (prefix, MAC, 64-aligned blobs) and safe reads and writes
    secret.py    this user's key, which the MAC of every entry is made with
    validate.py  checks of a decoded entry against itself and the graph
    cache.py     PlanCache, tying them together for one partition() call

It imports nothing above gpu/: what it needs from there (the package's version and directory,
the rewrite log's record type, a partition's float view) comes in a Package the delegate makes.
"""
from .cache import CacheWarning, Package, PlanCache, safe_directory
from .entry import EntryError

__all__ = ["CacheWarning", "EntryError", "Package", "PlanCache", "safe_directory"]
