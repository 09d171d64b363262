"""Models of one window reduction, as litert-torch and older converters write them: a
STABLEHLO_REDUCE_WINDOW whose body subgraph is one binary op of its two inputs, or the deprecated
REDUCE_WINDOW with its window as constant int64 inputs (tests/ops/test_reduce_window.py against
LiteRT, tests/gpu/test_reduce_window.py against the reference)."""
from dataclasses import dataclass

import numpy as np

from gles_delegate.tflite import ModelBuilder


@dataclass(frozen=True)
class Window:
    """One reduction's geometry: per dimension, as StableHLO's attributes."""
    window: tuple
    strides: tuple = None
    base_dilations: tuple = None
    window_dilations: tuple = None
    padding: tuple = None  # (before, after) per dimension, flattened

    def filled(self):
        rank = len(self.window)
        ones = (1,) * rank
        return (self.window, self.strides or ones, self.base_dilations or ones, self.window_dilations or ones,
                self.padding or (0,) * (2 * rank))

    def out_shape(self, in_shape):
        """The output's shape, computed here from StableHLO's definition (not the package's)."""
        window, strides, base, dilations, padding = self.filled()
        shape = []
        for k, n in enumerate(in_shape):
            padded = (n - 1) * base[k] + 1 + padding[2 * k] + padding[2 * k + 1]
            span = (window[k] - 1) * dilations[k] + 1
            shape.append(0 if padded < span else (padded - span) // strides[k] + 1)
        return tuple(shape)


def window_model(in_shape, window, body_op="ADD", init=0.0, dtype=np.float32, const_input=None, out_shape=None):
    """x [in_shape] -> STABLEHLO_REDUCE_WINDOW(x, init) with a body of `body_op` (None: two ops,
    ADD then MUL, which no kernel takes); const_input: x as a constant instead (the node folds);
    out_shape: the shape to declare (by default StableHLO's, which a malformed window has not)."""
    b = ModelBuilder("reduce_window")
    x = b.input("x", in_shape, dtype) if const_input is None else b.const("x", const_input)
    out = b.tensor("out", out_shape or window.out_shape(in_shape), dtype)
    dims, strides, base, dilations, padding = window.filled()
    b.op("STABLEHLO_REDUCE_WINDOW", [x, b.const("init", np.asarray(init, dtype))], [out], window_dimensions=dims,
         window_strides=strides, base_dilations=base, window_dilations=dilations, padding=padding,
         body_subgraph_index=1)
    b.output(out)
    body = b.subgraph("body")
    a, c = body.input("a", (), dtype), body.input("c", (), dtype)
    result = body.tensor("result", (), dtype)
    if body_op is None:
        partial = body.tensor("partial", (), dtype)
        body.op("ADD", [a, c], [partial], fused_activation_function=0)
        body.op("MUL", [partial, c], [result], fused_activation_function=0)
    else:
        options = {"fused_activation_function": 0} if body_op in ("ADD", "MUL", "SUB") else {}
        body.op(body_op, [a, c], [result], **options)
    body.output(result)
    return b.build()


# The deprecated REDUCE_WINDOW's reduce_function codes (the schema's ReduceWindowFunction).
REDUCE_FUNCTIONS = {"add": 1, "mul": 2, "min": 3, "max": 4, "all": 5, "any": 6}


def deprecated_window_model(in_shape, window, function, init=0.0, dtype=np.float32):
    """x -> REDUCE_WINDOW(x, init, window, strides, window dilations) (no padding, no base dilation)."""
    b = ModelBuilder("reduce_window_v1")
    x = b.input("x", in_shape, dtype)
    out = b.tensor("out", window.out_shape(in_shape), dtype)
    dims, strides, _, dilations, _ = window.filled()
    constants = [b.const(name, np.asarray(values, np.int64))
                 for name, values in (("window", dims), ("strides", strides), ("dilations", dilations))]
    b.op("REDUCE_WINDOW", [x, b.const("init", np.asarray(init, dtype)), *constants], [out],
         reduce_function=REDUCE_FUNCTIONS[function])
    b.output(out)
    return b.build()


def avg_pool_ceil_model(shape=(1, 9, 10, 6)):
    """avg_pool2d(3, 2, 1, ceil_mode=True, count_include_pad=False) as litert-torch writes it:
    window sums of x, DIV by window sums of a constant of ones (which fold at load); their bodies,
    two alike subgraphs of one ADD. Returns (model bytes, output shape)."""
    window = Window((1, 3, 3, 1), (1, 2, 2, 1), padding=(0, 0, 1, 2, 1, 2, 0, 0))
    out_shape = window.out_shape(shape)
    b = ModelBuilder("avg_pool_ceil")
    x = b.input("x", shape)
    sums, counts, out = (b.tensor(name, s) for name, s in (("sums", out_shape), ("counts", out_shape[:3] + (1,)),
                                                            ("out", out_shape)))
    zero = b.const("zero", np.float32(0.0))
    for k, (source, target) in enumerate(((x, sums), (b.const("ones", np.ones(shape[:3] + (1,), np.float32)), counts))):
        b.op("STABLEHLO_REDUCE_WINDOW", [source, zero], [target], window_dimensions=window.window,
             window_strides=window.strides, base_dilations=(1,) * 4, window_dilations=(1,) * 4,
             padding=window.padding, body_subgraph_index=k + 1)
    b.op("DIV", [sums, counts], [out], fused_activation_function=0)
    b.output(out)
    for k in range(2):
        body = b.subgraph(f"body{k}")
        a, c = body.input("a", ()), body.input("c", ())
        total = body.tensor("total", ())
        body.op("ADD", [a, c], [total], fused_activation_function=0)
        body.output(total)
    return b.build(), out_shape
