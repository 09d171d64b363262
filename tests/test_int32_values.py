"""int32_values.mark: which int64 tensors hold only int32-range values, followed through a graph
(what the GPU's index view narrows): ARG_MAX indices, CASTs of narrower ints, moves and picks of
those, constants that fit; never a graph input, a CAST of floats or uint32, an int64 sum, a move
of an unmarked or out-of-range tensor, or a tensor two operators write."""
import numpy as np

from gles_delegate.graph import Graph
from gles_delegate.int32_values import within_int32
from gles_delegate.tflite import ModelBuilder, read_model

I64 = np.int64


def marked_graph():
    """The model of the test below; returns (graph, tensors by name)."""
    b = ModelBuilder()
    x, ids = b.input("x", (2, 6)), b.input("ids", (2,), I64)
    small = b.input("small", (2,), np.uint16)
    big = b.input("big", (2,), np.uint32)
    t = {name: b.tensor(name, shape, dtype) for name, shape, dtype in [
        ("best", (2,), I64), ("from_u16", (2,), I64), ("from_u32", (2,), I64), ("from_float", (2, 6), I64),
        ("moved", (1, 2), I64), ("joined", (4,), I64), ("joined_far", (4,), I64), ("picked", (2,), I64),
        ("summed", (2,), I64), ("of_ids", (2,), I64), ("gathered", (2,), I64), ("gathered_far", (2,), I64),
        ("twice", (2,), I64)]}
    b.op("ARG_MAX", [x, b.const("axis", np.array([1], np.int32))], [t["best"]], output_type=4)
    b.op("CAST", [small], [t["from_u16"]])
    b.op("CAST", [big], [t["from_u32"]])
    b.op("CAST", [x], [t["from_float"]])
    b.op("RESHAPE", [t["best"], b.const("shape", np.array([1, 2], np.int64))], [t["moved"]])
    near, far = b.const("near", np.array([-2 ** 31, 2 ** 31 - 1], I64)), b.const("far", np.array([0, 2 ** 31], I64))
    b.op("CONCATENATION", [t["best"], near], [t["joined"]], axis=0, fused_activation_function=0)
    b.op("CONCATENATION", [t["best"], far], [t["joined_far"]], axis=0, fused_activation_function=0)
    b.op("MAXIMUM", [t["best"], t["from_u16"]], [t["picked"]])
    b.op("ADD", [t["best"], t["best"]], [t["summed"]], fused_activation_function=0)
    b.op("RESHAPE", [ids, b.const("same", np.array([2], np.int32))], [t["of_ids"]])
    b.op("GATHER", [near, t["best"]], [t["gathered"]], axis=0)  # indices from ARG_MAX, values `near`'s
    b.op("GATHER", [far, t["best"]], [t["gathered_far"]], axis=0)
    # Two writers (LiteRT's delegate path reads such graphs): the second may leave int32.
    b.op("CAST", [small], [t["twice"]])
    b.op("ADD", [t["best"], far], [t["twice"]], fused_activation_function=0)
    for tensor in t.values():
        b.output(tensor)
    return Graph.from_model(read_model(b.build()), single_producers=False), t


def test_mark_follows_int32_values_through_the_graph():
    graph, t = marked_graph()
    marked = {name for name, tensor in t.items() if graph.tensors[tensor].int32_values}
    assert marked == {"best", "from_u16", "moved", "joined", "picked", "gathered"}


def test_constants_and_narrow_types_are_within_int32():
    graph, _ = marked_graph()
    by_name = {tensor.name: tensor for tensor in graph.tensors}
    assert within_int32(by_name["near"]) and not within_int32(by_name["far"])
    assert within_int32(by_name["small"]) and not within_int32(by_name["big"]) and not within_int32(by_name["x"])
    assert not within_int32(by_name["ids"])  # a graph input holds what the user gives it
