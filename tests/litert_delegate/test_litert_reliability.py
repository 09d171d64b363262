"""LiteRT's Interpreter + GpuDelegate on models LiteRT alone runs that our plan must not get wrong
(issue 40): declared shapes the options contradict, a model file replaced while it is read,
control flow whose subgraphs are shared or whose tensors change shape."""
import numpy as np
import pytest

from gles_delegate import GpuDelegate
from gles_delegate.tflite import ModelBuilder
from tests.litert_delegate.test_litert_delegate import litert_alone, replaced, run

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
    with GpuDelegate(max_delegated_partitions=0) as delegate:
        interp = LiteRT(model_content=data, experimental_delegates=[delegate])
        interp.allocate_tensors()
        out = run(interp, X)
        claimed = sorted(i for nodes in replaced(delegate).values() for i in nodes)
        del interp
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


REPLACEMENTS = {  # name: (the file's replacement, what the error names)
    "other_weights": (weights_model(-0.5), "tensor 1 ('w'): the constant's 576 bytes in the file differ from the "
                                           "576 LiteRT holds"),
    "other_op": (weights_model(0.3, "TANH"), "operator 1 is LOGISTIC in LiteRT, TANH in the file"),
}


@pytest.mark.parametrize("case", sorted(REPLACEMENTS))
def test_a_model_file_replaced_while_litert_reads_it_is_refused(case, tmp_path, monkeypatch):
    """LiteRT reads model_path, then the file is replaced (os.replace: LiteRT's mapping keeps
    the old file) by one of other weights, or another op, before the delegate reads it: building
    the Interpreter fails, naming what differs (before: the GPU ran the new file's weights or op
    inside the model LiteRT loaded, with no error). A file left alone builds and runs as LiteRT
    alone."""
    import ai_edge_litert.interpreter as litert

    def output(delegate):
        interp = LiteRT(model_path=str(path), experimental_delegates=[delegate])
        interp.allocate_tensors()
        return run(interp, X)

    (new, message), old = REPLACEMENTS[case], weights_model(0.3)
    path = tmp_path / "model.tflite"
    path.write_bytes(old)
    with GpuDelegate() as delegate:
        np.testing.assert_allclose(output(delegate), litert_alone(old, X), atol=1e-5)
        create = litert._interpreter_wrapper.CreateWrapperFromFile

        def create_then_replace(*args):
            wrapper = create(*args)
            replacement = tmp_path / "replacement.tflite"
            replacement.write_bytes(new)
            replacement.replace(path)
            return wrapper

        monkeypatch.setattr(litert._interpreter_wrapper, "CreateWrapperFromFile", create_then_replace)
        with pytest.raises((RuntimeError, ValueError)) as caught:
            output(delegate)
    assert "the model LiteRT loaded is not the one the GpuDelegate read" in str(caught.value)
    assert message in str(caught.value)
