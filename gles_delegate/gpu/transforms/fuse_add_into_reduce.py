"""Fuse an ADD of two runtime tensors of one shape, read only by a reduction (MEAN, SUM, ...), into
that reduction: it adds the second operand to each element it loads (reduce.INPUT_ADDEND), and the
ADD's dispatch and its output tensor go away. MediaPipe's selfie decoders pool each skip sum
(ADD -> global AVERAGE_POOL_2D, a MEAN by then) for their squeeze-excite gate and read the sum
nowhere else.

Runs after se_gate, which takes a MEAN whole into its gate kernel where the plane is small: an
ADD read by such a MEAN stays an ADD (fused into its producer's epilogue where it can be)."""
from .. import kernels
from ..kernels import reduce as reduce_kernel
from ..kernels.reduce import INPUT_ADDEND, OP_CODES
from .common import fuse_into_readers, sole_plain_reader

# rewrite_partition skips the rule when False (gles-profile --set gpu.transforms.fuse_add_into_reduce.ENABLED=0)
ENABLED = True


def apply(graph, log):
    fuse_into_readers(graph, log, "ADD", _reduction, _fuse)


def _fuse(graph, node, reduction, operands):
    x, addend = node.inputs[:2]
    reduction.options[INPUT_ADDEND] = addend
    graph.set_inputs(reduction, [x] + reduction.inputs[1:])
    graph.remove_node(node)
    operands.add(id(addend))
    return f"into {reduction.label}, which adds tensor {addend.index} to each element it loads"


def _reduction(graph, node, operands):
    """(the reduction that can take ADD `node` as its input addend, None), or (None, why not)."""
    a, b = node.inputs[:2]
    out = node.outputs[0]
    if a.is_const or b.is_const:
        return None, "an operand is a constant"
    if not tuple(a.shape) == tuple(b.shape) == tuple(out.shape):
        return None, f"it broadcasts {list(a.shape)} and {list(b.shape)} to {list(out.shape)}"
    reduction, why = sole_plain_reader(graph, node, operands)
    if why:
        return None, why
    if reduction.op not in OP_CODES or reduction.inputs[0] is not out or any(t is out for t in reduction.inputs[1:]):
        return None, f"its reader {reduction.label} does not reduce it"
    if reduction.options.get(INPUT_ADDEND) is not None:
        return None, f"{reduction.label} already adds a tensor to its input"
    runner = kernels.RUNNER[reduction.op](reduction)
    if runner is not reduce_kernel:  # integer.py's int32 reductions read no addend
        return None, f"{reduction.label} runs in {runner.__name__.rsplit('.', 1)[-1]}.py, which adds no addend"
    return reduction, None
