"""One LiteRT delegate kernel: the GPU partitions of the nodes LiteRT replaced by one node.

Its I/O never goes through a copy of our own: the partitions' upload and download (gpu/runtime.py)
read each input from, and write each output into, numpy views over LiteRT's own tensor memory
(TfLiteTensor.data), as they read and write the Interpreter's storage arrays.
"""
import ctypes

import numpy as np

from . import abi


class Kernel:
    """The partitions of `plan` (plan.SubgraphPlan) whose nodes LiteRT gave this kernel (`nodes`,
    operator indices); a RuntimeError if LiteRT split one of them over several kernels."""

    def __init__(self, plan, nodes, delegate):
        self.delegate = delegate
        self.nodes = sorted(nodes)  # what LiteRT replaced by this kernel's node
        self.bind(plan)

    def bind(self, plan):
        """Take this kernel's partitions from `plan` (again after a re-plan)."""
        nodes = set(self.nodes)
        self.plan = plan
        self.partitions = [p for p in plan.partitions if any(n.index in nodes for n in p.nodes)]
        ours = {n.index for p in self.partitions for n in p.nodes}
        split = [p for p in self.partitions if not {n.index for n in p.nodes} <= nodes]
        if split:
            raise RuntimeError(f"LiteRT split the GPU partition {_span(split[0].nodes)} over several delegate "
                               "kernels; it cannot run in pieces")
        stray = sorted(nodes - ours - plan.folded)
        if stray:
            raise RuntimeError(f"LiteRT gave the GpuDelegate kernel nodes it does not run: {stray[:8]}")
        graph_nodes = [n for p in self.partitions for n in p.nodes]
        self.label = f"GpuDelegate kernel of {_span(graph_nodes)}" if graph_nodes else "GpuDelegate kernel"
        # {tensor index: graph Tensor} of every partition input and output.
        self.tensors = {slot.tensor_index: plan.graph.tensors[slot.tensor_index]
                        for p in self.partitions for slot in list(p.plan.inputs) + list(p.plan.outputs)}
        self.input_indices = sorted({slot.tensor_index for p in self.partitions for slot in p.plan.inputs})
        self._forget_views()

    def _forget_views(self):
        """Drop the views over LiteRT's memory (rebuilt at the next invoke)."""
        self._views = {}      # tensor index -> numpy view over LiteRT's memory (the storage partitions run on)
        self._addresses = {}  # tensor index -> the data address its view covers
        self._base, self._cells = None, []  # context.tensors, and (index, its data field) cells

    def fit(self, context, address):
        """The kernel's prepare (context: the TfLiteContext at `address`): resize the outputs
        LiteRT holds at another shape than the plan's; then a RuntimeError naming the tensor
        when any input or output still has another size (its memory comes later)."""
        outputs = {slot.tensor_index for p in self.partitions for slot in p.plan.outputs}
        for index in sorted(outputs):
            shape = self.plan.graph.tensors[index].shape
            if tuple(abi.int_array(context.tensors[index].dims)) != tuple(shape):
                if context.ResizeTensor(address, ctypes.pointer(context.tensors[index]),
                                        abi.owned_int_array(shape)) != abi.OK:
                    raise RuntimeError(f"LiteRT refused to resize output tensor {index} to {list(shape)}")
        for index, tensor in self.tensors.items():
            held = context.tensors[index]
            nbytes = tensor.size * np.dtype(tensor.dtype).itemsize
            if held.bytes != nbytes:
                raise RuntimeError(f"tensor {index} ({tensor.name!r}): LiteRT holds {held.bytes} bytes, the GPU "
                                   f"plan expects {nbytes} ({list(tensor.shape)} {np.dtype(tensor.dtype).name})")

    def run(self, context):
        """Run the partitions on LiteRT's tensors (context: the TfLiteContext)."""
        if self.delegate.context is None:
            raise RuntimeError("its GpuDelegate was closed: this interpreter can no longer run the GPU nodes "
                               "(make a new Interpreter with an open GpuDelegate)")
        storage = self._storage(context)
        for partition in self.partitions:
            partition.run(storage)

    def _storage(self, context):
        """{tensor index: numpy view over LiteRT's memory of it}, the same dict every invoke while
        LiteRT keeps the tensors where they are: per invoke only each tensor's data pointer is
        read (through cells made once) and compared with the view's."""
        base = ctypes.c_void_p.from_address(ctypes.addressof(context) + abi.TENSORS_OFFSET).value
        if base != self._base:
            self._base = base
            self._cells = [(index, ctypes.c_void_p.from_address(base + index * abi.TENSOR_SIZE + abi.DATA_OFFSET))
                           for index in self.tensors]
        storage, addresses = self._views, self._addresses
        for index, cell in self._cells:
            address = cell.value
            if address != addresses.get(index):
                storage[index] = self._view(address, index, self.tensors[index])
                addresses[index] = address
        return storage

    @staticmethod
    def _view(address, index, tensor):
        """A numpy array over LiteRT's memory of tensor `index` at `address`."""
        if not address:
            raise RuntimeError(f"tensor {index} ({tensor.name!r}) has no memory (allocate_tensors() first)")
        dtype = np.dtype(tensor.dtype)
        raw = (ctypes.c_uint8 * (tensor.size * dtype.itemsize)).from_address(address)
        return np.frombuffer(raw, dtype).reshape(tensor.shape)

    def release(self):
        for partition in self.partitions:
            partition.release()
        self._forget_views()


def _span(nodes):
    """'#3 (CONV_2D) .. #40 (ADD)' (Node.label of the first and last node)."""
    return nodes[0].label if len(nodes) == 1 else f"nodes {nodes[0].label} .. {nodes[-1].label}"


def kernel_nodes(buffer):
    """The operator indices of TfLiteDelegateParams* `buffer` (what init() receives)."""
    params = ctypes.cast(buffer, ctypes.POINTER(abi.TfLiteDelegateParams)).contents
    return set(abi.int_array(params.nodes_to_replace))
