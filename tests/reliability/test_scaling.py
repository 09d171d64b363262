"""allocate_tensors() is linear in the number of ops: the rewrite rules ask the Graph's
readers/producers index instead of scanning the graph per node (issue 17, item 3)."""
import time

import numpy as np

from gles_delegate import GpuDelegate, Interpreter
from gles_delegate.graph import Graph, Node, Tensor
from gles_delegate.tflite import ModelBuilder


def add_chain(n):
    """x + 1 + 1 ... (n ADDs): one GPU partition of n nodes, all fused into elementwise chains."""
    b = ModelBuilder()
    x = b.input("x", (1, 8, 8, 4))
    one = b.const("one", np.ones((4,), np.float32))
    value = x
    for k in range(n):
        out = b.tensor(f"t{k}", (1, 8, 8, 4))
        b.op("ADD", [value, one], [out])
        value = out
    b.output(value)
    return b.build()


def test_20000_ops_allocate_in_under_10_s():
    # Before the index: 1,000 / 4,000 ops took 1.0 / 13.6 s, and 20,000 did not finish in 60 s.
    interpreter = Interpreter(model_content=add_chain(20000), experimental_delegates=[GpuDelegate()])
    start = time.perf_counter()
    interpreter.allocate_tensors()
    assert time.perf_counter() - start < 10
    x = np.random.default_rng(0).random((1, 8, 8, 4), np.float32)
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    interpreter.invoke()
    np.testing.assert_allclose(interpreter.get_tensor(interpreter.get_output_details()[0]["index"]), x + 20000)


def _tensor(k):
    return Tensor(k, f"t{k}", (1,), np.dtype(np.float32))


def test_the_index_follows_every_edit():
    t = [_tensor(k) for k in range(4)]
    a, b, c = (Node(k, "ABS", [t[k]], [t[k + 1]]) for k in range(3))
    graph = Graph([a, b, c], [t[0]], [t[3]], t)
    assert graph.readers_of(t[1]) == [b] and graph.producer_of(t[2]) is b
    graph.set_inputs(c, [t[1]])
    assert graph.readers_of(t[1]) == [b, c] and graph.readers_of(t[2]) == []
    graph.remove_node(b)
    assert graph.producer_of(t[2]) is None and graph.readers_of(t[1]) == [c]
    d, e = Node(3, "NEG", [t[0]], [t[2]]), Node(4, "ABS", [t[2]], [t[1]])
    graph.replace_node(a, [d, e])
    assert graph.nodes == [d, e, c] and graph.producer_of(t[1]) is e and graph.readers_of(t[0]) == [d]
    graph.move_before(c, d)
    assert graph.nodes == [c, d, e] and graph.position(c) < graph.position(d)
    graph.set_outputs(e, [t[3]])
    assert graph.producer_of(t[3]) is e and graph.producer_of(t[1]) is None
