"""What the rule tests share: build small models, rewrite them with one rule, run them on the GPU
(every rule on, as the delegate does) against the numpy reference."""
import contextlib
import importlib

import numpy as np

from gles_delegate import GpuDelegate
from gles_delegate.graph import Graph
from gles_delegate.tflite import ModelBuilder, read_model
from gles_delegate.gpu.transforms import RULES, rewrite_partition
from tests.gpu.gpulib import assert_gpu_matches
from tests.oplib import SAME, VALID, run_ours


def only(rule):
    """RULES restricted to the rule named `rule`."""
    return tuple((name, apply) for name, apply in RULES if name == rule)


def rewrite(model, rule):
    """(rewritten Graph, its Records) of the whole model as one partition, under one rule."""
    graph = Graph.from_model(read_model(model))
    return rewrite_partition(graph.nodes, graph.inputs, graph.outputs, only(rule))


def rewrite_through(model, rule):
    """(rewritten Graph, its Records) of the whole model as one partition, under the rules up to
    and including `rule` (those that make its patterns: pools as MEAN, 1x1 convs as FC, ...)."""
    graph = Graph.from_model(read_model(model))
    names = [name for name, _ in RULES]
    return rewrite_partition(graph.nodes, graph.inputs, graph.outputs, RULES[:names.index(rule) + 1])


def ops_of(graph):
    return [n.op for n in graph.nodes]


def statuses(log, rule):
    """[(status, node label)] of a rule's records."""
    return [(r.status, r.node) for r in log if r.rule == rule]


def why(log, rule, node_label):
    return next(r.why for r in log if r.rule == rule and r.node == node_label)


def check_skipped(model, rule, op, reason, values):
    """`rule` considers one node of `model` and skips it saying `reason`, which stays an `op`
    node; the model still runs on the GPU as the reference does."""
    graph, log = rewrite_through(model, rule)
    assert op in ops_of(graph)
    [(status, label)] = statuses(log, rule)
    assert status == "SKIPPED" and reason in why(log, rule, label)
    check_gpu(model, values)


def check_unfused(model, rule, node_label, fused_op, reason, values):
    """`rule` leaves `model` without a `fused_op` node, saying `reason` at `node_label`; the
    model still runs on the GPU as the reference does."""
    graph, log = rewrite(model, rule)
    assert fused_op not in ops_of(graph)
    assert reason in why(log, rule, node_label)
    check_gpu(model, values)


def check_gpu(model, values, precision="fp32", **options):
    """Run `model` on the delegate (all rules on) and on the reference, compare every output;
    returns (the delegate's summary, its rewrite log)."""
    reference = run_ours(model, values)
    with GpuDelegate(precision=precision, **options) as delegate:
        outputs = run_ours(model, values, experimental_delegates=[delegate])
        summary, log = delegate.summary(), list(delegate.rewrite_log)
    assert summary["cpu_nodes"] == 0, summary
    for k, (r, g) in enumerate(zip(reference, outputs)):
        assert_gpu_matches(r, g, precision, what=f"output {k}")
    return summary, log


def dispatches(model, values, **options):
    """Dispatches per invoke of the model on the delegate."""
    with GpuDelegate(**options) as delegate:
        run_ours(model, values, experimental_delegates=[delegate])
        return delegate.summary()["dispatches"]


@contextlib.contextmanager
def rule_off(rule):
    """Switch the rewrite rule named `rule` (its module in gles_delegate/gpu/transforms) off for
    the block, and on again after it."""
    module = importlib.import_module(f"gles_delegate.gpu.transforms.{rule}")
    module.ENABLED = False
    try:
        yield
    finally:
        module.ENABLED = True


def dispatches_without(rule, model, values, **options):
    """Dispatches per invoke of the model with `rule` off, for the count it saves."""
    with rule_off(rule):
        return dispatches(model, values, **options)


def run_on_gpu(model, values, precision, **options):
    """The model's outputs on a GpuDelegate of `precision` (all rules on that are not switched off)."""
    with GpuDelegate(precision=precision, **options) as delegate:
        return run_ours(model, values, experimental_delegates=[delegate])


def unfused_outputs(rule, model, values, precision):
    """The model's outputs on the GPU with `rule` off."""
    with rule_off(rule):
        return run_on_gpu(model, values, precision)


def assert_same_as_unfused(rule, model, values, precision):
    """The outputs with `rule` on are the ones with it off, bit for bit."""
    for a, b in zip(run_on_gpu(model, values, precision), unfused_outputs(rule, model, values, precision)):
        np.testing.assert_array_equal(a, b)


def random(shape, seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


class Chain:
    """A model built node by node: `x = c.op("RELU", x)` adds a node reading x and returns its
    output (shape: the input's unless given)."""

    def __init__(self, shape, name="x"):
        self.b = ModelBuilder()
        self.x = self.b.input(name, shape)
        self.shapes = {self.x: tuple(shape)}
        self.count = 0

    def const(self, value, dtype=np.float32):
        self.count += 1
        return self.b.const(f"c{self.count}", np.asarray(value, dtype))

    def op(self, op, *inputs, shape=None, **options):
        self.count += 1
        shape = tuple(shape or next(self.shapes[t] for t in inputs if t in self.shapes))
        out = self.b.tensor(f"t{self.count}_{op.lower()}", shape)
        self.shapes[out] = shape
        self.b.op(op, list(inputs), [out], **options)
        return out

    def conv(self, x, out_channels, kernel=3, padding=SAME, stride=1, activation=0, seed=1, groups=1):
        n, h, w, c = self.shapes[x]
        weights = self.const(random((out_channels, kernel, kernel, c // groups), seed, 0.5))
        bias = self.const(random(out_channels, seed + 1))
        oh, ow = ((h + stride - 1) // stride, (w + stride - 1) // stride) if padding == SAME else \
            ((h - kernel) // stride + 1, (w - kernel) // stride + 1)
        return self.op("CONV_2D", x, weights, bias, shape=(n, oh, ow, out_channels), padding=padding,
                       stride_w=stride, stride_h=stride, fused_activation_function=activation)

    def depthwise(self, x, kernel=3, padding=SAME, stride=1, activation=0, seed=3):
        n, h, w, c = self.shapes[x]
        weights = self.const(random((1, kernel, kernel, c), seed, 0.5))
        bias = self.const(random(c, seed + 1))
        oh, ow = ((h + stride - 1) // stride, (w + stride - 1) // stride) if padding == SAME else \
            ((h - kernel) // stride + 1, (w - kernel) // stride + 1)
        return self.op("DEPTHWISE_CONV_2D", x, weights, bias, shape=(n, oh, ow, c), padding=padding,
                       stride_w=stride, stride_h=stride, depth_multiplier=1, fused_activation_function=activation)

    def build(self, *outputs):
        for out in outputs:
            self.b.output(out)
        return self.b.build()
