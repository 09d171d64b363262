"""Models with control flow and resource variables, built with our writer, as TFLite's converter
lays them out: one subgraph per WHILE condition / body, IF branch and CALL_ONCE initializer."""
import numpy as np

from gles_delegate.tflite import ModelBuilder
from tests.litert import RESOLVERS, LiteRTInterpreter
from tests.oplib import assert_close
from tests.tolerance import F32_U, F32_ULPS, gamma, ulp_bound

NONE = 0  # fused_activation_function


def _inputs(builder, specs):
    """Graph inputs of `builder` from (name, shape, dtype) specs; returns their indices."""
    return [builder.input(name, shape, dtype) for name, shape, dtype in specs]


def _less_than(cond, counter, bound):
    """Make `cond` return counter < bound (int32 scalars of that subgraph)."""
    less = cond.tensor("less", (), np.bool_)
    cond.op("LESS", [counter, bound], [less])
    cond.output(less)


def _rnn_step(body, xs, t, h, wx, wh, bias, tensors):
    """Add to `body` h2 = tanh(xs[t] @ wx^T + bias + h @ wh^T) into `tensors` (x_t, from_x,
    from_h, pre, h2), as the RNN loops' bodies compute a step."""
    x_t, from_x, from_h, pre, h2 = tensors
    body.op("GATHER", [xs, t], [x_t], axis=0, batch_dims=0)
    body.op("FULLY_CONNECTED", [x_t, body.const("wx", wx), body.const("bias", bias)], [from_x],
            fused_activation_function=NONE)
    body.op("FULLY_CONNECTED", [h, body.const("wh", wh), -1], [from_h], fused_activation_function=NONE)
    body.op("ADD", [from_x, from_h], [pre], fused_activation_function=NONE)
    body.op("TANH", [pre], [h2])


def _while(b, inputs, specs, cond, body):
    """A WHILE node in `b` over `inputs` (carried tensors of (name, shape, dtype) `specs`);
    returns its output indices."""
    outputs = [b.tensor(f"{name}_out", shape, dtype) for name, shape, dtype in specs]
    b.op("WHILE", inputs, outputs, cond_subgraph_index=cond.index, body_subgraph_index=body.index)
    return outputs


def counter_loop(x_shape, step):
    """inputs n (int32 scalar), x (float32 x_shape); carried (i, n, acc): while i < n:
    i += 1, acc += step (a constant of x_shape). Outputs i and acc."""
    specs = [("i", (), np.int32), ("n", (), np.int32), ("acc", x_shape, np.float32)]
    b = ModelBuilder()
    n, x = b.input("n", (), np.int32), b.input("x", x_shape, np.float32)
    cond, body = b.subgraph("cond"), b.subgraph("body")
    i, _, acc = _while(b, [b.const("zero", np.array(0, np.int32)), n, x], specs, cond, body)
    b.output(i)
    b.output(acc)
    _counting(cond, body, specs, step)
    return b.build()


def _counting(cond, body, specs, step):
    """counter_loop's condition (i < n) and body (i += 1, acc += step) over carried `specs`."""
    _less_than(cond, *_inputs(cond, specs)[:2])
    bi, bn, bacc = _inputs(body, specs)
    i2, acc2 = body.tensor("i2", (), np.int32), body.tensor("acc2", specs[2][1], np.float32)
    body.op("ADD", [bi, body.const("one", np.array(1, np.int32))], [i2], fused_activation_function=NONE)
    body.op("ADD", [bacc, body.const("step", step)], [acc2], fused_activation_function=NONE)
    for t in (i2, bn, acc2):
        body.output(t)


def nested_loop(x_shape, step, outer, inner):
    """A loop in a loop body, each bound a constant: carried (i, n, acc): while i < `outer`:
    (acc = `inner` times acc += step, in a WHILE of its own), i += 1. Input x (float32
    x_shape); outputs i and acc = x + outer * inner * step. The subgraphs in the file: main,
    inner cond, inner body, outer cond, outer body (not in the order the main graph calls them)."""
    specs = [("i", (), np.int32), ("n", (), np.int32), ("acc", x_shape, np.float32)]
    b = ModelBuilder()
    x = b.input("x", x_shape, np.float32)
    inner_cond, inner_body, cond, body = (b.subgraph(name) for name in ("inner_cond", "inner_body", "cond", "body"))
    zero = b.const("zero", np.array(0, np.int32))
    i, _, acc = _while(b, [zero, b.const("n", np.array(outer, np.int32)), x], specs, cond, body)
    b.output(i)
    b.output(acc)
    _less_than(cond, *_inputs(cond, specs)[:2])
    bi, bn, bacc = _inputs(body, specs)
    _, _, summed = _while(body, [body.const("zero", np.array(0, np.int32)), body.const("m", np.array(inner, np.int32)),
                                 bacc], specs, inner_cond, inner_body)
    i2 = body.tensor("i2", (), np.int32)
    body.op("ADD", [bi, body.const("one", np.array(1, np.int32))], [i2], fused_activation_function=NONE)
    for t in (i2, bn, summed):
        body.output(t)
    _counting(inner_cond, inner_body, specs, step)
    return b.build()


def constant_bound_loop(carried, bound, step, output=1):
    """A WHILE over (i = 0, v), v the model input of spec `carried` (name, shape, dtype): while
    i < `bound` (a constant), step(body, i, v) adds the body's nodes and returns its (i', v').
    The model's output: the loop's output `output`."""
    specs = [("i", (), np.int32), carried]
    b = ModelBuilder()
    v = b.input(*carried)
    cond, body = b.subgraph("cond"), b.subgraph("body")
    outputs = _while(b, [b.const("zero", np.array(0, np.int32)), v], specs, cond, body)
    b.output(outputs[output])
    _less_than(cond, _inputs(cond, specs)[0], cond.const("bound", np.array(bound, np.int32)))
    for t in step(body, *_inputs(body, specs)):
        body.output(t)
    return b.build()


def stepped_loop(x_shape):
    """x (float32 x_shape) -> MUL by 2 -> TANH -> WHILE (i < 5: i += s, acc += 1) over carried
    (i, bound, s, acc), s an int32 scalar input: at s = 0 (zeros) it never ends. Outputs i, acc."""
    specs = [("i", (), np.int32), ("bound", (), np.int32), ("s", (), np.int32), ("acc", x_shape, np.float32)]
    b = ModelBuilder()
    x, s = b.input("x", x_shape, np.float32), b.input("s", (), np.int32)
    doubled, squashed = b.tensor("doubled", x_shape), b.tensor("squashed", x_shape)
    b.op("MUL", [x, b.const("two", np.float32(2))], [doubled], fused_activation_function=NONE)
    b.op("TANH", [doubled], [squashed])
    cond, body = b.subgraph("cond"), b.subgraph("body")
    start, bound = b.const("zero", np.array(0, np.int32)), b.const("five", np.array(5, np.int32))
    i, _, _, acc = _while(b, [start, bound, s, squashed], specs, cond, body)
    b.output(i)
    b.output(acc)
    _less_than(cond, *_inputs(cond, specs)[:2])
    bi, bbound, bs, bacc = _inputs(body, specs)
    i2, acc2 = body.tensor("i2", (), np.int32), body.tensor("acc2", x_shape, np.float32)
    body.op("ADD", [bi, bs], [i2], fused_activation_function=NONE)
    body.op("ADD", [bacc, body.const("one", np.float32(1))], [acc2], fused_activation_function=NONE)
    for t in (i2, bbound, bs, acc2):
        body.output(t)
    return b.build()


def loop_between(x_shape, step):
    """counter_loop's WHILE between runs of float nodes: x -> MUL by 2 -> TANH -> WHILE (n times
    acc += step) -> ADD 0.5 -> LOGISTIC -> y. Inputs n (int32 scalar) and x (float32 x_shape);
    outputs i and y. The WHILE runs on the reference (it runs subgraphs), the nodes before and
    after it are two runs of CPU nodes."""
    specs = [("i", (), np.int32), ("n", (), np.int32), ("acc", x_shape, np.float32)]
    b = ModelBuilder()
    n, x = b.input("n", (), np.int32), b.input("x", x_shape, np.float32)
    doubled, squashed = b.tensor("doubled", x_shape), b.tensor("squashed", x_shape)
    b.op("MUL", [x, b.const("two", np.float32(2))], [doubled], fused_activation_function=NONE)
    b.op("TANH", [doubled], [squashed])
    cond, body = b.subgraph("cond"), b.subgraph("body")
    i, _, acc = _while(b, [b.const("zero", np.array(0, np.int32)), n, squashed], specs, cond, body)
    shifted, y = b.tensor("shifted", x_shape), b.tensor("y", x_shape)
    b.op("ADD", [acc, b.const("half", np.float32(0.5))], [shifted], fused_activation_function=NONE)
    b.op("LOGISTIC", [shifted], [y])
    b.output(i)
    b.output(y)
    _counting(cond, body, specs, step)
    return b.build()


def rnn_loop(wx, wh, bias, head, steps, batch):
    """An RNN over `steps` time steps: inputs xs [steps, batch, n_in] and h0 [batch, n_hidden];
    carried (t, h, xs): while t < steps: h = tanh(FC(xs[t], wx) + FC(h, wh) + bias), t += 1.
    The final h goes through FULLY_CONNECTED(head) in the main subgraph (a node after the loop
    that a GPU can take). Outputs t, h and the head's output."""
    n_hidden, n_in = wx.shape
    specs = [("t", (), np.int32), ("h", (batch, n_hidden), np.float32), ("xs", (steps, batch, n_in), np.float32)]
    b = ModelBuilder()
    xs, h0 = b.input("xs", specs[2][1], np.float32), b.input("h0", specs[1][1], np.float32)
    cond, body = b.subgraph("cond"), b.subgraph("body")
    t, h, _ = _while(b, [b.const("zero", np.array(0, np.int32)), h0, xs], specs, cond, body)
    y = b.tensor("y", (batch, head.shape[0]), np.float32)
    b.op("FULLY_CONNECTED", [h, b.const("head", head), -1], [y], fused_activation_function=NONE)
    for out in (t, h, y):
        b.output(out)
    ct, _, _ = _inputs(cond, specs)
    _less_than(cond, ct, cond.const("steps", np.array(steps, np.int32)))
    bt, bh, bxs = _inputs(body, specs)
    x_t, from_x, from_h, pre, h2, t2 = (body.tensor(name, shape, dtype) for name, shape, dtype in (
        ("x_t", (batch, n_in), np.float32), ("from_x", (batch, n_hidden), np.float32),
        ("from_h", (batch, n_hidden), np.float32), ("pre", (batch, n_hidden), np.float32),
        ("h2", (batch, n_hidden), np.float32), ("t2", (), np.int32)))
    _rnn_step(body, bxs, bt, bh, wx, wh, bias, (x_t, from_x, from_h, pre, h2))
    body.op("ADD", [bt, body.const("one", np.array(1, np.int32))], [t2], fused_activation_function=NONE)
    for out in (t2, h2, bxs):
        body.output(out)
    return b.build()


def rnn_case(steps, batch, n_in, n_hidden, seed=0):
    """Weights (wx, wh scaled by 1/sqrt(fan-in), bias, head [3, n_hidden]) and inputs [xs, h0]
    of rnn_loop, random."""
    rng = np.random.default_rng(seed + steps)
    wx, wh = ((rng.standard_normal((n_hidden, n)) / np.sqrt(n)).astype(np.float32) for n in (n_in, n_hidden))
    bias, head = rng.standard_normal(n_hidden).astype(np.float32), rng.standard_normal((3, n_hidden)).astype(np.float32)
    inputs = [rng.standard_normal((steps, batch, n_in)).astype(np.float32),
              rng.uniform(-1, 1, (batch, n_hidden)).astype(np.float32)]
    return wx, wh, bias, head, inputs


def rnn_bounds(wx, wh, bias, head, xs, h0, u=F32_U, ulps=F32_ULPS):
    """Max abs differences (final h, head output) of two evaluations of rnn_loop in unit roundoff
    `u`, each summing in any order: each step's pre-activation differs by the two FCs' and the
    ADD's rounding (gamma of their terms times the magnitudes summed) plus |wh| (max row sum)
    times the error h carried in; tanh adds `ulps` ulps of 1 on each side and does not enlarge
    an error (its slope is at most 1). The head multiplies h's error by its own max row sum."""
    row_sums = np.abs(wh).sum(axis=1).max()
    error, h = 0.0, h0.astype(np.float64)
    for x in xs.astype(np.float64):
        magnitude = (np.abs(x) @ np.abs(wx).T + np.abs(h) @ np.abs(wh).T + np.abs(bias)).max()
        error = row_sums * error + 2 * gamma(wx.shape[1] + wh.shape[1] + 2, u) * magnitude + \
            ulp_bound(np.ones(1), 2 * ulps)
        h = np.tanh(x @ wx.T.astype(np.float64) + h @ wh.T.astype(np.float64) + bias)
    head_rows = np.abs(head).sum(axis=1).max()
    return error, head_rows * error + 2 * gamma(head.shape[1] + 1, u) * head_rows * np.abs(h).max()


def growing_loop(width):
    """Carried (i, n, x): while i < n: x = concat(x, x), i += 1: x doubles at every iteration, so
    the loop's outputs are dynamic. Inputs n (int32) and x [width]; outputs i, x and x + x (a
    node after the loop that reads a dynamic tensor)."""
    specs = [("i", (), np.int32), ("n", (), np.int32), ("x", (width,), np.float32)]
    b = ModelBuilder()
    n, x = b.input("n", (), np.int32), b.input("x", (width,), np.float32)
    cond, body = b.subgraph("cond"), b.subgraph("body")
    i, _, grown = _while(b, [b.const("zero", np.array(0, np.int32)), n, x], specs, cond, body)
    doubled = b.tensor("doubled", (width,), np.float32)
    b.op("ADD", [grown, grown], [doubled], fused_activation_function=NONE)
    for out in (i, grown, doubled):
        b.output(out)
    _less_than(cond, *_inputs(cond, specs)[:2])
    bi, bn, bx = _inputs(body, specs)
    i2, x2 = body.tensor("i2", (), np.int32), body.tensor("x2", (2 * width,), np.float32)
    body.op("ADD", [bi, body.const("one", np.array(1, np.int32))], [i2], fused_activation_function=NONE)
    body.op("CONCATENATION", [bx, bx], [x2], axis=0, fused_activation_function=NONE)
    for out in (i2, bn, x2):
        body.output(out)
    return b.build()


def growing_then_select(width, steps):
    """growing_loop's loop, then SELECT(keep [width * 2**steps] bool, the loop's x, other of that
    shape): SELECT's x is a dynamic tensor declared [width], which its checks saw as not matching
    the condition before invoke (tf.compat.v1.where after a tf.while_loop growing [1, None]).
    Inputs n, x [width], keep, other; output the SELECT's."""
    size = width * 2 ** steps
    specs = [("i", (), np.int32), ("n", (), np.int32), ("x", (width,), np.float32)]
    b = ModelBuilder()
    n, x = b.input("n", (), np.int32), b.input("x", (width,), np.float32)
    keep, other = b.input("keep", (size,), np.bool_), b.input("other", (size,), np.float32)
    cond, body = b.subgraph("cond"), b.subgraph("body")
    _, _, grown = _while(b, [b.const("zero", np.array(0, np.int32)), n, x], specs, cond, body)
    selected = b.tensor("selected", (size,), np.float32)
    b.op("SELECT", [keep, grown, other], [selected])
    b.output(selected)
    _less_than(cond, *_inputs(cond, specs)[:2])
    bi, bn, bx = _inputs(body, specs)
    i2, x2 = body.tensor("i2", (), np.int32), body.tensor("x2", (2 * width,), np.float32)
    body.op("ADD", [bi, body.const("one", np.array(1, np.int32))], [i2], fused_activation_function=NONE)
    body.op("CONCATENATION", [bx, bx], [x2], axis=0, fused_activation_function=NONE)
    for out in (i2, bn, x2):
        body.output(out)
    return b.build()


def if_model(shape, same_shapes=True):
    """IF(c, x, y): then = x * y; else = x - y, or with same_shapes False concat(x, y) (the
    branches' outputs differ in shape: the IF's output is dynamic)."""
    b = ModelBuilder()
    c, x, y = b.input("c", (1,), np.bool_), b.input("x", shape, np.float32), b.input("y", shape, np.float32)
    then, other = b.subgraph("then"), b.subgraph("else")
    out = b.tensor("out", shape, np.float32)
    b.op("IF", [c, x, y], [out], then_subgraph_index=then.index, else_subgraph_index=other.index)
    b.output(out)
    tx, ty = then.input("x", shape, np.float32), then.input("y", shape, np.float32)
    product = then.tensor("product", shape, np.float32)
    then.op("MUL", [tx, ty], [product], fused_activation_function=NONE)
    then.output(product)
    ex, ey = other.input("x", shape, np.float32), other.input("y", shape, np.float32)
    if same_shapes:
        result = other.tensor("difference", shape, np.float32)
        other.op("SUB", [ex, ey], [result], fused_activation_function=NONE)
    else:
        result = other.tensor("joined", (2 * shape[0], *shape[1:]), np.float32)
        other.op("CONCATENATION", [ex, ey], [result], axis=0, fused_activation_function=NONE)
    other.output(result)
    return b.build()


def bias_free_depthwise_loop():
    """constant_bound_loop over acc [1, 3, 3, 2], 3 times: i + 1, and a DEPTHWISE_CONV_2D of 2
    inputs (no bias slot) halving acc: the form LiteRT 2.3's kernel crashes on
    (litert_crashes.py). Its output: x / 8."""
    def step(body, i, acc):
        i2, acc2 = body.tensor("i2", (), np.int32), body.tensor("acc2", (1, 3, 3, 2), np.float32)
        body.op("ADD", [i, body.const("one", np.array(1, np.int32))], [i2], fused_activation_function=NONE)
        body.op("DEPTHWISE_CONV_2D", [acc, body.const("w", np.full((1, 1, 1, 2), 0.5, np.float32))], [acc2],
                padding=1, stride_w=1, stride_h=1, depth_multiplier=1, fused_activation_function=NONE,
                dilation_w_factor=1, dilation_h_factor=1)
        return i2, acc2
    return constant_bound_loop(("acc", (1, 3, 3, 2), np.float32), 3, step)


def stateful_counter(initial, shared_name="acc"):
    """A variable initialized once (CALL_ONCE of an init subgraph assigning `initial`), read,
    increased by input x and assigned back at every invoke; output: the new value. The main
    and init subgraphs each take their own VAR_HANDLE of (container "", shared_name)."""
    b = ModelBuilder()
    x = b.input("x", initial.shape, initial.dtype)
    init = b.subgraph("init")
    b.op("CALL_ONCE", [], [], init_subgraph_index=init.index)
    handle = b.tensor("handle", (), type_name="RESOURCE")
    b.op("VAR_HANDLE", [], [handle], container="", shared_name=shared_name)
    value, total = b.tensor("value", initial.shape, initial.dtype), b.tensor("total", initial.shape, initial.dtype)
    b.op("READ_VARIABLE", [handle], [value])
    b.op("ADD", [value, x], [total], fused_activation_function=NONE)
    b.op("ASSIGN_VARIABLE", [handle, total], [])
    b.output(total)
    init_handle = init.tensor("handle", (), type_name="RESOURCE")
    init.op("VAR_HANDLE", [], [init_handle], container="", shared_name=shared_name)
    init.op("ASSIGN_VARIABLE", [init_handle, init.const("initial", initial)], [])
    return b.build()



B = None  # the batch dim in the shapes of keras_rnn_loop's tensors


class _Declare:
    """Tensors of keras_rnn_loop: `B` in a shape is the batch, declared as `batch`, or with
    dynamic_batch as the TF converter declares an unknown dim: 1 in the shape and -1 in the
    shape_signature."""

    def __init__(self, batch, dynamic_batch):
        self.batch, self.dynamic = batch, dynamic_batch

    def __call__(self, builder, name, shape, dtype=np.float32, signature=None, is_input=False):
        """A tensor of `shape` (B: the batch); `signature` (-1: unknown, B: the batch) overrides."""
        signature = signature or (shape if self.dynamic and B in shape else None)
        declared = tuple(self.dim(d) for d in shape)
        if signature is not None:
            signature = tuple(-1 if d is B and self.dynamic else self.dim(d) for d in signature)
            declared = tuple(1 if s < 0 else d for d, s in zip(declared, signature))
        make = builder.input if is_input else builder.tensor
        return make(name, declared, dtype, shape_signature=signature)

    def dim(self, d):
        return (1 if self.dynamic else self.batch) if d is B else d


def keras_rnn_loop(wx, wh, bias, head, steps, batch, dynamic_batch=False):
    """An RNN laid out as the TF converter writes a Keras SimpleRNN / GRU / LSTM layer: carried
    (t, outs [steps, batch, n_hidden], h [batch, n_hidden], xs [steps, batch, n_in]); while
    t < steps: h = tanh(FC(xs[t], wx) + FC(h, wh) + bias); outs[t] = h, written as
    concat(SLICE(outs, 0, t), h, SLICE(outs, t + 1, end)), whose begin and size the loop
    counter computes (RESHAPE, CONCATENATION): the slices' shapes are only known at invoke, and
    the model declares them as placeholders (shape_signature [-1, -1, -1] and [-1, batch,
    n_hidden], shape [1, 1, 1] and [1, batch, n_hidden]). `dynamic_batch`: every tensor of the
    batch is declared with batch 1 and -1 in its signature (a Keras model of batch None), and
    resizing inputs xs and h0 gives the loop its batch (the caller's shapes replace the body's
    declared ones). Inputs xs and h0; outputs outs, h and FULLY_CONNECTED(h, head)."""
    n_hidden, n_in = wx.shape
    declare = _Declare(batch, dynamic_batch)
    specs = [("t", (), np.int32), ("outs", (steps, B, n_hidden), np.float32),
             ("h", (B, n_hidden), np.float32), ("xs", (steps, B, n_in), np.float32)]
    b = ModelBuilder()
    xs, h0 = (declare(b, name, shape, is_input=True) for name, shape, _ in (specs[3], specs[2]))
    cond, body = b.subgraph("cond"), b.subgraph("body")
    outputs = [declare(b, f"{name}_out", shape, dtype) for name, shape, dtype in specs]
    b.op("WHILE", [b.const("zero", np.array(0, np.int32)), _zeros_like(b, declare, xs, specs[1][1]), h0, xs],
         outputs, cond_subgraph_index=cond.index, body_subgraph_index=body.index)
    _, outs, h, _ = outputs
    y = declare(b, "y", (B, head.shape[0]))
    b.op("FULLY_CONNECTED", [h, b.const("head", head), -1], [y], fused_activation_function=NONE)
    for out in (outs, h, y):
        b.output(out)
    ct = cond.input("t", (), np.int32)
    for name, shape, _ in specs[1:]:
        declare(cond, name, shape, is_input=True)
    _less_than(cond, ct, cond.const("steps", np.array(steps, np.int32)))
    _keras_rnn_body(body, declare, wx, wh, bias, specs)
    return b.build()


def _zeros_like(b, declare, xs, shape):
    """Zeros of `shape` [steps, B, n_hidden] with the batch xs has: SLICE(xs, 0, [-1, -1, 1]) * 0
    + a zero row of n_hidden (MUL and ADD broadcast)."""
    first, scaled, zeros = (declare(b, name, s) for name, s in (
        ("xs_first", (*shape[:2], 1)), ("xs_zero", (*shape[:2], 1)), ("outs0", shape)))
    b.op("SLICE", [xs, b.const("begin0", np.zeros(3, np.int32)), b.const("size0", np.array([-1, -1, 1], np.int32))],
         [first])
    b.op("MUL", [first, b.const("zero_f", np.zeros((), np.float32))], [scaled], fused_activation_function=NONE)
    b.op("ADD", [scaled, b.const("zero_row", np.zeros(shape[2], np.float32))], [zeros], fused_activation_function=NONE)
    return zeros


def _keras_rnn_body(body, declare, wx, wh, bias, specs):
    """The body of keras_rnn_loop (see there)."""
    n_hidden = wx.shape[0]
    bt = body.input("t", (), np.int32)
    bouts, bh, bxs = (declare(body, name, shape, is_input=True) for name, shape, _ in specs[1:])
    t2 = body.tensor("t2", (), np.int32)
    body.op("ADD", [bt, body.const("one", np.array(1, np.int32))], [t2], fused_activation_function=NONE)
    x_t, from_x, from_h, pre, h2 = (declare(body, name, (B, n)) for name, n in (
        ("x_t", wx.shape[1]), ("from_x", n_hidden), ("from_h", n_hidden), ("pre", n_hidden), ("h2", n_hidden)))
    _rnn_step(body, bxs, bt, bh, wx, wh, bias, (x_t, from_x, from_h, pre, h2))
    one = body.const("shape1", np.array([1], np.int32))

    def counter_vector(name, counter, rest):
        """[counter, *rest] (int32 [3]): RESHAPE of the scalar counter, CONCATENATION with `rest`."""
        column, vector = body.tensor(f"{name}_1", (1,), np.int32), body.tensor(name, (3,), np.int32)
        body.op("RESHAPE", [counter, one], [column])
        body.op("CONCATENATION", [column, body.const(f"{name}_rest", np.array(rest, np.int32))], [vector],
                axis=0, fused_activation_function=NONE)
        return vector

    before = declare(body, "before", (1, 1, 1), signature=(-1, -1, -1))
    body.op("SLICE", [bouts, body.const("origin", np.zeros(3, np.int32)), counter_vector("size", bt, [-1, -1])],
            [before])
    after = declare(body, "after", (1, B, n_hidden), signature=(-1, B, n_hidden))
    body.op("SLICE", [bouts, counter_vector("begin", t2, [0, 0]), body.const("rest", np.array([-1, -1, -1], np.int32))],
            [after])
    row, outs2 = declare(body, "row", (1, B, n_hidden)), declare(body, "outs2", specs[1][1])
    body.op("RESHAPE", [h2, body.const("row_shape", np.array([1, -1, n_hidden], np.int32))], [row])
    body.op("CONCATENATION", [before, row, after], [outs2], axis=0, fused_activation_function=NONE)
    for out in (t2, outs2, h2, bxs):
        body.output(out)


def invoke_resized(interpreter, inputs):
    """Resize the interpreter's inputs to the shapes of `inputs`, allocate, set them and invoke;
    returns the outputs."""
    for detail, value in zip(interpreter.get_input_details(), inputs):
        interpreter.resize_tensor_input(detail["index"], value.shape)
    interpreter.allocate_tensors()
    for detail, value in zip(interpreter.get_input_details(), inputs):
        interpreter.set_tensor(detail["index"], value)
    interpreter.invoke()
    return [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]


def check_keras_rnn(ours, case, model):
    """Compare the outputs `ours` of keras_rnn_loop(*case weights) with LiteRT's: the rows of outs
    are the h of each step, within the final h's bound (rnn_bounds: it grows with the steps)."""
    wx, wh, bias, head, inputs = case
    theirs = invoke_resized(LiteRTInterpreter(model_content=model,
                                              experimental_op_resolver_type=RESOLVERS["builtin"]), inputs)
    h_bound, y_bound = rnn_bounds(wx, wh, bias, head, *inputs)
    for what, mine, reference, bound in zip(("outs", "h", "head"), ours, theirs, (h_bound, h_bound, y_bound)):
        assert mine.shape == reference.shape, what
        assert_close(mine, reference, bound=np.full(reference.shape, bound), what=what)
