"""Graph rewrite rules, one module per rule, applied to each GPU partition before it compiles.

A rule module exposes `apply(graph, log)`: it edits the Graph in place and records, for every
node it considered, whether it rewrote it (log.applied) or why not (log.skipped). A module may
also hold `ENABLED = True`, a switch for A/B measurements: rewrite_partition skips the rule
while it is False. Rules run on a copy of the partition's nodes (see rewrite_partition), never
on the interpreter's graph.
"""
import sys
from dataclasses import dataclass

from ...graph import Graph
from . import (alias_reshape, assign_in_place, channel_gate, concat_in_place, concat_stored_by_producers, conv_to_fully_connected,
               dense_rows_as_batch, depthwise_tile_sums, elementwise_after_layout, elementwise_before_concat, fold_mul_add, fuse_activation, fuse_add_into_reduce,
               fuse_dense_into_dag, fuse_elementwise, fuse_layer_norm, fuse_pointwise_dag, fuse_residual_add, fuse_rms_norm, fuse_swish,
               global_pool_to_mean, lane_views, matmul_through_layout, merge_padding, mixed_depthwise, pad_into_operand, read_through_layout,
               remove_dead, remove_noops, residual_through_concat, row_op_through_reshapes, se_gate, slice_views, square_into_reduce, unflatten_dense)

# Order matters: later rules see what earlier ones produced. Clean-ups first (so reader counts are
# true; a row-wise op loses the reshapes around it while it has no epilogue), then the layer
# normalizations (whole, before any of their nodes is fused elsewhere), then elementwise ops move
# past the permutation after them (before any epilogue takes them), then rewrites that change what a
# node is (a Dense's reshapes, padding, a mixed-kernel depthwise block as one convolution, which
# then takes the batch norm after it; FC, MEAN), then folding into weights (needs the producer
# free of activations), then squares into the reductions that read them (before epilogue fusion
# takes a SQUARE into its producer), then epilogue fusion, in the order an epilogue applies its steps (swish,
# which is two nodes, then activation, residual, the rest; then a residual over a concatenation a
# depthwise convolution half computes, which that convolution applies), then the squeeze-excite fusions, which
# take layers with their epilogues complete (a gate's sigmoid) and a gating MUL that no epilogue
# took, then a gate's mean taken off the depthwise convolution before it, then an ADD into the
# reduction that alone reads it (after se_gate, which may take that reduction whole), then channel
# PADs that only epilogue steps read (after fuse_residual_add made them operands), and last the
# layout ops that other layout ops can read through, then the matmuls that read or write through
# what layout ops are left, then the groups of pointwise nodes that run as one dispatch (after every
# epilogue fusion and layout rewrite, whose results they take as they are) and the one-row dense
# layers such a group alone reads (a recurrent cell's, computed in the group's workgroup), then the aliases,
# which only mark the reshapes left, then the values written straight into a resource variable's
# storage (no rule after it may change their producers), then the FC outputs stored as rows where
# more of the slices reading them are then blocks (it counts what slice_views and lane_views would
# take), and last the views, which only mark slices and concatenation inputs that share storage,
# knowing every alias and variable storage the rules before made: whole vec4 blocks first, then
# the lane views of what is left, which must know every other view; then the concatenation inputs
# still copied that their producers can store into place.
RULES = (
    ("remove_noops", remove_noops.apply),
    ("remove_dead", remove_dead.apply),
    ("row_op_through_reshapes", row_op_through_reshapes.apply),
    ("fuse_layer_norm", fuse_layer_norm.apply),
    ("fuse_rms_norm", fuse_rms_norm.apply),
    ("elementwise_after_layout", elementwise_after_layout.apply),
    ("unflatten_dense", unflatten_dense.apply),
    ("merge_padding", merge_padding.apply),
    ("mixed_depthwise", mixed_depthwise.apply),
    ("elementwise_before_concat", elementwise_before_concat.apply),
    ("conv_to_fully_connected", conv_to_fully_connected.apply),
    ("global_pool_to_mean", global_pool_to_mean.apply),
    ("fold_mul_add", fold_mul_add.apply),
    ("square_into_reduce", square_into_reduce.apply),
    ("fuse_swish", fuse_swish.apply),
    ("fuse_activation", fuse_activation.apply),
    ("fuse_residual_add", fuse_residual_add.apply),
    ("fuse_elementwise", fuse_elementwise.apply),
    ("residual_through_concat", residual_through_concat.apply),
    ("se_gate", se_gate.apply),
    ("depthwise_tile_sums", depthwise_tile_sums.apply),
    ("channel_gate", channel_gate.apply),
    ("fuse_add_into_reduce", fuse_add_into_reduce.apply),
    ("pad_into_operand", pad_into_operand.apply),
    ("read_through_layout", read_through_layout.apply),
    ("matmul_through_layout", matmul_through_layout.apply),
    ("fuse_pointwise_dag", fuse_pointwise_dag.apply),
    ("fuse_dense_into_dag", fuse_dense_into_dag.apply),
    ("alias_reshape", alias_reshape.apply),
    ("assign_in_place", assign_in_place.apply),
    ("dense_rows_as_batch", dense_rows_as_batch.apply),
    ("slice_views", slice_views.apply),
    ("concat_in_place", concat_in_place.apply),
    ("lane_views", lane_views.apply),
    ("concat_stored_by_producers", concat_stored_by_producers.apply),
)


@dataclass
class Record:
    """One decision of one rule about one node: status is 'APPLIED' or 'SKIPPED'. (Not frozen:
    a rule logs one for nearly every node it looks at, and a frozen dataclass took 3x as long
    to make.)"""
    rule: str
    node: str
    status: str
    why: str = ""


class RewriteLog(list):
    """The Records of a rewrite, in order; the inspector prints them."""

    def __init__(self, rule=""):
        super().__init__()
        self.rule = rule

    def applied(self, node, why=""):
        self.append(Record(self.rule, node.label, "APPLIED", why))

    def skipped(self, node, why):
        self.append(Record(self.rule, node.label, "SKIPPED", why))


def rewrite_partition(nodes, inputs, outputs, rules=RULES, tensor_count=0):
    """Apply `rules` to a copy of a partition; returns (rewritten Graph, RewriteLog).

    nodes / inputs / outputs: the partition's nodes and boundary tensors. Nodes are copied
    (their options and input lists too), tensors are shared and never edited in place.
    tensor_count: the model's tensor count; tensors a rule creates (folded weights) are numbered
    from there, or from past the partition's highest index, so they name no model tensor.
    """
    copies = []
    for node in nodes:
        clone = object.__new__(type(node))  # copy.copy without its reduce protocol, which took 3x as long
        clone.__dict__.update(node.__dict__)
        clone.inputs, clone.outputs, clone.options = list(node.inputs), list(node.outputs), dict(node.options)
        copies.append(clone)
    tensors = {id(t): t for n in copies for t in n.inputs + n.outputs if t is not None}
    graph = Graph(copies, inputs, outputs, list(tensors.values()))
    graph.next_index = max(graph.next_index, tensor_count)
    log = RewriteLog()
    for name, apply in rules:
        # A rule module's ENABLED switch (gles-profile --set gpu.transforms.<rule>.ENABLED=0).
        if getattr(sys.modules[apply.__module__], "ENABLED", True):
            log.rule = name
            apply(graph, log)
    return graph, log
