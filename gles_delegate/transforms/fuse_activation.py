"""Fuse a standalone RELU / RELU6 / RELU_N1_TO_1 into the fused_activation_function of the node
that produces its input, when that node has no activation yet and nothing else reads its output."""
from ..ops.common import ACT_NONE, ACT_RELU, ACT_RELU6, ACT_RELU_N1_TO_1

ACTIVATION_CODES = {"RELU": ACT_RELU, "RELU6": ACT_RELU6, "RELU_N1_TO_1": ACT_RELU_N1_TO_1}
# Ops whose kernels apply options["fused_activation_function"] to their float output.
TAKES_FUSED_ACTIVATION = {"ADD", "SUB", "MUL", "DIV", "CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED",
                          "TRANSPOSE_CONV", "AVERAGE_POOL_2D", "MAX_POOL_2D", "CONCATENATION"}


def apply(graph, log):
    producers, readers = graph.producers(), graph.consumers()
    for node in list(graph.nodes):
        if node.op not in ACTIVATION_CODES:
            continue
        source = node.inputs[0]
        producer = producers.get(id(source))
        reason = _blocker(graph, producer, source, readers)
        if reason:
            log.skipped(node, reason)
            continue
        producer.options["fused_activation_function"] = ACTIVATION_CODES[node.op]
        producer.outputs = [node.outputs[0]]
        graph.remove_node(node)
        log.applied(node, f"into {producer.label}")


def _blocker(graph, producer, source, readers):
    """Why the activation cannot be fused, or None."""
    if producer is None:
        return "its input is not computed in this partition"
    if producer.op not in TAKES_FUSED_ACTIVATION:
        return f"{producer.label} has no fused activation"
    if producer.options.get("fused_activation_function", ACT_NONE) != ACT_NONE:
        return f"{producer.label} already applies an activation"
    if len(readers.get(id(source), [])) > 1 or graph.is_graph_output(source):
        return f"the output of {producer.label} is also read elsewhere"
    return None
