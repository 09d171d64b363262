"""Move an elementwise op whose only runtime operand comes from a layout op (a MUL by a scalar, a
LOGISTIC, ...) past the permutations (RESHAPE, TRANSPOSE, ...) that alone read its result, one
after another: a permutation of op(x) is op of the permuted x, value for value, and the layout
ops, adjacent now, compose into one (rule read_through_layout). litert-torch's attention scales q
and k between the slice of the qkv projection and the reshapes and transposes that split the
heads and merge them into the BATCH_MATMUL's batch: mobilevit_xxs 207 -> 189 dispatches,
vit_tiny_96 81 -> 73, transformer_encoder 37 -> 33."""
import numpy as np

from ..kernels import epilogue, layout
from .common import constant_parameters, fused_operands, producer_of, sole_reader

SCALAR_BINARY = ("MUL", "ADD", "SUB", "DIV")  # with a one-element constant operand
UNARY = ("LOGISTIC", "TANH", "RELU", "RELU6", "RELU_N1_TO_1", "NEG", "ABS", "EXP")
PERMUTATIONS = ("RESHAPE", "SQUEEZE", "EXPAND_DIMS", "TRANSPOSE")
ENABLED = True  # rewrite_partition skips the rule when False (gles-profile --set gpu.transforms.elementwise_after_layout.ENABLED=0)


def apply(graph, log):
    operands = fused_operands(graph)
    for node in list(graph.nodes):
        if node.op not in SCALAR_BINARY + UNARY:
            continue
        x = _runtime_operand(node)
        before = None if x is None else producer_of(graph, x)
        if before is None or before.op not in layout.REMAP_OPS:
            continue  # nothing to compose with: moving it would gain nothing
        passed = []
        while not isinstance(after := _permutation_after(graph, node, x, operands), str):
            x = _move_past(graph, node, x, after)
            passed.append(after.label)
        if passed:  # past a chain of them (a RESHAPE, then a TRANSPOSE: ViT's q), one at a time
            log.applied(node, f"after {', '.join(passed)}, which now read{'s' * (len(passed) == 1)} "
                              f"{before.label}'s output")
        else:
            log.skipped(node, after)


def _move_past(graph, node, x, after):
    """Make permutation `after` read `x` (node's runtime operand) and `node` read what it writes;
    returns node's new runtime operand."""
    result = after.outputs[0]
    moved = graph.new_tensor(f"{result.name}/before_{node.op.lower()}", result.shape, np.float32)
    graph.set_inputs(after, [x if t is node.outputs[0] else t for t in after.inputs])
    graph.set_outputs(after, [moved])
    graph.set_inputs(node, [moved if t is x else t for t in node.inputs])
    graph.set_outputs(node, [result])
    graph.move_before(after, node)
    return moved


def _runtime_operand(node):
    """The one runtime input of `node` when every other input is a one-element constant, else None."""
    runtime = [t for t in node.inputs if t is not None and not t.is_const]
    others = [t for t in node.inputs if t is not None and t.is_const]
    return runtime[0] if len(runtime) == 1 and all(t.size == 1 for t in others) else None


def _permutation_after(graph, node, x, operands):
    """The RESHAPE / TRANSPOSE that alone reads `node`'s output, when `node` may move past it;
    else why not."""
    out = node.outputs[0]
    if sole_reader(graph, x, operands) is not node:  # (or x leaves the partition)
        return "its input is read elsewhere too"
    after = sole_reader(graph, out, operands)
    if after is None or after.op not in PERMUTATIONS or after.inputs[0] is not out or not constant_parameters(after):
        return "its output is not read by a RESHAPE or TRANSPOSE alone"
    if epilogue.steps_of(node) or epilogue.steps_of(after) or tuple(out.shape) != tuple(x.shape):
        return "it has epilogue steps, or broadcasts"
    if any(t.dtype != np.float32 or t.quantization is not None for t in (x, out, after.outputs[0])):
        return "a tensor is not float32 (a quantized model's)"
    if any(t is not None and t.is_const and len(t.shape) > len(after.outputs[0].shape) for t in node.inputs):
        # ([1, 1, 1] by a RESHAPE to [1, 1]: it would broadcast the result to its rank, which no kernel takes)
        return f"its constant has a higher rank than the output of {after.label}"
    return after
