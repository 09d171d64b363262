"""Assemble a compute shader from a template in kernels_glsl/: #version, precision, the
kernel's #defines, its Params uniform block (std140) and common.glsl (and epilogue.glsl, after
the named constants epilogue.py defines for it, for a kernel that applies epilogue steps), then
the template body. GLSL ES has no #include: a template
line `#include "name.glsl"` is replaced here by that template's text (pieces two kernels share)."""
import functools
import importlib.resources
import re
import struct
from pathlib import Path

import numpy as np

from .kernels import epilogue

SOURCE_TREE = Path(__file__).resolve().parents[2] / "kernels_glsl"
PARAMS_BINDING = 0
# A template compiled in highp in every mode (assemble) says so itself, in a line of its own
# text (not of an include) beginning "// @highp", followed by why: sums that would overflow half
# math, complex_part's tests of infinities and NaN on the bits, which fp16 registers would not hold.
_HIGHP_MARKER = re.compile(r"^// @highp\b", re.MULTILINE)
_INCLUDE = re.compile(r'^#include "(\w+)\.glsl"[ \t]*$', re.MULTILINE)
_BAKED = re.compile(r"const highp (int|float|i?vec[234]) (\w+) = (.+);$")
_INT_LITERAL = re.compile(r"\(-2147483647-1\)|-?\d+")
_FLOAT_BITS = re.compile(r"uintBitsToFloat\((\d+)u\)")


@functools.lru_cache(maxsize=None)
def full_precision(name):
    """Whether template `name` computes in highp in every precision: its own text (includes not
    expanded) has a line beginning "// @highp"."""
    return bool(_HIGHP_MARKER.search(_template_text(name)))


def _template_text(name):
    """kernels_glsl/<name>.glsl as written: from the source tree, else the installed package."""
    path = SOURCE_TREE / f"{name}.glsl"
    if path.exists():
        return path.read_text()
    return importlib.resources.files("gles_delegate.kernels_glsl").joinpath(f"{name}.glsl").read_text()


@functools.lru_cache(maxsize=None)
def template(name):
    """The text of kernels_glsl/<name>.glsl (from the source tree, else the installed package),
    each `#include "other.glsl"` line replaced by template("other")."""
    return _INCLUDE.sub(lambda match: template(match.group(1)).rstrip("\n"), _template_text(name))


_PLAIN_TYPES = {int: "int", bool: "int", float: "float"}
_INT_VECTORS = {(int,) * n: f"ivec{n}" for n in (2, 3, 4)}


def glsl_type(value):
    """The GLSL type of a param value: int, float, or an ivecN / vecN for tuples."""
    kind = _PLAIN_TYPES.get(type(value))  # most values: asked for every param of every dispatch
    if kind is not None:
        return kind
    if type(value) is tuple:
        kind = _INT_VECTORS.get(tuple(map(type, value)))
        if kind is not None:
            return kind
    if isinstance(value, (bool, int, np.integer)):
        return "int"
    if isinstance(value, (float, np.floating)):
        return "float"
    items = tuple(value)
    if not 2 <= len(items) <= 4:
        raise ValueError(f"param of {len(items)} components has no GLSL vector type")
    prefix = "i" if all(isinstance(v, (bool, int, np.integer)) for v in items) else ""
    return f"{prefix}vec{len(items)}"


def params_block(params):
    """The Params uniform block declaration for {name: value}, in a fixed (sorted) order."""
    return _block(param_types(params))


def param_types(params):
    """((name, GLSL type), ...) of {name: value}, sorted by name: the Params block's layout,
    which pack_params and assemble take once made (the compiler asks both per dispatch)."""
    # Plain sorted(): names are unique, so the pairs compare by name alone.
    return tuple([(name, glsl_type(v)) for name, v in sorted(params.items())])


def _block(param_types):
    """params_block() of sorted (name, GLSL type) pairs."""
    # highp: in fp16 mode the default float precision is mediump, which would round scales and
    # coordinates on GPUs that honour it.
    fields = "".join(f"  highp {kind} {name};\n" for name, kind in param_types)
    return f"layout(std140, binding = {PARAMS_BINDING}) uniform Params {{\n{fields}}};\n" if fields else ""


def pack_params(params, types=None):
    """std140 bytes of the Params block for {name: value} (same order as params_block); types:
    param_types(params) where the caller has it."""
    types = param_types(params) if types is None else types
    items = []
    for name, kind in types:
        if kind in ("int", "float"):
            items.append(params[name])
        else:
            items.extend(params[name])
    return _std140(tuple([kind for _, kind in types])).pack(*items)


@functools.lru_cache(maxsize=1024)
def _std140(kinds):
    """The struct.Struct that packs values of GLSL types `kinds` (in order) as a std140 block:
    each aligned to 4, 8 or 16 bytes, the whole to 16 (one Struct per block layout: packing
    field by field was a tenth of compiling 100,000 dispatches)."""
    fmt, size = "<", 0
    for kind in kinds:
        count = 1 if kind in ("int", "float") else int(kind[-1])
        pad = -size % (4 if count == 1 else (8 if count == 2 else 16))
        fmt += f"{pad}x{count}{'i' if kind.startswith(('int', 'ivec')) else 'f'}"
        size += pad + 4 * count
    return struct.Struct(fmt + f"{-size % 16}x")


def assemble(template_name, defines, params, storage_half, math_half, cache=None, types=None, baked=False):
    """Full GLSL ES 3.10 source of one kernel variant.

    defines: {NAME: value} compile-time constants (must include WG_X, WG_Y, WG_Z).
    params: {name: value} per-dispatch values, declared as the Params uniform block.
    storage_half: tensors and weights stored as halves; math_half: mediump float math.
    types: param_types(params) where the caller has it.
    cache: a dict kept by the caller (one partition's compile) of the sources made so far: the
    source depends on the params' names and types only, so most dispatches share one, then one
    string object, whose hash the compiler's dedupe computes once (assembling and hashing 20 KB
    per dispatch was a third of compiling 100,000 dispatches).
    """
    types = param_types(params) if types is None else types
    if baked:
        types = tuple((name, kind, _literal(kind, params[name])) for name, kind in types)
    key = (template_name, tuple(sorted(defines.items())), types, bool(storage_half), bool(math_half), bool(baked))
    if cache is None:
        return _assemble(*key)
    source = cache.get(key)
    if source is None:
        source = cache[key] = _assemble(*key)
    return source


def _assemble(template_name, defines, param_types, storage_half, math_half, baked):
    """assemble() of sorted (name, value) `defines` and (name, GLSL type) `param_types`, or with
    `baked` (name, GLSL type, literal) triples declared as constants."""
    # A template with an @highp line (reductions: a half-float sum overflows at 65504) computes in
    # highp in every mode: NVIDIA's GLES compiler runs mediump as fp16, shared-memory folds included.
    precision = "mediump" if math_half and not full_precision(template_name) else "highp"
    lines = ["#version 310 es", f"precision {precision} float;", "precision highp int;",
             f"#define STORAGE_HALF {int(storage_half)}"]
    defines = {"ACTIVATION": 0, "CLAMP_FINITE": 0, "OUT_IO": 0, **dict(defines)}  # common.glsl tests them; GLSL ES has no implicit 0
    lines += [f"#define {name} {_define_value(value)}" for name, value in sorted(defines.items())]
    # A kernel that applies an epilogue (gpu/kernels/epilogue.py) always defines EP_COUNT.
    shared = template("common") + (epilogue.glsl_defines() + template("epilogue") if "EP_COUNT" in defines else "")
    block = _constants(param_types) if baked else _block(param_types)
    return "\n".join(lines) + "\n" + block + shared + template(template_name)


def _constants(baked_types):
    """The params as compile-time constants: (name, GLSL type, literal) triples."""
    return "".join(f"const highp {kind} {name} = {literal};\n" for name, kind, literal in baked_types)


def baked_params(source):
    """{name: (GLSL type, values)} of the params a source declares as constants (assemble's
    `baked`), each value a tuple of Python ints or floats; {} for a source with a Params block.
    Only the header is read: the constants follow the #defines, before common.glsl."""
    found, position = {}, source.find("\nconst highp ") + 1
    while position and source.startswith("const highp ", position):
        end = source.index("\n", position)
        kind, name, literal = _BAKED.match(source, position, end).groups()
        position = end + 1
        if kind.startswith(("int", "ivec")):
            inner = literal[len(kind) + 1:-1] if kind.startswith("ivec") else literal
            values = tuple(-2**31 if v.startswith("(") else int(v) for v in _INT_LITERAL.findall(inner))
        else:
            values = tuple(np.array(_FLOAT_BITS.findall(literal), np.uint64).astype(np.uint32).view(np.float32).tolist())
        found[name] = (kind, values)
    return found


def _literal(kind, value):
    """A GLSL constant expression of `value` (a param of GLSL type `kind`), exact: floats by their
    float32 bits (a decimal literal would be rounded by the driver's parser)."""
    items = [value] if kind in ("int", "float") else list(value)
    if kind.startswith(("int", "ivec")):
        parts = [str(int(v)) if int(v) != -2**31 else "(-2147483647-1)" for v in items]
    else:
        parts = [f"uintBitsToFloat({int(np.float32(v).view(np.uint32))}u)" for v in items]
    return parts[0] if kind in ("int", "float") else f"{kind}({', '.join(parts)})"


def _define_value(value):
    if isinstance(value, (bool, np.bool_)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return repr(float(value)) if np.isfinite(value) else ("1e38" if value > 0 else "-1e38")
    return str(value)
