"""Graph IR: the one representation that transforms, the partitioner and the compilers edit.

A Graph holds Tensor and Node objects. Node.inputs holds Tensor objects (None for an omitted
optional input), so a rewrite can rewire nodes without index bookkeeping. Tensor.index is the
tensor's index in the original subgraph (what the interpreter API exposes); tensors created by
rewrites get fresh indices after the original ones.
"""
import functools
import math
from dataclasses import dataclass, field

import numpy as np

from . import int32_values
from .errors import ModelError


class Deferred:
    """A constant's value that is computed the first time Tensor.data is read (folding fp16
    weights: a start that loads its GPU partitions from the serialization cache never reads
    them). `compute()` returns the array."""
    __slots__ = ("compute",)

    def __init__(self, compute):
        self.compute = compute


@functools.lru_cache(maxsize=4096)
def _elements(shape):
    """The product of `shape`, exact (no numpy call per tensor: reading a model asks thousands,
    and the stages after it ask several times per tensor)."""
    return math.prod(map(int, shape))


@dataclass(eq=False)
class Tensor:
    """A tensor: shape (tuple of ints), numpy dtype, constant data (or None) and quantization.
    `data` may be set to a Deferred: it counts as constant at once and is computed when read.
    `fixed_shape`: an operator writes it, but the model gives it a buffer (see Graph.from_model),
    so its shape cannot change on a resize. `int32_values`: an int64 tensor the model's semantics
    keep within int32's range (int32_values.mark, which Graph.from_model runs)."""
    index: int
    name: str
    shape: tuple
    dtype: np.dtype
    data: np.ndarray | None = None
    quantization: object = None
    sparsity: object = None
    shape_signature: tuple | None = None
    is_variable: bool = False
    type_name: str = ""
    fixed_shape: bool = False
    int32_values: bool = False

    @property
    def is_const(self):
        return self._data is not None

    @property
    def is_deferred(self):
        """A constant whose value is not computed yet (reading `data` computes it)."""
        return type(self._data) is Deferred

    @property
    def size(self):
        """Number of elements (the product of the shape; 1 for a scalar)."""
        return _elements(tuple(self.shape))


    def __repr__(self):
        kind = "const " if self.is_const else ""
        return f"<Tensor {self.index} {self.name!r} {kind}{list(self.shape)} {self.dtype}>"


def _data(tensor):
    value = tensor._data
    if type(value) is Deferred:
        value = tensor._data = value.compute()
    return value


def _set_data(tensor, value):
    tensor._data = value


# After the dataclass is made (its __init__ assigns self.data, so through the setter).
Tensor.data = property(_data, _set_data, doc="The constant's array (None for a runtime tensor).")


@dataclass(eq=False)
class Node:
    """An operator application. `index` is the operator's index in the original subgraph
    (what error messages and logs name); `options` the builtin options dict. `runtime`: what the
    kernels of control flow and resource variables call back into (subgraphs.Runtime), set by
    the interpreter on the nodes of those ops (ops.RUNTIME_OPS); None elsewhere."""
    index: int
    op: str
    inputs: list
    outputs: list
    version: int = 1
    options: dict = field(default_factory=dict)
    custom: bool = False
    custom_options: bytes | None = None
    runtime: object = field(default=None, repr=False)

    def __repr__(self):
        return f"<Node #{self.index} {self.op}>"

    @property
    def label(self):
        """How logs and errors name this node: `#<index> (<OP>)`."""
        return f"#{self.index} ({self.op})"


# StableHLO ops whose body subgraph LiteRT's kernel reads as one reduction op (stablehlo_reduce_window.cc
# inspects the body's single kernel rather than running it): the option naming the body, and the
# one Graph.from_model adds, BODY_OP, the body's op code when it is one binary op of the body's two
# inputs to its output (no fused activation), else None.
REDUCTION_BODIES = {"STABLEHLO_REDUCE_WINDOW": "body_subgraph_index"}
BODY_OP = "body_op"


def _options_of(model, op):
    """A copy of operator `op`'s options, with BODY_OP for the ops of REDUCTION_BODIES."""
    options = dict(op.options)
    if not op.custom and op.op in REDUCTION_BODIES:
        options[BODY_OP] = _body_op(model, options.get(REDUCTION_BODIES[op.op]))
    return options


def _body_op(model, index):
    if not isinstance(index, int) or not 0 <= index < len(model.subgraphs):
        return None
    body = model.subgraphs[index]
    if len(body.operators) != 1 or len(body.inputs) != 2 or len(body.outputs) != 1:
        return None
    (op,) = body.operators
    if op.custom or sorted(op.inputs) != sorted(body.inputs) or len(set(op.inputs)) != 2 \
            or tuple(op.outputs) != tuple(body.outputs) or op.options.get("fused_activation_function", 0) != 0:
        return None
    return op.op


def tensor_of(model, subgraph_index, i, index=None, name=None):
    """The IR Tensor of tensor i of a model's subgraph (its constant data zero-copy); `index` and
    `name` replace the file's (an inlined decomposition's tensors get fresh ones)."""
    t = model.subgraphs[subgraph_index].tensors[i]
    return Tensor(index=i if index is None else index, name=t.name if name is None else name, shape=tuple(t.shape),
                  dtype=tensor_dtype(t), data=model.tensor_data(subgraph_index, i), quantization=t.quantization,
                  sparsity=t.sparsity, shape_signature=t.shape_signature, is_variable=t.is_variable,
                  type_name=t.type_name)


def node_of(model, k, op, tensors):
    """The IR Node of OperatorDef `op` (as node #k), its tensor indices looked up in `tensors`."""
    inputs = [tensors[i] if i >= 0 else None for i in op.inputs]
    outputs = [tensors[i] for i in op.outputs]
    for out in outputs:
        _drop_written_buffer(out)
    _check_not_in_place(k, op, inputs, outputs)
    return Node(index=k, op=op.op, inputs=inputs, outputs=outputs, version=op.version, options=_options_of(model, op),
                custom=op.custom, custom_options=op.custom_options)


def _drop_written_buffer(tensor):
    """Make a tensor an operator writes a runtime tensor even when the model gives it a buffer
    (converters leave one there at times). LiteRT maps such a buffer read-only and the operator
    overwrites it at every invoke, so the values are the operator's; a buffer with data fixes the
    tensor's shape (LiteRT's ResizeTensor: 'Attempting to resize a fixed-size tensor')."""
    if tensor.is_const:
        tensor.fixed_shape = tensor.fixed_shape or tensor.data.size > 0
        tensor.data = None


def tensor_dtype(tensor_def):
    """The numpy dtype a tensor of the file (tflite.model.TensorDef) holds: its own, or int32 for
    a RESOURCE tensor, which holds the id of a resource variable (4 bytes in TFLite, VAR_HANDLE);
    None for types numpy cannot hold (STRING, INT4, ...)."""
    if tensor_def.type_name == "RESOURCE":
        return np.dtype(np.int32)
    return tensor_def.dtype


def _check_not_in_place(k, op, inputs, outputs):
    """ModelError if operator #k writes one of its own inputs. TFLite kernels never run in place
    (an output may be resized and reallocated before the inputs are read), and LiteRT refuses
    such a model at AllocateTensors ('Tensor 0 is both input 0 and output 0')."""
    for j, out in enumerate(outputs):
        for i, t in enumerate(inputs):
            if t is out:
                raise ModelError(f"operator #{k} ({op.op}) writes tensor {out.index} ({out.name!r}) as its "
                                 f"output {j}, which is also its input {i}: an operator cannot run in place")


# Option keys under which GPU rewrite rules make a node read more tensors (fused_reads).
EPILOGUE_KEY = "epilogue"
INPUT_GATE_KEY = "input_gate"
INPUT_ADDEND_KEY = "input_addend"
PASS_THROUGH_KEY = "pass_through"  # a depthwise convolution's residual (rule residual_through_concat)
READ_THROUGH_KEY = "read_through"  # gpu/kernels/layout.py READ_THROUGH: ((input, tensor read in its place, map), ...)


def fused_reads(node):
    """The tensors `node` reads through its options, not its inputs, once GPU rewrite rules fused
    work into it: the tensor operands of its epilogue steps (options["epilogue"],
    gpu/kernels/epilogue.py), a convolution's input gate (options["input_gate"], rule
    channel_gate), a reduction's input addend (options["input_addend"], rule
    fuse_add_into_reduce), a depthwise convolution's residual (options["pass_through"], rule
    residual_through_concat) and the tensors a layout op reads in place of inputs whose producer,
    a layout op too, was removed (options["read_through"], rule read_through_layout: a rule
    that took the source for unread once dropped its store)."""
    if READ_THROUGH_KEY not in node.options:
        return option_operands(node)
    return option_operands(node) + [source for _, source, _ in node.options[READ_THROUGH_KEY]]


def option_operands(node):
    """The operands fused_reads names but the read-through sources: what a fused step or gate
    of `node` reads at its output's (or input's) position."""
    options = node.options
    if EPILOGUE_KEY not in options and INPUT_GATE_KEY not in options and INPUT_ADDEND_KEY not in options \
            and PASS_THROUGH_KEY not in options:
        return []  # most nodes (the graph's index asks every node)
    operands = [getattr(step, "operand", None) for step in options.get(EPILOGUE_KEY, ())]
    return [t for t in [*operands, options.get(INPUT_GATE_KEY), options.get(INPUT_ADDEND_KEY),
                        options.get(PASS_THROUGH_KEY)] if isinstance(t, Tensor)]


def read_tensors(node):
    """Every tensor `node` reads: its inputs and its fused_reads. The Graph's reader index counts
    both, so no later rule takes a fused operand for unread (a RESHAPE feeding a fused ADD was
    once removed as if nothing read it)."""
    return [t for t in node.inputs if t is not None] + fused_reads(node)


class _TensorList:
    """A Graph's inputs or outputs: a list of tensors (assign a new one to change it, never edit
    it) and the set of their ids, kept with it for is_graph_input / is_graph_output."""

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, graph, owner=None):
        return self if graph is None else graph.__dict__["_" + self.name]

    def __set__(self, graph, tensors):
        tensors = list(tensors)
        graph.__dict__["_" + self.name] = tensors
        graph.__dict__[f"_{self.name}_ids"] = {id(t) for t in tensors}


class Graph:
    """Nodes in execution order, the tensors they use, and the graph inputs/outputs.

    Rewrites edit nodes through the methods below (set_inputs, set_outputs, remove_node,
    replace_node, move_before), never by assigning a node's lists: those keep an index of each
    tensor's readers and producer and of each node's position current, so that readers_of,
    producer_of and runs_before cost O(1) instead of a scan of the graph (a rule asking them
    for every node was quadratic: minutes for 20,000 nodes).

    The index is made on the first query or edit that needs it: most graphs (the interpreter's,
    a partition's float view) are never asked, and indexing 100,000 nodes took a quarter second.

    model_digest / subgraph_index: the sha256 of the model file and the subgraph this graph was
    built from (Graph.from_model; None otherwise): what the serialization cache keys by. The
    digest is computed on first use, once per model.
    """

    inputs = _TensorList()
    outputs = _TensorList()

    def __init__(self, nodes, inputs, outputs, tensors, name=""):
        self.nodes = nodes
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.tensors = list(tensors)
        self.name = name
        self.source_model = None  # the ModelDef of Graph.from_model
        self.subgraph_index = None
        self.next_index = max((t.index for t in self.tensors), default=-1) + 1  # see new_tensor

    @classmethod
    def from_model(cls, model, subgraph_index=0, single_producers=True, inline_composites=True):
        """Build the IR of one subgraph of a ModelDef. Constant data stays zero-copy.
        single_producers: refuse a tensor that two operators write (check_order); LiteRT's
        delegate path reads such a graph and leaves those operators to LiteRT.
        inline_composites: each STABLEHLO_COMPOSITE that can be replaced by the nodes of its
        decomposition subgraph is (composites.py; LiteRT's delegate path claims such a composite
        whole or not at all: litert/plan.py)."""
        sg = model.subgraphs[subgraph_index]
        tensors = [tensor_of(model, subgraph_index, i) for i in range(len(sg.tensors))]
        nodes = [node_of(model, k, op, tensors) for k, op in enumerate(sg.operators)]
        if inline_composites:
            from .composites import inline  # it builds on this module
            nodes = inline(model, subgraph_index, nodes, tensors)
        graph = cls(nodes, [tensors[i] for i in sg.inputs], [tensors[i] for i in sg.outputs], tensors, sg.name)
        graph.source_model = model
        graph.subgraph_index = subgraph_index
        graph.check_order(single_producers)
        int32_values.mark(graph)
        return graph

    @property
    def model_digest(self):
        """sha256 (hex) of the model file this graph was read from, or None (see ModelDef.digest)."""
        return getattr(self.source_model, "digest", None)

    def check_order(self, single_producers=True):
        """Every node's inputs must be graph inputs, constants or outputs of earlier nodes, and
        (with `single_producers`) no tensor may be the output of two nodes: TFLite gives each
        tensor one producer, and LiteRT's memory planner, which frees a tensor after its last
        reader, can let a second write land outside its arena (heap corruption in LiteRT 2.3,
        found by gles-fuzz)."""
        ready = {id(t) for t in self.inputs} | {id(t) for t in self.tensors if t.is_const or t.is_variable}
        for node in self.nodes:
            for t in node.inputs:
                if t is not None and id(t) not in ready:
                    raise ModelError(f"operator {node.label} reads tensor {t.index} ({t.name!r}) "
                                     "before anything writes it")
            ready.update(id(t) for t in node.outputs)
        rewritten = self.rewritten_tensors() if single_producers else ()
        if rewritten:
            tensor, (first, second, *_) = rewritten[0]
            raise ModelError(f"tensor {tensor.index} ({tensor.name!r}) is the output of operator {first.label} "
                             f"and of operator {second.label}: a tensor has one producer")

    def rewritten_tensors(self):
        """[(tensor, [the nodes writing it, in order])] of the tensors more than one node writes."""
        writers = {}
        for node in self.nodes:
            for t in node.outputs:
                if t is not None:
                    writers.setdefault(id(t), (t, []))[1].append(node)
        return [(t, nodes) for t, nodes in writers.values() if len(nodes) > 1]

    # -- nodes and the index ---------------------------------------------------------------
    @property
    def nodes(self):
        """The nodes in execution order (a list made again after an edit; do not edit it)."""
        if self._node_list is None:
            self._node_list = sorted(self._position, key=self._position.__getitem__)
        return self._node_list

    @nodes.setter
    def nodes(self, nodes):
        self._node_list = list(nodes)
        self._position = self._taken = self._readers = self._producer = None  # the index: _indexed()

    def _indexed(self):
        """The graph, its index made if it was not (positions, readers, producers)."""
        if self._position is None:
            # Positions spaced apart so that move_before finds room between two nodes.
            self._position = {node: k * _SPACING for k, node in enumerate(self._node_list)}
            self._taken = set(self._position.values())
            self._readers, self._producer = {}, {}
            for node in self._node_list:
                self._index(node)
        return self

    def _index(self, node):
        readers, producer = self._readers, self._producer
        for t in node.inputs:
            if t is not None:
                readers.setdefault(id(t), {})[node] = None
        for t in fused_reads(node):
            readers.setdefault(id(t), {})[node] = None
        for t in node.outputs:
            if t is not None:
                producer[id(t)] = node

    def _reindex(self, node):
        # A node a rule removed earlier (rules loop over a snapshot) stays out of the index; no
        # index yet: it will be made from the nodes as they are then.
        if self._position is not None and node in self._position:
            self._index(node)

    def _unindex(self, node):
        if self._position is None:
            return
        for t in (*node.inputs, *fused_reads(node)):
            readers = self._readers.get(id(t)) if t is not None else None
            if readers is not None:
                readers.pop(node, None)
        for t in node.outputs:
            if t is not None and self._producer.get(id(t)) is node:
                del self._producer[id(t)]

    # -- queries --------------------------------------------------------------------------
    def producers(self):
        """{id(tensor): node} for every tensor some node writes."""
        return dict(self._indexed()._producer)

    def consumers(self):
        """{id(tensor): [nodes that read it]}, in execution order."""
        return {key: self.readers_of_id(key) for key, nodes in self._indexed()._readers.items() if nodes}

    def readers_of(self, tensor):
        """The nodes that read `tensor`, in execution order."""
        return self.readers_of_id(id(tensor))

    def readers_of_id(self, key):
        self._indexed()
        return sorted(self._readers.get(key, ()), key=self._position.__getitem__)

    def producer_of(self, tensor):
        """The node that writes `tensor`, or None (a graph input or a constant)."""
        return self._indexed()._producer.get(id(tensor))

    def position(self, node):
        """A number that orders `node` among the graph's nodes (execution order)."""
        return self._indexed()._position[node]

    def is_graph_input(self, tensor):
        """Whether `tensor` (the object, not an equal one) is an input of the graph: O(1)."""
        return id(tensor) in self._inputs_ids

    def is_graph_output(self, tensor):
        """Whether `tensor` (the object, not an equal one) is an output of the graph: O(1) (a
        graph whose every node writes an output asks this per node)."""
        return id(tensor) in self._outputs_ids

    # -- edits ----------------------------------------------------------------------------
    def new_tensor(self, name, shape, dtype, data=None, quantization=None):
        """Add a tensor created by a rewrite; it gets the next free index, `next_index` (one past
        the graph's largest index, or what transforms.rewrite_partition sets: past the model's)."""
        tensor = Tensor(index=self.next_index, name=name, shape=tuple(shape), dtype=np.dtype(dtype),
                        data=data, quantization=quantization)
        self.next_index += 1
        self.tensors.append(tensor)
        return tensor

    def set_inputs(self, node, inputs):
        """Make `node` read `inputs`."""
        self._unindex(node)
        node.inputs = list(inputs)
        self._reindex(node)

    def set_outputs(self, node, outputs):
        """Make `node` write `outputs`."""
        self._unindex(node)
        node.outputs = list(outputs)
        self._reindex(node)

    def set_options(self, node, options):
        """Give `node` `options` (its epilogue operands, input gate and addend are read tensors)."""
        self._unindex(node)
        node.options = options
        self._reindex(node)

    def replace_uses(self, old, new):
        """Make every reader of `old` (and the graph outputs) read `new` instead."""
        for node in self.readers_of(old):
            self.set_inputs(node, [new if t is old else t for t in node.inputs])
        if self.is_graph_output(old):
            self.outputs = [new if t is old else t for t in self.outputs]

    def remove_nodes(self, nodes):
        """Remove `nodes` in one pass (reindexing once, not once per node)."""
        gone = {id(n) for n in nodes}
        if gone:
            self.nodes = [n for n in self.nodes if id(n) not in gone]

    def remove_node(self, node):
        """Remove `node` (nothing if it is not in the graph)."""
        if node not in self._indexed()._position:
            return
        self._unindex(node)
        self._taken.discard(self._position.pop(node))
        self._node_list = None

    def replace_node(self, node, replacement):
        """Put the nodes `replacement` (in order) where `node` is, and remove `node`."""
        anchor = node
        for new in reversed(replacement):
            self._insert_before(new, anchor)
            anchor = new
        self.remove_node(node)

    def insert_before(self, new, node):
        """Put the node `new` (not in the graph) just before `node` in execution order."""
        self._insert_before(new, node)

    def move_before(self, moved, node):
        """Move `moved` to just before `node` in execution order."""
        self.remove_node(moved)
        self._insert_before(moved, node)

    def _insert_before(self, new, node):
        """Give `new` the position just below `node`'s: free, it is above the node before (an
        integer below `node`'s); taken, every node is renumbered first (rare: positions start
        _SPACING apart), so inserting is O(1) amortized."""
        if self._indexed()._position[node] - 1 in self._taken:
            self.nodes = self.nodes
            self._indexed()
        self._position[new] = self._position[node] - 1
        self._taken.add(self._position[new])
        self._node_list = None
        self._index(new)


_SPACING = 1 << 20  # room between two nodes' positions for nodes inserted between them
