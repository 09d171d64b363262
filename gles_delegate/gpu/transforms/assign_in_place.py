"""Let the node that computes an ASSIGN_VARIABLE's value write it straight into the variable's
storage: the ASSIGN_VARIABLE's copy goes (one dispatch fewer per variable and invoke; a ring
buffer's STRIDED_SLICE of the newest frames writes the state itself).

The value then is the variable's storage from its producer on, so the rule takes an assignment
only where that changes nothing the partition reads: the variable's only assignment in the
partition (gpu/variables.bind made input 0 its storage), of a value computed in the partition (by
a node that is no alias of another tensor's storage: rule alias_reshape), assigned to no other
variable, and no READ_VARIABLE of the variable between that node and the assignment (it would
read the new value early). A SPLIT_V's output (the frames a ring buffer keeps) qualifies: the
variable shares that output's storage only."""
from ..kernels.layout import ALIAS
from ..kernels.variables import IN_PLACE

ENABLED = True  # rewrite_partition skips the rule when False, for A/B measurements (gles-profile --set gpu.transforms.assign_in_place.ENABLED=0)


def apply(graph, log):
    assigns = [n for n in graph.nodes if n.op == "ASSIGN_VARIABLE"]
    taken = set()  # id of each value some assignment already writes in place
    for node in assigns:
        reason = _reason(graph, node, assigns, taken)
        if reason:
            log.skipped(node, reason)
            continue
        taken.add(id(node.inputs[1]))
        graph.set_options(node, {**node.options, IN_PLACE: True})
        log.applied(node, f"{graph.producer_of(node.inputs[1]).label} writes tensor {node.inputs[1].index} "
                          "into the variable's storage")


def _reason(graph, node, assigns, taken):
    """Why the value of ASSIGN_VARIABLE `node` cannot be its variable's storage, or None."""
    var, value = node.inputs
    producer = graph.producer_of(value)
    if sum(n.inputs[0] is var for n in assigns) > 1:
        return "the partition assigns the variable more than once"
    if producer is None:
        return f"tensor {value.index} comes from outside the partition"
    if producer.options.get(ALIAS):
        return f"{producer.label}'s output shares its input's storage (rule alias_reshape)"
    if id(value) in taken:
        return f"tensor {value.index} is assigned to another variable in place already"
    start, end = graph.position(producer), graph.position(node)
    if any(n.op == "READ_VARIABLE" and n.inputs[0] is var and start < graph.position(n) < end for n in graph.nodes):
        return "the variable is read between its new value's producer and the assignment"
    return None
