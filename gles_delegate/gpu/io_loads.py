"""Partition inputs read straight from the I/O buffer by their one reader (common.glsl IN_IO):
the convert_in dispatch, which copies an input from the I/O buffer (BHWC float32) into its PHWC4
storage, goes, and with it a dispatch and a barrier per invoke; the reader does the conversion
as it loads. The mirror of compiler.fuse_output_stores.

Only where the I/O goes through device memory (MIN_IO_BYTES): a small partition's kernels read
the mapped host buffer itself, over PCIe, and a convolution reads each input element several
times where convert_in reads it once. Either way the result is the same: the reader's load
rounds each value as the tensor's storage would have (as_stored)."""
import numpy as np

from .kernels.base import ArenaRef

ENABLED = True  # False: every input keeps its convert_in (gles-profile --set gpu.io_loads.ENABLED=0)
# Partitions with more I/O bytes than this load their inputs so: runtime.DIRECT_IO_MAX_BYTES's
# default, the most that its kernels read from host memory (the compiler imports nothing of GL).
MIN_IO_BYTES = 64 * 1024
# Templates that read every arena tensor through common.glsl's load(), where IN_IO takes over.
READERS = frozenset({"conv2d", "depthwise_conv2d", "elementwise", "pool"})


def load_inputs_from_io(dispatches, converts, io_bytes, outputs, shared, lanes):
    """`dispatches` without the convert_in dispatches (of `converts`, dispatches' first ones)
    whose tensor one dispatch of READERS alone reads, that dispatch loading it from the I/O
    buffer instead; and {tensor index: (I/O element offset, element steps of (w, h, c, b), shape)}
    of the tensors so read (Plan.io_loads: a capture takes them from the inputs, runtime.strided_value).
    outputs: the partition's outputs, whose convert_out, made after this, would read the storage
    (a permuted input the CPU reads too); shared: ids of tensors whose storage another tensor
    shares (an alias or view reads it under another name); lanes: KernelEnv.lanes. At most one
    such input per reader."""
    if not ENABLED or io_bytes <= MIN_IO_BYTES:
        return dispatches, {}
    readers = {}
    for d in dispatches[converts:]:
        for key in {id(t) for t in d.reads}:
            readers.setdefault(key, []).append(d)
    dropped, loads, kept = set(), {}, shared | {id(t) for t in outputs}
    for convert in dispatches[:converts]:
        tensor = convert.writes[0]
        mine = readers.get(id(tensor), ())
        if len(mine) != 1 or id(tensor) in kept or id(tensor) in lanes or tensor.dtype != np.float32:
            continue
        reader = mine[0]
        if reader.template not in READERS or reader.node is None or "IN_IO" in reader.defines:
            continue
        params = convert.params
        reader.defines["IN_IO"] = 1
        reader.params.update({"in_io_tensor": ArenaRef(tensor), "in_io_size": params["size"],
                              "in_io_channels": params["channels"], "in_io_offset": params["io_offset"],
                              "in_io_strides": params["io_strides"]})
        # Its storage is never written: an output in place of it would only confuse the load.
        reader.inplace = tuple(t for t in reader.inplace if t is not tensor)
        dropped.add(id(convert))
        loads[tensor.index] = (params["io_offset"], tuple(params["io_strides"]), tuple(tensor.shape))
    return [d for d in dispatches if id(d) not in dropped], loads

