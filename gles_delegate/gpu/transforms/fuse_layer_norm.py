"""Fuse a layer normalization written as separate nodes into one LAYER_NORM node, one dispatch
(gpu/kernels/layer_norm.py). Converters write its statistics the same way,

    m = MEAN(x, last axis, keep_dims), v = MEAN(SQUARED_DIFFERENCE(x, m), last axis, keep_dims),
    r = RSQRT(ADD(v, epsilon)),

which is matched node by node, and then a tail of MUL / ADD / SUB / NEG nodes on x, m, r and
constants that computes (x - m) * r * gamma + beta in an arrangement of their own (Keras 3:
s = r * gamma, y = x * s + (-m) * s; TF's batch-norm form: y = x * s + (beta - m * s)). litert-torch
drops the kept axis (keep_dims false, the MEANs over [0, last] of a [1, N, C]: m and v of shape
[N]) and puts it back with a RESHAPE wherever a vector meets x (y = x * R(r) + R(0 - r * m)): a
RESHAPE (of a constant shape) counts as a tail node, and one that only adds or drops size-1 dims
as m's way into the SQUARED_DIFFERENCE. The tail is
checked by running it rather than by its shape: it must be a function of x, m and r alone whose
one result equals (x - m) * r * gamma + beta on random inputs, gamma and beta read off it at
x = 0 and x = 1 (m = 0, r = 1) and the same for every row.
"""
import numpy as np

from ... import ops
from ...graph import Node
from ...ops.common import ACT_NONE, fused_activation
from .. import kernels
from ..kernels import epilogue, layer_norm
from .common import constant_parameters, fused_operands, is_boundary, new_constant, readers_of, sole_reader

ENABLED = True  # rewrite_partition skips the rule when False, for A/B measurements (gles-profile --set gpu.transforms.fuse_layer_norm.ENABLED=0)
TAIL_OPS = {"MUL", "ADD", "SUB", "NEG", "RESHAPE"}
MAX_TAIL_NODES = 8  # the arrangements seen take 3-5
# The tail must give (x - m) * r * gamma + beta within this many float32 roundings of its terms.
TAIL_ROUNDINGS = 16


def apply(graph, log):
    gone, operands = set(), fused_operands(graph)  # no rule before this one fuses operands in
    for mean in list(graph.nodes):
        if id(mean) in gone or not last_axis_mean(mean):
            continue
        fused = _fuse(graph, mean, operands)
        if isinstance(fused, str):
            log.skipped(mean, fused)
        else:
            gone.update(map(id, fused))
            log.applied(mean, f"with {len(fused) - 1} nodes after it as one LAYER_NORM dispatch")


def last_axis_mean(node):
    """A MEAN over the last axis (and, at most, dims of size 1: litert-torch's axes [0, 2] of a
    [1, N, C]), kept as a size-1 axis or not, with no epilogue."""
    if node.op != "MEAN" or len(node.inputs) < 2 or not node.inputs[1].is_const or epilogue.steps_of(node):
        return False
    x = node.inputs[0]
    axes = {int(a) % len(x.shape) for a in np.asarray(node.inputs[1].data).reshape(-1)} if len(x.shape) else set()
    last = len(x.shape) - 1
    return last in axes and all(x.shape[a] == 1 for a in axes - {last}) and x.dtype == np.float32


def only_reader(graph, tensor, operands, op):
    """The one node reading `tensor` (common.sole_reader) when it is an `op` without epilogue
    steps, else None."""
    reader = sole_reader(graph, tensor, operands)
    return reader if reader is not None and reader.op == op and not epilogue.steps_of(reader) else None


def scalar(tensor):
    if tensor.is_const and tensor.size == 1 and tensor.dtype == np.float32:
        return float(np.asarray(tensor.data).reshape(-1)[0])
    return None


def unit_reshape(node):
    """A RESHAPE (constant or no shape input) whose output has its input's dims of more than one
    element, in order: it only adds or drops size-1 dims, so a row vector stays one."""
    if node.op != "RESHAPE" or not constant_parameters(node) or epilogue.steps_of(node):
        return False
    return [d for d in node.inputs[0].shape if d != 1] == [d for d in node.outputs[0].shape if d != 1]


def _kept_mean(graph, x, m):
    """The tensors that hold the mean m with x's last axis kept as size 1: m itself when the MEAN
    kept it, and every unit RESHAPE of m to that shape."""
    return [t for t in [m] + [n.outputs[0] for n in readers_of(graph, m) if unit_reshape(n)]
            if tuple(t.shape) == rows_of(x)]


def rows_of(x):
    """The shape of a per-row statistic of x, its last axis kept (it broadcasts against x)."""
    return tuple(x.shape[:-1]) + (1,)


def _statistics(graph, mean, operands):
    """[the core's nodes] (MEAN, SQUARED_DIFFERENCE, MEAN, ADD, RSQRT) and epsilon, or why not."""
    x, m = mean.inputs[0], mean.outputs[0]
    square = next((n for kept in _kept_mean(graph, x, m) for n in readers_of(graph, kept)
                   if n.op == "SQUARED_DIFFERENCE" and not epilogue.steps_of(n)
                   and {id(t) for t in n.inputs} == {id(x), id(kept)}), None)
    if square is None:
        return "its mean is not read by a SQUARED_DIFFERENCE with its input"
    variance = only_reader(graph, square.outputs[0], operands, "MEAN")
    if variance is None or not last_axis_mean(variance):
        return f"{square.label} is not read by a MEAN over the last axis alone"
    add = only_reader(graph, variance.outputs[0], operands, "ADD")
    epsilon = None if add is None else next((scalar(t) for t in add.inputs if scalar(t) is not None), None)
    if epsilon is None or fused_activation(add) != ACT_NONE:
        return f"{variance.label} is not read by an ADD of a constant epsilon alone"
    rsqrt = only_reader(graph, add.outputs[0], operands, "RSQRT")
    if rsqrt is None:
        return f"{add.label} is not read by an RSQRT alone"
    return [mean, square, variance, add, rsqrt], epsilon


def tail_nodes(graph, x, statistics, first):
    """The MUL / ADD / SUB / NEG / RESHAPE nodes after node `first` (the statistics' first node)
    that compute from x, the `statistics` tensors (the mean, the RSQRT), constants and each other,
    and read a statistic or each other's outputs (in graph order; a NEG of the mean may come
    before the RSQRT)."""
    computed = {id(t) for t in statistics}
    known, tail = computed | {id(x)}, []
    start = graph.position(first)
    for node in graph.nodes:
        if graph.position(node) <= start or node.op not in TAIL_OPS or len(tail) == MAX_TAIL_NODES:
            continue
        inputs = [t for t in node.inputs if t is not None]
        if node.op == "RESHAPE" and not constant_parameters(node):
            continue
        if fused_activation(node) == ACT_NONE and not epilogue.steps_of(node) and len(node.outputs) == 1 \
                and all(t.is_const or id(t) in known for t in inputs) and any(id(t) in computed for t in inputs):
            tail.append(node)
            known.add(id(node.outputs[0]))
            computed.add(id(node.outputs[0]))
    return tail


def result_of(graph, x, core, tail, operands):
    """The tail's one result (the tensor read outside core + tail, or leaving the partition, of
    x's shape), or why there is none."""
    inside = {id(n) for n in core + tail}
    leaving = [n.outputs[0] for n in core[-1:] + core[:1] + tail
               if is_boundary(graph, n.outputs[0]) or id(n.outputs[0]) in operands
               or any(id(reader) not in inside for reader in readers_of(graph, n.outputs[0]))]
    if len(leaving) != 1 or leaving[0] is core[0].outputs[0] or leaving[0] is core[-1].outputs[0]:
        return f"its statistics and the nodes after them leave {len(leaving)} values, not one result"
    if tuple(leaving[0].shape) != tuple(x.shape):
        return f"the result {list(leaving[0].shape)} is not of the input's shape {list(x.shape)}"
    return leaving[0]


def run_tail(tail, x, m, r, values):
    """Run the tail on the reference kernels with x, m, r given by `values` (three arrays)."""
    env = dict(zip((id(x), id(m), id(r)), values))
    for node in tail:
        inputs = [None if t is None else t.data if t.is_const else env[id(t)] for t in node.inputs]
        env[id(node.outputs[0])] = np.asarray(ops.run_node(node, inputs)[0], np.float32)
    return env


def affine(tail, x, m, r, result, centered=True):
    """(gamma, beta) [C] when the tail computes (x - m) * r * gamma + beta (m = 0 when not
    `centered`: an RMS normalization has no mean), else why not."""
    channels = x.shape[-1]
    zeros, ones = np.zeros((r if m is None else m).shape, np.float32), np.ones(r.shape, np.float32)
    at = [run_tail(tail, x, m, r, (np.full(x.shape, v, np.float32), zeros, ones))[id(result)].reshape(-1, channels)
          for v in (0.0, 1.0)]
    beta, gamma = at[0][0], at[1][0] - at[0][0]
    if not all(np.array_equal(a, a[:1].repeat(len(a), 0)) for a in at):
        return "the nodes after its statistics scale or shift rows differently"
    rng = np.random.default_rng(0)
    sample = (rng.standard_normal(x.shape).astype(np.float32),
              rng.standard_normal(m.shape).astype(np.float32) if centered else zeros,
              rng.uniform(0.5, 2.0, r.shape).astype(np.float32))
    got = run_tail(tail, x, m, r, sample)[id(result)].astype(np.float64)
    xs, ms, rs = (v.astype(np.float64).reshape(s) for v, s in zip(sample, (x.shape, rows_of(x), rows_of(x))))
    terms = np.abs(xs * rs * gamma) + np.abs(ms * rs * gamma) + np.abs(beta)
    if np.any(np.abs(got - ((xs - ms) * rs * gamma + beta)) > TAIL_ROUNDINGS * np.finfo(np.float32).eps * terms):
        return ("the nodes after its statistics do not compute "
                + ("(x - mean)" if centered else "x") + " * rsqrt(variance + epsilon) * gamma + beta")
    return gamma, beta


def _fuse(graph, mean, operands):
    """Replace the layer normalization starting at `mean` by a LAYER_NORM node; returns the nodes
    it replaced, or why not."""
    found = _statistics(graph, mean, operands)
    if isinstance(found, str):
        return found
    core, epsilon = found
    x, m, r = mean.inputs[0], mean.outputs[0], core[-1].outputs[0]
    return replace_with_norm(graph, x, core, epsilon, tail_nodes(graph, x, (m, r), mean), operands, m)


def replace_with_norm(graph, x, core, epsilon, tail, operands, m=None):
    """Replace `core` (the statistics' nodes, the RSQRT last) and the longest prefix of `tail` that
    computes (x - m) * r * gamma + beta (x * r * gamma + beta without a mean `m`: an RMS
    normalization) by one LAYER_NORM node; returns the nodes it replaced, or why not."""
    r = core[-1].outputs[0]
    # The longest prefix of the tail that is a normalization: a residual ADD of x after it also
    # reads only x and the tail, and stays a node of its own (an epilogue, later).
    reasons = []
    for end in range(len(tail), 0, -1):
        result = result_of(graph, x, core, tail[:end], operands)
        fitted = result if isinstance(result, str) else affine(tail[:end], x, m, r, result, centered=m is not None)
        if not isinstance(fitted, str):
            break
        reasons.append(fitted)
    else:
        return reasons[0] if reasons else "no MUL / ADD / SUB / NEG reads its statistics"  # the whole tail's
    tail = tail[:end]
    first = core[0]
    gamma, beta = (new_constant(graph, f"layer_norm_{first.index}_{name}", v) for name, v in zip(("gamma", "beta"), fitted))
    node = Node(index=first.index, op=layer_norm.OP, inputs=[x, gamma, beta], outputs=[result],
                options={layer_norm.EPSILON: epsilon, layer_norm.CENTER: m is not None})
    reason = kernels.unsupported_reason(node)
    if reason:
        return reason
    graph.replace_node(graph.producer_of(result), [node])
    for gone in core + tail:
        graph.remove_node(gone)
    return core + tail
