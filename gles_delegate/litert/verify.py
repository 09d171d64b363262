"""Whether the model the delegate read is the one LiteRT loaded.

LiteRT reads model_path itself; the delegate reads the file again a moment later (source.py), so
a file replaced in between would have the GPU run the new file's weights and structure inside
the old model. check_subgraph compares, for one subgraph, what LiteRT's TfLiteContext holds
with what the delegate read: the tensor count (LiteRT may hold more: its kernels' temporaries),
each tensor's type and declared shape, which
tensors are constants and their bytes (LiteRT's in-memory copy, read through each tensor's data
pointer). A difference is a RuntimeError that Prepare reports, so LiteRT's Interpreter fails to
build. The operators' inputs, outputs and op codes are matched before (plan.match_subgraph: a
subgraph that matches none of the file's stays on LiteRT's CPU kernels, with a warning);
builtin options with identical weights and structure are not compared (their C structs differ
per op).
"""
import ctypes

import numpy as np

from ..raw_memory import array_at
from . import abi

_TENSOR_FIELDS = np.dtype({"names": ["type", "data", "allocation_type", "bytes"],
                           "formats": [np.int32, np.uintp, np.int32, np.uintp],
                           "offsets": [abi.TfLiteTensor.type.offset, abi.TfLiteTensor.data.offset,
                                       abi.TfLiteTensor.allocation_type.offset, abi.TfLiteTensor.bytes.offset],
                           "itemsize": abi.TENSOR_SIZE})


def check_subgraph(ctx, model, index):
    """A RuntimeError naming the first tensor of subgraph `index` of `model` (what the delegate
    read) that differs from LiteRT's (ctx: its TfLiteContext, at the delegate's first Prepare
    of it, before any resize)."""
    sg = model.subgraphs[index]
    # More is LiteRT's own: a kernel's Init may add temporaries after the file's tensors
    # (ADD_N's scratch tensor: 5 held for a file of 4), which the file's operators never name.
    if ctx.tensors_size < len(sg.tensors):
        _differ(index, f"LiteRT holds {ctx.tensors_size} tensors, the file now has {len(sg.tensors)}")
    fields = _tensor_fields(ctx)
    for i, tensor in enumerate(sg.tensors):
        _check_tensor(ctx, model, index, i, tensor, fields[i])


def _tensor_fields(ctx):
    """ctx.tensors' type, data, allocation_type and bytes fields as one numpy record array (a
    ctypes read per field and tensor cost 0.5 s for 100,000 tensors)."""
    if not ctx.tensors_size:
        return np.zeros(0, _TENSOR_FIELDS)
    address = ctypes.addressof(ctx.tensors.contents)
    return array_at(address, (ctx.tensors_size,), _TENSOR_FIELDS)


def _check_tensor(ctx, model, index, i, tensor, held):
    """Compare tensor `i` (our TensorDef) with LiteRT's (`held`: its _TENSOR_FIELDS record)."""
    what = f"tensor {i} ({tensor.name!r})"
    if int(held["type"]) != abi.TFLITE_TYPES.get(tensor.type_name):
        _differ(index, f"{what} has type code {int(held['type'])} in LiteRT, {tensor.type_name} in the file")
    dims = tuple(abi.int_array(ctx.tensors[i].dims))
    if dims != tuple(tensor.shape):
        _differ(index, f"{what} has shape {list(dims)} in LiteRT, {list(tensor.shape)} in the file")
    if 0 in dims:
        # No bytes either way, and LiteRT's view depends on the file's bytes, not on what they
        # hold: an empty data vector (litert-torch writes them for a RESHAPE to a scalar) is a
        # read-only tensor there, a missing one not, where the reader sees one empty buffer.
        return
    raw = model.buffers[tensor.buffer] if 0 < tensor.buffer < len(model.buffers) else None
    constant = raw is not None and raw.size > 0
    if constant != (int(held["allocation_type"]) == abi.MMAP_RO):
        _differ(index, f"{what} is {'a constant' if constant else 'no constant'} in the file, "
                       f"{'not ' if constant else ''}in LiteRT")
    # Types numpy cannot hold (INT4, which LiteRT may unpack, STRING) never reach the GPU.
    if constant and tensor.dtype is not None and not _same_bytes(raw, int(held["data"]), int(held["bytes"])):
        _differ(index, f"{what}: the constant's {raw.size:,} bytes in the file differ from the "
                       f"{int(held['bytes']):,} LiteRT holds")


def _same_bytes(raw, address, nbytes):
    """Whether LiteRT's `nbytes` at `address` equal the uint8 array `raw`."""
    if nbytes != raw.size or not address:
        return False
    return np.array_equal(array_at(address, (nbytes,), np.uint8), raw)


def _differ(index, what):
    raise RuntimeError(f"subgraph {index}: the model LiteRT loaded is not the one the GpuDelegate read ({what}): "
                       "was model_path replaced while the Interpreter was built? Build the Interpreter again "
                       "(or pass model_content, which both read from the same bytes)")
