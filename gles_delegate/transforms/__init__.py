"""Graph rewrite rules, one module per rule, applied to each GPU partition before it compiles.

A rule module exposes `apply(graph, log)`: it edits the Graph in place and records, for every
node it considered, whether it rewrote it (log.applied) or why not (log.skipped). Rules run on
a copy of the partition's nodes (see rewrite_partition), never on the interpreter's graph.
"""
import copy
from dataclasses import dataclass

from ..graph import Graph
from . import fuse_activation

# Order matters: later rules see what earlier ones produced.
RULES = (
    ("fuse_activation", fuse_activation.apply),
)


@dataclass(frozen=True)
class Record:
    """One decision of one rule about one node: status is 'APPLIED' or 'SKIPPED'."""
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


def rewrite_partition(nodes, inputs, outputs, rules=RULES):
    """Apply `rules` to a copy of a partition; returns (rewritten Graph, RewriteLog).

    nodes / inputs / outputs: the partition's nodes and boundary tensors. Nodes are copied
    (their options and input lists too), tensors are shared and never edited in place.
    """
    copies = []
    for node in nodes:
        clone = copy.copy(node)
        clone.inputs, clone.outputs, clone.options = list(node.inputs), list(node.outputs), dict(node.options)
        copies.append(clone)
    tensors = {id(t): t for n in copies for t in n.inputs + n.outputs if t is not None}
    graph = Graph(copies, inputs, outputs, list(tensors.values()))
    log = RewriteLog()
    for name, apply in rules:
        log.rule = name
        apply(graph, log)
    return graph, log
