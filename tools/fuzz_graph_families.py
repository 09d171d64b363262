"""The generator families of gles-fuzz-graphs beyond its float32 graphs (tools/fuzz_graphs.py runs
and judges them; its module docstring says how). Each family is a fuzz_graphs.Generator whose
pools (`values`: what later nodes read) hold its own kind of tensor:

  int32   int32 inputs, token ids (0 <= id < vocabulary) or any int32 (edges INT32_MIN / MAX, 0,
          +-1 drawn one value in ten), through GATHER / EMBEDDING_LOOKUP of runtime indices (kept
          in range: a FLOOR_MOD, a clamp or an ARG_MAX makes them), ADD / SUB / MUL (wrapping),
          FLOOR_DIV / FLOOR_MOD (divisors never 0 or -1: LiteRT fails on 0 and traps on
          INT32_MIN / -1), MINIMUM / MAXIMUM, ABS / NEG, the comparisons, SELECT / SELECT_V2,
          CAST between int32, float32 and bool, SUM, ARG_MAX / ARG_MIN (int32 or int64 indices, the
          int64 ones a leaf or CAST back to int32) and the layout ops. No float
          arithmetic: every value is exact (a float compared or cast is a copy of an input, or an
          input times a power of two), so every integer output must match exactly.
  quant   int8 (or uint8) graphs: QUANTIZE of a float input or a quantized input, CONV_2D /
          DEPTHWISE_CONV_2D (per-channel int8 weights; per-tensor uint8), FULLY_CONNECTED, ADD /
          MUL (operands of different scales, constants too), CONCATENATION (inputs of different
          scales, the output's its own), the layout ops and pools (their input's scale), LOGISTIC /
          TANH / SOFTMAX (their fixed output grids), MEAN, QUANTIZE to another scale, DEQUANTIZE of
          outputs. Held to gles-parity's one quantization step.
  state   a float32 graph around 1-2 resource variables (CALL_ONCE of an init subgraph assigning
          their start values, VAR_HANDLE / READ_VARIABLE / ASSIGN_VARIABLE, sometimes a streaming
          ring buffer: CONCATENATION of the state and the input, STRIDED_SLICE of the newest
          frames), sometimes an int32 step counter selecting a row (FLOOR_MOD, GATHER), a READ
          after the ASSIGN; its steps are 3 invokes, reset_all_variables and one more.
  signal  a float32 graph with L2_NORMALIZATION and RFFT2D -> COMPLEX_ABS / REAL / IMAG (complex64
          outputs too).
  resize  float32 graphs over dynamic input dimensions, resized between invokes
          (tools/fuzz_graph_resize.py's docstring).
  edge    a float32 graph with the ops that split GPU partitions until they got kernels: PACK
          (1-3 tensors of one shape, one of them twice sometimes, along a new axis anywhere),
          UNPACK (along an axis of 1-4), BROADCAST_TO (size-1 dims widened, a leading dim added
          sometimes), CUMSUM (any axis, exclusive and reverse), REDUCE_ALL / REDUCE_ANY of a
          comparison (any axes, keep_dims both ways) cast to float32 or selecting between two
          tensors, and GATHER_ND of constant index rows or of an ARG_MAX's (in range by its
          construction; int32 or int64 indices) reshaped into rows of one, ONE_HOT of such an
          ARG_MAX (a depth below its range sometimes: lines of off_value), and ATAN2(y, |x| +
          0.25) (right of the branch cut, where a y rounded across 0 would jump by 2 pi;
          tests/gpu/test_binary.py has the rest),
          and DYNAMIC_UPDATE_SLICE of a tensor (or a constant) into another at start indices
          one of which an ARG_MAX computes (the others constants, past the end sometimes: TFLite
          clamps them), LOCAL_RESPONSE_NORMALIZATION (radius 0-6, AlexNet's options and others),
          TOPK_V2 of the last axis (its values go on), and CONV_3D of a tensor as one clip
          (kernels, strides and dilations per dim; a PAD of its depth before it, a
          CONV_3D_TRANSPOSE and a rank-5 MEAN after it sometimes).
  cells   a float32 graph with unrolled recurrent cells as litert-torch writes them (the state, one
          row of H: [1, 1, H] or [1, H], through a FULLY_CONNECTED to 3H or 4H, plus an input
          projection sometimes, gate SLICEs, LOGISTIC / TANH and the LSTM's or GRU's state update,
          1-3 steps, the steps' h concatenated into a sequence sometimes) and GhostNet modules (a
          1x1 CONV_2D to half the channels, a 3x3 DEPTHWISE_CONV_2D of it, their CONCATENATION,
          plus the module's input as a residual): rules fuse_pointwise_dag, fuse_dense_into_dag,
          concat_stored_by_producers and residual_through_concat.
Every model, of every family, is invoked twice or more on different inputs (Spec.steps).
"""
import contextlib

import numpy as np

from . import fuzz_graphs as fg
from .fuzz_graphs import NONE, RELU, RELU6, SAME, VALID, TensorSpec

I32 = (-2 ** 31, 2 ** 31 - 1)
INT_LAYOUT = (fg.reshape, fg.slice_op, fg.strided_slice, fg.split, fg.concatenation, fg.transpose,
              fg.squeeze_or_expand, fg.tile, fg.gather)
# (CONCATENATION: q_concatenation, which puts an int8 one's inputs on its output's grid)
QUANT_LAYOUT = tuple(b for b in INT_LAYOUT if b is not fg.concatenation) + (fg.pool, fg.mean)
POW2 = (8.0, 64.0, 1024.0)  # float -> int32 casts of x * 2^k: exact products, then truncation


def _clip(low, high):
    """(low, high) if within int32, else the whole range (the op wraps)."""
    return (int(low), int(high)) if I32[0] <= low and high <= I32[1] else I32


class _Pools(fg.Generator):
    """A Generator with a pool per kind of tensor; `values` is the one builders draw from now."""
    KINDS = ("float",)

    def __init__(self, rng, min_nodes, max_nodes):
        super().__init__(rng, min_nodes, max_nodes)
        self.pools = {kind: [] for kind in self.KINDS}
        self.values = self.pools[self.KINDS[0]]

    def kind(self, spec):
        """Which pool a tensor joins (None: none)."""
        if spec.is_float and np.dtype(spec.dtype) == np.float32 and 2 <= len(spec.shape) <= 4:
            return "float"
        return None

    def register(self, t):
        kind = self.kind(self.spec.tensors[t])
        if kind in self.pools:
            self.pools[kind].append(t)

    @contextlib.contextmanager
    def drawing(self, kind):
        """Builders pick from pool `kind` inside the block."""
        saved, self.values = self.values, self.pools[kind]
        try:
            yield
        finally:
            self.values = saved

    def value(self, shape, dtype=np.float32, quant=None, bounds=None):
        return TensorSpec(tuple(int(d) for d in shape), "value", dtype=dtype, quant=quant, bounds=bounds)

    def emit(self, op, inputs, spec, **options):
        """One node with one output of TensorSpec `spec`; returns its id."""
        return self.typed(op, inputs, [spec], **options)[0]

    def input_of(self, shape, dtype=np.float32, quant=None, bounds=None):
        t = self.spec.add(TensorSpec(tuple(shape), "input", dtype=dtype, quant=quant, bounds=bounds))
        self.spec.inputs.append(t)
        self.register(t)
        return t

    def run_builders(self, builders):
        names, weights = zip(*builders)
        tries = 0
        while len(self.spec.nodes) < self.target and tries < 400:
            tries += 1
            self.run_builder(self.choice(names, weights))

    def run_builder(self, builder):
        """Add what one builder draws (a family whose builders may decline catches that here)."""
        builder(self)


# -- int32 ---------------------------------------------------------------------------------------
class IntGenerator(_Pools):
    """int32 index arithmetic (the module docstring)."""
    KINDS = ("int", "float", "bool")

    def kind(self, spec):
        dtype = np.dtype(spec.dtype)
        if dtype == np.int32 and 1 <= len(spec.shape) <= 4 and spec.bounds is not None:
            return "int"
        if dtype == np.bool_ and 1 <= len(spec.shape) <= 4:
            return "bool"
        if dtype == np.float32 and 1 <= len(spec.shape) <= 4:
            return "float"
        return None

    def generate(self):
        for _ in range(1 if self.chance(0.6) else 2):
            self.add_int_input()
        if self.chance(0.5):
            self.add_input()
        self.run_builders(INT_BUILDERS)
        self.choose_outputs()
        return self.spec

    def add_int_input(self):
        """Token ids [T] / [B, T] below a vocabulary, or any int32 of rank 1-3."""
        if self.chance(0.5):
            t = int(self.rng.integers(1, 13))
            shape = (t,) if self.chance(0.3) else (self.choice((1, 1, 2)), t)
            return self.input_of(shape, np.int32, bounds=(0, int(self.rng.integers(2, 41))))
        rank = int(self.rng.integers(1, 4))
        shape = tuple(int(self.rng.integers(1, 7)) for _ in range(rank))
        bounds = I32 if self.chance(0.6) else (-1000, 1000)
        return self.input_of(shape, np.int32, bounds=bounds)

    def int_const(self, shape, low, high):
        t = self.const(self.rng.integers(low, high, shape, dtype=np.int64, endpoint=True).astype(np.int32))
        self.spec.tensors[t].bounds = (int(low), int(high))
        return t

    def pick_int(self, accept=lambda spec: True):
        eligible = [t for t in self.pools["int"] if accept(self.spec.tensors[t])]
        return self.choice(eligible) if eligible else None

    def indices(self, n):
        """A runtime int32 tensor of values in [0, n): one already so bounded, else a FLOOR_MOD by
        n, a clamp to [0, n - 1], or (None) none."""
        ready = self.pick_int(lambda s: 0 <= s.bounds[0] and s.bounds[1] < n)
        if ready is not None and self.chance(0.6):
            return ready
        x = self.pick_int()
        if x is None:
            return None
        shape = self.shape_of(x)
        if self.chance(0.6):
            return self.emit("FLOOR_MOD", [x, self.int_const((), n, n)], self.value(shape, np.int32, bounds=(0, n - 1)))
        low = self.emit("MAXIMUM", [x, self.int_const((), 0, 0)], self.value(shape, np.int32, bounds=(0, I32[1])))
        return self.emit("MINIMUM", [low, self.int_const((), n - 1, n - 1)], self.value(shape, np.int32,
                                                                                          bounds=(0, n - 1)))


def _int_broadcast_partner(g, x):
    """Another int32 tensor broadcasting with x, else a constant of a broadcastable shape."""
    shape = g.shape_of(x)
    partners = [t for t in g.pools["int"] if fg._broadcast(g.shape_of(t), shape) == shape]
    if partners and g.chance(0.6):
        return g.choice(partners)
    cshape = g.choice(((), (shape[-1],), shape))
    low, high = (-9, 9) if g.chance(0.7) else I32
    return g.int_const(cshape, low, high)


def int_arith(g):
    """ADD / SUB / MUL / MINIMUM / MAXIMUM of two int32 tensors (wrapping past int32)."""
    x = g.pick_int()
    if x is None:
        return False
    y = _int_broadcast_partner(g, x)
    op = g.choice(("ADD", "SUB", "MUL", "MINIMUM", "MAXIMUM"), (3, 2, 2, 1, 1))
    (a, b), (c, d) = g.spec.tensors[x].bounds, g.spec.tensors[y].bounds
    if op == "ADD":
        bounds = _clip(a + c, b + d)
    elif op == "SUB":
        bounds = _clip(a - d, b - c)
    elif op == "MUL":
        products = (a * c, a * d, b * c, b * d)
        bounds = _clip(min(products), max(products))
    else:
        bounds = (min(a, c), min(b, d)) if op == "MINIMUM" else (max(a, c), max(b, d))
    inputs = [x, y] if g.chance(0.7) else [y, x]
    options = {}
    if op in ("ADD", "SUB", "MUL"):
        act = g.choice((NONE, RELU, RELU6), (8, 1, 1))
        options["fused_activation_function"] = act
        if act != NONE:  # a clamp to [0, 6] or [0, max]
            cap = 6 if act == RELU6 else I32[1]
            bounds = tuple(min(max(v, 0), cap) for v in bounds)
    out = fg._broadcast(g.shape_of(x), g.shape_of(y))
    return g.emit(op, inputs, g.value(out, np.int32, bounds=bounds), **options)


def int_divide(g):
    """FLOOR_DIV / FLOOR_MOD by a constant or a runtime divisor kept away from 0 and -1."""
    x = g.pick_int()
    if x is None:
        return False
    shape = g.shape_of(x)
    op = g.choice(("FLOOR_DIV", "FLOOR_MOD"))
    if g.chance(0.5):
        d = int(g.choice((1, 2, 3, 5, 7, 10, -2, -3, -7, 1000)))
        divisor, dlow, dhigh = g.int_const(g.choice(((), (shape[-1],))), d, d), d, d
    else:  # MAXIMUM(y, k >= 1) or MINIMUM(y, k <= -2)
        y = _int_broadcast_partner(g, x)
        k = int(g.choice((1, 2, 5, -2, -5)))
        ylow, yhigh = g.spec.tensors[y].bounds
        dlow, dhigh = (max(ylow, k), max(yhigh, k)) if k > 0 else (min(ylow, k), min(yhigh, k))
        divisor = g.emit("MAXIMUM" if k > 0 else "MINIMUM", [y, g.int_const((), k, k)],
                         g.value(g.shape_of(y), np.int32, bounds=(dlow, dhigh)))
    if op == "FLOOR_MOD":
        bounds = (0, dhigh - 1) if dlow > 0 else (dlow + 1, 0)
    else:
        a, b = g.spec.tensors[x].bounds
        quotients = [q // d for q in (a, b) for d in (dlow, dhigh)]
        bounds = _clip(min(quotients + [0]) - 1, max(quotients + [0]) + 1) if dlow == dhigh else I32
    out = fg._broadcast(shape, g.shape_of(divisor))
    return g.emit(op, [x, divisor], g.value(out, np.int32, bounds=bounds))


def int_unary(g):
    """ABS or NEG (of INT32_MIN: itself, as two's complement wraps)."""
    x = g.pick_int()
    if x is None:
        return False
    a, b = g.spec.tensors[x].bounds
    op = g.choice(("ABS", "NEG"))
    if a == I32[0]:
        bounds = I32
    elif op == "ABS":
        bounds = (0 if a <= 0 <= b else min(abs(a), abs(b)), max(abs(a), abs(b)))
    else:
        bounds = (-b, -a)
    return g.emit(op, [x], g.value(g.shape_of(x), np.int32, bounds=bounds))


def comparison(g):
    """A comparison of two int32 tensors, or of two exact float tensors: a bool tensor."""
    kind = g.choice(("int", "float"), (3, 1))
    x = g.pick_int() if kind == "int" else (g.choice(g.pools["float"]) if g.pools["float"] else None)
    if x is None:
        return False
    shape = g.shape_of(x)
    if kind == "int":
        y = _int_broadcast_partner(g, x)
    else:
        partners = [t for t in g.pools["float"] if fg._broadcast(g.shape_of(t), shape) == shape]
        y = g.choice(partners) if partners and g.chance(0.6) else g.const(np.float32(g.choice((0.0, 0.5, -0.25))))
    op = g.choice(("LESS", "GREATER", "EQUAL", "NOT_EQUAL", "LESS_EQUAL", "GREATER_EQUAL"))
    inputs = [x, y] if g.chance(0.7) else [y, x]
    return g.emit(op, inputs, g.value(fg._broadcast(shape, g.shape_of(y)), np.bool_))


def select(g):
    """SELECT (condition of the operands' shape) or SELECT_V2 (broadcasting) of int32 or float32."""
    if not g.pools["bool"]:
        return False
    cond = g.choice(g.pools["bool"])
    cshape = g.shape_of(cond)
    kind = g.choice(("int", "float"))
    pool = [t for t in g.pools[kind] if fg._broadcast(g.shape_of(t), cshape) is not None]
    if not pool:
        return False
    x = g.choice(pool)
    same = [t for t in pool if g.shape_of(t) == g.shape_of(x) and t != x]
    y = g.choice(same) if same else x
    out = fg._broadcast(cshape, g.shape_of(x))
    if cshape == g.shape_of(x) and g.chance(0.4):
        op = "SELECT"
    elif len(out) <= 4:
        op = "SELECT_V2"
    else:
        return False
    spec = g.spec.tensors[x]
    bounds = None if spec.bounds is None else (min(spec.bounds[0], g.spec.tensors[y].bounds[0]),
                                               max(spec.bounds[1], g.spec.tensors[y].bounds[1]))
    return g.emit(op, [cond, x, y], g.value(out, spec.dtype, bounds=bounds))


def cast(g):
    """CAST int32 -> float32 / bool, bool -> int32 / float32, float32 (times a power of 2) -> int32 / bool."""
    source = g.choice(("int", "bool", "float"), (3, 1, 2))
    if not g.pools[source]:
        return False
    x = g.choice(g.pools[source])
    shape = g.shape_of(x)
    if source == "int":
        a, b = g.spec.tensors[x].bounds
        if max(abs(a), abs(b)) > 2 ** 24 and g.chance(0.8):  # float outputs past 1e6 make a case degenerate
            return False
        target = g.choice((np.float32, np.bool_), (3, 1))
    elif source == "bool":
        target = g.choice((np.int32, np.float32))
    else:
        target = g.choice((np.int32, np.bool_), (3, 1))
        if target == np.int32:
            scale = g.choice(POW2)
            x = g.emit("MUL", [x, g.const(np.float32(scale))], g.value(shape), fused_activation_function=NONE)
    bounds = (0, 1) if source == "bool" else (-1024, 1024) if source == "float" else None
    return g.emit("CAST", [x], g.value(shape, target, bounds=bounds if target == np.int32 else None))


def gather_rows(g):
    """GATHER of runtime indices from a constant table, a float tensor or an int32 one."""
    source = g.choice(("table", "float", "int"), (2, 1, 1))
    if source == "table":
        v, d = int(g.rng.integers(2, 41)), g.choice((1, 3, 4, 8))
        params = g.uniform((v, d), -1, 1)
    elif g.pools[source]:
        params = g.choice(g.pools[source])
    else:
        return False
    pshape = g.shape_of(params)
    axis = 0 if source == "table" or g.chance(0.5) else int(g.rng.integers(len(pshape)))
    idx = g.indices(pshape[axis])
    if idx is None:
        return False
    out = pshape[:axis] + g.shape_of(idx) + pshape[axis + 1:]
    if len(out) > 4 or not g.fits(out):
        return False
    spec = g.spec.tensors[params]
    written = axis - len(pshape) if g.chance(0.2) else axis
    return g.emit("GATHER", [params, idx], g.value(out, spec.dtype, bounds=spec.bounds), axis=written, batch_dims=0)


def embedding_lookup(g):
    """EMBEDDING_LOOKUP of a 1-D runtime id tensor into a constant or runtime float table."""
    if g.pools["float"] and g.chance(0.3):
        table = g.choice(g.pools["float"])
    else:
        table = g.uniform((int(g.rng.integers(2, 41)), g.choice((2, 3, 5, 8))), -1, 1)
    tshape = g.shape_of(table)
    ids = g.indices(tshape[0])
    if ids is None:
        return False
    if len(g.shape_of(ids)) != 1:
        n = fg._size(g.shape_of(ids))
        ids = g.emit("RESHAPE", [ids, g.ints([n])], g.value((n,), np.int32, bounds=g.spec.tensors[ids].bounds),
                     new_shape=[n])
    out = g.shape_of(ids) + tshape[1:]
    if not g.fits(out):
        return False
    return g.emit("EMBEDDING_LOOKUP", [ids, table], g.value(out))


def int_reduce(g):
    """SUM of int32 (wrapping), or ARG_MAX / ARG_MIN of int32 or float32 (ties: the first index)
    into int32 or int64 indices."""
    kind = g.choice(("int", "float"))
    pool = [t for t in g.pools[kind] if len(g.shape_of(t)) >= 2]
    if not pool:
        return False
    x = g.choice(pool)
    shape = g.shape_of(x)
    axis = int(g.rng.integers(len(shape)))
    if kind == "int" and g.chance(0.4):
        keep = g.chance(0.5)
        out = tuple(1 if k == axis else d for k, d in enumerate(shape)) if keep else shape[:axis] + shape[axis + 1:]
        return g.emit("SUM", [x, g.ints([axis])], g.value(out, np.int32, bounds=I32), keep_dims=keep)
    op = g.choice(("ARG_MAX", "ARG_MIN"))
    out, bounds = shape[:axis] + shape[axis + 1:], (0, shape[axis] - 1)
    if g.chance(0.7):
        return g.emit(op, [x, g.ints(axis)], g.value(out, np.int32, bounds=bounds), output_type=2)
    # tf.argmax's default int64 indices (held as int32 on the GPU: gpu/index_view.py), a leaf or
    # read back into the int32 pool by a CAST
    index = g.emit(op, [x, g.ints(axis)], g.value(out, np.int64, bounds=bounds), output_type=4)
    return g.emit("CAST", [index], g.value(out, np.int32, bounds=bounds)) if g.chance(0.5) else index


def int_layout(g):
    """A layout op (fuzz_graphs' builders) on an int32, bool or float tensor of this graph."""
    kind = g.choice(("int", "bool", "float"), (4, 1, 1))
    with g.drawing(kind):
        return g.choice(INT_LAYOUT)(g)


INT_BUILDERS = ((int_arith, 5), (int_divide, 3), (int_unary, 1.5), (comparison, 2.5), (select, 2), (cast, 2.5),
                (gather_rows, 3), (embedding_lookup, 1.5), (int_reduce, 2), (int_layout, 4))


# -- quantized -----------------------------------------------------------------------------------
class QuantGenerator(_Pools):
    """int8 / uint8 quantized graphs (the module docstring)."""
    KINDS = ("quant",)

    def __init__(self, rng, min_nodes, max_nodes):
        super().__init__(rng, min_nodes, max_nodes)
        self.dtype = np.int8 if self.chance(0.8) else np.uint8
        self.qmin, self.qmax = int(np.iinfo(self.dtype).min), int(np.iinfo(self.dtype).max)

    def kind(self, spec):
        return "quant" if spec.quant is not None and 2 <= len(spec.shape) <= 4 and spec.kind != "const" else None

    def generate(self):
        for _ in range(1 if self.chance(0.7) else 2):
            self.add_quant_input()
        self.run_builders(QUANT_BUILDERS)
        self.dequantize_some()
        self.choose_outputs()
        return self.spec

    def grid(self, scale):
        """(scale, zero point, 0) of this graph's type with a random zero point."""
        middle = (self.qmin + self.qmax + 1) // 2
        return (float(scale), int(np.clip(middle + self.rng.integers(-30, 31), self.qmin, self.qmax)), 0)

    def q(self, shape, scale):
        return self.value(shape, self.dtype, self.grid(scale), (self.qmin, self.qmax))

    def scale_of(self, t):
        return float(np.max(self.spec.tensors[t].quant[0]))

    def add_quant_input(self):
        """A quantized input, or a float one QUANTIZEd (its [-1, 1) over 100 to 500 steps)."""
        shape, scale = self.input_shape(), float(self.rng.uniform(0.004, 0.02))
        if self.chance(0.4):
            return self.input_of(shape, self.dtype, self.grid(scale), (self.qmin, self.qmax))
        return self.emit("QUANTIZE", [self.input_of(shape)], self.q(shape, scale))

    def weights(self, shape, axis, per_channel):
        """Quantized weights (int8 symmetric, per channel of `axis` or per tensor; uint8 per
        tensor with a zero point) of a normal(0, 1 / sqrt(fan in)) draw: (tensor id, scales: an
        array per channel, else one float32)."""
        fan_in = fg._size(shape) // shape[axis]
        w = self.rng.standard_normal(shape) / np.sqrt(max(fan_in, 1))
        if self.dtype == np.uint8:
            scale = float(np.abs(w).max()) / 127 or 1.0
            zp = int(self.rng.integers(118, 139))
            q = np.clip(np.round(w / scale) + zp, 0, 255).astype(np.uint8)
            return self.quant_const(q, (scale, zp, 0)), np.float32(scale)  # uint8 weights: per tensor
        other = tuple(d for d in range(len(shape)) if d != axis)
        scales = (np.maximum(np.abs(w).max(axis=other), 1e-3) / 127 if per_channel else
                  np.full(shape[axis], max(float(np.abs(w).max()), 1e-3) / 127)).astype(np.float32)
        shaped = scales.reshape([-1 if d == axis else 1 for d in range(len(shape))])
        q = np.clip(np.round(w / shaped), -127, 127).astype(np.int8)
        if per_channel:
            return self.quant_const(q, (scales, 0, axis)), scales
        return self.quant_const(q, (float(scales[0]), 0, 0)), scales[0]

    def quant_const(self, array, quant):
        t = self.const(array)
        self.spec.tensors[t].quant = quant
        return t

    def bias(self, in_scale, w_scales, count):
        """int32 bias of scale in_scale x weight scale (per channel where the weights are)."""
        scales = (np.float32(in_scale) * np.broadcast_to(np.asarray(w_scales, np.float32), (count,))).astype(np.float32)
        values = np.round(self.rng.uniform(-0.2, 0.2, count) / scales).astype(np.int32)
        return self.quant_const(values, (scales, 0, 0) if np.ndim(w_scales) else (float(scales[0]), 0, 0))

    def dequantize_some(self):
        """DEQUANTIZE the last tensor (half the time), and now and then another: float outputs."""
        pool = self.pools["quant"]
        for t in ([pool[-1]] if pool and self.chance(0.5) else []) + ([self.choice(pool)] if pool and self.chance(0.2)
                                                                       else []):
            self.emit("DEQUANTIZE", [t], self.value(self.shape_of(t)))


def _out_scale(g, scale):
    """An output scale near `scale` (the range the values will span, give or take 2x)."""
    return float(scale * g.rng.uniform(0.5, 2.0))


def q_conv(g):
    """CONV_2D or DEPTHWISE_CONV_2D of a quantized NHWC tensor."""
    x = g.pick(fg._rank4)
    if x is None:
        return False
    n, h, w, c = g.shape_of(x)
    depthwise = g.chance(0.4)
    kernel, stride = g.choice((1, 3, 5), (4, 5, 1)), g.choice((1, 2), (3, 1))
    padding = g.choice((SAME, VALID))
    if padding == VALID and min(h, w) < kernel:
        padding = SAME
    o = c * (2 if depthwise and g.chance(0.2) else 1) if depthwise else g.channels()
    shape = (n, fg._window_out(h, kernel, stride, padding), fg._window_out(w, kernel, stride, padding), o)
    if not g.fits(shape):
        return False
    in_scale = g.scale_of(x)
    wshape, axis = ((1, kernel, kernel, o), 3) if depthwise else ((o, kernel, kernel, c), 0)
    weights, w_scales = g.weights(wshape, axis, per_channel=g.chance(0.8))
    bias = g.bias(in_scale, w_scales, o)
    options = dict(padding=padding, stride_w=stride, stride_h=stride, dilation_w_factor=1, dilation_h_factor=1,
                   fused_activation_function=g.activation())
    if depthwise:
        options["depth_multiplier"] = o // c
    # values of ~in_range spread over a window of fan_in products of ~1/sqrt(fan_in) weights
    return g.emit("DEPTHWISE_CONV_2D" if depthwise else "CONV_2D", [x, weights, bias],
                  g.q(shape, _out_scale(g, in_scale)), **options)


def q_fully_connected(g):
    x = g.pick()
    if x is None:
        return False
    shape = g.shape_of(x)
    u = g.channels()
    keep = g.chance(0.5)
    out = tuple(shape[:-1]) + (u,) if keep else (fg._size(shape[:-1]), u)
    if not g.fits(out):
        return False
    in_scale = g.scale_of(x)
    weights, w_scales = g.weights((u, shape[-1]), 0, per_channel=False)
    bias = g.bias(in_scale, w_scales, u) if g.chance(0.8) else -1
    return g.emit("FULLY_CONNECTED", [x, weights, bias], g.q(out, _out_scale(g, in_scale)), keep_num_dims=keep,
                  fused_activation_function=g.activation())


def q_binary(g):
    """ADD or MUL of two quantized tensors of different scales (or a quantized constant)."""
    x = g.pick()
    if x is None:
        return False
    shape = g.shape_of(x)
    partners = [t for t in g.values if t != x and fg._broadcasts_onto(g.shape_of(t), shape)]
    if partners and g.chance(0.7):
        y = g.choice(partners)
    else:
        cshape = g.choice(((1,), (shape[-1],), shape))
        scale = float(g.rng.uniform(0.004, 0.02))
        y = g.quant_const(g.rng.integers(g.qmin, g.qmax + 1, cshape).astype(g.dtype), g.grid(scale))
    op = g.choice(("ADD", "MUL"), (3, 2))
    sx, sy = g.scale_of(x), g.scale_of(y)
    half = (g.qmax - g.qmin) / 2
    scale = max(sx, sy) * 2 if op == "ADD" else sx * sy * half  # the range of a sum, of a product
    inputs = [x, y] if g.chance(0.7) else [y, x]
    return g.emit(op, inputs, g.q(shape, _out_scale(g, scale)), fused_activation_function=g.activation(0.2))


def q_concatenation(g):
    """CONCATENATION of quantized tensors of different scales into an output scale of its own:
    uint8 inputs as they are (LiteRT requantizes them), int8 ones each QUANTIZEd to the output's
    grid first where theirs differs (LiteRT's int8 kernel takes one grid, as converters write it)."""
    x = g.pick()
    if x is None:
        return False
    shape = g.shape_of(x)
    axis = len(shape) - 1 if g.chance(0.5) else int(g.rng.integers(len(shape)))
    partners = [t for t in g.values if len(g.shape_of(t)) == len(shape) and
                all(a == b for k, (a, b) in enumerate(zip(g.shape_of(t), shape)) if k != axis)]
    parts = [x] + [g.choice(partners) for _ in range(int(g.rng.integers(1, 4)))]
    out = tuple(sum(g.shape_of(p)[axis] for p in parts) if k == axis else d for k, d in enumerate(shape))
    if not g.fits(out):
        return False
    spec = g.q(out, _out_scale(g, max(g.scale_of(p) for p in parts)))
    if g.dtype == np.int8:
        parts = [p if g.spec.tensors[p].quant == spec.quant else
                 g.emit("QUANTIZE", [p], g.value(g.shape_of(p), g.dtype, spec.quant, spec.bounds)) for p in parts]
    return g.emit("CONCATENATION", parts, spec, axis=axis, fused_activation_function=NONE)


def q_activation(g):
    """LOGISTIC, TANH or SOFTMAX: outputs on the grids LiteRT requires."""
    x = g.pick()
    if x is None:
        return False
    op = g.choice(("LOGISTIC", "TANH", "SOFTMAX"))
    signed = g.dtype == np.int8
    scale, zero = (1 / 128, 0 if signed else 128) if op == "TANH" else (1 / 256, -128 if signed else 0)
    spec = g.value(g.shape_of(x), g.dtype, (scale, zero, 0), (g.qmin, g.qmax))
    if op == "SOFTMAX":
        return g.emit(op, [x], spec, beta=g.choice((1.0, 1.0, 0.5, 2.0)))
    return g.emit(op, [x], spec)


def q_requantize(g):
    """QUANTIZE of a quantized tensor to another scale and zero point."""
    x = g.pick()
    if x is None:
        return False
    return g.emit("QUANTIZE", [x], g.q(g.shape_of(x), _out_scale(g, g.scale_of(x))))


def q_layout(g):
    """A layout op, pool or MEAN (fuzz_graphs' builders): its output on its input's grid."""
    return g.choice(QUANT_LAYOUT)(g)


QUANT_BUILDERS = ((q_conv, 5), (q_fully_connected, 3), (q_binary, 4), (q_concatenation, 2), (q_activation, 2),
                  (q_requantize, 1), (q_layout, 6))


# -- state across invokes ------------------------------------------------------------------------
class StateGenerator(_Pools):
    """A float32 graph around resource variables (the module docstring)."""
    KINDS = ("float",)

    def generate(self):
        self.add_input()
        if self.chance(0.3):
            self.add_input()
        variables = [self.add_variable(k) for k in range(1 if self.chance(0.7) else 2)]
        counter = self.add_counter() if self.chance(0.4) else None
        self.run_builders(fg.BUILDERS)
        for handle, shape, read in variables:
            self.assign(handle, shape, read)
        if counter is not None:
            self.count(*counter)
        self.choose_outputs()
        self.spec.steps = ("invoke", "invoke", "invoke", "reset", "invoke")
        return self.spec

    def handle(self, name, init):
        """VAR_HANDLE of variable `name`, which CALL_ONCE's init assigns the constant `init`."""
        self.spec.variables[name] = init
        return self.emit("VAR_HANDLE", [], TensorSpec((), "value", type_name="RESOURCE"), container="",
                         shared_name=name)

    def add_variable(self, k):
        """A float32 variable of an input's shape (or that shape with another time axis: a ring
        buffer of the input's frames): (handle, shape, its READ_VARIABLE)."""
        x = self.spec.inputs[0]
        shape = self.shape_of(x)
        ring = len(shape) >= 3 and self.chance(0.4)
        if ring:
            shape = (shape[0], int(self.rng.integers(1, 5))) + shape[2:]
        start = np.zeros(shape, np.float32) if self.chance(0.5) else self.rng.uniform(-1, 1, shape).astype(np.float32)
        handle = self.handle(f"var{k}", self.const(start))
        read = self.emit("READ_VARIABLE", [handle], self.value(shape))
        if ring:  # the newest frames of [state, x] become the state (streaming models)
            joined = self.one("CONCATENATION", [read, x], (shape[0], shape[1] + self.shape_of(x)[1]) + shape[2:],
                              axis=1, fused_activation_function=NONE)
            newest = self.one("STRIDED_SLICE", [joined, self.ints([0, -shape[1]] + [0] * (len(shape) - 2)),
                                                self.ints([0] * len(shape)), self.ints([1] * len(shape))], shape,
                              begin_mask=(1 << len(shape)) - 1 - 2, end_mask=(1 << len(shape)) - 1, ellipsis_mask=0,
                              new_axis_mask=0, shrink_axis_mask=0, offset=False)
            self.typed("ASSIGN_VARIABLE", [handle, newest], [])
            return None, shape, read
        return handle, shape, read

    def assign(self, handle, shape, read):
        """ASSIGN_VARIABLE of a tensor of the variable's shape computed this invoke (else the
        state plus an input), sometimes read again after (the new value, in the same invoke)."""
        if handle is None:
            return
        later = [t for t in self.values if t > read and self.shape_of(t) == shape]
        value = self.choice(later) if later and self.chance(0.8) else self.one(
            "ADD", [read, self.spec.inputs[0]], shape, fused_activation_function=NONE)
        self.typed("ASSIGN_VARIABLE", [handle, value], [])
        if self.chance(0.3):
            self.emit("READ_VARIABLE", [handle], self.value(shape))

    def add_counter(self):
        """An int32 step counter (from 0) and the row of a float tensor it selects: (handle, read)."""
        handle = self.handle("steps", self.const(np.zeros(1, np.int32)))
        read = self.emit("READ_VARIABLE", [handle], self.value((1,), np.int32, bounds=(0, 1000)))
        table = self.values[0]
        n = self.shape_of(table)[0]
        row = self.emit("FLOOR_MOD", [read, self.ints(n)], self.value((1,), np.int32, bounds=(0, n - 1)))
        self.one("GATHER", [table, row], (1,) + self.shape_of(table)[1:], axis=0, batch_dims=0)
        return handle, read

    def count(self, handle, read):
        step = self.emit("ADD", [read, self.ints([1])], self.value((1,), np.int32, bounds=(1, 1001)),
                         fused_activation_function=NONE)
        self.typed("ASSIGN_VARIABLE", [handle, step], [])


# -- L2 norms and FFTs ---------------------------------------------------------------------------
class _FloatFamily(_Pools):
    """A float32 graph of 1-2 inputs: fuzz_graphs' builders and the family's own (extra_builders)."""

    def extra_builders(self):
        return ()

    def generate(self):
        for _ in range(1 if self.chance(0.7) else 2):
            self.add_input()
        self.run_builders(fg.BUILDERS + self.extra_builders())
        self.choose_outputs()
        return self.spec


class SignalGenerator(_FloatFamily):
    """A float32 graph with L2_NORMALIZATION and RFFT2D (the module docstring)."""

    def extra_builders(self):
        return (l2_normalization, 6), (rfft2d, 6)


def l2_normalization(g):
    """L2_NORMALIZATION over the last axis (the only one LiteRT's kernel normalises), sometimes of
    a RELU'd tensor with all-zero rows (LiteRT's epsilon then keeps them 0)."""
    x = g.pick()
    if x is None:
        return False
    if g.chance(0.2):
        x = g.one("RELU", [g.one("SUB", [x, g.const(np.float32(0.7))], g.shape_of(x), fused_activation_function=NONE)],
                  g.shape_of(x))
    return g.one("L2_NORMALIZATION", [x], g.shape_of(x), fused_activation_function=NONE)


def rfft2d(g):
    """RFFT2D of the last two axes to power-of-two lengths (cropping or zero-padding), then
    COMPLEX_ABS, REAL or IMAG (or the complex64 tensor as an output)."""
    x = g.pick()
    if x is None:
        return False
    shape = g.shape_of(x)
    # (a width of 1 is no transform in LiteRT 2.3: Ooura's rdft of n = 1 returns |x[0]| sqrt(2) and the like)
    lengths = [g.choice((1, 2, 4, 8, 16), (1, 3, 3, 2, 1)), g.choice((2, 4, 8, 16), (3, 3, 2, 1))]
    out = tuple(shape[:-2]) + (lengths[0], lengths[1] // 2 + 1)
    spectrum = g.emit("RFFT2D", [x, g.ints(lengths)], g.value(out, np.complex64))
    part = g.choice(("COMPLEX_ABS", "REAL", "IMAG", None), (4, 1, 1, 1))
    return g.emit(part, [spectrum], g.value(out)) if part else spectrum


# -- PACK, UNPACK, BROADCAST_TO, CUMSUM ----------------------------------------------------------
class EdgeGenerator(_FloatFamily):
    """A float32 graph with PACK, UNPACK, BROADCAST_TO, CUMSUM, bool reductions, GATHER_ND,
    ONE_HOT, ATAN2, DYNAMIC_UPDATE_SLICE, LOCAL_RESPONSE_NORMALIZATION and TOPK_V2 (the module
    docstring)."""

    def extra_builders(self):
        return ((pack, 5), (unpack, 5), (broadcast_to, 5), (cumsum, 5), (bool_reduce, 4), (gather_nd, 4), (one_hot, 3),
                (atan2, 3), (update_slice, 4), (local_response_norm, 3), (top_k, 3), (conv3d, 3))


def conv3d(g):
    """CONV_3D of a rank-4 tensor [A, B, C, D] as one clip [1, A, B, C, D] (kernel 1-3, stride 1-2
    and dilation 1-2 per dim, SAME / VALID, a clamp), its depth padded before it sometimes (as
    litert-torch writes a Conv3d's padding), then sometimes its global pool over depth, height
    and width (a rank-5 MEAN); back to rank 4."""
    x = g.pick(lambda shape: len(shape) == 4 and fg._size(shape) <= 4096)
    if x is None:
        return False
    clip = (1,) + g.shape_of(x)
    v = g.typed("RESHAPE", [x, g.ints(clip)], [g.value(clip)])[0]
    if g.chance(0.3):
        before, after = int(g.rng.integers(0, 2)), int(g.rng.integers(1, 3))
        clip = (1, clip[1] + before + after) + clip[2:]
        v = g.typed("PAD", [v, g.ints([[0, 0], [before, after], [0, 0], [0, 0], [0, 0]])], [g.value(clip)])[0]
    kernel, strides, rates = (tuple(int(k) for k in g.rng.integers(1, top + 1, 3)) for top in (3, 2, 2))
    padding = g.choice((SAME, VALID))
    if padding == VALID and any((k - 1) * r + 1 > n for k, r, n in zip(kernel, rates, clip[1:4])):
        padding = SAME
    o = g.channels()
    spatial = zip(clip[1:4], kernel, strides, rates)
    out = (1,) + tuple(fg._window_out(n, k, s, padding, r) for n, k, s, r in spatial) + (o,)
    if not g.fits(out):
        return False
    fan_in = int(np.prod(kernel)) * clip[4]
    v = g.typed("CONV_3D", [v, g.weights(kernel + (clip[4], o), fan_in), g.uniform(o, -0.2, 0.2)], [g.value(out)],
                padding=padding, stride_d=strides[0], stride_h=strides[1], stride_w=strides[2],
                dilation_d_factor=rates[0], dilation_h_factor=rates[1], dilation_w_factor=rates[2],
                fused_activation_function=g.activation())[0]
    if g.chance(0.3):
        v, out = _conv3d_transpose(g, v, out)
    if g.chance(0.4):
        out = (1, 1, 1, 1, out[4])
        v = g.typed("MEAN", [v, g.ints([1, 2, 3])], [g.value(out)], keep_dims=True)[0]
    return g.typed("RESHAPE", [v, g.ints(out[1:])], [g.value(out[1:])])[0]


def _conv3d_transpose(g, v, shape):
    """A CONV_3D_TRANSPOSE of clip v (SAME, kernel 1-3 and stride 1-2 per dim: the extents times
    the strides, as a 3D U-Net's upsampling), or v itself where that output would be too large."""
    kernel, strides = (tuple(int(k) for k in g.rng.integers(1, top + 1, 3)) for top in (3, 2))
    o = g.channels()
    out = (1,) + tuple(n * s for n, s in zip(shape[1:4], strides)) + (o,)
    if not g.fits(out):
        return v, shape
    fan_in = int(np.prod(kernel)) * shape[4]
    v = g.typed("CONV_3D_TRANSPOSE", [g.ints(out), g.weights(kernel + (o, shape[4]), fan_in), v,
                                      g.uniform(o, -0.2, 0.2)], [g.value(out)],
                padding=SAME, stride_d=strides[0], stride_h=strides[1], stride_w=strides[2],
                dilation_d_factor=1, dilation_h_factor=1, dilation_w_factor=1,
                fused_activation_function=g.activation())[0]
    return v, out


def _axis_written(g, axis, rank):
    """`axis` of a rank-`rank` dim list as a node's option: negative three times in ten."""
    return axis - rank if g.chance(0.3) else axis


def pack(g):
    """PACK of 1-3 tensors of x's shape along a new axis at any position."""
    x = g.pick()
    if x is None:
        return False
    shape = g.shape_of(x)
    inputs = [x] + [g.choice(g.alike(x)) for _ in range(int(g.rng.integers(0, 3)))]
    axis = int(g.rng.integers(0, len(shape) + 1))
    out = shape[:axis] + (len(inputs),) + shape[axis:]
    if not g.fits(out):
        return False
    return g.one("PACK", inputs, out, axis=_axis_written(g, axis, len(out)), values_count=len(inputs))


def unpack(g):
    """UNPACK along an axis of 1 to 4 elements (one output per element)."""
    x = g.pick(lambda shape: any(d <= 4 for d in shape))
    if x is None:
        return False
    shape = g.shape_of(x)
    axis = g.choice([k for k, d in enumerate(shape) if d <= 4])
    out = shape[:axis] + shape[axis + 1:]
    return g.node("UNPACK", [x], [out] * shape[axis], num=shape[axis], axis=_axis_written(g, axis, len(shape)))[0]


def broadcast_to(g):
    """BROADCAST_TO of x with its size-1 dims widened (to 1, 2, 3 or 5), a leading dim added
    sometimes (LiteRT registers the op from version 2)."""
    x = g.pick()
    if x is None:
        return False
    shape = g.shape_of(x)
    target = tuple(g.choice((1, 2, 3, 5)) if d == 1 else d for d in shape)
    if len(shape) < 4 and g.chance(0.4):
        target = (g.choice((2, 3)),) + target
    if target == shape or not g.fits(target):
        return False
    return g.one("BROADCAST_TO", [x, g.ints(target)], target, version=2)


def cumsum(g):
    """CUMSUM along any axis, exclusive and reverse three times in ten each."""
    x = g.pick()
    if x is None:
        return False
    shape = g.shape_of(x)
    axis = _axis_written(g, int(g.rng.integers(len(shape))), len(shape))
    return g.one("CUMSUM", [x, g.ints(axis)], shape, exclusive=g.chance(0.3), reverse=g.chance(0.3))


def bool_reduce(g):
    """REDUCE_ALL or REDUCE_ANY over random axes of x > t (t a quantile of x's likely values, so
    that both answers occur), then CAST to float32 or SELECT_V2 between x's reduction's shape
    tensors (a constant and x reduced by a MEAN of the same axes)."""
    x = g.pick()
    if x is None:
        return False
    shape = g.shape_of(x)
    axes = sorted({int(a) for a in g.rng.integers(0, len(shape), int(g.rng.integers(1, len(shape) + 1)))})
    keep = g.chance(0.5)
    out = tuple(1 if k in axes else d for k, d in enumerate(shape)) if keep else \
        tuple(d for k, d in enumerate(shape) if k not in axes)
    if len(out) < 2:
        return False  # the pools hold ranks 2-4: a CAST or SELECT of it would be an output only
    above = g.typed("GREATER", [x, g.const(np.float32(g.choice((-1.0, 0.0, 1.0))))],
                    [g.value(shape, np.bool_)])[0]
    op = g.choice(("REDUCE_ALL", "REDUCE_ANY"))
    reduced = g.typed(op, [above, g.ints(axes)], [g.value(out, np.bool_)], keep_dims=keep)[0]
    if g.chance(0.5):
        return g.typed("CAST", [reduced], [g.value(out)])[0]
    mean = g.one("MEAN", [x, g.ints(axes)], out, keep_dims=keep)
    return g.typed("SELECT_V2", [reduced, mean, g.const(np.float32(0.5))], [g.value(out)])[0]


def gather_nd(g):
    """GATHER_ND of x by constant rows of depth 1 to rank(x), or by the ARG_MAX over the last axis
    of a tensor no wider than x's first dim, as rows of depth 1."""
    x = g.pick()
    if x is None:
        return False
    shape = g.shape_of(x)
    narrow = [t for t in g.values if g.shape_of(t)[-1] <= shape[0] and len(g.shape_of(t)) <= 3]
    y = g.choice(narrow) if narrow and g.chance(0.5) else None
    if y is not None:
        depth, rows = 1, g.shape_of(y)[:-1]
    else:
        depth = int(g.rng.integers(1, len(shape) + 1))
        rows = tuple(int(d) for d in g.rng.integers(1, 4, int(g.rng.integers(1, 3))))
    out = tuple(rows) + tuple(shape[depth:])
    if not 1 <= len(out) <= 4 or not g.fits(out):
        return False
    if y is not None:
        index_type = _index_type(g)
        picked = _argmax_last(g, y, index_type)
        indices = g.typed("RESHAPE", [picked, g.ints(rows + (1,))], [g.value(rows + (1,), index_type)])[0]
    else:
        indices = g.ints(np.stack([g.rng.integers(0, d, rows) for d in shape[:depth]], axis=-1))
    return g.typed("GATHER_ND", [x, indices], [g.value(out)])[0]


def _index_type(g):
    """int32 or tf.argmax's default int64 (held as int32 on the GPU: gpu/index_view.py)."""
    return g.choice((np.int32, np.int64))


def _argmax_last(g, x, index_type):
    """The ARG_MAX of x over its last axis, its indices of `index_type`."""
    shape = g.shape_of(x)
    out = g.value(shape[:-1], index_type, bounds=(0, shape[-1] - 1))
    return g.typed("ARG_MAX", [x, g.ints(-1)], [out], output_type=2 if index_type == np.int32 else 4)[0]


def one_hot(g):
    """ONE_HOT of the ARG_MAX over the last axis of x (depth around its width), the new axis
    anywhere, float32 on / off values."""
    x = g.pick(lambda shape: len(shape) <= 4)
    if x is None:
        return False
    shape = g.shape_of(x)
    rows, width = shape[:-1], shape[-1]
    depth = max(1, width + int(g.rng.integers(-2, 3)))
    axis = int(g.rng.integers(0, len(rows) + 1))
    out = rows[:axis] + (depth,) + rows[axis:]
    if not g.fits(out):
        return False
    picked = _argmax_last(g, x, _index_type(g))
    values = [g.const(np.float32(v)) for v in (g.choice((1.0, 2.5)), g.choice((0.0, -0.5)))]
    return g.typed("ONE_HOT", [picked, g.ints(depth), *values], [g.value(out)],
                   axis=-1 if axis == len(rows) and g.chance(0.5) else axis)[0]


def atan2(g):
    """ATAN2(y, |x| + 0.25) of two tensors of one shape (x may be y)."""
    y = g.pick()
    if y is None:
        return False
    shape = g.shape_of(y)
    x = g.choice(g.alike(y))
    right = g.one("ADD", [g.one("ABS", [x], shape), g.const(np.float32(0.25))], shape, fused_activation_function=NONE)
    return g.one("ATAN2", [y, right], shape)


def update_slice(g):
    """DYNAMIC_UPDATE_SLICE of an update (a tensor of its shape, else a constant) into x, the
    start along one axis an ARG_MAX over a [1, w] tensor (in [0, w)), the others constants."""
    x = g.pick()
    if x is None:
        return False
    shape = g.shape_of(x)
    update_shape = tuple(int(g.rng.integers(1, d + 1)) for d in shape)
    fitting = [t for t in g.values if g.shape_of(t) == update_shape and t != x]
    update = g.choice(fitting) if fitting and g.chance(0.7) else g.uniform(update_shape, -1.0, 1.0)
    starts = [g.ints([int(g.rng.integers(-1, d + 2))]) for d in shape]  # clamped into range by TFLite
    rows = [t for t in g.values if len(g.shape_of(t)) == 2 and g.shape_of(t)[0] == 1]
    if rows:
        y = g.choice(rows)
        axis = int(g.rng.integers(len(shape)))
        starts[axis] = g.typed("ARG_MAX", [y, g.ints(-1)], [g.value((1,), np.int32, bounds=(0, g.shape_of(y)[1] - 1))],
                               output_type=2)[0]
    start = g.typed("CONCATENATION", starts, [g.value((len(shape),), np.int32)], axis=0,
                    fused_activation_function=NONE)[0]
    return g.one("DYNAMIC_UPDATE_SLICE", [x, update, start], shape)


def local_response_norm(g):
    """LOCAL_RESPONSE_NORMALIZATION of a 4-D tensor: radius 0 to 6 (past the channels too), the
    options of AlexNet and Inception or drawn around them."""
    x = g.pick(lambda shape: len(shape) == 4)
    if x is None:
        return False
    options = dict(radius=int(g.rng.integers(0, 7)), bias=g.choice((1.0, 2.0, 0.5)),
                   alpha=g.choice((1e-4, 2e-5, 0.1, 1.0)), beta=g.choice((0.75, 0.5, 1.0)))
    return g.one("LOCAL_RESPONSE_NORMALIZATION", [x], g.shape_of(x), **options)


def top_k(g):
    """TOPK_V2 of x's last axis, k from 1 to its width: the values go on (sorted values of rounded
    inputs are the rounded sorted values, whatever order the rounding ties), the indices are an
    int32 output of the node only."""
    x = g.pick()
    if x is None:
        return False
    shape = g.shape_of(x)
    k = int(g.rng.integers(1, shape[-1] + 1))
    out = tuple(shape[:-1]) + (k,)
    values, _ = g.typed("TOPK_V2", [x, g.ints(k)],
                        [g.value(out), g.value(out, np.int32, bounds=(0, shape[-1] - 1))])
    return values


# -- recurrent cells and ghost modules -------------------------------------------------------------
class CellGenerator(_FloatFamily):
    """A float32 graph with unrolled recurrent cells and GhostNet modules (the module docstring)."""

    def extra_builders(self):
        return (recurrent_cells, 6), (ghost_module, 6)


def _one_row(g):
    """A runtime tensor of one row of at most 32 values, [1, 1, H] or [1, H]: a picked one, or a
    MEAN of a tensor over every axis but the last (reshaped to rank 3 sometimes). Mostly H > 4:
    a sequence of such rows is then no block of its PHWC4 storage (a row per slice)."""
    least = 5 if g.chance(0.6) else 1
    x = g.pick(lambda s: len(s) in (2, 3) and fg._size(s[:-1]) == 1 and least <= s[-1] <= 32)
    if x is not None:
        return x
    x = g.pick(lambda s: len(s) >= 2 and least <= s[-1] <= 32)
    if x is None:
        return None
    rank = len(g.shape_of(x))
    row = fg.mean(g, x, list(range(rank - 1)), keep=False)  # [H]
    h = g.shape_of(row)[-1]
    return fg.reshape(g, row, (1, 1, h) if g.chance(0.6) else (1, h))


def recurrent_cells(g):
    """1-3 LSTM or GRU steps of a one-row state h: gates = FC(h) (+ an input projection), their
    SLICEs through LOGISTIC / TANH, the state update; the steps' h concatenated along axis 0
    sometimes (litert-torch's sequence output)."""
    h = _one_row(g)
    if h is None:
        return False
    shape = g.shape_of(h)
    units, gru = shape[-1], g.chance(0.4)
    count = 3 if gru else 4
    gates_shape = tuple(shape[:-1]) + (count * units,)
    projection = g.pick(lambda s: s == gates_shape) if g.chance(0.4) else None
    c, steps = h, []
    for _ in range(int(g.rng.integers(1, 4))):
        gates = g.one("FULLY_CONNECTED", [h, g.weights((count * units, units), units), g.uniform(count * units, -0.2, 0.2)],
                      gates_shape, keep_num_dims=len(shape) == 3, fused_activation_function=NONE)
        if projection is not None:
            gates = g.one("ADD", [gates, projection], gates_shape, fused_activation_function=NONE)
        part = [g.one("SLICE", [gates, g.ints([0] * (len(shape) - 1) + [k * units]), g.ints(list(shape))], shape)
                for k in range(count)]
        if gru:
            r, z = (fg.unary(g, p, "LOGISTIC") for p in part[:2])
            n = fg.unary(g, g.one("MUL", [part[2], r], shape, fused_activation_function=NONE), "TANH")
            h = g.one("ADD", [g.one("MUL", [g.one("SUB", [h, n], shape, fused_activation_function=NONE), z], shape,
                                    fused_activation_function=NONE), n], shape, fused_activation_function=NONE)
        else:
            i, f, o = (fg.unary(g, part[k], "LOGISTIC") for k in (0, 1, 3))
            c = g.one("ADD", [g.one("MUL", [f, c], shape, fused_activation_function=NONE),
                              g.one("MUL", [i, fg.unary(g, part[2], "TANH")], shape, fused_activation_function=NONE)],
                      shape, fused_activation_function=NONE)
            h = g.one("MUL", [o, fg.unary(g, c, "TANH")], shape, fused_activation_function=NONE)
        steps.append(h)
    if len(steps) > 1 and g.chance(0.6):
        seq = g.one("CONCATENATION", steps, (len(steps),) + tuple(shape[1:]), axis=0, fused_activation_function=NONE)
        if g.chance(0.8):  # read on (a last FULLY_CONNECTED over the rows), as a model's head reads it
            fg.fully_connected(g, seq, keep=False)
    return True


def ghost_module(g):
    """GhostNet's module: a = 1x1 CONV_2D(x) to half x's channels, b = 3x3 DEPTHWISE_CONV_2D(a),
    CONCATENATION(a, b) along channels, plus x (either order) where the channels match."""
    x = g.pick(lambda s: len(s) == 4 and s[-1] >= 2 and (s[0] == 1 or g.chance(0.2)))
    if x is None:
        return False
    n, height, width, channels = g.shape_of(x)
    if channels % 8 and g.chance(0.7):  # halves of whole vec4s mostly (the rule's case), any sometimes
        x = fg.conv2d(g, x, 8 * max(1, channels // 8), 1, 1, SAME, act=NONE)
        if not x:
            return False
        channels = g.shape_of(x)[-1]
    half = channels // 2 if g.chance(0.8) else g.channels()
    a = fg.conv2d(g, x, half, 1, 1, SAME, act=g.choice((RELU, NONE)))
    b = a and fg.depthwise(g, a, 3, 1, SAME, act=g.choice((RELU, NONE)), multiplier=1)
    if not b:
        return bool(a)
    joined = g.one("CONCATENATION", [a, b], (n, height, width, 2 * half), axis=3, fused_activation_function=NONE)
    if 2 * half == channels and g.chance(0.85):
        total = g.one("ADD", [joined, x] if g.chance(0.7) else [x, joined], (n, height, width, channels),
                      fused_activation_function=NONE)
        if g.chance(0.8):  # the next block's 1x1 convolution reads the sum
            fg.conv2d(g, total, kernel=1, stride=1, padding=SAME)
    return True


from .fuzz_graph_resize import ResizeGenerator  # noqa: E402 (it builds on _Pools)

GENERATORS = {"int32": IntGenerator, "quant": QuantGenerator, "state": StateGenerator, "signal": SignalGenerator,
              "resize": ResizeGenerator, "edge": EdgeGenerator, "cells": CellGenerator}
