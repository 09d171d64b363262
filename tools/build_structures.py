"""Build small float32 models, seeded random weights, that reproduce the channel-group structures
of MixNet and EdgeNeXt with this package's own writer (no framework needed), for the dispatch
counts of docs/performance.md round 19 (rules mixed_depthwise and lane_views).

    python -m tools.build_structures OUT_DIR

Writes:
  mixnet_like.tflite    [1, 20, 20, 40] -> two MixNet blocks: a 1x1 CONV_2D to 270 channels and
                        swish, SLICEs of 3 x 90 channels (from channels 90 and 180: mid-vec4 and
                        whole), depthwise 3x3 / 5x5 / 7x7 (SAME), CONCATENATION, batch norm (MUL,
                        ADD) and swish, a 1x1 CONV_2D back to 40; then the same with 360 channels
                        as 4 x 90 through 3x3 / 5x5 / 7x7 / 9x9 at stride 2, each PADded
                        symmetrically first as litert-torch writes PyTorch's padding.
  edgenext_like.tflite  [1, 20, 20, 24] -> two EdgeNeXt split depthwise blocks: a 1x1 CONV_2D to
                        88 channels, SLICEs of 30 / 30 / 28, the first through a 3x3 depthwise, the
                        second added to that result and then through another, both results and
                        the last group concatenated; then the same on 168 channels as 4 x 42; a
                        1x1 CONV_2D back to 24.
"""
import sys
from pathlib import Path

import numpy as np

from gles_delegate.tflite import ModelBuilder
from gles_delegate.tools import common

SAME, VALID = 0, 1  # the schema's Padding


class Writer:
    """A model built node by node on ModelBuilder, tensors' shapes tracked, weights seeded."""

    def __init__(self, shape):
        self.b, self.rng, self.count = ModelBuilder(), np.random.default_rng(0), 0
        self.x = self.b.input("x", shape)
        self.shapes = {self.x: tuple(shape)}

    def const(self, values, dtype=np.float32):
        self.count += 1
        return self.b.const(f"c{self.count}", np.asarray(values, dtype))

    def random(self, shape, scale):
        return self.const(self.rng.standard_normal(shape) * scale)

    def op(self, op, inputs, shape, **options):
        self.count += 1
        out = self.b.tensor(f"t{self.count}_{op.lower()}", shape)
        self.shapes[out] = tuple(shape)
        self.b.op(op, list(inputs), [out], **options)
        return out

    def pointwise(self, x, channels):
        n, h, w, c = self.shapes[x]
        return self.op("CONV_2D", [x, self.random((channels, 1, 1, c), c ** -0.5), self.random(channels, 0.1)],
                       (n, h, w, channels), padding=SAME, stride_w=1, stride_h=1, fused_activation_function=0)

    def depthwise(self, x, kernel, stride=1, padding=SAME):
        n, h, w, c = self.shapes[x]
        out = (-(-h // stride), -(-w // stride)) if padding == SAME else \
            ((h - kernel) // stride + 1, (w - kernel) // stride + 1)
        return self.op("DEPTHWISE_CONV_2D", [x, self.random((1, kernel, kernel, c), 1 / kernel), self.random(c, 0.1)],
                       (n, *out, c), padding=padding, stride_w=stride, stride_h=stride, depth_multiplier=1,
                       fused_activation_function=0)

    def swish(self, x):
        return self.op("MUL", [x, self.op("LOGISTIC", [x], self.shapes[x])], self.shapes[x])

    def channels(self, x, sizes):
        """SLICEs of `x`'s channels in groups of `sizes` (what litert-torch writes for torch.split)."""
        n, h, w, _ = self.shapes[x]
        starts = np.cumsum((0,) + tuple(sizes))
        return [self.op("SLICE", [x, self.const((0, 0, 0, a), np.int32), self.const((n, h, w, s), np.int32)],
                        (n, h, w, s)) for a, s in zip(starts, sizes)]

    def concatenate(self, parts):
        n, h, w, _ = self.shapes[parts[0]]
        return self.op("CONCATENATION", parts, (n, h, w, sum(self.shapes[p][3] for p in parts)), axis=3,
                       fused_activation_function=0)

    def build(self, out):
        self.b.output(out)
        return self.b.build()


def mixnet_block(m, x, groups, kernels, stride):
    """MixNet's inverted bottleneck with a mixed-kernel depthwise convolution (MixedConv2d)."""
    y = m.swish(m.pointwise(x, sum(groups)))
    convolved = []
    for part, kernel in zip(m.channels(y, groups), kernels):
        if stride > 1:  # PyTorch's symmetric padding: a PAD, then a VALID convolution
            n, h, w, c = m.shapes[part]
            p = (kernel - 1) // 2
            paddings = m.const([[0, 0], [p, p], [p, p], [0, 0]], np.int32)
            part = m.op("PAD", [part, paddings], (n, h + 2 * p, w + 2 * p, c))
            convolved.append(m.depthwise(part, kernel, stride, VALID))
        else:
            convolved.append(m.depthwise(part, kernel))
    y = m.concatenate(convolved)
    channels = m.shapes[y][3]
    y = m.op("ADD", [m.op("MUL", [y, m.random(channels, 0.5)], m.shapes[y]), m.random(channels, 0.1)], m.shapes[y])
    return m.pointwise(m.swish(y), m.shapes[x][3])


def mixnet_like():
    m = Writer((1, 20, 20, 40))
    y = mixnet_block(m, m.x, (90, 90, 90), (3, 5, 7), 1)
    return m.build(mixnet_block(m, y, (90, 90, 90, 90), (3, 5, 7, 9), 2))


def edgenext_block(m, x, widths):
    """EdgeNeXt's split depthwise block (SDTA's first half): each group but the last through a
    3x3 depthwise convolution, after adding the previous group's result."""
    parts = m.channels(x, widths)
    results, y = [], None
    for k, part in enumerate(parts[:-1]):
        y = m.depthwise(part if k == 0 else m.op("ADD", [y, part], m.shapes[part]), 3)
        results.append(y)
    return m.concatenate(results + parts[-1:])


def edgenext_like():
    m = Writer((1, 20, 20, 24))
    y = edgenext_block(m, m.pointwise(m.x, 88), (30, 30, 28))
    y = edgenext_block(m, m.pointwise(y, 168), (42, 42, 42, 42))
    return m.build(m.pointwise(y, 24))


def build_parser():
    parser = common.tool_parser("python -m tools.build_structures", __doc__)
    parser.add_argument("out", type=common.output_dir, help="directory for the .tflite files")
    return parser


def main(argv=None):
    return common.run_main(build_parser(), run, argv)


def run(args):
    Path(args.out).mkdir(parents=True, exist_ok=True)
    for name, build in (("mixnet_like", mixnet_like), ("edgenext_like", edgenext_like)):
        path = Path(args.out) / f"{name}.tflite"
        path.write_bytes(build())
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
