"""Partitioning: runs of GPU-runnable nodes, their boundary tensors, the TFLite-style log."""
import logging

import numpy as np

from gles_delegate.graph import Graph
from gles_delegate.partition import EmptyTensor, find_partitions
from gles_delegate.tflite import ModelBuilder, read_model


def chain_model():
    """x -> ADD -> MysteryOp (CPU only) -> ADD -> ADD -> y, plus a variable state tensor."""
    b = ModelBuilder()
    x = b.input("x", (1, 4))
    one = b.const("one", np.ones(4, np.float32))
    state = b.tensor("state", (1, 4), is_variable=True)
    names = []
    t = x
    for k, op in enumerate(["ADD", "MysteryOp", "ADD", "ADD"]):
        y = b.tensor(f"t{k}", (1, 4))
        if op == "ADD":
            b.op("ADD", [t, state if k == 3 else one], [y])
        else:
            b.op(op, [t], [y], custom_options=b"")
        names.append(y)
        t = y
    b.output(t)
    return Graph.from_model(read_model(b.build()))


def gpu_reason(node):
    return None if node.op == "ADD" else "not on this GPU"


def test_partitions_are_runs_and_the_largest_are_kept(caplog):
    graph = chain_model()
    with caplog.at_level(logging.INFO, logger="gles_delegate"):
        specs = find_partitions(graph, graph.nodes, gpu_reason, max_partitions=1)
    assert [[n.index for n in s.nodes] for s in specs] == [[2, 3]]
    assert "op code #1 (MysteryOp) cannot be handled by this delegate: not on this GPU" in caplog.text
    assert "2 operations will run on the GPU, and the remaining 2 operations will run on the CPU." in caplog.text
    both = find_partitions(graph, graph.nodes, gpu_reason, max_partitions=0)
    assert [[n.index for n in s.nodes] for s in both] == [[0], [2, 3]]


def test_boundary_tensors_include_variable_state_as_input_and_output():
    graph = chain_model()
    (spec,) = find_partitions(graph, graph.nodes, gpu_reason, max_partitions=1)
    assert [t.name for t in spec.inputs] == ["t1", "state"]
    # t3 is the graph output; the variable state is downloaded back after every invoke.
    assert [t.name for t in spec.outputs] == ["t3", "state"]


def test_nodes_refused_for_an_empty_tensor_are_one_line(caplog):
    """An empty batch empties every tensor: one line for all such nodes, not one per node."""
    graph = chain_model()

    def empty_reason(node):
        return "not on this GPU" if node.op != "ADD" else EmptyTensor(f"output tensor {node.outputs[0].index} is empty")
    with caplog.at_level(logging.WARNING, logger="gles_delegate"):
        assert find_partitions(graph, graph.nodes, empty_reason, max_partitions=0) == []
    assert caplog.messages == [
        "op code #1 (MysteryOp) cannot be handled by this delegate: not on this GPU",
        "3 operations, op codes #0 (ADD) .. #3 (ADD) cannot be handled by this delegate: a tensor each reads or "
        "writes is empty (nothing to compute)"]
