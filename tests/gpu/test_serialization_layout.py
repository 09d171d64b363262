"""gpu/serialization/ imports nothing above gpu/: what it needs from there (the package's
version, the rewrite log's record type, a partition's float view) is handed in by the delegate.
The one exception is a leaf of the package (LEAVES), a module that itself imports only the
standard library."""
import ast
import sys
from pathlib import Path

import gles_delegate.gpu.serialization as serialization

PACKAGE = "gles_delegate.gpu.serialization"
GPU = "gles_delegate.gpu"                 # it and its submodules may be imported
THIRD_PARTY = frozenset({"numpy"})
DYNAMIC = frozenset({"importlib"})        # loading modules by name would hide an import
LEAVES = frozenset({"gles_delegate.private_read.read_private"})  # shared with the .tflite reader


def imported_modules(source, package):
    """The absolute names of what `source` (a module of `package`) imports, relative imports
    resolved; `from a import b` gives a.b (b may be a module)."""
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")
            parts = parts[:len(parts) - node.level + 1] if node.level else []  # level 1: the package
            base = ".".join(parts + ([node.module] if node.module else []))
            names += [f"{base}.{alias.name}" for alias in node.names]
    return names


def violations(source, package=PACKAGE):
    """The imports of `source` that reach outside gles_delegate.gpu (stdlib and numpy are fine)."""
    out = []
    for name in imported_modules(source, package):
        top = name.split(".")[0]
        if name == GPU or name.startswith(GPU + ".") or name in LEAVES:
            continue
        if top in DYNAMIC or not (top in sys.stdlib_module_names or top in THIRD_PARTY):
            out.append(name)
    return out


def test_serialization_imports_nothing_above_gpu():
    files = sorted(Path(serialization.__file__).parent.glob("*.py"))
    assert {f.stem for f in files} >= {"__init__", "key", "codec", "entry", "validate", "cache"}
    found = {}
    for path in files:
        bad = violations(path.read_text())
        if bad:
            found[path.name] = bad
    assert found == {}


def test_the_leaves_import_only_the_standard_library():
    for name in LEAVES:
        module = sys.modules[name.rsplit(".", 1)[0]]
        imported = imported_modules(Path(module.__file__).read_text(), module.__package__)
        assert imported and all(n.split(".")[0] in sys.stdlib_module_names for n in imported), imported


def test_the_check_catches_imports_above_gpu():
    assert violations("from ... import quant\nfrom ...transforms import Record") == \
        ["gles_delegate.quant", "gles_delegate.transforms.Record"]
    assert violations("import importlib\nfrom gles_delegate import partition\nimport gles_delegate.gpu_x") == \
        ["importlib", "gles_delegate.partition", "gles_delegate.gpu_x"]
    assert violations("from ...private_read import read_private, private_memory") == ["gles_delegate.private_read.private_memory"]
    assert violations("import json\nimport numpy as np\nfrom .. import compiler\nfrom .entry import X") == []
