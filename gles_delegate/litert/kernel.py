"""One LiteRT delegate kernel: the GPU partitions of the nodes LiteRT replaced by one node.

Its I/O never goes through a copy of our own: the partitions' upload and download (gpu/runtime.py)
read each input from, and write each output into, numpy views over LiteRT's own tensor memory
(TfLiteTensor.data), as they read and write the Interpreter's storage arrays; a graph output
left in a partition's mapped I/O buffer is lent to LiteRT instead (memory.py).
"""
import ctypes

import numpy as np

from .. import ops
from . import abi
from .memory import TensorMemory, check_bytes


class Kernel:
    """The partitions of `plan` (plan.SubgraphPlan) whose nodes LiteRT gave this kernel (`nodes`,
    operator indices; `boundary`: the tensor indices LiteRT passes in and out of its node); a
    RuntimeError if LiteRT split one of them over several kernels.

    After a re-plan, a node of the kernel that the GPU no longer takes (plan.py: at the new
    shapes its GPU kernel refuses it) runs on the numpy reference, between the partitions, in
    the subgraph's order: LiteRT cannot take a node back from a delegate.

    lendable: the tensor indices whose memory the kernel may lend LiteRT (memory.lendable_outputs);
    views_alive: () -> whether numpy views over LiteRT's tensors live (memory.TensorMemory).
    pending: the kernel holds nodes invalid at the declared shapes (plan.SubgraphPlan.pending):
    it has no steps until its first prepare re-plans it (native.py) and binds the result."""

    def __init__(self, plan, nodes, boundary, delegate, lendable=(), views_alive=lambda: False, pending=False):
        self.delegate = delegate
        self.nodes = sorted(nodes)  # what LiteRT replaced by this kernel's node
        self.boundary = set(boundary)  # LiteRT's tensors: the only ones with memory of LiteRT's
        self.memory = TensorMemory(lendable, views_alive)  # kept over re-plans: the outputs lent stay lent
        self.plan, self.partitions, self.pending = plan, [], pending
        if pending:  # bind() names its nodes; until then, their indices
            self.label = f"GpuDelegate kernel of operators #{self.nodes[0]} .. #{self.nodes[-1]} (pending)"
        else:
            self.bind(plan)

    def bind(self, plan):
        """Take this kernel's partitions from `plan` (again after a re-plan), and its nodes that
        no partition runs as reference steps."""
        nodes = set(self.nodes)
        self.plan, self.pending = plan, False
        self.partitions = [p for p in plan.partitions if any(n.index in nodes for n in p.nodes)]
        ours = {n.index for p in self.partitions for n in p.nodes}
        split = split_partitions(plan, nodes)
        if split:
            raise RuntimeError(f"LiteRT split the GPU partition {_span(split[0].nodes)} over several delegate "
                               "kernels; it cannot run in pieces")
        rest = nodes - ours  # once: per node it made building a 100,000-node kernel quadratic
        self.reference = [n for n in plan.graph.nodes if n.index in rest]
        stray = sorted(rest - plan.folded - {n.index for n in self.reference})
        if stray:
            raise RuntimeError(f"LiteRT gave the GpuDelegate kernel nodes it does not run: {stray[:8]}")
        self.steps = self._steps()
        graph_nodes = sorted([n for p in self.partitions for n in p.nodes] + self.reference, key=lambda n: n.index)
        self.label = f"GpuDelegate kernel of {_span(graph_nodes)}" if graph_nodes else "GpuDelegate kernel"
        used = {slot.tensor_index for p in self.partitions for slot in list(p.plan.inputs) + list(p.plan.outputs)}
        used |= {t.index for n in self.reference for t in n.inputs + n.outputs if t is not None}
        tensors = plan.graph.tensors
        # {tensor index: graph Tensor} of the tensors read from and written into LiteRT's memory;
        # the others (between a partition and a reference step) are arrays of the kernel's own.
        self.tensors = {i: tensors[i] for i in sorted(used) if i in self.boundary and not tensors[i].is_const}
        written = self._written()
        self.outputs = sorted(i for i in self.tensors if i in written)
        self.input_indices = sorted(set(self.tensors) - set(self.outputs))
        private = {i: tensors[i].data if tensors[i].is_const else np.zeros(tensors[i].shape, tensors[i].dtype)
                   for i in sorted(used) if i not in self.tensors}
        self.memory.bind(self.tensors, private)

    def _steps(self):
        """The partitions and reference nodes in the subgraph's order (each partition is a run
        of consecutive nodes, so it goes where its first node is)."""
        first = {p.nodes[0].index: p for p in self.partitions}
        ordered = sorted([n.index for n in self.reference] + list(first))
        reference = {n.index: n for n in self.reference}
        return [first[k] if k in first else _ReferenceStep(reference[k]) for k in ordered]

    def _written(self):
        """The indices of the tensors the steps of this kernel compute."""
        return {slot.tensor_index for p in self.partitions for slot in p.plan.outputs} | \
            {t.index for n in self.reference for t in n.outputs if t is not None}

    def fit(self, context, address):
        """The kernel's prepare (context: the TfLiteContext at `address`): resize the outputs
        LiteRT holds at another shape than the plan's; then a RuntimeError naming the tensor
        when any input or output still has another size (one without memory yet gets it, and
        is checked, at invoke)."""
        for index in self.outputs:
            shape = self.plan.graph.tensors[index].shape
            if tuple(abi.int_array(context.tensors[index].dims)) != tuple(shape):
                if context.ResizeTensor(address, ctypes.pointer(context.tensors[index]),
                                        abi.owned_int_array(shape)) != abi.OK:
                    raise RuntimeError(f"LiteRT refused to resize output tensor {index} to {list(shape)}")
        for index, tensor in self.tensors.items():
            held = context.tensors[index]
            # No memory yet: an IF branch's or WHILE body's input, which LiteRT points at its own
            # tensor's memory after this prepare (control_flow_common.h, the shallow copy);
            # memory.refresh checks its size at invoke.
            if held.bytes or held.data:
                check_bytes(index, tensor, held.bytes)
        self.memory.fit_lent()

    def run(self, context):
        """Run the partitions on LiteRT's tensors (context: the TfLiteContext)."""
        if self.delegate.context is None:
            raise RuntimeError("its GpuDelegate was closed: this interpreter can no longer run the GPU nodes "
                               "(make a new Interpreter with an open GpuDelegate)")
        storage = self.memory.refresh(context)
        for step in self.steps:
            step.run(storage)

    def release_partitions(self):
        """Free the GL objects of the partitions (a re-plan binds new ones next); the outputs
        lent from their mappings move to memory of the kernel's own first (memory.settle): here,
        before the partitions' release asks, since LiteRT allows no view of its tensors to live
        at a re-plan (allocate_tensors) and its call there holds a reference views_alive counts."""
        self.memory.settle()
        for partition in self.partitions:
            partition.release()

    def release(self):
        """LiteRT frees the kernel: its lent outputs go back to LiteRT's arena, then the partitions."""
        self.memory.give_back()
        self.release_partitions()


class _ReferenceStep:
    """One node the GPU does not take at the shapes LiteRT holds, run on the numpy reference
    (the package's CPU fallback and oracle) over the kernel's storage."""

    def __init__(self, node):
        self.node = node

    def run(self, storage):
        ops.run_into(self.node, storage)


def split_partitions(plan, nodes):
    """The partitions of `plan` that the operators `nodes` (one LiteRT kernel's) hold only part of."""
    return [p for p in plan.partitions if any(n.index in nodes for n in p.nodes)
            and not {n.index for n in p.nodes} <= nodes]


def _span(nodes):
    """'#3 (CONV_2D) .. #40 (ADD)' (Node.label of the first and last node)."""
    return nodes[0].label if len(nodes) == 1 else f"nodes {nodes[0].label} .. {nodes[-1].label}"


def kernel_nodes(buffer):
    """The operator indices, and the tensor indices it reads and writes, of
    TfLiteDelegateParams* `buffer` (what init() receives)."""
    params = ctypes.cast(buffer, ctypes.POINTER(abi.TfLiteDelegateParams)).contents
    return (set(abi.int_array(params.nodes_to_replace)),
            set(abi.int_array(params.input_tensors)) | set(abi.int_array(params.output_tensors)))
