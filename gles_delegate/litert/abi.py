"""TFLite's C ABI as ctypes structs, and the runtimes whose layout they match.

Every field names its line in tflite/core/c/common.h of LiteRT v2.2.0 (google-ai-edge/LiteRT;
the header is unchanged from v1.4.0 to the commits after 2.3.0, so it is the header of
ai-edge-litert 2.3). TFLite only appends fields to these structs ("semi-ABI stable", the
header's own note). We read fields of TfLiteContext, TfLiteTensor and TfLiteNode that all
supported runtimes have, and we pass one TfLiteRegistration by value: ours is the newest layout,
and a by-value struct larger than the one a runtime expects is harmless (x86-64 and AArch64 pass
it in memory; the callee reads its own prefix), a smaller one is not.
"""
import ctypes
import re
from ctypes import POINTER, Structure, c_bool, c_char_p, c_float, c_int, c_int32, c_int64, c_size_t, c_uint64, c_void_p

import numpy as np

# TfLiteType (tflite/core/c/c_api_types.h, `typedef enum { kTfLiteNoType = 0, ... } TfLiteType`), by
# the schema's TensorType names (tflite/tables.py and the reader's TensorDef.type_name).
TFLITE_TYPES = {"FLOAT32": 1, "INT32": 2, "UINT8": 3, "INT64": 4, "STRING": 5, "BOOL": 6, "INT16": 7,
                "COMPLEX64": 8, "INT8": 9, "FLOAT16": 10, "FLOAT64": 11, "COMPLEX128": 12, "UINT64": 13,
                "RESOURCE": 14, "VARIANT": 15, "UINT32": 16, "UINT16": 17, "INT4": 18, "BFLOAT16": 19}
# TfLiteStatus (tflite/core/c/c_api_types.h:74-82).
OK, ERROR, DELEGATE_ERROR = 0, 1, 2
KERNEL_INIT_FAILED = ctypes.c_void_p(-1).value  # TfLiteKernelInitFailed() (common.cc:867): (void*)-1
# TfLiteAllocationType (common.h:456-466): kTfLiteMmapRo (:458), a constant in the model's bytes;
# kTfLiteArenaRw (:459), placed by LiteRT's arena planner; kTfLiteCustom (:463), memory LiteRT
# neither places nor frees (litert/memory.py lends outputs so).
MMAP_RO, ARENA_RW, CUSTOM = 1, 2, 6

# {runtime package: (lowest version, first unsupported version)} whose layouts we checked or
# whose fields we read have existed since before the lowest version (module docstring).
SUPPORTED = {"ai_edge_litert": ((1, 4), (3, 0)), "tflite_runtime": ((2, 14), (3, 0)),
             "tensorflow": ((2, 14), (3, 0))}


class TfLiteIntArray(Structure):
    """common.h:112: `int size; int data[];` (a flexible array: read with int_array())."""
    _fields_ = [("size", c_int)]  # common.h:113


class TfLiteQuantizationParams(Structure):
    """tflite/converter/core/c/tflite_types.h:79 (legacy per-tensor quantization)."""
    _fields_ = [("scale", c_float), ("zero_point", c_int32)]


class TfLiteQuantization(Structure):
    """common.h:364."""
    _fields_ = [("type", c_int),      # :366 TfLiteQuantizationType (an int enum)
                ("params", c_void_p)]  # :370


class TfLiteTensor(Structure):
    """common.h:565 (not TF_LITE_STATIC_MEMORY)."""
    _fields_ = [("type", c_int),                        # :568 TfLiteType
                ("data", c_void_p),                     # :571 TfLitePtrUnion: only .data is used
                ("dims", POINTER(TfLiteIntArray)),      # :575
                ("params", TfLiteQuantizationParams),   # :577
                ("allocation_type", c_int),             # :583 TfLiteAllocationType
                ("bytes", c_size_t),                    # :588
                ("allocation", c_void_p),               # :591
                ("name", c_char_p),                     # :594
                ("delegate", c_void_p),                 # :599
                ("buffer_handle", c_int),               # :605 TfLiteBufferHandle (int, :501)
                ("data_is_stale", c_bool),              # :613
                ("is_variable", c_bool),                # :616
                ("quantization", TfLiteQuantization),   # :619
                ("sparsity", c_void_p),                 # :625
                ("dims_signature", POINTER(TfLiteIntArray))]  # :635


class TfLiteNode(Structure):
    """common.h:641 (not TF_LITE_STATIC_MEMORY)."""
    _fields_ = [("inputs", POINTER(TfLiteIntArray)),         # :643
                ("outputs", POINTER(TfLiteIntArray)),        # :646
                ("intermediates", POINTER(TfLiteIntArray)),  # :650
                ("temporaries", POINTER(TfLiteIntArray)),    # :655
                ("user_data", c_void_p),                     # :658 what our init returned
                ("builtin_data", c_void_p),                  # :662 TfLiteDelegateParams* for a delegate node
                ("custom_initial_data", c_void_p),           # :667
                ("custom_initial_data_size", c_int),         # :668
                ("delegate", c_void_p),                      # :674
                ("might_have_side_effect", c_bool)]          # :677


class TfLiteDelegateParams(Structure):
    """common.h:869: what init() receives as `buffer` for a delegate kernel."""
    _fields_ = [("delegate", c_void_p),                        # :870
                ("nodes_to_replace", POINTER(TfLiteIntArray)),  # :871
                ("input_tensors", POINTER(TfLiteIntArray)),     # :872
                ("output_tensors", POINTER(TfLiteIntArray))]    # :873


# Kernel callbacks of TfLiteRegistration (common.h:1244-1262).
InitFn = ctypes.CFUNCTYPE(c_void_p, c_void_p, c_void_p, c_size_t)
FreeFn = ctypes.CFUNCTYPE(None, c_void_p, c_void_p)
# prepare and invoke; the node as a plain address: converting a POINTER argument and following it
# costs more than the rest of a warm invoke callback (node_user_data reads the one field we need).
NodeFn = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p)
USER_DATA_OFFSET = TfLiteNode.user_data.offset
TENSOR_SIZE, DATA_OFFSET, BYTES_OFFSET = ctypes.sizeof(TfLiteTensor), TfLiteTensor.data.offset, TfLiteTensor.bytes.offset


def node_user_data(node):
    """TfLiteNode.user_data of the node at address `node`."""
    return c_void_p.from_address(node + USER_DATA_OFFSET).value


class TfLiteRegistration(Structure):
    """common.h:1218, passed by value to ReplaceNodeSubsetsWithDelegateKernels."""
    _fields_ = [("init", InitFn),                      # :1244
                ("free", FreeFn),                      # :1248
                ("prepare", NodeFn),                   # :1256
                ("invoke", NodeFn),                    # :1262
                ("profiling_string", c_void_p),        # :1269 (NULL)
                ("builtin_code", c_int32),             # :1278 kTfLiteBuiltinDelegate for a delegate kernel
                ("custom_name", c_char_p),             # :1286 the name profilers and errors show
                ("version", c_int),                    # :1291
                ("registration_external", c_void_p),   # :1298 (NULL)
                ("async_kernel", c_void_p),            # :1309 (NULL: no async execution)
                ("inplace_operator", c_uint64)]        # :1314 kTfLiteInplaceOpNone


BUILTIN_CODE_OFFSET = TfLiteRegistration.builtin_code.offset


# TfLiteDelegateFlags (common.h:1392): we allow dynamic tensors, so LiteRT neither prepares the
# CPU kernels of the nodes we take (a custom op only XNNPACK resolves would fail there) nor
# undoes the delegate on a resize: it calls our kernels' prepare again, which re-plans and sizes
# the kernel's outputs. Not kTfLiteDelegateFlagsRequirePropagatedShapes (:1422): it prepares the
# original plan's CPU kernels, that custom op's included.
ALLOW_DYNAMIC_TENSORS = 1  # common.h:1403
BUILTIN_DELEGATE = 51  # BuiltinOperator DELEGATE (schema.fbs), the code of delegate kernel nodes

# TfLiteContext's function pointers we call (common.h:953-1077).
GetExecutionPlanFn = ctypes.CFUNCTYPE(c_int, c_void_p, POINTER(POINTER(TfLiteIntArray)))
# ReportError is variadic (`const char* msg, ...`); we always pass "%s" and one string, which
# the x86-64 and AArch64 Linux conventions pass as they pass fixed arguments.
ReportErrorFn = ctypes.CFUNCTYPE(None, c_void_p, c_char_p, c_char_p)
GetNodeAndRegistrationFn = ctypes.CFUNCTYPE(c_int, c_void_p, c_int, POINTER(POINTER(TfLiteNode)),
                                            POINTER(c_void_p))
ReplaceNodeSubsetsFn = ctypes.CFUNCTYPE(c_int, c_void_p, TfLiteRegistration, POINTER(TfLiteIntArray), c_void_p)
# ResizeTensor takes ownership of the new dims, which it frees with TfLiteIntArrayFree: free()
# (common.cc:313, :170), so they must come from malloc (owned_int_array).
ResizeTensorFn = ctypes.CFUNCTYPE(c_int, c_void_p, POINTER(TfLiteTensor), c_void_p)
PreviewPartitioningFn = ctypes.CFUNCTYPE(c_int, c_void_p, POINTER(TfLiteIntArray),
                                         POINTER(POINTER(TfLiteDelegateParams)), POINTER(c_int))


class TfLiteContext(Structure):
    """common.h:905, up to the last field we use (we never allocate one: LiteRT does)."""
    _fields_ = [("tensors_size", c_size_t),                         # :907
                ("GetExecutionPlan", GetExecutionPlanFn),           # :953
                ("tensors", POINTER(TfLiteTensor)),                 # :957
                ("impl_", c_void_p),                                # :960
                ("ResizeTensor", ResizeTensorFn),                   # :964
                ("ReportError", ReportErrorFn),                     # :967
                ("AddTensors", c_void_p),                           # :972
                ("GetNodeAndRegistration", GetNodeAndRegistrationFn),  # :978
                ("ReplaceNodeSubsetsWithDelegateKernels", ReplaceNodeSubsetsFn),  # :984
                ("recommended_num_threads", c_int),                 # :990
                ("GetExternalContext", c_void_p),                   # :995
                ("SetExternalContext", c_void_p),                   # :1001
                ("allow_fp32_relax_to_fp16", c_bool),               # :1008
                ("profiler", c_void_p),                             # :1011
                ("AllocatePersistentBuffer", c_void_p),             # :1020
                ("AllocateBufferForEval", c_void_p),                # :1030
                ("RequestScratchBufferInArena", c_void_p),          # :1039
                ("GetScratchBuffer", c_void_p),                     # :1046
                ("ResizeTensorExplicit", c_void_p),                 # :1053 (NULL in LiteRT's Subgraph)
                ("PreviewDelegatePartitioning", PreviewPartitioningFn)]  # :1077


TENSORS_OFFSET = TfLiteContext.tensors.offset


# TfLiteDelegate's callbacks (common.h:1454-1477).
PrepareFn = ctypes.CFUNCTYPE(c_int, POINTER(TfLiteContext), c_void_p)


class TfLiteDelegate(Structure):
    """common.h:1441."""
    _fields_ = [("data_", c_void_p),                  # :1446
                ("Prepare", PrepareFn),               # :1454
                ("CopyFromBufferHandle", c_void_p),   # :1461 NULL: no buffer handles of ours
                ("CopyToBufferHandle", c_void_p),     # :1468 NULL
                ("FreeBufferHandle", c_void_p),       # :1477 NULL
                ("flags", c_int64),                   # :1482 TfLiteDelegateFlags
                ("opaque_delegate_builder", c_void_p)]  # :1492 NULL, so LiteRT calls Prepare


def int_array(pointer):
    """The ints of a TfLiteIntArray* (a list; [] for NULL)."""
    if not pointer:
        return []
    contents = pointer.contents
    # Cast from the address: ctypes.cast of a pointer object gives the two one dict that holds
    # the pointer, a reference cycle (pointer -> dict -> pointer) per call.
    return ctypes.cast(ctypes.addressof(contents), POINTER(c_int))[1:1 + contents.size]


def make_int_array(values):
    """(a TfLiteIntArray* holding `values`, the numpy array whose memory it is: keep that alive
    while the pointer is used). No ctypes type is made per call: ctypes keeps every pointer type
    it makes forever, and a Structure defined per call grew the process by 5.6 KB per LiteRT
    interpreter built with the delegate."""
    values = list(values)
    memory = np.array([len(values), *values], np.intc)
    return ctypes.cast(memory.ctypes.data, POINTER(TfLiteIntArray)), memory


_libc = ctypes.CDLL(None)
_libc.malloc.restype, _libc.malloc.argtypes = c_void_p, [c_size_t]


def owned_int_array(values):
    """A malloc'd TfLiteIntArray holding `values` (its address), for a callee that frees it."""
    values = list(values)
    ints = np.array([len(values), *values], np.intc)  # not a `c_int * n`: see raw_memory.py
    address = _libc.malloc(ints.nbytes)
    if not address:
        raise MemoryError("malloc of a TfLiteIntArray failed")
    ctypes.memmove(address, ints.ctypes.data, ints.nbytes)
    return address


def version_tuple(text):
    """(major, minor) of a version string such as '2.3.0' or '2.16.1rc0'; None if unreadable."""
    match = re.match(r"(\d+)\.(\d+)", str(text))
    return (int(match.group(1)), int(match.group(2))) if match else None


def check_runtime(package, version):
    """A RuntimeError unless `package` at `version` has the layout of these structs (SUPPORTED)."""
    supported = ", ".join(f"{name} >= {'.'.join(map(str, low))}, < {'.'.join(map(str, high))}"
                          for name, (low, high) in SUPPORTED.items())
    if package not in SUPPORTED:
        raise RuntimeError(f"GpuDelegate: the interpreter comes from {package!r}, whose TfLiteDelegate ABI this "
                           f"package does not know; supported: {supported}")
    low, high = SUPPORTED[package]
    parsed = version_tuple(version)
    if parsed is None or not low <= parsed < high:
        raise RuntimeError(f"GpuDelegate: {package} {version} is not supported (its TfLiteContext / TfLiteTensor / "
                           f"TfLiteRegistration layout is unchecked); supported: {supported}")
