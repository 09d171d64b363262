"""LiteRT's Interpreter + GpuDelegate on models LiteRT alone runs that our plan must not get wrong
(issue 40): declared shapes the options contradict, a model file replaced while it is read,
control flow whose subgraphs are shared or whose tensors change shape."""
import logging

import numpy as np
import pytest

from gles_delegate import GpuDelegate, callee_subgraphs
from gles_delegate.litert.native import native_delegates
from gles_delegate.tflite import ModelBuilder
from tests.control_flow_models import growing_loop, if_model
from tests.litert_delegate.test_litert_delegate import claimed_run, litert_alone, replaced, run

LiteRT = pytest.importorskip("ai_edge_litert.interpreter").Interpreter
NONE = 0  # fused_activation_function
X = np.random.default_rng(40).standard_normal((1, 8, 8, 4)).astype(np.float32)


def _pool(kind, **options):
    def add(b, a, out):
        b.op(kind, [a], [out], fused_activation_function=NONE, **options)
    return add


def _conv_stride_2(b, a, out):
    w = b.const("w2", np.random.default_rng(2).standard_normal((4, 3, 3, 4)).astype(np.float32) * 0.3)
    b.op("CONV_2D", [a, w, b.const("bias", np.zeros(4, np.float32))], [out], padding=0, stride_w=2, stride_h=2, fused_activation_function=NONE)


def _resize_to_4x4(b, a, out):
    b.op("RESIZE_BILINEAR", [a, b.const("size", np.array([4, 4], np.int32))], [out], align_corners=False,
         half_pixel_centers=True)


def _reshape_to_16x4x4(b, a, out):
    b.op("RESHAPE", [a, b.const("shape", np.array([1, 16, 4, 4], np.int32))], [out])


CONTRADICTED = {  # name: (op adder, what LiteRT computes for a [1, 8, 8, 4] input declared [1, 8, 8, 4])
    "max_pool_stride": (_pool("MAX_POOL_2D", padding=0, stride_w=2, stride_h=2, filter_width=2, filter_height=2),
                        (1, 4, 4, 4)),
    "average_pool_valid": (_pool("AVERAGE_POOL_2D", padding=1, stride_w=1, stride_h=1, filter_width=3,
                                 filter_height=3), (1, 6, 6, 4)),
    "conv_stride": (_conv_stride_2, (1, 4, 4, 4)),
    "resize_size": (_resize_to_4x4, (1, 4, 4, 4)),
    "reshape_shape": (_reshape_to_16x4x4, (1, 16, 4, 4)),
}


def contradicted_model(add_op):
    """x [1, 8, 8, 4] -> ADD 0.5 (#0) -> the op `add_op` adds (#1), its output declared
    [1, 8, 8, 4] whatever its options give -> MUL 2 (#2), declared [1, 8, 8, 4] too."""
    b = ModelBuilder()
    x = b.input("x", (1, 8, 8, 4))
    a, p, y = (b.tensor(name, (1, 8, 8, 4)) for name in "apy")
    b.op("ADD", [x, b.const("half", np.float32(0.5))], [a], fused_activation_function=NONE)
    add_op(b, a, p)
    b.op("MUL", [p, b.const("two", np.float32(2.0))], [y], fused_activation_function=NONE)
    b.output(y)
    return b.build()


@pytest.mark.parametrize("case", sorted(CONTRADICTED))
def test_a_declared_shape_the_options_contradict_stays_on_litert(case, caplog):
    """LiteRT alone gives the contradicted node's output (and the MUL's) the shape its options
    give; the delegate declines that node and what reads it, so LiteRT's kernels run them, and
    claims only the ADD before it. Before, the GPU ran a pool at the declared shape (-inf / NaN
    or values of the wrong windows, with no error); the other GPU kernels refused the node, but
    the MUL after it was claimed, planned for the declared shape LiteRT does not hold."""
    add_op, shape = CONTRADICTED[case]
    data = contradicted_model(add_op)
    out, claimed = claimed_run(data, X)
    ref = litert_alone(data, X)
    assert out.shape == ref.shape == shape
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-6)
    assert claimed == [0]
    assert "operator #1" in caplog.text and "is declared [1, 8, 8, 4], its inputs give" in caplog.text


def weights_model(scale, activation="LOGISTIC"):
    """x [1, 8, 8, 4] -> CONV_2D (3x3 weights `scale` times a fixed draw) -> `activation`: two
    scales give two files of the same structure and sizes, and other weights."""
    b = ModelBuilder()
    x = b.input("x", (1, 8, 8, 4))
    w = b.const("w", np.random.default_rng(3).standard_normal((4, 3, 3, 4)).astype(np.float32) * scale)
    a, y = b.tensor("a", (1, 8, 8, 4)), b.tensor("y", (1, 8, 8, 4))
    b.op("CONV_2D", [x, w, b.const("bias", np.zeros(4, np.float32))], [a], padding=0, stride_w=1, stride_h=1,
         fused_activation_function=NONE)
    b.op(activation, [a], [y])
    b.output(y)
    return b.build()


def test_a_model_file_replaced_while_litert_reads_it_is_refused(tmp_path, monkeypatch, caplog):
    """LiteRT reads model_path, then the file is replaced (os.replace: LiteRT's mapping keeps
    the old file) before the delegate reads it. By one of other weights: building the
    Interpreter fails, naming the weights that differ. By one whose LOGISTIC is a TANH: no
    subgraph of the file matches LiteRT's, so its nodes stay on LiteRT's CPU kernels, with a
    warning, and the outputs are LiteRT alone's. Before, the GPU ran the new file's weights, or
    its op, inside the model LiteRT loaded, with no error. A file left alone builds and runs as
    LiteRT alone."""
    import ai_edge_litert.interpreter as litert

    def output(delegate):
        interp = LiteRT(model_path=str(path), experimental_delegates=[delegate])
        interp.allocate_tensors()
        return run(interp, X)

    def replace_after_litert_read(new):
        def create_then_replace(*args):
            wrapper = create(*args)
            replacement = tmp_path / "replacement.tflite"
            replacement.write_bytes(new)
            replacement.replace(path)
            return wrapper
        path.write_bytes(old)
        monkeypatch.setattr(litert._interpreter_wrapper, "CreateWrapperFromFile", create_then_replace)

    path, old, expected = tmp_path / "model.tflite", weights_model(0.3), litert_alone(weights_model(0.3), X)
    create = litert._interpreter_wrapper.CreateWrapperFromFile
    path.write_bytes(old)
    with GpuDelegate() as delegate:
        np.testing.assert_allclose(output(delegate), expected, atol=1e-5)
        replace_after_litert_read(weights_model(-0.5))
        with pytest.raises((RuntimeError, ValueError)) as caught:
            output(delegate)
        replace_after_litert_read(weights_model(0.3, "TANH"))
        np.testing.assert_allclose(output(delegate), expected, atol=1e-6)
    assert "the model LiteRT loaded is not the one the GpuDelegate read (tensor 1 ('w'): the constant's 576 bytes " \
           "in the file differ from the 576 LiteRT holds)" in str(caught.value)
    assert "LiteRT's subgraph of 2 nodes matches none of the model's subgraphs" in caplog.text


def if_one_branch(shape):
    """IF(c, x, y) whose then and else branches are one subgraph: x * y + 1."""
    b = ModelBuilder()
    c, x, y = b.input("c", (1,), np.bool_), b.input("x", shape, np.float32), b.input("y", shape, np.float32)
    branch = b.subgraph("branch")
    out = b.tensor("out", shape, np.float32)
    b.op("IF", [c, x, y], [out], then_subgraph_index=branch.index, else_subgraph_index=branch.index)
    b.output(out)
    bx, by = branch.input("x", shape, np.float32), branch.input("y", shape, np.float32)
    product, result = branch.tensor("product", shape, np.float32), branch.tensor("result", shape, np.float32)
    branch.op("MUL", [bx, by], [product], fused_activation_function=NONE)
    branch.op("ADD", [product, branch.const("one", np.float32(1.0))], [result], fused_activation_function=NONE)
    branch.output(result)
    return b.build()


def run_all(interp, inputs):
    """Set `inputs` (in input order), invoke, and return every output."""
    for detail, value in zip(interp.get_input_details(), inputs):
        interp.set_tensor(detail["index"], value)
    interp.invoke()
    return [interp.get_tensor(d["index"]) for d in interp.get_output_details()]


def assert_as_alone(interp, alone, invokes):
    """Each of `invokes` (a list of inputs) gives `interp` the outputs, shapes included, that it
    gives LiteRT's interpreter `alone`."""
    for inputs in invokes:
        for ours, theirs in zip(run_all(interp, inputs), run_all(alone, inputs)):
            assert ours.shape == theirs.shape
            np.testing.assert_allclose(ours, theirs, rtol=1e-6)


def gpu_subgraphs(delegate):
    """{subgraph index: operator indices on the GPU} of the delegate's (one) LiteRT interpreter."""
    (native,) = native_delegates(delegate)
    return {index: sorted(plan.gpu_nodes) for index, plan in native.plans.items() if plan.gpu_nodes}


CONTROL_FLOW = {  # name: (model, [inputs of each invoke], the subgraphs and nodes the GPU runs)
    "if_one_branch": (if_one_branch((2, 3)),
                      [[np.array([c]), np.full((2, 3), k + 1.5, np.float32), np.arange(6, dtype=np.float32).reshape(2, 3)]
                       for k, c in enumerate((True, False, True))], {1: [0, 1]}),
    "if_two_branches": (if_model((2, 3)),
                        [[np.array([c]), np.full((2, 3), 2.5, np.float32), np.arange(6, dtype=np.float32).reshape(2, 3)]
                         for c in (True, False)], {1: [0], 2: [0]}),
    "while_growing": (growing_loop(4), [[np.array(n, np.int32), np.arange(4, dtype=np.float32) + n] for n in (2, 0, 3)],
                      {0: [1], 1: [0], 2: [0, 1]}),
}


@pytest.mark.parametrize("case", sorted(CONTROL_FLOW))
def test_control_flow_runs_with_its_subgraphs_on_the_gpu(case, caplog, monkeypatch):
    """LiteRT's IF and WHILE point their subgraphs' inputs at their own tensors only after they
    prepared the subgraph (bytes 0 and no memory until then): the delegate kernel there takes
    its memory at invoke and checks its size then (before: 'tensor 0 ('x'): LiteRT holds 0
    bytes, the GPU plan expects 24', for an IF whose branches are one subgraph and for a WHILE
    whose carried tensor grows). An IF's two branches of the same tensors, told apart by
    their op codes, are both claimed. The outputs are LiteRT's alone, invoke after invoke, as
    the loop's shapes change. (Subgraphs this small are LiteRT's by default, as the next test
    shows: every callee counts as large here.)"""
    monkeypatch.setattr(callee_subgraphs, "CALLEE_WORK_MAX", -1)
    model, invokes, gpu = CONTROL_FLOW[case]
    alone = LiteRT(model_content=model)
    alone.allocate_tensors()
    with GpuDelegate() as delegate:
        interp = LiteRT(model_content=model, experimental_delegates=[delegate])
        interp.allocate_tensors()
        assert_as_alone(interp, alone, invokes)
        assert gpu_subgraphs(delegate) == gpu
        del interp
    assert "matches 2 of the model's subgraphs" not in caplog.text


@pytest.mark.parametrize("case", sorted(CONTROL_FLOW))
def test_small_control_flow_subgraphs_are_left_to_litert(case, caplog):
    """A GPU partition inside a loop body costs a call into our Python per iteration (a Keras
    GRU: 26.8 ms per invoke through LiteRT + GpuDelegate on llvmpipe, 0.31 ms with its subgraphs
    left to LiteRT): subgraphs an IF / WHILE calls that compute at most CALLEE_WORK_MAX
    multiply-adds a call are not claimed, the outputs LiteRT's alone's."""
    model, invokes, _ = CONTROL_FLOW[case]
    alone = LiteRT(model_content=model)
    alone.allocate_tensors()
    with caplog.at_level(logging.INFO, logger="gles_delegate"), GpuDelegate() as delegate:
        interp = LiteRT(model_content=model, experimental_delegates=[delegate])
        interp.allocate_tensors()
        assert_as_alone(interp, alone, invokes)
        assert set(gpu_subgraphs(delegate)) <= {0}  # only the entry subgraph's nodes, if any
        del interp
    assert "is left to LiteRT's kernels: operator #" in caplog.text


def add_n_model():
    """x -> TANH -> ADD_N(x, tanh, x) -> LOGISTIC: LiteRT's ADD_N adds a scratch tensor of its
    own at Init, after the file's 4."""
    b = ModelBuilder()
    x = b.input("x", (1, 4, 4, 3))
    t, s, y = (b.tensor(name, (1, 4, 4, 3)) for name in ("t", "s", "y"))
    b.op("TANH", [x], [t])
    b.op("ADD_N", [x, t, x], [s])
    b.op("LOGISTIC", [s], [y])
    b.output(y)
    return b.build()


def test_a_kernels_own_temporary_tensor_is_not_a_replaced_model():
    """LiteRT held 5 tensors for a file of 4 (ADD_N's scratch tensor), and the check that the
    file was not replaced refused the model: 'LiteRT holds 5 tensors, the file now has 4'."""
    data, x = add_n_model(), np.random.default_rng(0).standard_normal((1, 4, 4, 3)).astype(np.float32)
    with GpuDelegate(max_delegated_partitions=0) as delegate:
        interp = LiteRT(model_content=data, experimental_delegates=[delegate])
        interp.allocate_tensors()
        got = run(interp, x)
        assert sorted(i for nodes in replaced(delegate).values() for i in nodes) == [0, 1, 2]
    expected = litert_alone(data, x)
    np.testing.assert_allclose(got, expected, rtol=0, atol=4 * np.finfo(np.float32).eps)


def rewritten_model():
    """x [1, 8, 8, 4] -> ADD 0.5 (#0) -> a; MUL(a, x) (#1) -> m; NEG(m) (#2) written into a again,
    the graph's output; and TANH(x) (#3) -> t, a second output no rewritten tensor touches."""
    b = ModelBuilder()
    x = b.input("x", (1, 8, 8, 4))
    a, m, t = (b.tensor(name, (1, 8, 8, 4)) for name in "amt")
    b.op("ADD", [x, b.const("half", np.float32(0.5))], [a], fused_activation_function=NONE)
    b.op("MUL", [a, x], [m], fused_activation_function=NONE)
    b.op("NEG", [m], [a])
    b.op("TANH", [x], [t])
    b.output(a)
    b.output(t)
    return b.build()


def test_a_tensor_written_twice_stays_on_litert(caplog):
    """Our Interpreter refuses a tensor with two producers (Graph.check_order); LiteRT runs this
    one, keeping the last write: the delegate leaves both writers and what reads between them to
    LiteRT's kernels and claims the TANH beside them."""
    data = rewritten_model()
    with GpuDelegate(max_delegated_partitions=0) as delegate:
        interp = LiteRT(model_content=data, experimental_delegates=[delegate])
        interp.allocate_tensors()
        interp.set_tensor(interp.get_input_details()[0]["index"], X)
        interp.invoke()
        outs = [interp.get_tensor(d["index"]) for d in interp.get_output_details()]
        claimed = sorted(i for nodes in replaced(delegate).values() for i in nodes)
        del interp
    alone = LiteRT(model_content=data)
    alone.allocate_tensors()
    alone.set_tensor(alone.get_input_details()[0]["index"], X)
    alone.invoke()
    for out, detail in zip(outs, alone.get_output_details()):
        np.testing.assert_allclose(out, alone.get_tensor(detail["index"]), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(outs[0], -(X + 0.5) * X, rtol=1e-6, atol=1e-6)
    assert claimed == [3]
    assert "tensor 1 ('a') is written by #0 (ADD) and #2 (NEG)" in caplog.text
