"""Resource variables held in a GPU partition's memory between invokes: compile time.

A GPU partition that reads or assigns a resource variable keeps it in its arena, in storage the
memory planner lends to no other tensor (memory.plan_arena's `persistent`), as the float values
of its float view: a float32 variable as it is, an int8 / uint8 one as the real values of its
integers (all on one grid: resource_variables.VariableRef.gpu_reason). The stages:

  bind()         before the rewrite rules: each READ_VARIABLE / ASSIGN_VARIABLE of the partition
                 reads / writes one storage tensor per variable (its input 0, in place of its
                 handle), the VAR_HANDLEs go (gpu/kernels/variables.py then copies in and out);
  slots()        after memory planning: Plan.variables, where each variable lives and whether
                 the partition reads it before assigning it;
  then, at run time, gpu/variable_sync.GpuVariables keeps that storage in step with the
  interpreter's other copies (variable_store.py).
"""
import copy
from dataclasses import dataclass

import numpy as np

from ..graph import Tensor
from ..ops.variables import ref_of
from . import memory

ACCESS_OPS = ("READ_VARIABLE", "ASSIGN_VARIABLE")
F32 = np.dtype(np.float32)


# -- compile time --------------------------------------------------------------------------------
def bind(nodes, inputs, outputs, next_index):
    """A partition's view (its nodes, input and output tensors) with its variables bound: each
    READ_VARIABLE / ASSIGN_VARIABLE reads / writes the storage tensor of its variable (a new
    float32 tensor of the variable's shape per variable, indices from `next_index`: past every
    model tensor, so a capture never takes it for one) as input 0; the VAR_HANDLE nodes go, and
    so do the handles among the inputs and outputs (GpuVariables writes the ones read outside).
    Returns (nodes, inputs, outputs): the nodes it rebinds are copies (a float partition's
    view holds the graph's own nodes: quant.float_view)."""
    handles = {id(n.outputs[0]) for n in nodes if n.op == "VAR_HANDLE"}
    storage = {}
    nodes = list(nodes)
    for k, node in enumerate(nodes):
        if node.op in ACCESS_OPS:
            node = nodes[k] = copy.copy(node)
            ref, value = ref_of(node), node.outputs[0] if node.op == "READ_VARIABLE" else node.inputs[1]
            if ref.key not in storage:
                storage[ref.key] = Tensor(index=next_index + len(storage), name=f"variable {ref.shared_name}",
                                          shape=ref.shape, dtype=F32, quantization=value.quantization,
                                          type_name="FLOAT32")
            handles.add(id(node.inputs[0]))
            node.inputs = [storage[ref.key], *node.inputs[1:]]
    kept = [n for n in nodes if n.op != "VAR_HANDLE"]
    read = {id(t) for n in kept for t in n.inputs if t is not None}
    return (kept, [t for t in inputs if id(t) not in handles or id(t) in read],
            [t for t in outputs if id(t) not in handles])


@dataclass
class VariableSlot:
    """A resource variable a partition holds: its VAR_HANDLE's (container, shared_name), its
    storage's offset (vec4 elements, encoded as Plan.writes encodes them) and shape, whether the
    partition reads it before assigning it (`reads`: the value must be there) and whether it
    assigns it (`writes`)."""
    container: str
    shared_name: str
    offset: int
    shape: tuple
    reads: bool
    writes: bool


def slots(dispatches, env, offsets):
    """The VariableSlots of a partition built with KernelEnv `env` (its `persistent` variables
    and the tensors sharing their storage, `aliases`: a value written in place), `offsets` the
    storage layout's {id(tensor): offset}."""
    groups = memory.alias_groups(env.aliases)
    out = []
    for tensor, (container, shared_name) in env.persistent.values():
        members = {id(t) for t in groups.get(id(tensor), [tensor])}
        touching = [d for d in dispatches if any(id(t) in members for t in d.reads + d.writes)]
        out.append(VariableSlot(container, shared_name, offsets[id(tensor)], tuple(tensor.shape),
                                reads=any(id(t) in members for t in touching[0].reads),
                                writes=any(id(t) in members for d in touching for t in d.writes)))
    return out
