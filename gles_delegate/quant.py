"""The float view of a quantized partition: how the float32 GPU kernels run int8 / uint8 models.

As TFLite's GPU delegate does, quantized models run in floating point on the GPU: constants are
dequantized once, inputs at run time, and after every op whose output was quantized a fake-quant
step (QUANTIZE_AND_DEQUANTIZE, ops/quantize.py) snaps the values back to that tensor's grid, so
every intermediate holds a value the quantized model can hold. float_view() builds that view of a
partition as new nodes and tensors, the partition itself untouched:

  (a) constant int8 / uint8 tensors become float32 constants of their real values (per tensor or
      per channel); the int32 bias of a quantized CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED /
      TRANSPOSE_CONV becomes float32 bias * input_scale * weight_scale[channel] (what the integer
      kernel adds to its accumulator, in real units). A hybrid node's weights are dequantized the
      same way: it becomes a float node (TFLite's GPU delegate does the same);
  (b) every other int8 / uint8 tensor becomes a float32 tensor that keeps its index, name and
      `.quantization`; inside the partition it holds real values, on its grid;
  (c) every op whose output was quantized writes a fresh float32 tensor, and a
      QUANTIZE_AND_DEQUANTIZE node ({"qmin", "qmax"}: the type's integer range) writes the
      output's view from it. Ops that only move or select integers in TFLite (RESHAPE, TRANSPOSE,
      SLICE, GATHER, PAD, MAX_POOL_2D, MAXIMUM, ...; CONCATENATION) keep their values on the grid
      and get no step when their quantized inputs share the output's quantization and no fused
      activation clamps; the moving ones refuse differing quantizations (TFLite would reinterpret
      the integers on the other grid);
  (d) a model's own QUANTIZE (float or integer -> integer) becomes QUANTIZE_AND_DEQUANTIZE to its
      output's grid (an integer -> integer one carries TFLite's fixed-point Requantize of every
      input integer as a table, options[REQUANTIZE_FROM]: it rounds twice, and a steep op after
      it would make a step of difference several); its DEQUANTIZE becomes
      QUANTIZE_AND_DEQUANTIZE to its input's grid, which leaves on-grid values as they are and
      keeps a node that writes the float output;
  (e) a quantized partition input keeps its index and holds the raw integers, which the runtime
      uploads as float32 numbers: a DEQUANTIZE node (float view: float32 integers -> real) feeds
      the partition a fresh real tensor. A quantized partition output keeps its index and receives
      integers from a QUANTIZE node (float view: real -> float32 integers), which the runtime casts
      back to int8 / uint8 (exact: they are integers in range); the op inside writes a fresh real
      tensor (and the fake-quant step before a QUANTIZE is dropped when nothing else reads it:
      quantizing twice to one grid is quantizing once).
The view's QUANTIZE / DEQUANTIZE / QUANTIZE_AND_DEQUANTIZE nodes are what gpu/kernels/quantize.py
runs; every other view node is a float node for the float GPU kernels. Which nodes have a view
the GPU can run: unsupported_reason(). run_on_reference() evaluates a view with the numpy
reference kernels (the oracle for the GPU run of a view); model_value() turns what a view tensor
holds into what the model's tensor of that index holds.

Precision: values of an 8-bit grid are exact in half storage (integers up to 2048 are); real
values in half storage carry half's rounding, so a fake-quant step of a value within 2^-11 of a
rounding boundary can land one step off.
"""
import numpy as np

from . import ops
from .gpu import kernels
from .gpu.kernels.pool import INTEGER_MEAN
from .graph import Graph, Node, Tensor
from .ops.common import dequantize, fused_activation, is_quantized, quant_params, round_half_away
from .ops.quantize import REQUANTIZE_FROM, requantize_table

F32 = np.dtype(np.float32)
QUANTIZED_DTYPES = (np.dtype(np.int8), np.dtype(np.uint8))
FAKE_QUANT = "QUANTIZE_AND_DEQUANTIZE"
# Inputs that hold an int32 bias in quantized units (input_scale * weight_scale), by op:
# (bias input, data input, weights input).
BIAS_INPUTS = {"CONV_2D": (2, 0, 1), "DEPTHWISE_CONV_2D": (2, 0, 1), "FULLY_CONNECTED": (2, 0, 1),
               "TRANSPOSE_CONV": (3, 2, 1)}
# Ops whose result stays on the grid its inputs share, and that rescale inputs of other grids
# (CONCATENATION: TFLite's uint8 kernel does; its int8 kernel refuses them).
GRID_KEEPING = {"CONCATENATION"}
# Ops whose output is on its grid already: a variable holds the values assigned to it, each on
# the grid every read and assignment of it shares (gpu/kernels/variables.py checks it).
GRID_HELD = {"READ_VARIABLE"}
# Ops whose quantized kernels compute on the integers themselves (not on the real values), or
# with intermediate quantizations the view does not have: no float view. (8-bit comparisons
# compare rounded fixed-point rescalings, which can tie where the real values differ.)
NO_VIEW = {"CAST", "BITCAST", "BITWISE_XOR", "RIGHT_SHIFT", "LSTM", "UNIDIRECTIONAL_SEQUENCE_LSTM",
           "BIDIRECTIONAL_SEQUENCE_LSTM", "SVDF", "UNIDIRECTIONAL_SEQUENCE_RNN", "BIDIRECTIONAL_SEQUENCE_RNN", "RNN",
           "GREATER", "GREATER_EQUAL", "LESS", "LESS_EQUAL", "EQUAL", "NOT_EQUAL"}


def integer_range(tensor):
    """(qmin, qmax) of a quantized tensor's integer type (an 8-bit type)."""
    info = np.iinfo(tensor.dtype)
    return int(info.min), int(info.max)


def touches_quantized(node):
    """True when any tensor of the node is int8 / uint8 (or another quantized integer type): its
    float view differs from it (or it has none)."""
    return any(t is not None and (t.dtype in QUANTIZED_DTYPES or is_quantized(t))
               for t in [*node.inputs, *node.outputs])


def _same_grid(a, b):
    qa, qb = a.quantization, b.quantization
    return (qa is not None and qb is not None and qa.scales.size == qb.scales.size
            and np.array_equal(qa.scales.astype(F32), qb.scales.astype(F32))
            and np.array_equal(qa.zero_points, qb.zero_points)
            and (qa.scales.size == 1 or qa.quantized_dimension == qb.quantized_dimension))


def _tensor_reason(tensor):
    """Why a tensor has no float view, or None."""
    if tensor.dtype not in QUANTIZED_DTYPES:
        if is_quantized(tensor):
            return f"tensor {tensor.index} is quantized {tensor.dtype} (the float view takes 8-bit types)"
        return None
    if not is_quantized(tensor) or tensor.quantization.scales.size == 0:
        return f"tensor {tensor.index} is {tensor.dtype} without quantization parameters"
    q = tensor.quantization
    if not np.all(np.isfinite(q.scales)) or not np.all(q.scales > 0):
        return f"tensor {tensor.index} has a non-positive or non-finite scale"
    if tensor.is_variable:
        return f"tensor {tensor.index} is a quantized variable"
    return None


def view_reason(node):
    """Why `node` has no float view (whatever the GPU then says of its view nodes), or None."""
    quantized_runtime = [t for t in [*node.inputs, *node.outputs]
                         if t is not None and not t.is_const and t.dtype in QUANTIZED_DTYPES]
    if node.op in NO_VIEW and quantized_runtime:
        return f"{node.op} computes on the integers of its quantized tensors: it has no float view"
    for tensor in [*node.inputs, *node.outputs]:
        reason = None if tensor is None else _tensor_reason(tensor)
        if reason:
            return reason
    # An op whose TFLite kernel copies or selects integers keeps its inputs' grid: they must share
    # the output's quantization (else TFLite reinterprets the integers on another grid, or refuses
    # the node), unless a fused activation clamps them.
    if kernels.facts(node.op).integer_move:
        for out in node.outputs:
            if out.dtype in QUANTIZED_DTYPES:
                for t in node.inputs:
                    if t is not None and t.dtype in QUANTIZED_DTYPES and not _same_grid(t, out):
                        return (f"{node.op} copies integers from tensor {t.index} to tensor {out.index}, "
                                "which have different quantizations")
    return None


def unsupported_reason(node, reason_of):
    """None when the GPU can run `node`: as it is if no tensor of it is int8 / uint8, else its
    float view (one node, its partition boundary included). reason_of: the GPU registry's
    unsupported_reason. Else why not."""
    if not touches_quantized(node):
        return reason_of(node)
    reason = view_reason(node)
    if reason:
        return f"no float view: {reason}"
    inputs = [t for t in node.inputs if t is not None and not t.is_const]
    view = float_view([node], list({id(t): t for t in inputs}.values()), list(node.outputs))
    for view_node in view.nodes:
        reason = reason_of(view_node)
        if reason:
            return f"float view {view_node.op}: {reason}"
    return None


# -- building the view ---------------------------------------------------------------------
class FloatView(Graph):
    """A Graph of view nodes and tensors, plus what maps them back to the model's tensors:
    model_tensors {index: the model's int8 / uint8 tensor} for every such tensor the view holds
    as float32 at that index; integer_valued: the indices among them that hold integers (the
    partition's quantized inputs and outputs), the others holding real values (see model_value)."""

    def __init__(self, nodes, inputs, outputs, tensors, model_tensors, integer_valued):
        super().__init__(nodes, inputs, outputs, tensors)
        self.model_tensors = model_tensors
        self.integer_valued = integer_valued


def model_value(view, index, values):
    """What the model's tensor `index` holds, from the float32 values its view tensor holds (on
    the GPU, or in run_on_reference): the integers of an int8 / uint8 tensor (a real-valued one
    quantized to its grid, an integer-valued one cast), else the values as they are. For
    capturing intermediates (preserve_all_tensors) and parity tools."""
    tensor = view.model_tensors.get(index)
    if tensor is None:
        return values
    if index not in view.integer_valued:
        values = quantize_to_integers(values, tensor, *integer_range(tensor))
    return np.asarray(values).astype(tensor.dtype)


class _Builder:
    """Maps the partition's tensors to their views and collects the view's nodes."""

    def __init__(self, next_index):
        self.next_index = next_index
        self.views = {}       # id(original tensor) -> its view inside the partition
        self.biases = {}      # (id(bias tensor), input scale, weight scales) -> float32 constant
        self.nodes = []
        self.tensors = {}

    def fresh(self, like, suffix, quantization=None):
        """A new float32 tensor shaped like `like`, at the next free index."""
        tensor = Tensor(index=self.next_index, name=f"{like.name}/{suffix}", shape=tuple(like.shape), dtype=F32,
                        quantization=quantization, type_name="FLOAT32")
        self.next_index += 1
        return self.keep(tensor)

    def keep(self, tensor):
        self.tensors[id(tensor)] = tensor
        return tensor

    def same_index(self, tensor, quantization=None):
        """The float32 tensor of `tensor`'s index (integer values or real values, by where it is)."""
        return self.keep(Tensor(index=tensor.index, name=tensor.name, shape=tuple(tensor.shape), dtype=F32,
                                quantization=quantization, shape_signature=tensor.shape_signature,
                                type_name="FLOAT32"))

    def view(self, tensor):
        """The view of a tensor read inside the partition."""
        if tensor is None:
            return None
        if id(tensor) not in self.views:
            if tensor.is_const and tensor.dtype in QUANTIZED_DTYPES:
                view = self.same_index(tensor)
                view.data = _read_only(dequantize(tensor, tensor.data))
            elif tensor.dtype in QUANTIZED_DTYPES:
                view = self.same_index(tensor, tensor.quantization)
            else:
                view = self.keep(tensor)
            self.views[id(tensor)] = view
        return self.views[id(tensor)]

    def bias(self, node, index):
        """The float32 view of an int32 bias (real units) of a quantized convolution or FC."""
        bias_t = node.inputs[index]
        _, data, weights = BIAS_INPUTS[node.op]
        x_t, w_t = node.inputs[data], node.inputs[weights]
        input_scale = np.float64(np.float32(x_t.quantization.scales[0]))
        weight_scales = w_t.quantization.scales.astype(F32).astype(np.float64)
        key = (id(bias_t), float(input_scale), weight_scales.tobytes())
        if key not in self.biases:
            view = self.same_index(bias_t)
            real = np.asarray(bias_t.data, np.float64).reshape(-1) * input_scale * weight_scales
            view.data = _read_only(real.astype(F32).reshape(bias_t.shape))
            self.biases[key] = view
        return self.biases[key]

    def add(self, index, op, inputs, outputs, options=None):
        node = Node(index=index, op=op, inputs=list(inputs), outputs=list(outputs), options=dict(options or {}))
        self.nodes.append(node)
        return node


def _read_only(array):
    array = np.ascontiguousarray(array, F32)
    array.flags.writeable = False
    return array


def _range_options(tensor):
    qmin, qmax = integer_range(tensor)
    return {"qmin": qmin, "qmax": qmax}


def _is_quantized_bias(node, index):
    if node.op not in BIAS_INPUTS or index != BIAS_INPUTS[node.op][0]:
        return False
    bias_t, x_t = node.inputs[index], node.inputs[BIAS_INPUTS[node.op][1]]
    return bias_t is not None and bias_t.is_const and bias_t.dtype == np.int32 and x_t.dtype in QUANTIZED_DTYPES


def _keeps_grid(node, out):
    """True when the op's float result is already on `out`'s grid: it moves or selects values of
    quantized inputs that all share out's quantization, with no fused activation."""
    if node.op in GRID_HELD:
        return True
    if not (kernels.facts(node.op).integer_move or node.op in GRID_KEEPING) or fused_activation(node) != 0:
        return False
    quantized = [t for t in node.inputs if t is not None and t.dtype in QUANTIZED_DTYPES]
    return bool(quantized) and all(_same_grid(t, out) for t in quantized)


def float_view(nodes, inputs, outputs, next_index=None):
    """The float view of a partition (see the module docstring): a FloatView (a Graph) of new
    nodes and tensors; the partition's own nodes and tensors are not changed.

    nodes / inputs / outputs: the partition's nodes (execution order) and boundary tensors, as
    partition.find_partitions gives them. next_index: the first index free for new tensors; pass
    len(graph.tensors) (the default, one past the partition's largest index, can collide with a
    tensor outside the partition, which matters where indices key storage, e.g. capture).
    The Graph's inputs and outputs keep the partition's tensor indices, in the same order: the
    runtime's I/O slots map to the interpreter's storage as before. Raises ValueError for a node
    without a float view (check with unsupported_reason first)."""
    if next_index is None:
        indices = [t.index for n in nodes for t in [*n.inputs, *n.outputs] if t is not None]
        next_index = max(indices + [t.index for t in [*inputs, *outputs]], default=-1) + 1
    if not any(touches_quantized(node) for node in nodes):
        # A float partition is its own view: its nodes as they are (whoever edits them copies
        # them first: gpu/variables.bind, transforms.rewrite_partition), no copy per node.
        tensors = {id(t): t for n in nodes for t in [*n.inputs, *n.outputs] if t is not None}
        return FloatView(list(nodes), inputs, outputs, list(tensors.values()), {}, set())
    for node in nodes:
        reason = view_reason(node)
        if reason:
            raise ValueError(f"operator {node.label} has no float view: {reason}")
    b = _Builder(next_index)
    first = nodes[0].index if nodes else 0
    # (e) quantized inputs: integers at their index -> DEQUANTIZE -> a fresh real tensor.
    view_inputs = []
    for tensor in inputs:
        if tensor.dtype in QUANTIZED_DTYPES:
            boundary = b.same_index(tensor, tensor.quantization)
            real = b.fresh(tensor, "real", tensor.quantization)
            b.add(first, "DEQUANTIZE", [boundary], [real])
            b.views[id(tensor)] = real
            view_inputs.append(boundary)
        else:
            view_inputs.append(b.view(tensor))
    # (e) quantized outputs: the partition computes a fresh real tensor, QUANTIZE writes the index.
    boundary_outputs = {id(t) for t in outputs if t.dtype in QUANTIZED_DTYPES}
    for tensor in outputs:
        if id(tensor) in boundary_outputs:
            b.views[id(tensor)] = b.fresh(tensor, "real", tensor.quantization)
    for node in nodes:
        _view_node(b, node)
    view_outputs = []
    for tensor in outputs:
        if id(tensor) in boundary_outputs:
            boundary = b.same_index(tensor, tensor.quantization)
            producer = next(n for n in b.nodes if any(o is b.views[id(tensor)] for o in n.outputs))
            b.add(producer.index, "QUANTIZE", [b.views[id(tensor)]], [boundary], _range_options(tensor))
            view_outputs.append(boundary)
        else:
            view_outputs.append(b.views.get(id(tensor), tensor))
    view_nodes = _drop_fake_quant_before_quantize(b.nodes)
    tensors = {id(t): t for n in view_nodes for t in [*n.inputs, *n.outputs] if t is not None}
    model_tensors = {t.index: t for n in nodes for t in [*n.inputs, *n.outputs]
                     if t is not None and not t.is_const and t.dtype in QUANTIZED_DTYPES}
    integer_valued = {t.index for t in [*inputs, *outputs] if t.dtype in QUANTIZED_DTYPES}
    return FloatView(view_nodes, view_inputs, view_outputs, list(tensors.values()), model_tensors, integer_valued)


def _view_node(b, node):
    """Add the view of one partition node to the builder."""
    if node.op == "QUANTIZE":  # (d) float or integer -> integer: snap to the output's grid
        source, out = node.inputs[0], node.outputs[0]
        options = _range_options(out)
        if source.dtype in QUANTIZED_DTYPES:  # TFLite's fixed-point Requantize, looked up
            options[REQUANTIZE_FROM] = (float(np.float32(source.quantization.scales[0])),
                                        int(source.quantization.zero_points[0]), integer_range(source)[0],
                                        tuple(int(q) for q in requantize_table(source, out)))
        b.add(node.index, FAKE_QUANT, [b.view(source)], [b.views.get(id(out)) or b.view(out)], options)
        return
    if node.op == "DEQUANTIZE" and node.inputs[0].dtype in QUANTIZED_DTYPES:  # (d) integer -> float
        source, out = node.inputs[0], node.outputs[0]
        target = b.same_index(out, source.quantization)  # a float32 output: it takes its input's grid
        b.views[id(out)] = target
        b.add(node.index, FAKE_QUANT, [b.view(source)], [target], _range_options(source))
        return
    inputs = [b.bias(node, k) if _is_quantized_bias(node, k) else b.view(t) for k, t in enumerate(node.inputs)]
    outputs, steps = [], []
    for out in node.outputs:
        if out.dtype not in QUANTIZED_DTYPES:
            outputs.append(b.view(out))
            continue
        target = b.views.get(id(out)) or b.view(out)
        if _keeps_grid(node, out):
            outputs.append(target)
        else:  # (c) the op writes a fresh real tensor, a fake-quant step the output's view
            raw = b.fresh(out, "unquantized")
            outputs.append(raw)
            steps.append((raw, target, _range_options(out)))
    options = node.options
    if node.op == "AVERAGE_POOL_2D" and node.inputs[0].dtype in QUANTIZED_DTYPES:
        # TFLite's integer average pool rounds the mean of the raw integers (pool.INTEGER_MEAN)
        q = node.inputs[0].quantization
        options = {**options, INTEGER_MEAN: (float(np.float32(q.scales[0])), int(q.zero_points[0]))}
    copy = b.add(node.index, node.op, inputs, outputs, options)
    copy.version, copy.custom, copy.custom_options = node.version, node.custom, node.custom_options
    copy.runtime = node.runtime  # the interpreter's variables (resource variable ops)
    for raw, target, options in steps:
        b.add(node.index, FAKE_QUANT, [raw], [target], options)


def _drop_fake_quant_before_quantize(nodes):
    """A boundary QUANTIZE that reads a fake-quant step's output, read by nothing else, reads the
    step's input instead and the step goes: quantizing to the same grid twice is quantizing once."""
    readers = {}
    for node in nodes:
        for t in node.inputs:
            if t is not None:
                readers.setdefault(id(t), []).append(node)
    producer = {id(t): n for n in nodes for t in n.outputs}
    dropped = set()
    for node in nodes:
        if node.op != "QUANTIZE":
            continue
        step = producer.get(id(node.inputs[0]))
        if (step is not None and step.op == FAKE_QUANT and REQUANTIZE_FROM not in step.options
                and len(readers[id(node.inputs[0])]) == 1
                and _same_grid(step.outputs[0], node.outputs[0])):
            node.inputs = [step.inputs[0]]
            dropped.add(id(step))
    return [n for n in nodes if id(n) not in dropped]


# -- running a view on the numpy reference -------------------------------------------------
def quantize_to_integers(x, tensor, qmin, qmax):
    """The view's QUANTIZE: real x -> float32 integers clamp(round(x / s) + zp, qmin, qmax) of
    `tensor`'s quantization (per tensor, or per channel along its quantized dimension)."""
    scales, zero_points = quant_params(tensor, np.ndim(x))
    x = np.asarray(x, F32)
    steps = round_half_away(np.where(np.isnan(x), np.float32(0), x / scales.astype(F32)).astype(np.float64))
    return np.clip(steps + zero_points, qmin, qmax).astype(F32)


def dequantize_integers(q, tensor):
    """The view's DEQUANTIZE: float32 integers of `tensor`'s quantization -> real float32."""
    return dequantize(tensor, np.asarray(q).astype(np.int64))


def run_on_reference(view, values, every_tensor=False):
    """Evaluate a float view with the numpy reference kernels (its QUANTIZE / DEQUANTIZE nodes
    with the view's semantics above). values: {tensor index: array} for the view's inputs, as the
    runtime uploads them (a quantized input's integers as float32). Returns {tensor index: array}
    of the view's outputs (a quantized output's integers as float32), or with `every_tensor` of
    every tensor a view node writes (model_value maps them to the model's tensors)."""
    arrays = {id(t): np.asarray(values[t.index], F32 if t.dtype == F32 else t.dtype) for t in view.inputs}
    for node in view.nodes:
        args = [None if t is None else t.data if t.is_const else arrays[id(t)] for t in node.inputs]
        if node.op == "QUANTIZE" and node.inputs[0].dtype == F32 and node.outputs[0].dtype == F32:
            results = [quantize_to_integers(args[0], node.outputs[0], node.options["qmin"], node.options["qmax"])]
        elif node.op == "DEQUANTIZE" and node.inputs[0].dtype == F32:
            results = [dequantize_integers(args[0], node.inputs[0])]
        else:
            reason = ops.unsupported_reason(node)
            if reason:
                raise ValueError(f"view node {node.label}: {reason}")
            results = ops.run_node(node, args)
        for tensor, value in zip(node.outputs, results):
            arrays[id(tensor)] = np.asarray(value).reshape(tensor.shape)
    if every_tensor:
        return {t.index: arrays[id(t)] for n in view.nodes for t in n.outputs}
    return {t.index: arrays[id(t)] for t in view.outputs}
