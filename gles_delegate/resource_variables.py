"""Which resource variable each READ_VARIABLE / ASSIGN_VARIABLE uses, and whether its shape is
fixed before invoke (an allocate_tensors() stage of the Interpreter's executors).

A GPU partition holds a variable in storage of a fixed shape (gpu/variables.py). annotate()
fixes a variable's shape and dtype where nothing can assign it others: every ASSIGN_VARIABLE
of it, here (at the shapes shape propagation gave, none a dynamic tensor) and in the model's
other subgraphs (as declared: CALL_ONCE's initializer assigns constants), assigns values of one
shape and dtype, and the value it holds now (at a later allocate_tensors, after a resize) has
them too. A model where some ASSIGN_VARIABLE gets its handle from elsewhere than a VAR_HANDLE
of its own subgraph fixes no variable (that handle may name any of them). READ_VARIABLE's
output shape does not depend on it (ops/variables.py: declared, as LiteRT keeps it).

The shapes fixed here are checked again before each invoke (stale()): a value of another shape
assigned since (a signature that assigns its own input, resized) makes the executor plan again.
"""
from dataclasses import dataclass, replace

import numpy as np

from .graph import tensor_dtype
from .ops.variables import DYNAMIC_READ, VARIABLE, ref_of
from .shape_propagation import dynamic_tensors

ACCESS_OPS = ("READ_VARIABLE", "ASSIGN_VARIABLE")
GPU_DTYPES = (np.dtype(np.float32), np.dtype(np.int8), np.dtype(np.uint8))


@dataclass(frozen=True)
class VariableRef:
    """The variable of a READ_VARIABLE / ASSIGN_VARIABLE node: its VAR_HANDLE's (container,
    shared_name) and resource id `rid`; `shape` and `dtype` fixed before invoke, or None and
    `why` not; `gpu_reason`: why a GPU partition cannot hold it (None: it can)."""
    container: str
    shared_name: str
    rid: int
    shape: tuple | None = None
    dtype: np.dtype | None = None
    why: str | None = None
    gpu_reason: str | None = None

    @property
    def key(self):
        return self.container, self.shared_name

    @property
    def label(self):
        """How messages name the variable."""
        return f"resource variable {self.shared_name!r}" + (f" (container {self.container!r})" if self.container else "")


def var_handles(operators, tensor_of):
    """{handle tensor: (container, shared_name)} of the VAR_HANDLE operators; tensor_of maps an
    operator's output entry to the key used for it."""
    return {tensor_of(op.outputs[0]): (op.options.get("container", ""), op.options.get("shared_name", ""))
            for op in operators if op.op == "VAR_HANDLE" and len(op.outputs) == 1 and op.outputs[0] is not None}


def declared_assigns(model, skip):
    """({key: [(shape or None, dtype)]} of the values the ASSIGN_VARIABLEs of the model's
    subgraphs other than `skip` assign, a shape None where the file declares a placeholder;
    whether some ASSIGN_VARIABLE of any subgraph takes its handle from elsewhere than a
    VAR_HANDLE of its own subgraph)."""
    assigns, untraceable = {}, False
    for s, sg in enumerate(model.subgraphs):
        handles = var_handles(sg.operators, lambda i: i)
        for op in sg.operators:
            if op.op != "ASSIGN_VARIABLE" or len(op.inputs) != 2:
                continue
            key = handles.get(op.inputs[0])
            untraceable |= key is None
            if key is None or s == skip or op.inputs[1] < 0:
                continue
            value = sg.tensors[op.inputs[1]]
            shape = None if value.shape_signature is not None and min(value.shape_signature, default=0) < 0 \
                else tuple(value.shape)
            assigns.setdefault(key, []).append((shape, tensor_dtype(value)))
    return assigns, untraceable


def _grid(tensor):
    q = tensor.quantization
    return None if q is None else (q.scales.astype(np.float32).tobytes(), np.asarray(q.zero_points).tobytes())


def _gpu_reason(tensors, dtype):
    """Why a GPU partition cannot hold a variable read and assigned as `tensors`, or None: the
    GPU holds float32 values, and 8-bit ones as their float view on one per-tensor grid."""
    if dtype not in GPU_DTYPES:
        return f"it holds {dtype} values (the GPU holds float32 and 8-bit quantized variables)"
    if dtype == np.float32:
        return None
    grids = {_grid(t) for t in tensors}
    if None in grids or any(t.quantization.scales.size != 1 for t in tensors):
        return "its reads and assignments are not all quantized per tensor"
    if len(grids) > 1:
        return "its reads and assignments are on different quantization grids (TFLite reinterprets the integers)"
    return None


def _fix(ref, nodes, elsewhere, untraceable, held, dynamic):
    """`ref` with the shape and dtype of the variable its `nodes` (this graph's reads and
    assignments of it) use when nothing can change them (the module docstring), else with why."""
    reads = [n.outputs[0] for n in nodes if n.op == "READ_VARIABLE"]
    values = [n.inputs[1] for n in nodes if n.op == "ASSIGN_VARIABLE"]
    shapes = {tuple(t.shape) for t in values} | {shape for shape, _ in elsewhere}
    dtypes = {t.dtype for t in reads + values} | {dtype for _, dtype in elsewhere}
    if held is not None:
        shapes.add(tuple(held[0]))
        dtypes.add(np.dtype(held[1]))
    why = None
    if untraceable:
        why = "an ASSIGN_VARIABLE of the model takes its handle from elsewhere than a VAR_HANDLE"
    elif any(id(t) in dynamic for t in values):
        why = "it is assigned a dynamic tensor"
    elif not shapes:
        why = "nothing assigns it"
    elif len(shapes) != 1 or None in shapes:
        why = f"it is assigned values of shapes {sorted('unknown' if s is None else str(list(s)) for s in shapes)}"
    elif len(dtypes) != 1:
        why = f"it is read or assigned as {sorted(str(d) for d in dtypes)}"
    if why is not None:
        return replace(ref, why=f"{ref.label} has no fixed shape: {why}")
    dtype = next(iter(dtypes))
    return replace(ref, shape=next(iter(shapes)), dtype=dtype, gpu_reason=_gpu_reason(reads + values, dtype))


def annotate(graph, runtime):
    """Record on every READ_VARIABLE of `graph` whether its output is dynamic (ops/variables.py:
    declared of rank 0, which shape propagation leaves as it is), and give every READ_VARIABLE /
    ASSIGN_VARIABLE whose handle a VAR_HANDLE of `graph` makes its VariableRef
    (options[VARIABLE]), its shape fixed where the module docstring says. Call after shape
    propagation; returns shape_propagation.dynamic_tensors(graph). runtime: subgraphs.Runtime
    (None: only the dynamic tensors)."""
    if runtime is None:
        return dynamic_tensors(graph)
    for node in graph.nodes:
        if node.op == "READ_VARIABLE" and node.outputs and node.outputs[0] is not None:
            node.options[DYNAMIC_READ] = len(node.outputs[0].shape) == 0
    dynamic = dynamic_tensors(graph)
    handles = var_handles(graph.nodes, lambda t: id(t))
    uses = {}
    for node in graph.nodes:
        if node.op in ACCESS_OPS and _well_formed(node) and id(node.inputs[0]) in handles:
            uses.setdefault(handles[id(node.inputs[0])], []).append(node)
    model = getattr(graph, "source_model", None)
    elsewhere, untraceable = ({}, False) if model is None else declared_assigns(model, graph.subgraph_index)
    for key, nodes in uses.items():
        rid = runtime.resource_id(*key)
        ref = _fix(VariableRef(*key, rid), nodes, elsewhere.get(key, []), untraceable,
                   runtime.variables.describe(rid), dynamic)
        for node in nodes:
            node.options[VARIABLE] = ref
    return dynamic


def _well_formed(node):
    """Whether READ_VARIABLE / ASSIGN_VARIABLE `node` has the tensors its op takes: a malformed
    one fixes nothing here, and the checks of allocate_tensors() name it (ops/variables.py)."""
    if not node.inputs or node.inputs[0] is None:
        return False
    if node.op == "ASSIGN_VARIABLE":
        return len(node.inputs) == 2 and node.inputs[1] is not None
    return len(node.outputs) == 1 and node.outputs[0] is not None


def fixed(nodes):
    """{resource id: (shape, dtype)} of the variables whose shape annotate() fixed that `nodes`
    (those GPU partitions hold) read or assign."""
    return {ref.rid: (ref.shape, ref.dtype) for node in nodes for ref in [ref_of(node)]
            if ref is not None and ref.shape is not None}


def stale(planned, store):
    """Whether a variable of `planned` ({rid: (shape, dtype)}, fixed()) holds a value of
    another shape or dtype in `store` now: the plan that fixed it must be made again."""
    for rid, expected in planned.items():
        held = store.describe(rid)
        if held is not None and (tuple(held[0]), np.dtype(held[1])) != (tuple(expected[0]), np.dtype(expected[1])):
            return True
    return False
