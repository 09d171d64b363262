"""A generic codec of plain data: values become JSON plus raw byte blobs, and back.

Dataclasses are encoded field by field, so fields the compiler adds to a Plan are carried
without a change here. Only dataclasses of the modules the caller names are encoded or decoded
(`modules`: {module name: module}); nothing read is executed, and every value the decoder reads
is type- and bounds-checked.
"""
import dataclasses
import functools
import math

import numpy as np

from .entry import EntryError

MAX_DEPTH = 32  # nesting of decoded values
# Strings of at least this many characters (GLSL sources: 1.2 MB of pose_landmark_full's 1.2 MB
# header) are stored as UTF-8 blobs: JSON would escape every newline, and parsing them back was
# most of a warm start's header time.
TEXT_BLOB_CHARS = 1024
NUMPY_DTYPES = frozenset({"bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
                          "uint64", "float16", "float32", "float64"})


class Blobs:
    """The raw byte blobs of an entry being written."""

    def __init__(self):
        self.items = []
        self._texts = {}  # str -> its blob: a source shared by two partitions is stored once

    def add(self, data):
        self.items.append(memoryview(data).cast("B"))
        return len(self.items) - 1

    def text(self, value):
        """The blob index of `value` (a str) as UTF-8."""
        if value not in self._texts:
            self._texts[value] = self.add(value.encode())
        return self._texts[value]


class Encoder:
    """encoder(value): a JSON-able form of `value`, its raw bytes added to `blobs` (a Blobs).
    Supported: None, bool, int, float (NaN / inf too), str (a long one as a blob), bytes,
    bytearray, list, tuple, dict, set, frozenset, numpy arrays (NUMPY_DTYPES, any shape) and
    scalars, and instances of dataclasses defined in `modules`, nested freely. Anything else
    raises TypeError (the entry is then not stored)."""

    def __init__(self, blobs, modules):
        self.blobs, self.modules = blobs, modules

    def __call__(self, value):
        if isinstance(value, str) and len(value) >= TEXT_BLOB_CHARS:
            return {"text": self.blobs.text(value)}
        if value is None or isinstance(value, (bool, str, int)):
            return value
        if isinstance(value, float):
            return value if math.isfinite(value) else {"float": repr(value)}
        if isinstance(value, list):
            return [self(v) for v in value]
        if isinstance(value, tuple) and not hasattr(value, "_fields"):
            return {"tuple": [self(v) for v in value]}
        if isinstance(value, (set, frozenset)):
            return {type(value).__name__: [self(v) for v in value]}
        if isinstance(value, dict):
            return {"dict": [[self(k), self(v)] for k, v in value.items()]}
        if isinstance(value, (bytes, bytearray)):
            return {type(value).__name__: self.blobs.add(value)}
        if isinstance(value, np.ndarray):
            if value.dtype.name not in NUMPY_DTYPES:
                raise TypeError(f"numpy arrays of {value.dtype} are not serialized")
            data = np.ascontiguousarray(value)
            return {"ndarray": self.blobs.add(data.reshape(-1).view(np.uint8)), "dtype": value.dtype.name,
                    "shape": list(value.shape)}
        if isinstance(value, np.generic) and value.dtype.name in NUMPY_DTYPES:
            return {"scalar": value.dtype.name, "value": self(value.item())}
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return self.dataclass(value)
        raise TypeError(f"values of type {type(value).__name__} are not serialized")

    def dataclass(self, value):
        cls = type(value)
        if cls.__module__ not in self.modules:
            raise TypeError(f"dataclass {cls.__module__}.{cls.__qualname__} is not of a serialized module")
        return {"dataclass": f"{cls.__module__}:{cls.__qualname__}",
                "fields": {f.name: self(getattr(value, f.name)) for f in dataclasses.fields(value)}}


_SCALARS = frozenset({int, float, str, bool, type(None)})
# The keys of a tagged value: its tag alone, but for these.
_TAG_KEYS = {"ndarray": frozenset({"ndarray", "dtype", "shape"}), "scalar": frozenset({"scalar", "value"}),
             "dataclass": frozenset({"dataclass", "fields"})}
_COLLECTIONS = {"tuple": tuple, "set": set, "frozenset": frozenset}


class Decoder:
    """The inverse of Encoder, checking every value: unknown tags, wrong JSON types, blob
    references out of range, array sizes that do not match their blob, unknown classes or fields
    raise EntryError."""

    def __init__(self, blobs, modules):
        self.blobs = blobs  # list of memoryviews into the entry
        self.modules = modules  # {name: module} whose dataclasses may be decoded

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
        keys = _TAG_KEYS.get(tag)
        if (len(value) != 1) if keys is None else (value.keys() != keys):
            raise EntryError(f"malformed {tag!r} value")
        collection = _COLLECTIONS.get(tag)
        if collection is not None:  # the most frequent tag: a plan's steps, shapes, workgroups
            items = [v if type(v) in _SCALARS else self(v, depth + 2) for v in self.list(body)]
            try:
                return collection(items)
            except TypeError:
                raise EntryError(f"unhashable item in a {tag}") from None
        if tag == "float":
            if body not in ("nan", "inf", "-inf"):
                raise EntryError("malformed float")
            return float(body)
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
        if tag == "text":
            try:
                return bytes(self.blob(body)).decode("utf-8")
            except UnicodeDecodeError:
                raise EntryError("a text blob is not UTF-8") from None
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
        module = self.modules.get(module_name)
        if module is None:
            raise EntryError(f"dataclass module {module_name!r} not allowed")
        cls = getattr(module, qualname, None) if qualname.isidentifier() else None
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__module__ == module_name):
            raise EntryError(f"{name} is not a dataclass")
        names, init_names, other_names = _field_names(cls)
        if fields.keys() != names:
            raise EntryError(f"{qualname} fields changed: entry has {sorted(fields)}, "
                             f"the code has {sorted(names)}")
        values = {name: value if type(value) in _SCALARS else self(value, depth + 1)
                  for name, value in fields.items()}
        try:
            obj = cls(**{name: values[name] for name in init_names})
        except Exception as exc:  # the dataclass's own __post_init__ checks
            raise EntryError(f"{qualname}: {exc}") from None
        for name in other_names:
            object.__setattr__(obj, name, values[name])
        return obj


@functools.lru_cache(maxsize=None)
def _field_names(cls):
    """(every field name, those __init__ takes, the others) of a dataclass: asked once a class,
    not once a decoded object."""
    known = dataclasses.fields(cls)
    return (frozenset(f.name for f in known), tuple(f.name for f in known if f.init),
            tuple(f.name for f in known if not f.init))
