"""Which int64 tensors of a graph hold only values of int32's range, by TFLite's semantics.

tf.argmax's default output type is int64, and a model then gathers, one-hot encodes or casts
those indices (a greedy decoder's next token, a label table). The GPU has no 64-bit integers:
gpu/index_view.py holds such a tensor as int32, which is exact only where no value can leave
int32's range. mark() follows that through a graph, in execution order. An int64 tensor holds
int32 values when:
- an ARG_MAX / ARG_MIN writes it: an index along one axis, and no tensor has 2^31 elements;
- a CAST writes it from bool or an integer type narrower than 64 bits, uint32 aside (a widening
  TFLite does exactly);
- an op that only moves or picks values (VALUE_INPUTS) writes it from such tensors;
- it is a constant whose values all lie in int32's range.
Nothing else is assumed to: an int64 ADD or SUM may carry past 2^31, a graph input or a variable
holds what the user gave it, and a tensor two operators write (LiteRT's delegate path reads
such graphs) keeps what either wrote.
"""
import numpy as np

INT64 = np.dtype(np.int64)
INT32_MIN, INT32_MAX = -2 ** 31, 2 ** 31 - 1
INDEX_OPS = frozenset({"ARG_MAX", "ARG_MIN"})
# CAST from these to int64 keeps every value within int32's range.
NARROW_DTYPES = frozenset(np.dtype(t) for t in (np.bool_, np.int8, np.uint8, np.int16, np.uint16, np.int32))
ALL = None  # every input is a value input
# op -> the inputs whose values the outputs take (the others are shapes, axes, positions). Only
# ops whose outputs hold nothing but those values (PAD pads with 0); REDUCE_MAX is not one: an
# empty reduction writes int64's lowest value.
VALUE_INPUTS = {
    "RESHAPE": (0,), "SQUEEZE": (0,), "EXPAND_DIMS": (0,), "TRANSPOSE": (0,), "SLICE": (0,),
    "STRIDED_SLICE": (0,), "GATHER": (0,), "GATHER_ND": (0,), "TILE": (0,), "BROADCAST_TO": (0,),
    "REVERSE_V2": (0,), "PAD": (0,), "PADV2": (0, 2), "MIRROR_PAD": (0,), "SPLIT": (1,), "SPLIT_V": (0,),
    "UNPACK": (0,), "DEPTH_TO_SPACE": (0,), "SPACE_TO_DEPTH": (0,), "MAXIMUM": (0, 1), "MINIMUM": (0, 1),
    "SELECT": (1, 2), "SELECT_V2": (1, 2), "CONCATENATION": ALL, "PACK": ALL,
}


def within_int32(tensor):
    """Whether every value `tensor` can hold lies in int32's range: an int64 tensor mark() found
    so, or a constant int64 whose values do, or an integer tensor of a type that cannot leave it.
    (False for float and uint32 / uint64 tensors.)"""
    if tensor.dtype == INT64:
        if tensor.int32_values:
            return True
        if tensor.is_const:
            data = np.asarray(tensor.data)
            return data.size == 0 or (int(data.min()) >= INT32_MIN and int(data.max()) <= INT32_MAX)
        return False
    return tensor.dtype in NARROW_DTYPES


def _writes_int32_values(node):
    """Whether `node` writes int32-range values into its int64 outputs (the module docstring)."""
    if node.op in INDEX_OPS:
        return True
    if node.op == "CAST":
        return within_int32(node.inputs[0])
    sources = VALUE_INPUTS.get(node.op, ())
    if sources is ALL:
        sources = range(len(node.inputs))
    return bool(sources) and all(k < len(node.inputs) and node.inputs[k] is not None
                                 and within_int32(node.inputs[k]) for k in sources)


def mark(graph):
    """Set Tensor.int32_values on the int64 tensors of `graph` (a Graph, its nodes in execution
    order) that hold only int32-range values. Only sets: a tensor marked stays marked."""
    writers = {}
    for node in graph.nodes:
        for t in node.outputs:
            if t is not None:
                writers[id(t)] = writers.get(id(t), 0) + 1
    for node in graph.nodes:
        outputs = [t for t in node.outputs if t is not None and t.dtype == INT64 and writers[id(t)] == 1]
        if outputs and _writes_int32_values(node):
            for t in outputs:
                t.int32_values = True
