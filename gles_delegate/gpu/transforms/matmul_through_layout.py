"""A BATCH_MATMUL reads an operand through the layout op that made it, and writes its output
into the place a layout op would have moved it to, when that is a strided view of whole vec4s
(matmul.fit_view): an attention block's head split (FC output [1, T, H * D] -> RESHAPE ->
TRANSPOSE -> [H, T, D], the key transposed too, which flips the matmul's adjoint) and its head
merge ([H, T, D] -> [1, T, H * D]) then cost no dispatch of their own. Runs after
read_through_layout, which has already composed each chain of layout ops into one."""
import numpy as np

from ..kernels import epilogue, layout, matmul
from .common import fused_operands, is_boundary, producer_of, readers_of
from .read_through_layout import own_blocker

ENABLED = True  # rewrite_partition skips the rule when False (gles-profile --set gpu.transforms.matmul_through_layout.ENABLED=0)
OPERANDS = ("lhs", "rhs")


def apply(graph, log):
    operands = fused_operands(graph)
    for node in list(graph.nodes):
        if node.op != "BATCH_MATMUL":
            continue
        done = [_take_operand(graph, node, k, operands) for k in range(2)] + [_take_output(graph, node, operands)]
        if any(not what.startswith("no ") for what in done):
            log.applied(node, "; ".join(done))
        else:
            log.skipped(node, "; ".join(done))


def _readers(graph, tensor):
    """The nodes reading `tensor`: as an input, or through a removed layout op (a READ_THROUGH
    entry of layout nodes, which the graph's reader index does not count)."""
    through = [n for n in graph.nodes if any(source is tensor for _, source, _ in n.options.get(layout.READ_THROUGH, ()))]
    return readers_of(graph, tensor) + [n for n in through if all(n is not r for r in readers_of(graph, tensor))]


def _layout_producer(graph, tensor, operands):
    """(the layout node computing `tensor`, its stored source, why not: None) for a view."""
    node = producer_of(graph, tensor)
    if node is None or node.op not in layout.REMAP_OPS:
        return None, None, "it is not a layout op's output"
    x = node.inputs[layout.DATA_INPUT.get(node.op, 0)]
    reason = own_blocker(node, x, operands)
    if reason is None and (is_boundary(graph, tensor) or len(_readers(graph, tensor)) != 1):
        reason = "its output is read elsewhere or leaves the partition"
    return node, layout.stored_source(node, x), reason and f"{node.label}: {reason}"


def _positions(node):
    """Per element of layout node `node`'s output (its shape), the row-major index in its stored
    source it copies."""
    flat = layout.source_map(node)
    out = node.outputs[0]
    return np.arange(out.size).reshape(out.shape) if flat is None else flat.reshape(out.shape)


def _take_operand(graph, node, k, operands):
    """Make operand k of `node` a view of what its layout producer reads; what was done, or
    'no ...: why'."""
    key, x = OPERANDS[k], node.inputs[k]
    views = node.options.get(matmul.VIEWS, {})
    if x.is_const or key in views:
        return f"no {key} view: a constant"
    if node.inputs[0] is node.inputs[1]:
        return f"no {key} view: both operands are one tensor"
    producer, source, reason = _layout_producer(graph, x, operands)
    if reason is None and source.is_const:
        reason = "its source is a constant"
    if reason is None and matmul.batch_dims(x.shape) != matmul.batch_dims(matmul.shapes(node)[2]):
        reason = "it broadcasts along a batch dimension"
    if reason:
        return f"no {key} view: {reason}"
    positions = _positions(producer)
    for transposed in (False, True):
        stored = np.swapaxes(positions, -1, -2) if transposed else positions
        fit = matmul.fit_view(source.shape, stored)
        if fit is not None:
            break
    else:
        return f"no {key} view: {producer.label}'s output is no strided view of whole vec4s of tensor {source.index}"
    view = matmul.View(source, tuple(x.shape), fit[0], fit[1], transposed)
    node.options[matmul.VIEWS] = {**views, key: view}
    graph.remove_node(producer)
    graph.set_inputs(node, [source if j == k else t for j, t in enumerate(node.inputs)])
    return f"reads {key} from tensor {source.index} in place of {producer.label}" + (" (transposed)" if transposed else "")


def _take_output(graph, node, operands):
    """Make `node` write its output straight into the output of the layout op that alone reads
    it, when that op only moves every element to a place of its own; what was done, or 'no ...'."""
    y = node.outputs[0]
    readers = _readers(graph, y)
    if is_boundary(graph, y) or len(readers) != 1:
        return "no output view: its output is read by more than one node or leaves the partition"
    reader = readers[0]
    data = reader.inputs[layout.DATA_INPUT.get(reader.op, 0)] if reader.op in layout.REMAP_OPS else None
    if data is None or layout.stored_source(reader, data) is not y or \
            any(t is y for t in reader.inputs if t is not data):
        return f"no output view: {reader.label} is not a layout op moving it"
    reason = own_blocker(reader, data, operands)
    reason = (reason and f"{reader.label}: {reason}") or _epilogue_blocker(node)
    z = reader.outputs[0]
    if reason is None and z.size != y.size:
        reason = f"{reader.label} does not move each of its elements once"
    if reason:
        return f"no output view: {reason}"
    copied = _positions(reader).reshape(-1)
    if not np.array_equal(np.sort(copied), np.arange(y.size)):
        return f"no output view: {reader.label} does not move each of its elements once"
    places = np.empty(y.size, np.int64)
    places[copied] = np.arange(y.size)  # where each element of y lands in z
    fit = matmul.fit_view(z.shape, places.reshape(y.shape))
    if fit is None:
        return f"no output view: {reader.label} puts it in no strided view of whole vec4s of tensor {z.index}"
    views = node.options.get(matmul.VIEWS, {})
    node.options[matmul.VIEWS] = {**views, "out": matmul.View(z, tuple(y.shape), fit[0], fit[1])}
    graph.remove_node(reader)
    graph.set_outputs(node, [z])
    return f"writes its output into tensor {z.index} in place of {reader.label}"


def _epilogue_blocker(node):
    """Why the output of `node` cannot be written through a view: epilogue steps reading a
    tensor index it by the output's own layout."""
    if any(hasattr(step.operand, "shape") for step in epilogue.steps_of(node)):
        return "an epilogue step reads a tensor at the output's own layout"
    return None
