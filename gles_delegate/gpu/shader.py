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
# Templates compiled in highp in every mode (assemble): sums, and complex_part, whose |z| scales by
# exponents and tests infinities and NaN on the bits, which fp16 registers would not hold.
FULL_PRECISION_TEMPLATES = frozenset({"complex_part", "fft", "reduce", "se_gate", "softmax"})
_INCLUDE = re.compile(r'^#include "(\w+)\.glsl"[ \t]*$', re.MULTILINE)


@functools.lru_cache(maxsize=None)
def template(name):
    """The text of kernels_glsl/<name>.glsl (from the source tree, else the installed package),
    each `#include "other.glsl"` line replaced by template("other")."""
    path = SOURCE_TREE / f"{name}.glsl"
    if path.exists():
        text = path.read_text()
    else:
        text = importlib.resources.files("gles_delegate.kernels_glsl").joinpath(f"{name}.glsl").read_text()
    return _INCLUDE.sub(lambda match: template(match.group(1)).rstrip("\n"), text)


def glsl_type(value):
    """The GLSL type of a param value: int, float, or an ivecN / vecN for tuples."""
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
    # highp: in fp16 mode the default float precision is mediump, which would round scales and
    # coordinates on GPUs that honour it.
    fields = "".join(f"  highp {glsl_type(v)} {name};\n" for name, v in sorted(params.items()))
    return f"layout(std140, binding = {PARAMS_BINDING}) uniform Params {{\n{fields}}};\n" if fields else ""


def pack_params(params):
    """std140 bytes of the Params block for {name: value} (same order as params_block)."""
    out = bytearray()
    for _, value in sorted(params.items()):
        kind = glsl_type(value)
        items = (value,) if kind in ("int", "float") else tuple(value)
        align = 4 if len(items) == 1 else (8 if len(items) == 2 else 16)
        out.extend(b"\0" * (-len(out) % align))
        fmt = "i" if kind.startswith(("int", "ivec")) else "f"
        out.extend(struct.pack(f"<{len(items)}{fmt}", *items))
    out.extend(b"\0" * (-len(out) % 16))
    return bytes(out)


def assemble(template_name, defines, params, storage_half, math_half):
    """Full GLSL ES 3.10 source of one kernel variant.

    defines: {NAME: value} compile-time constants (must include WG_X, WG_Y, WG_Z).
    params: {name: value} per-dispatch values, declared as the Params uniform block.
    storage_half: tensors and weights stored as halves; math_half: mediump float math.
    """
    # Reductions compute in highp in every mode: a half-float sum overflows at 65504, and NVIDIA's
    # GLES compiler runs mediump as fp16, shared-memory folds included (seen on an H200).
    precision = "mediump" if math_half and template_name not in FULL_PRECISION_TEMPLATES else "highp"
    lines = ["#version 310 es", f"precision {precision} float;", "precision highp int;",
             f"#define STORAGE_HALF {int(storage_half)}"]
    defines = {"ACTIVATION": 0, "CLAMP_FINITE": 0, "OUT_IO": 0, **defines}  # common.glsl tests them; GLSL ES has no implicit 0
    lines += [f"#define {name} {_define_value(value)}" for name, value in sorted(defines.items())]
    # A kernel that applies an epilogue (gpu/kernels/epilogue.py) always defines EP_COUNT.
    shared = template("common") + (epilogue.glsl_defines() + template("epilogue") if "EP_COUNT" in defines else "")
    return "\n".join(lines) + "\n" + params_block(params) + shared + template(template_name)


def _define_value(value):
    if isinstance(value, (bool, np.bool_)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return repr(float(value)) if np.isfinite(value) else ("1e38" if value > 0 else "-1e38")
    return str(value)
