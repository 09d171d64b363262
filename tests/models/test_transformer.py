"""A small transformer encoder block built with our writer: FULLY_CONNECTED projections, RESHAPE
and TRANSPOSE to heads, BATCH_MATMUL Q.K^T, MUL by 1/sqrt(d), SOFTMAX, BATCH_MATMUL .V, the
output projection, a residual ADD and a layer norm of MEAN, SUB, SQUARED_DIFFERENCE, RSQRT, MUL
and ADD. Every node runs on the GPU, and the output matches LiteRT within 1e-4 x max|LiteRT| in
FP32 (and the reference within its bounds in every precision)."""
import numpy as np
import pytest

from gles_delegate import GpuDelegate
from gles_delegate.tflite import ModelBuilder
from tests.gpu.gpulib import PRECISIONS
from tests.litert import run_litert
from tests.oplib import run_ours
from tests.tolerance import F16_U

SEQUENCE, WIDTH, HEADS = 8, 16, 2
HEAD = WIDTH // HEADS
EPSILON = 1e-5


class Block:
    """A ModelBuilder with the few helpers an encoder block needs."""

    def __init__(self, rng):
        self.b, self.rng, self.count = ModelBuilder(), rng, 0

    def tensor(self, shape):
        self.count += 1
        return self.b.tensor(f"t{self.count}", shape, np.float32)

    def const(self, value, dtype=np.float32):
        self.count += 1
        return self.b.const(f"c{self.count}", np.asarray(value, dtype))

    def op(self, op, inputs, shape, **options):
        out = self.tensor(shape)
        self.b.op(op, inputs, [out], **options)
        return out

    def dense(self, x, units):
        w = self.const(self.rng.standard_normal((units, WIDTH)) / np.sqrt(WIDTH))
        bias = self.const(self.rng.standard_normal(units) * 0.1)
        return self.op("FULLY_CONNECTED", [x, w, bias], (1, SEQUENCE, units), keep_num_dims=True,
                       fused_activation_function=0, weights_format=0)

    def to_heads(self, x):
        """[1, S, D] -> [1, H, S, D / H]."""
        split = self.op("RESHAPE", [x, self.const([1, SEQUENCE, HEADS, HEAD], np.int32)], (1, SEQUENCE, HEADS, HEAD))
        return self.op("TRANSPOSE", [split, self.const([0, 2, 1, 3], np.int32)], (1, HEADS, SEQUENCE, HEAD))

    def layer_norm(self, x):
        axis, shape = self.const([2], np.int32), (1, SEQUENCE, 1)
        mean = self.op("MEAN", [x, axis], shape, keep_dims=True)
        centred = self.op("SUB", [x, mean], (1, SEQUENCE, WIDTH))
        variance = self.op("MEAN", [self.op("SQUARED_DIFFERENCE", [x, mean], (1, SEQUENCE, WIDTH)), axis], shape,
                           keep_dims=True)
        inverse = self.op("RSQRT", [self.op("ADD", [variance, self.const([EPSILON])], shape)], shape)
        normed = self.op("MUL", [centred, inverse], (1, SEQUENCE, WIDTH))
        scaled = self.op("MUL", [normed, self.const(1 + 0.1 * self.rng.standard_normal(WIDTH))], (1, SEQUENCE, WIDTH))
        return self.op("ADD", [scaled, self.const(0.1 * self.rng.standard_normal(WIDTH))], (1, SEQUENCE, WIDTH))


def encoder_block(seed=0):
    """The model's bytes and its node count."""
    block = Block(np.random.default_rng(seed))
    x = block.b.input("x", (1, SEQUENCE, WIDTH), np.float32)
    q, k, v = (block.to_heads(block.dense(x, WIDTH)) for _ in range(3))
    scores = block.op("BATCH_MATMUL", [q, k], (1, HEADS, SEQUENCE, SEQUENCE), adj_x=False, adj_y=True)
    scaled = block.op("MUL", [scores, block.const([1 / np.sqrt(HEAD)])], (1, HEADS, SEQUENCE, SEQUENCE))
    weights = block.op("SOFTMAX", [scaled], (1, HEADS, SEQUENCE, SEQUENCE), beta=1.0)
    context = block.op("BATCH_MATMUL", [weights, v], (1, HEADS, SEQUENCE, HEAD), adj_x=False, adj_y=False)
    merged = block.op("TRANSPOSE", [context, block.const([0, 2, 1, 3], np.int32)], (1, SEQUENCE, HEADS, HEAD))
    flat = block.op("RESHAPE", [merged, block.const([1, SEQUENCE, WIDTH], np.int32)], (1, SEQUENCE, WIDTH))
    residual = block.op("ADD", [x, block.dense(flat, WIDTH)], (1, SEQUENCE, WIDTH))
    block.b.output(block.layer_norm(residual))
    return block.b.build(), len(block.b.model().subgraphs[0].operators)


def _input():
    return np.random.default_rng(1).standard_normal((1, SEQUENCE, WIDTH)).astype(np.float32)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_every_node_on_the_gpu(precision):
    model, nodes = encoder_block()
    with GpuDelegate(precision=precision) as delegate:
        (gpu,) = run_ours(model, [_input()], experimental_delegates=[delegate])
        summary = delegate.summary()
    assert (summary["gpu_nodes"], summary["cpu_nodes"], summary["partitions"]) == (nodes, 0, 1), summary
    (reference,) = run_ours(model, [_input()])
    # Half storage rounds each node's output once (F16_U relative); allow every rounding at a gain
    # of 2 through the rest of the block (the layer norm's division by the deviation included).
    bound = 1e-4 if precision == "fp32" else nodes * 2 * F16_U
    assert np.max(np.abs(gpu - reference)) <= bound * np.max(np.abs(reference))


def test_fp32_matches_litert():
    model, _ = encoder_block()
    (theirs,) = run_litert(model, [_input()], resolver="builtin")
    with GpuDelegate(precision="fp32") as delegate:
        (gpu,) = run_ours(model, [_input()], experimental_delegates=[delegate])
    (reference,) = run_ours(model, [_input()])
    scale = np.max(np.abs(theirs))
    assert np.max(np.abs(gpu - theirs)) <= 1e-4 * scale
    assert np.max(np.abs(reference - theirs)) <= 1e-4 * scale
