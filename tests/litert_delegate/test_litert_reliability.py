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
