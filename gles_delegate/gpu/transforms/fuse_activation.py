"""Fuse a standalone activation (RELU, RELU6, RELU_N1_TO_1, RELU_0_TO_1, LEAKY_RELU, PRELU with a
constant slope, HARD_SWISH, LOGISTIC, TANH) into the node that produces its input: as that node's
fused_activation_function where TFLite has one for it and nothing else runs after it yet, else as
a step of its epilogue."""
from .. import kernels
from ..kernels import epilogue
from ...ops.common import ACT_NONE, ACT_RELU, ACT_RELU6, ACT_RELU_N1_TO_1, fused_activation
from .common import fuse_into_epilogue, only_reader_blocker, producer_of

ACTIVATION_CODES = {"RELU": ACT_RELU, "RELU6": ACT_RELU6, "RELU_N1_TO_1": ACT_RELU_N1_TO_1}
ACTIVATIONS = tuple(ACTIVATION_CODES) + ("RELU_0_TO_1", "LEAKY_RELU", "PRELU", "HARD_SWISH", "LOGISTIC", "TANH")


def apply(graph, log):
    for node in list(graph.nodes):
        if node.op not in ACTIVATIONS:
            continue
        source = node.inputs[0]
        producer = producer_of(graph, source)
        if node.op == "PRELU" and not node.inputs[1].is_const:
            log.skipped(node, "its slope is computed at run time")
        elif _as_fused_activation(producer, node):
            reason = only_reader_blocker(graph, source, producer)
            if reason:
                log.skipped(node, reason)
                continue
            producer.options["fused_activation_function"] = ACTIVATION_CODES[node.op]
            graph.remove_node(node)
            graph.set_outputs(producer, [node.outputs[0]])
            log.applied(node, f"into {producer.label}")
        else:
            reason = fuse_into_epilogue(graph, log, node, source)
            if reason:
                log.skipped(node, reason)


def _as_fused_activation(producer, node):
    """Whether the activation can be the producer's fused_activation_function: TFLite has a code
    for it, the producer's kernel applies one (its OpFacts say so), and the producer applies nothing yet (its
    activation runs before its epilogue)."""
    return (producer is not None and node.op in ACTIVATION_CODES and kernels.facts(producer.op).fused_activation
            and fused_activation(producer) == ACT_NONE and not epilogue.steps_of(producer)
            and not epilogue.steps_of(node) and len(producer.outputs) == 1)
