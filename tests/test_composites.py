"""STABLEHLO_COMPOSITE inlined at Graph.from_model (composites.py): the decomposition's nodes
replace the composite, nested composites too, and the model computes what LiteRT's composite
kernel computes, on our reference alone and as one GPU partition; a composite whose
decomposition cannot replace it (its own subgraph, a cycle, another signature, an output that
is an input, past the budget) stays one node, as before (LiteRT's kernels, or a ModelError).
Inside LiteRT's Interpreter the delegate claims a composite node whole, or leaves it to LiteRT."""
import numpy as np
import pytest
from flatbuffers import flexbuffers

from gles_delegate import GpuDelegate, Interpreter, ModelError, composites
from gles_delegate.graph import Graph
from gles_delegate.tflite import ModelBuilder
from gles_delegate.tflite.reader import read_model
from tests.oplib import run_ours

SHAPE = (2, 8, 6)
ATTRIBUTES = tuple(flexbuffers.Dumps({"epsilon": 1e-6}))  # a flexbuffer map, which LiteRT requires


def composite(b, name, x, out, index):
    b.op("STABLEHLO_COMPOSITE", [x], [out], options={"name": name, "composite_attributes": ATTRIBUTES,
                                                     "decomposition_subgraph_index": index, "version": 1})


def rms_norm_body(body, shape=SHAPE):
    """x * rsqrt(mean(x^2 over the last axis) + eps) * w: litert-torch's 'odml.rms_norm'."""
    x = body.input("x", shape)
    squares, mean, shifted, scale, normed, out = (body.tensor(n, s) for n, s in (
        ("squares", shape), ("mean", shape[:-1] + (1,)), ("shifted", shape[:-1] + (1,)),
        ("scale", shape[:-1] + (1,)), ("normed", shape), ("out", shape)))
    body.op("MUL", [x, x], [squares], fused_activation_function=0)
    body.op("MEAN", [squares, body.const("axis", np.array([-1], np.int32))], [mean], keep_dims=True)
    body.op("ADD", [mean, body.const("eps", np.float32([1e-6]))], [shifted], fused_activation_function=0)
    body.op("RSQRT", [shifted], [scale])
    body.op("MUL", [x, scale], [normed], fused_activation_function=0)
    weights = body.const("w", np.linspace(0.5, 1.5, shape[-1], dtype=np.float32))
    body.op("MUL", [normed, weights], [out], fused_activation_function=0)
    body.output(out)


def norm_model(decomposition=1, nested=False, body_shape=SHAPE):
    """x -> ADD 1 -> composite 'odml.rms_norm' -> LOGISTIC; nested: the decomposition (subgraph
    1) is itself a composite of subgraph 2, the norm."""
    b = ModelBuilder("composite_norm")
    x = b.input("x", SHAPE)
    shifted, normed, y = (b.tensor(n, SHAPE) for n in ("shifted", "normed", "y"))
    b.op("ADD", [x, b.const("one", np.float32([1.0]))], [shifted], fused_activation_function=0)
    composite(b, "odml.rms_norm", shifted, normed, decomposition)
    b.op("LOGISTIC", [normed], [y])
    b.output(y)
    if nested:
        outer = b.subgraph("outer")
        v = outer.input("v", SHAPE)
        w = outer.tensor("w", SHAPE)
        composite(outer, "odml.inner", v, w, 2)
        outer.output(w)
    rms_norm_body(b.subgraph("decomposition"), body_shape)
    return b.build()


def expected(x):
    shifted = x + 1
    w = np.linspace(0.5, 1.5, SHAPE[-1], dtype=np.float32)
    normed = shifted / np.sqrt(np.mean(shifted ** 2, axis=-1, keepdims=True) + 1e-6) * w
    return 1 / (1 + np.exp(-normed))


def ops_of(model):
    return [node.op for node in Graph.from_model(read_model(model)).nodes]


def sample():
    return np.random.default_rng(3).standard_normal(SHAPE).astype(np.float32)


@pytest.mark.parametrize("nested", [False, True])
def test_a_composite_becomes_its_decomposition(nested):
    model = norm_model(nested=nested)
    assert ops_of(model) == ["ADD", "MUL", "MEAN", "ADD", "RSQRT", "MUL", "MUL", "LOGISTIC"]
    (ours,) = run_ours(model, [sample()], cpu_backend="reference")  # no LiteRT kernel needed
    np.testing.assert_allclose(ours, expected(sample()), rtol=1e-5)


def test_inlined_it_equals_litert_s_composite_kernel_and_runs_on_the_gpu():
    pytest.importorskip("ai_edge_litert.interpreter")
    from tests.litert import run_litert
    model, x = norm_model(), sample()
    (theirs,) = run_litert(model, [x])
    (reference,) = run_ours(model, [x], cpu_backend="reference")
    np.testing.assert_allclose(reference, theirs, rtol=2e-6, atol=1e-7)
    with GpuDelegate() as delegate:
        (gpu,) = run_ours(model, [x], experimental_delegates=[delegate])
        summary = delegate.summary()
    assert (summary["gpu_nodes"], summary["cpu_nodes"], summary["partitions"]) == (8, 0, 1), summary
    np.testing.assert_allclose(gpu, theirs, rtol=1e-5, atol=1e-6)


def test_inlined_tensors_have_fresh_indices_and_the_composite_s_node_index():
    graph = Graph.from_model(read_model(norm_model()))
    model_tensors = len(read_model(norm_model()).subgraphs[0].tensors)
    inlined = [node for node in graph.nodes if node.op not in ("ADD", "LOGISTIC") or node.index == 1]
    assert {node.index for node in inlined} == {1}
    fresh = [t for t in graph.tensors if t.index >= model_tensors]
    assert len({t.index for t in graph.tensors}) == len(graph.tensors) and fresh
    assert all(t.name.startswith("odml.rms_norm#1/") for t in fresh)


@pytest.mark.parametrize("why,model", [
    ("its own subgraph", norm_model(decomposition=0)),
    ("out of range", norm_model(decomposition=7)),
    ("another input shape", norm_model(body_shape=(2, 8, 5))),
])
def test_a_composite_that_cannot_be_inlined_stays_one_node(why, model):
    assert "STABLEHLO_COMPOSITE" in ops_of(model), why
    with pytest.raises(ModelError, match="STABLEHLO_COMPOSITE"):
        Interpreter(model_content=model, cpu_backend="reference").allocate_tensors()


def test_a_cycle_of_composites_is_inlined_once_around():
    """Subgraph 1 is a composite of subgraph 2, whose one node is a composite of subgraph 1: the
    expansion stops where it would re-enter a subgraph it is inside of."""
    b = ModelBuilder("cycle")
    x = b.input("x", SHAPE)
    y = b.tensor("y", SHAPE)
    composite(b, "odml.a", x, y, 1)
    b.output(y)
    for name, callee in (("a", 2), ("b", 1)):
        body = b.subgraph(name)
        v, w = body.input("v", SHAPE), body.tensor("w", SHAPE)
        composite(body, f"odml.{name}", v, w, callee)
        body.output(w)
    assert ops_of(b.build()) == ["STABLEHLO_COMPOSITE"]


def test_an_output_that_is_an_input_keeps_the_composite():
    b = ModelBuilder("identity")
    x = b.input("x", SHAPE)
    y = b.tensor("y", SHAPE)
    composite(b, "odml.identity", x, y, 1)
    b.output(y)
    body = b.subgraph("identity")
    body.output(body.input("v", SHAPE))
    assert ops_of(b.build()) == ["STABLEHLO_COMPOSITE"]


def test_past_the_budget_composites_stay(monkeypatch):
    monkeypatch.setattr(composites, "MAX_NODES", 5)
    assert "STABLEHLO_COMPOSITE" in ops_of(norm_model())


def litert_claims(model, x, **options):
    """(the operator indices LiteRT replaced by our kernels, the output) in LiteRT's Interpreter."""
    from ai_edge_litert.interpreter import Interpreter as LiteRT
    from tests.litert_delegate.test_litert_delegate import replaced
    with GpuDelegate(max_delegated_partitions=0, **options) as delegate:
        interp = LiteRT(model_content=model, experimental_delegates=[delegate])
        interp.allocate_tensors()
        interp.set_tensor(interp.get_input_details()[0]["index"], x)
        interp.invoke()
        out = interp.get_tensor(interp.get_output_details()[0]["index"])
        claimed = sorted(i for nodes in replaced(delegate).values() for i in nodes)
        del interp
    return claimed, out


def test_inside_litert_the_delegate_claims_the_composite_whole():
    """LiteRT's graph holds the composite as one node (#1): with every node of its decomposition
    on the GPU, the delegate claims it with its neighbours, one kernel; LiteRT's outputs."""
    pytest.importorskip("ai_edge_litert.interpreter")
    from tests.litert import run_litert
    model, x = norm_model(), sample()
    claimed, out = litert_claims(model, x)
    assert claimed == [0, 1, 2]
    np.testing.assert_allclose(out, run_litert(model, [x])[0], rtol=1e-5, atol=1e-6)


def test_inside_litert_a_composite_with_a_cpu_node_stays_litert_s(monkeypatch):
    """A node of the decomposition the GPU does not take (RSQRT, here): the composite stays one
    LiteRT node, the nodes around it ours."""
    pytest.importorskip("ai_edge_litert.interpreter")
    from gles_delegate.gpu import kernels
    from tests.litert import run_litert
    support = kernels.SUPPORT["RSQRT"]
    monkeypatch.setitem(kernels.SUPPORT, "RSQRT", lambda node: "no RSQRT today")
    model, x = norm_model(), sample()
    claimed, out = litert_claims(model, x)
    monkeypatch.setitem(kernels.SUPPORT, "RSQRT", support)
    assert claimed == [0, 2]
    np.testing.assert_allclose(out, run_litert(model, [x])[0], rtol=1e-5, atol=1e-6)
