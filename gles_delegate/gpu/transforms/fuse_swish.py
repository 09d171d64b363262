"""Fuse swish (SiLU), x * LOGISTIC(x) as two graph nodes (what the TF and PyTorch converters
write for EfficientNet's and other networks' activation), into the epilogue of the node that
computes x, as one SWISH step: the layer and its activation become one dispatch instead of two.

It runs before fuse_activation, which would otherwise leave the LOGISTIC standing (its input is
also read by the MUL) and fuse the MUL into it."""
import numpy as np

from ..kernels import epilogue
from .common import absorb, epilogue_blocker, producer_of, readers_of

ENABLED = True  # rewrite_partition skips the rule when False, for A/B measurements (gles-profile --set gpu.transforms.fuse_swish.ENABLED=0)


def apply(graph, log):
    for node in list(graph.nodes):
        if node.op != "LOGISTIC":
            continue
        product = _swish_product(graph, node)
        if product is None:
            continue
        x = node.inputs[0]
        producer = producer_of(graph, x)
        steps = [epilogue.Step("SWISH", stored=True)] + epilogue.activation_steps(product)
        reason = epilogue_blocker(graph, producer, x, product, steps, readers=2)
        if reason:
            log.skipped(product, reason)
            continue
        graph.remove_node(node)
        absorb(graph, producer, product, steps)
        log.applied(product, f"with {node.label}: x * sigmoid(x) in the epilogue of {producer.label}")


def _swish_product(graph, logistic):
    """The MUL computing x * LOGISTIC(x) from `logistic` (the only reader of its output, and
    reading x too), or None when the graph has no swish there."""
    x, gate = logistic.inputs[0], logistic.outputs[0]
    if x.dtype != np.float32 or epilogue.steps_of(logistic) or graph.is_graph_output(gate):
        return None
    readers = readers_of(graph, gate)
    if len(readers) != 1 or readers[0].op != "MUL":
        return None
    product = readers[0]
    # A MUL of x and the gate (epilogue_blocker checks that it does not broadcast x larger).
    return product if {id(t) for t in product.inputs} == {id(x), id(gate)} else None
