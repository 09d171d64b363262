"""The 'resize' family of gles-fuzz-graphs: float32 models whose inputs have dynamic dimensions
(shape_signature -1), invoked at several sizes of them on one interpreter per path.

Each case draws symbols (B: a batch or a count of rows, H / W: an image's height and width, T: a
sequence length), 1-2 model inputs over them (an image [B?, H?, W?, C], a sequence [B?, T?, C] or
rows [B, C]; a second input shares the first's symbols), and a graph of ops that stay valid at
every size of those dimensions: elementwise (unary, with constants broadcast over static
dimensions, between runtime tensors), CONV_2D / DEPTHWISE_CONV_2D / AVERAGE_POOL_2D / MAX_POOL_2D
(SAME padding over a dynamic H / W, VALID where H / W are static or the window is 1),
FULLY_CONNECTED over a dynamic batch or rows (keep_num_dims both ways), MEAN / SUM / REDUCE_MAX
over any axes, SOFTMAX, CONCATENATION and SPLIT / SPLIT_V along a static axis, SLICE (size -1 on
a dynamic axis), STRIDED_SLICE (begin / end masks, strides 1, 2 and -1, or an end past the size,
on a dynamic axis; shrink_axis on a static one), RESHAPE with -1 for its one dynamic dimension,
SQUEEZE / EXPAND_DIMS, TRANSPOSE, PAD / PADV2 of static axes, TILE, GATHER of constant indices
(index 0 of a dynamic axis), BATCH_MATMUL (a constant, the tensor itself, or another of the same
dynamic batch), RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR to a fixed size, and the patterns the
rewrite rules fuse (swish, squeeze-excite gates, batch norms, residual ADDs, layer norms,
attention over a dynamic sequence, Keras' flattened Dense, MediaPipe's pooled shortcut).

A dimension is an int (static) or a Dim: scale x the product of ceil(size / divisor) of symbols,
which every such op keeps exact (a stride-2 SAME window divides, a flattening multiplies).
Spec.steps: invoke at the declared sizes, then resizes to other sizes (each symbol larger or
smaller), to sizes of 1, back to the first sizes and to those same sizes again, each followed by
allocate_tensors and an invoke on fresh inputs. One case in four declares its shapes as
converters write them: every dynamic dimension 1 (intermediates too, however many elements they
really hold), and the first resize grows from there.
"""
import functools
from dataclasses import dataclass, field

import numpy as np

from . import fuzz_graphs as fg
from .fuzz_graph_families import _Pools
from .fuzz_graphs import NONE, RELU, RELU6, SAME, VALID, TensorSpec

MAX_SIZE = {"B": 3, "H": 9, "W": 9, "T": 10}  # the largest size of each symbol any step takes


class Decline(Exception):
    """A builder cannot go on at every size (dims that do not fit, a window that is no Dim):
    run_builders drops the attempt, keeping the valid nodes it added."""


@dataclass(frozen=True)
class Dim:
    """A dimension that follows the resized sizes: scale x prod(ceil(sizes[s] / d) for s, d in factors)."""
    factors: tuple          # ((symbol, divisor), ...), sorted
    scale: int = 1

    def at(self, sizes):
        return self.scale * int(np.prod([-(-sizes[s] // d) for s, d in self.factors]))


def dynamic(d):
    return isinstance(d, Dim)


def at(dims, sizes):
    """The concrete shape of dims at {symbol: size}."""
    return tuple(d.at(sizes) if dynamic(d) else int(d) for d in dims)


def times(a, b):
    """The dimension a x b."""
    if not dynamic(a) and not dynamic(b):
        return a * b
    fa, sa = (a.factors, a.scale) if dynamic(a) else ((), a)
    fb, sb = (b.factors, b.scale) if dynamic(b) else ((), b)
    return Dim(tuple(sorted(fa + fb)), sa * sb)


def product(dims):
    return functools.reduce(times, dims, 1)


def ceil_div(d, stride):
    """ceil(d / stride) at every size, or None where that is no Dim (a product, a scaled one)."""
    if stride == 1:
        return d
    if not dynamic(d):
        return -(-d // stride)
    if d.scale != 1 or len(d.factors) != 1:
        return None
    (symbol, divisor), = d.factors
    return Dim(((symbol, divisor * stride),))


def broadcast(a, b):
    """The broadcast of dims a and b where it holds at every size (equal, or a static 1), else None."""
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            return None
    return tuple(out)


@dataclass
class ResizeSpec(fg.Spec):
    """A Spec whose runtime tensors have dims (per dimension an int or a Dim) and whose steps resize."""
    dims: dict = field(default_factory=dict)   # tensor id -> dims
    sizes: dict = field(default_factory=dict)  # the declared sizes of the symbols
    converter: bool = False                    # placeholders declared 1 at every dynamic dimension

    def declared(self, t):
        dims = self.dims.get(t)
        if dims is None or not any(map(dynamic, dims)):
            return self.tensors[t].shape, None
        signature = tuple(-1 if dynamic(d) else d for d in dims)
        shape = tuple(1 if s < 0 else d for s, d in zip(signature, self.tensors[t].shape)) if self.converter \
            else self.tensors[t].shape
        return shape, signature

    def input_shapes(self, sizes):
        return [at(self.dims[t], sizes) if t in self.dims else self.tensors[t].shape for t in self.inputs]


class ResizeGenerator(_Pools):
    """Float32 graphs over dynamic dimensions, and the resize steps (the module docstring)."""

    def __init__(self, rng, min_nodes, max_nodes):
        super().__init__(rng, min_nodes, max_nodes)
        self.spec = ResizeSpec(family="resize")
        self.all_sizes = []

    def generate(self):
        self.plan_sizes()
        self.add_inputs()
        self.run_builders(RESIZE_BUILDERS)
        self.choose_outputs()
        return self.spec

    # sizes and inputs
    def plan_sizes(self):
        """The symbols of this case, their declared sizes and the resize steps: other sizes, sizes
        of 1 (all, or some), the first sizes again and once more."""
        kind = self.choice(("image", "sequence", "rows"), (3, 2, 1))
        free = {"image": (("B",), ("H", "W"), ("B", "H", "W"), ("H",), ("W",)),
                "sequence": (("B",), ("T",), ("B", "T")), "rows": (("B",),)}[kind]
        self.layout, self.free = kind, self.choice(free)
        self.spec.converter = self.chance(0.25)
        first = {s: 1 if self.spec.converter else self.size(s) for s in self.free}
        other = {s: self.size(s, not_=first[s]) for s in self.free}
        ones = {s: 1 if self.chance(0.5) else first[s] for s in self.free} if self.chance(0.5) else \
            dict.fromkeys(self.free, 1)
        order = [other, ones] if self.chance(0.7) else [ones, other]
        self.spec.sizes = first
        self.all_sizes = [first, other, ones]
        steps = ["invoke"]
        for sizes in order + [first, dict(first)]:
            steps += [sizes, "invoke"]
        self.spec.steps = tuple(steps)

    def size(self, symbol, not_=None):
        """A size of `symbol` (another than `not_` where given)."""
        choices = [n for n in range(1, MAX_SIZE[symbol] + 1) if n != not_]
        return self.choice(choices)

    def add_inputs(self):
        """The first input over the case's symbols, and sometimes a second over the same ones."""
        sym = {s: Dim(((s, 1),)) if s in self.free else 1 for s in ("B", "H", "W", "T")}
        if self.layout == "image":
            lead = (sym["B"], sym["H"], sym["W"])
            if "H" not in self.free and "W" not in self.free:
                lead = (sym["B"], int(self.rng.integers(1, 8)), int(self.rng.integers(1, 8)))
        elif self.layout == "sequence":
            lead = (sym["B"], sym["T"] if "T" in self.free else int(self.rng.integers(1, 10)))
        else:
            lead = (sym["B"],)
        for _ in range(1 if self.chance(0.7) else 2):
            fitting = [dims for dims in (lead + (self.channels(),) for _ in range(20)) if self.fits(dims)]
            self.input_dims(fitting[0] if fitting else lead + (1,))

    def input_dims(self, dims):
        t = self.input_of(at(dims, self.spec.sizes))
        self.spec.dims[t] = tuple(dims)
        return t

    def run_builder(self, builder):
        try:
            builder(self)
        except Decline:  # the builder found nothing valid at every size: another one is drawn
            pass

    # the generator's helpers, over dims
    def dims_of(self, t):
        return self.spec.dims[t]

    def fits(self, dims):
        """Whether dims hold 1 to MAX_ELEMENTS elements at every size a step takes."""
        return all(min(at(dims, s)) >= 1 and fg._size(at(dims, s)) <= fg.MAX_ELEMENTS for s in self.all_sizes)

    def pick(self, accept=lambda dims: True):
        """A runtime float tensor whose dims `accept`s: often the newest, else any earlier one."""
        eligible = [t for t in self.values if accept(self.dims_of(t))]
        if not eligible:
            return None
        return eligible[-1] if self.chance(0.45) else eligible[int(self.rng.integers(len(eligible)))]

    def out(self, op, inputs, dims, **options):
        """A node with one float32 output of `dims` (its id); Decline where dims do not fit."""
        if dims is None or not self.fits(dims):
            raise Decline(op)
        t = self.emit(op, inputs, self.value(at(dims, self.spec.sizes)), **options)
        self.spec.dims[t] = tuple(dims)
        return t

    def outs(self, op, inputs, dims_list, **options):
        """A node with several float32 outputs (their ids)."""
        ids = self.typed(op, inputs, [self.value(at(d, self.spec.sizes)) for d in dims_list], **options)
        for t, dims in zip(ids, dims_list):
            self.spec.dims[t] = tuple(dims)
        return ids


def _rank4_static_c(dims):
    return len(dims) == 4 and not dynamic(dims[3])


def _static_last(dims):
    return not dynamic(dims[-1])


def _window(d, kernel, stride, padding, dilation=1):
    """A window's output dimension (None where it does not hold at every size)."""
    span = (kernel - 1) * dilation + 1
    if padding == SAME or span == 1:
        return ceil_div(d, stride)
    return None if dynamic(d) or d < span else (d - span) // stride + 1


# -- builders: each adds nodes to g and returns an output id (or True), or False ------------------
def r_unary(g, x=None, op=None):
    x = x if x is not None else g.pick()
    if x is None:
        return False
    dims = g.dims_of(x)
    op = op or g.choice(("LOGISTIC", "TANH", "HARD_SWISH", "RELU", "RELU6", "ABS", "NEG", "EXP", "ELU", "GELU",
                         "LEAKY_RELU", "PRELU"), (6, 4, 4, 4, 2, 1, 1, 1, 1, 1, 1, 1))
    if op == "GELU":
        return g.out(op, [x], dims, approximate=g.chance(0.5))
    if op == "LEAKY_RELU":
        return g.out(op, [x], dims, alpha=g.choice((0.1, 0.2, 0.01)))
    if op == "PRELU":  # a slope per channel: a static last axis
        if dynamic(dims[-1]):
            raise Decline(op)
        return g.out(op, [x, g.uniform((dims[-1],), -0.5, 0.5)], dims)
    return g.out(op, [x], dims)


def r_binary_const(g):
    """ADD / MUL / SUB / DIV / MAXIMUM / MINIMUM / SQUARED_DIFFERENCE with a constant of static
    dimensions (1 on the dynamic ones)."""
    x = g.pick()
    if x is None:
        return False
    dims = g.dims_of(x)
    op = g.choice(("ADD", "MUL", "SUB", "DIV", "MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE"), (4, 4, 4, 1, 1, 1, 1))
    kind = g.choice(("scalar", "channel", "broadcast"))
    if kind == "scalar":
        cshape = ()
    elif kind == "channel" and not dynamic(dims[-1]):
        cshape = (dims[-1],) if g.chance(0.5) else (1,) * (len(dims) - 1) + (dims[-1],)
    else:
        cshape = tuple(1 if dynamic(d) or g.chance(0.5) else d for d in dims)
        cshape = cshape[int(g.rng.integers(0, 2)):] if len(cshape) > 1 else cshape
    c = g.uniform(cshape, 0.5, 1.5) if op in ("MUL", "DIV") else g.uniform(cshape, -1.0, 1.0)
    inputs = [x, c] if g.chance(0.75) or op == "DIV" else [c, x]
    options = {"fused_activation_function": g.activation(0.2)} if op in ("ADD", "MUL", "SUB", "DIV") else {}
    return g.out(op, inputs, broadcast(dims, cshape), **options)


def r_binary_runtime(g):
    """An elementwise op of two runtime tensors whose dims broadcast at every size (or x op x)."""
    x = g.pick()
    if x is None:
        return False
    dims = g.dims_of(x)
    partners = [t for t in g.values if t != x and broadcast(g.dims_of(t), dims) == dims]
    y = g.choice(partners) if partners and g.chance(0.85) else x
    op = g.choice(("ADD", "MUL", "SUB", "MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE"), (6, 4, 4, 1, 1, 1))
    options = {"fused_activation_function": g.activation(0.2)} if op in ("ADD", "MUL", "SUB") else {}
    return g.out(op, [x, y] if g.chance(0.6) else [y, x], dims, **options)


def r_conv(g, x=None, out_channels=None, kernel=None, stride=None, act=None, depthwise=None):
    """CONV_2D or DEPTHWISE_CONV_2D: SAME, or VALID where the window holds at every size."""
    x = x if x is not None else g.pick(_rank4_static_c)
    if x is None:
        return False
    b, h, w, c = g.dims_of(x)
    depthwise = g.chance(0.4) if depthwise is None else depthwise
    kernel = kernel or g.choice((1, 3, 5), (4, 5, 1))
    stride = stride or g.choice((1, 2), (3, 1))
    dilation = 2 if kernel == 3 and stride == 1 and g.chance(0.1) else 1
    padding = g.choice((SAME, VALID), (3, 1))
    oh, ow = _window(h, kernel, stride, padding, dilation), _window(w, kernel, stride, padding, dilation)
    if oh is None or ow is None:
        padding = SAME
        oh, ow = _window(h, kernel, stride, SAME), _window(w, kernel, stride, SAME)
    if oh is None or ow is None:
        raise Decline("CONV_2D")
    options = dict(padding=padding, stride_w=stride, stride_h=stride, dilation_w_factor=dilation,
                   dilation_h_factor=dilation, fused_activation_function=g.activation() if act is None else act)
    if depthwise:
        m = 2 if out_channels is None and g.chance(0.15) else 1
        o = c * m
        return g.out("DEPTHWISE_CONV_2D", [x, g.weights((1, kernel, kernel, o), kernel * kernel),
                                           g.uniform(o, -0.2, 0.2)], (b, oh, ow, o), depth_multiplier=m, **options)
    o = out_channels or g.channels()
    return g.out("CONV_2D", [x, g.weights((o, kernel, kernel, c), kernel * kernel * c), g.uniform(o, -0.2, 0.2)],
                 (b, oh, ow, o), **options)


def r_pool(g, x=None, op=None, size=None, stride=None):
    """AVERAGE_POOL_2D / MAX_POOL_2D: SAME, VALID where it holds, global over a static H x W."""
    x = x if x is not None else g.pick(lambda d: len(d) == 4)
    if x is None:
        return False
    b, h, w, c = g.dims_of(x)
    op = op or g.choice(("AVERAGE_POOL_2D", "MAX_POOL_2D"))
    if size is None and not dynamic(h) and not dynamic(w) and g.chance(0.2):
        fh, fw, stride, padding = h, w, 1, VALID
    else:
        fh = fw = size or g.choice((2, 3))
        stride = stride or g.choice((1, 2))
        padding = g.choice((SAME, VALID))
        if _window(h, fh, stride, padding) is None or _window(w, fw, stride, padding) is None:
            padding = SAME
    oh, ow = _window(h, fh, stride, padding), _window(w, fw, stride, padding)
    if oh is None or ow is None:
        raise Decline(op)
    return g.out(op, [x], (b, oh, ow, c), padding=padding, stride_w=stride, stride_h=stride, filter_width=fw,
                 filter_height=fh, fused_activation_function=g.activation(0.15))


def r_fully_connected(g, x=None, units=None, keep=None, act=None):
    """FULLY_CONNECTED over a static last axis; every other axis (dynamic ones too) rows."""
    x = x if x is not None else g.pick(_static_last)
    if x is None:
        return False
    dims = g.dims_of(x)
    u = units or g.channels()
    keep = g.chance(0.5) if keep is None else keep
    out = tuple(dims[:-1]) + (u,) if keep else (product(dims[:-1]), u)
    bias = g.uniform(u, -0.2, 0.2) if g.chance(0.8) else -1
    return g.out("FULLY_CONNECTED", [x, g.weights((u, dims[-1]), dims[-1]), bias], out, keep_num_dims=keep,
                 fused_activation_function=g.activation() if act is None else act)


def r_reduce(g, x=None, axes=None, keep=None, op=None):
    """MEAN / SUM / REDUCE_MAX over any axes (dynamic ones too)."""
    x = x if x is not None else g.pick()
    if x is None:
        return False
    dims = g.dims_of(x)
    rank = len(dims)
    op = op or g.choice(("MEAN", "SUM", "REDUCE_MAX"), (3, 1, 1))
    if axes is None:
        pattern = g.choice(("spatial", "last", "dynamic", "random"))
        if pattern == "spatial" and rank == 4:
            axes = [1, 2]
        elif pattern == "dynamic" and any(map(dynamic, dims)):
            axes = [k for k, d in enumerate(dims) if dynamic(d)]
        elif pattern == "random" and rank > 2:
            axes = sorted(int(a) for a in g.rng.choice(rank, int(g.rng.integers(1, rank)), replace=False))
        else:
            axes = [rank - 1]
    keep = g.chance(0.6) if keep is None else keep
    out = tuple(1 if k in axes else d for k, d in enumerate(dims))
    if not keep and rank - len(axes) >= 2:
        out = tuple(d for k, d in enumerate(dims) if k not in axes)
    else:
        keep = True
    written = [a - rank if g.chance(0.2) else a for a in axes]
    return g.out(op, [x, g.ints(written)], out, keep_dims=keep)


def r_softmax(g, x=None):
    x = x if x is not None else g.pick()
    if x is None:
        return False
    return g.out("SOFTMAX", [x], g.dims_of(x), beta=g.choice((1.0, 1.0, 0.5, 2.0)))


def r_concatenation(g):
    """CONCATENATION along a static axis of tensors equal elsewhere (or of one tensor twice)."""
    x = g.pick()
    if x is None:
        return False
    dims = g.dims_of(x)
    axes = [k for k, d in enumerate(dims) if not dynamic(d)]
    if not axes:
        return False
    axis = g.choice(axes)
    partners = [t for t in g.values if len(g.dims_of(t)) == len(dims) and not dynamic(g.dims_of(t)[axis])
                and all(a == b for k, (a, b) in enumerate(zip(g.dims_of(t), dims)) if k != axis)]
    parts = [x] + [g.choice(partners) for _ in range(int(g.rng.integers(1, 3)))]
    out = tuple(sum(g.dims_of(p)[axis] for p in parts) if k == axis else d for k, d in enumerate(dims))
    written = axis - len(dims) if g.chance(0.25) else axis
    return g.out("CONCATENATION", parts, out, axis=written, fused_activation_function=NONE)


def r_split(g):
    """SPLIT (equal parts) or SPLIT_V (one size -1 sometimes) along a static axis."""
    x = g.pick()
    if x is None:
        return False
    dims = g.dims_of(x)
    axes = [k for k, d in enumerate(dims) if not dynamic(d) and d >= 2]
    if not axes:
        return False
    axis = g.choice(axes)
    d = dims[axis]
    count = int(g.rng.integers(2, min(3, d) + 1))
    if d % count == 0 and g.chance(0.5):
        part = tuple(d // count if k == axis else e for k, e in enumerate(dims))
        return g.outs("SPLIT", [g.ints(axis), x], [part] * count, num_splits=count)
    cuts = sorted(int(c) for c in g.rng.choice(np.arange(1, d), count - 1, replace=False))
    sizes = [b - a for a, b in zip([0] + cuts, cuts + [d])]
    written = list(sizes)
    if g.chance(0.3):
        written[int(g.rng.integers(count))] = -1
    return g.outs("SPLIT_V", [x, g.ints(written), g.ints(axis)],
                  [tuple(s if k == axis else e for k, e in enumerate(dims)) for s in sizes], num_splits=count)


def r_slice(g):
    """SLICE: all of a dynamic axis (size -1), any part of a static one."""
    x = g.pick()
    if x is None:
        return False
    begin, size, out = [], [], []
    for d in g.dims_of(x):
        if dynamic(d):
            begin.append(0), size.append(-1), out.append(d)
            continue
        b = int(g.rng.integers(0, d)) if g.chance(0.6) else 0
        s = int(g.rng.integers(1, d - b + 1))
        begin.append(b), size.append(-1 if s == d - b and g.chance(0.3) else s), out.append(s)
    return g.out("SLICE", [x, g.ints(begin), g.ints(size)], tuple(out))


def r_strided_slice(g):
    """STRIDED_SLICE: a dynamic axis whole (begin / end masks, or an end past any size), every
    second element (stride 2) or reversed (stride -1); a static axis any range, or shrunk."""
    x = g.pick()
    if x is None:
        return False
    dims = g.dims_of(x)
    rank = len(dims)
    begin, end, strides, out = [], [], [], []
    begin_mask = end_mask = shrink = 0
    for k, d in enumerate(dims):
        if dynamic(d):
            stride = g.choice((1, 1, 2, -1))
            n = ceil_div(d, 2) if stride == 2 else d
            if n is None:
                stride, n = 1, d
            if stride == 1 and g.chance(0.3):  # an end past any size: clamped to the size
                begin.append(0), end.append(1 << 20), strides.append(1), out.append(n)
                continue
            begin_mask |= 1 << k
            end_mask |= 1 << k
            begin.append(0), end.append(0), strides.append(stride), out.append(n)
        elif rank > 2 and not shrink and g.chance(0.15):
            b = int(g.rng.integers(d))
            begin.append(b), end.append(b + 1), strides.append(1)
            shrink |= 1 << k
        else:
            stride = g.choice((1, 1, 2, -1))
            b = int(g.rng.integers(0, d))
            e = int(g.rng.integers(b + 1, d + 1)) if stride > 0 else int(g.rng.integers(-1, b))
            n = len(range(b, e, stride))
            if e < 0:  # -1 would mean the last element: the mask reaches past the first instead
                end_mask |= 1 << k
                n = len(range(b, -1, stride))
            begin.append(b), end.append(max(e, 0)), strides.append(stride), out.append(n)
    if len(out) < 2:
        return False
    return g.out("STRIDED_SLICE", [x, g.ints(begin), g.ints(end), g.ints(strides)], tuple(out),
                 begin_mask=begin_mask, end_mask=end_mask, ellipsis_mask=0, new_axis_mask=0,
                 shrink_axis_mask=shrink, offset=False)


def r_reshape(g, x=None, target=None):
    """RESHAPE to dims with at most one dynamic dimension (written -1): a run of axes merged, a
    static axis split in two, rows x features; `target` (dims) where a pattern needs one."""
    x = x if x is not None else g.pick()
    if x is None:
        return False
    dims = g.dims_of(x)
    if target is None:
        pattern = g.choice(("merge", "split", "rows"))
        if pattern == "merge" and len(dims) > 2:
            i = int(g.rng.integers(0, len(dims) - 1))
            j = int(g.rng.integers(i + 2, len(dims) + 1))
            target = dims[:i] + (product(dims[i:j]),) + dims[j:]
        elif pattern == "split" and len(dims) < 4:
            even = [k for k, d in enumerate(dims) if not dynamic(d) and d % 2 == 0]
            if not even:
                return False
            k = g.choice(even)
            target = dims[:k] + (2, dims[k] // 2) + dims[k + 1:]
        else:
            target = (product(dims[:-1]), dims[-1])
    free = [k for k, d in enumerate(target) if dynamic(d)]
    if len(free) > 1 or product(target) != product(dims):  # one -1 at most
        raise Decline("RESHAPE")
    written = [-1 if dynamic(d) else d for d in target]
    if not free and g.chance(0.25):
        written[int(g.rng.integers(len(written)))] = -1
    return g.out("RESHAPE", [x, g.ints(written)], tuple(target), new_shape=written)


def r_squeeze_or_expand(g):
    """SQUEEZE of a static 1, or EXPAND_DIMS anywhere."""
    x = g.pick()
    if x is None:
        return False
    dims = g.dims_of(x)
    ones = [k for k, d in enumerate(dims) if d == 1]
    if ones and len(dims) > 2 and g.chance(0.5):
        k = g.choice(ones)
        return g.out("SQUEEZE", [x], dims[:k] + dims[k + 1:], squeeze_dims=[k - len(dims) if g.chance(0.3) else k])
    if len(dims) == 4:
        return False
    axis = int(g.rng.integers(0, len(dims) + 1))
    return g.out("EXPAND_DIMS", [x, g.ints(axis - len(dims) - 1 if g.chance(0.3) else axis)],
                 dims[:axis] + (1,) + dims[axis:])


def r_transpose(g, x=None, perm=None):
    x = x if x is not None else g.pick()
    if x is None:
        return False
    dims = g.dims_of(x)
    if perm is None:
        perm = [int(p) for p in g.rng.permutation(len(dims))]
        if perm == sorted(perm):
            perm = perm[::-1]
    return g.out("TRANSPOSE", [x, g.ints(perm)], tuple(dims[p] for p in perm))


def r_pad(g, x=None, paddings=None):
    """PAD / PADV2 of static axes (a dynamic one keeps [0, 0])."""
    x = x if x is not None else g.pick()
    if x is None:
        return False
    dims = g.dims_of(x)
    if paddings is None:
        paddings = [[0, 0] if dynamic(d) or not g.chance(0.6) else [int(g.rng.integers(0, 3)) for _ in range(2)]
                    for d in dims]
    out = tuple(d if dynamic(d) else d + a + b for d, (a, b) in zip(dims, paddings))
    if g.chance(0.25):
        return g.out("PADV2", [x, g.ints(paddings), g.const(np.float32(g.choice((1.0, -0.5))))], out)
    return g.out("PAD", [x, g.ints(paddings)], out)


def r_tile(g):
    x = g.pick()
    if x is None:
        return False
    dims = g.dims_of(x)
    multiples = [g.choice((1, 1, 1, 2)) if dynamic(d) else g.choice((1, 1, 2, 3)) for d in dims]
    if set(multiples) == {1}:
        return False
    return g.out("TILE", [x, g.ints(multiples)], tuple(times(d, m) for d, m in zip(dims, multiples)))


def r_gather(g):
    """GATHER of constant indices along a static axis, or of index 0 along a dynamic one."""
    x = g.pick()
    if x is None:
        return False
    dims = g.dims_of(x)
    axis = int(g.rng.integers(len(dims)))
    d = dims[axis]
    indices = np.zeros(int(g.rng.integers(1, 3)), np.int64) if dynamic(d) else \
        g.rng.integers(0, d, int(g.rng.integers(1, 2 * d + 1)))
    written = axis - len(dims) if g.chance(0.2) else axis
    return g.out("GATHER", [x, g.ints(indices)], dims[:axis] + (len(indices),) + dims[axis + 1:], axis=written,
                 batch_dims=0)


def r_batch_matmul(g):
    """BATCH_MATMUL of x and a constant [K, N] (static K), x itself, or another tensor of the same batch."""
    x = g.pick()
    if x is None:
        return False
    dims = g.dims_of(x)
    adj_x = g.chance(0.25)
    m, k = (dims[-1], dims[-2]) if adj_x else (dims[-2], dims[-1])
    how = g.choice(("const", "self", "other"))
    adj_y = g.chance(0.4)
    if how == "self":
        y, adj_y, n = x, not adj_x, m
    elif how == "other":
        y = g.pick(lambda d: len(d) >= 2 and (d[-1] if adj_y else d[-2]) == k and broadcast(d[:-2], dims[:-2])
                   is not None)
        if y is None:
            return False
        n = g.dims_of(y)[-2] if adj_y else g.dims_of(y)[-1]
    elif not dynamic(k):
        n = g.channels()
        y = g.weights((n, k) if adj_y else (k, n), k)
    else:
        return False
    ydims = g.dims_of(y) if how != "const" else ()
    batch = broadcast(dims[:-2], ydims[:-2])
    if batch is None or len(batch) + 2 > 4:
        return False
    return g.out("BATCH_MATMUL", [x, y], batch + (m, n), adj_x=adj_x, adj_y=adj_y, asymmetric_quantize_inputs=False)


def r_resize_image(g):
    """RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR of any H x W to a fixed size."""
    x = g.pick(lambda d: len(d) == 4)
    if x is None:
        return False
    b, _, _, c = g.dims_of(x)
    size = [int(g.rng.integers(1, 9)), int(g.rng.integers(1, 9))]
    mode = g.choice(("plain", "align_corners", "half_pixel"))
    return g.out(g.choice(("RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR")), [x, g.ints(size)], (b, *size, c),
                 align_corners=mode == "align_corners", half_pixel_centers=mode == "half_pixel")


# Patterns the rewrite rules look for, over dynamic dimensions.
def r_swish(g):
    x = g.pick()
    if x is None:
        return False
    if len(g.dims_of(x)) == 4 and not dynamic(g.dims_of(x)[3]) and g.chance(0.6):
        x = r_conv(g, x, act=NONE) or x
    s = r_unary(g, x, "LOGISTIC")
    return g.out("MUL", [x, s] if g.chance(0.6) else [s, x], g.dims_of(x), fused_activation_function=NONE)


def r_squeeze_excite(g):
    """MEAN over H, W -> FC or 1x1 CONV -> gate -> MUL onto the input."""
    x = g.pick(_rank4_static_c)
    if x is None:
        return False
    c = g.dims_of(x)[3]
    r = max(1, c // 2)
    squeezed = r_reduce(g, x, [1, 2], keep=True, op="MEAN")
    if g.chance(0.5):
        gate = r_fully_connected(g, r_fully_connected(g, squeezed, r, True, g.choice((RELU, RELU6))), c, True, NONE)
    else:
        gate = r_conv(g, r_conv(g, squeezed, r, 1, 1, g.choice((RELU, NONE)), False), c, 1, 1, NONE, False)
    gate = r_unary(g, gate, g.choice(("LOGISTIC", "HARD_SWISH")))
    return g.out("MUL", [x, gate] if g.chance(0.7) else [gate, x], g.dims_of(x), fused_activation_function=NONE)


def r_conv_batch_norm(g):
    x = g.pick(_rank4_static_c)
    if x is None:
        return False
    y = r_conv(g, x, act=NONE)
    c = g.dims_of(y)[3]
    y = g.out("MUL", [y, g.uniform((c,), 0.5, 1.5)], g.dims_of(y), fused_activation_function=NONE)
    return g.out(g.choice(("ADD", "SUB")), [y, g.uniform((c,), -0.3, 0.3)], g.dims_of(y),
                 fused_activation_function=g.activation(0.4))


def r_residual(g):
    x = g.pick(_rank4_static_c)
    if x is None:
        return False
    y = r_conv(g, x, g.dims_of(x)[3], g.choice((1, 3)), 1, depthwise=g.chance(0.4))
    if g.dims_of(y) != g.dims_of(x):  # a depthwise multiplier of 2
        return False
    return g.out("ADD", [y, x] if g.chance(0.5) else [x, y], g.dims_of(x), fused_activation_function=g.activation(0.4))


def r_layer_norm(g):
    """(x - mean) * rsqrt(var + eps) over the last axis, then a scale and shift."""
    x = g.pick(lambda d: _static_last(d) and d[-1] >= 2)
    if x is None:
        return False
    dims = g.dims_of(x)
    last = len(dims) - 1
    m = r_reduce(g, x, [last], keep=True, op="MEAN")
    var = r_reduce(g, g.out("SQUARED_DIFFERENCE", [x, m], dims), [last], keep=True, op="MEAN")
    r = g.out("RSQRT", [g.out("ADD", [var, g.const(np.float32(1e-3))], g.dims_of(m), fused_activation_function=NONE)],
              g.dims_of(m))
    y = g.out("MUL", [g.out("SUB", [x, m], dims, fused_activation_function=NONE), r], dims,
              fused_activation_function=NONE)
    y = g.out("MUL", [y, g.uniform((dims[-1],), 0.5, 1.5)], dims, fused_activation_function=NONE)
    return g.out("ADD", [y, g.uniform((dims[-1],), -0.3, 0.3)], dims, fused_activation_function=NONE)


def r_attention(g):
    """softmax(q k^T / sqrt(d)) v over a dynamic sequence; heads split by RESHAPE / TRANSPOSE
    where one dimension of [B, T] is dynamic (a RESHAPE writes one -1)."""
    x = g.pick(lambda d: len(d) in (2, 3) and _static_last(d))
    if x is None:
        return False
    dims = g.dims_of(x)
    heads = g.choice((1, 2))
    d = g.choice((2, 3, 4)) * heads
    q, k, v = (r_fully_connected(g, x, d, True, NONE) for _ in range(3))
    split = heads > 1 and len(dims) == 3 and sum(map(dynamic, dims[:2])) <= 1
    if split:
        q, k, v = (r_transpose(g, r_reshape(g, y, dims[:2] + (heads, d // heads)), [0, 2, 1, 3]) for y in (q, k, v))
    scores = g.out("BATCH_MATMUL", [q, k], g.dims_of(q)[:-1] + (g.dims_of(k)[-2],), adj_x=False, adj_y=True,
                   asymmetric_quantize_inputs=False)
    scores = g.out("MUL", [scores, g.const(np.float32(1 / np.sqrt(d // heads)))], g.dims_of(scores),
                   fused_activation_function=NONE)
    p = r_softmax(g, scores)
    o = g.out("BATCH_MATMUL", [p, v], g.dims_of(p)[:-1] + (g.dims_of(v)[-1],), adj_x=False, adj_y=False,
              asymmetric_quantize_inputs=False)
    if split:
        o = r_reshape(g, r_transpose(g, o, [0, 2, 1, 3]), dims[:2] + (d,))
    return o


def r_keras_dense(g):
    """RESHAPE [..., C] -> [rows, C], FULLY_CONNECTED, RESHAPE back (one dynamic dimension)."""
    x = g.pick(lambda d: len(d) >= 3 and _static_last(d) and sum(map(dynamic, d[:-1])) <= 1)
    if x is None:
        return False
    dims = g.dims_of(x)
    fc = r_fully_connected(g, r_reshape(g, x, (product(dims[:-1]), dims[-1])), keep=False, act=NONE)
    return r_reshape(g, fc, dims[:-1] + (g.dims_of(fc)[-1],))


def r_pooled_shortcut(g):
    """MediaPipe's block shortcut: MAX_POOL stride 2 -> PAD channels -> ADD to a stride-2 conv."""
    x = g.pick(_rank4_static_c)
    if x is None:
        return False
    c = g.dims_of(x)[3]
    wider = c + int(g.rng.integers(1, 9))
    pooled = r_pool(g, x, "MAX_POOL_2D", 2, 2)
    y = r_conv(g, x, wider, g.choice((1, 3)), 2, NONE, False)
    if g.dims_of(y)[1:3] != g.dims_of(pooled)[1:3]:  # a VALID pool of a static H or W
        return False
    padded = r_pad(g, pooled, [[0, 0], [0, 0], [0, 0], [0, wider - c]])
    return g.out("ADD", [y, padded], g.dims_of(y), fused_activation_function=g.activation(0.5))


RESIZE_BUILDERS = (
    (r_unary, 5), (r_binary_const, 5), (r_binary_runtime, 4), (r_conv, 7), (r_pool, 3), (r_fully_connected, 4),
    (r_reduce, 3), (r_softmax, 2), (r_concatenation, 3), (r_split, 1.5), (r_slice, 2), (r_strided_slice, 2),
    (r_reshape, 3), (r_squeeze_or_expand, 1.5), (r_transpose, 2), (r_pad, 1.5), (r_tile, 1), (r_gather, 1.5),
    (r_batch_matmul, 2), (r_resize_image, 1), (r_swish, 2), (r_squeeze_excite, 2), (r_conv_batch_norm, 2),
    (r_residual, 2), (r_layer_norm, 1), (r_attention, 1.5), (r_keras_dense, 1), (r_pooled_shortcut, 1),
)
