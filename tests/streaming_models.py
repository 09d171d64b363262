"""Streaming models built with our writer, as the TF converter lays out a stateful keyword
spotter (microWakeWord / ESPHome style): the ring buffer of each streaming layer is a resource
variable that CALL_ONCE's init subgraph assigns (zeros), and every invoke reads it, concatenates
the new frames, runs a convolution over the buffer, and assigns back the newest frames."""
from dataclasses import dataclass

import numpy as np

from gles_delegate.tflite import ModelBuilder
from tests.oplib import cpu_node

VALID = 1  # Padding
I8 = np.dtype(np.int8)


@dataclass(frozen=True)
class Ring:
    """The model's sizes: `frames` new frames of `channels` per invoke, a buffer of `history`
    past frames; the convolution (CONV_2D to `filters` channels, or DEPTHWISE_CONV_2D) spans the
    whole buffer in time. `keep_from`: the first buffer frame the STRIDED_SLICE keeps (None:
    `frames`, the newest `history`; -history: those too, at any frame count, as TF writes
    buf[:, -history:]; anything else assigns a value of another shape). `quantized`: int8
    tensors (one grid for the frames, the buffer and the state) and weights."""
    frames: int = 3
    history: int = 2
    channels: int = 8
    filters: int = 6
    conv: str = "CONV_2D"
    quantized: bool = False
    keep_from: int | None = None

    @property
    def span(self):
        return self.frames + self.history


GRID = (0.05, -3)  # (scale, zero point) of the int8 frames, buffer and state
OUT_GRID = (0.08, 2)


def _weights(ring, rng):
    """(weights, bias) of the convolution, float32."""
    if ring.conv == "CONV_2D":
        w = rng.normal(0, 1 / np.sqrt(ring.span * ring.channels), (ring.filters, ring.span, 1, ring.channels))
        return w.astype(np.float32), rng.normal(0, 0.1, ring.filters).astype(np.float32)
    w = rng.normal(0, 1 / np.sqrt(ring.span), (1, ring.span, 1, ring.channels))
    return w.astype(np.float32), rng.normal(0, 0.1, ring.channels).astype(np.float32)


def _conv_inputs(b, ring, rng):
    """The weights and bias tensors of the convolution (int8 per channel and int32 when quantized)."""
    w, bias = _weights(ring, rng)
    if not ring.quantized:
        return b.const("w", w), b.const("bias", bias)
    axis = 0 if ring.conv == "CONV_2D" else 3
    scales = np.maximum(np.abs(w).max(axis=tuple(d for d in range(4) if d != axis)), 1e-3) / 127
    shaped = scales.reshape([-1 if d == axis else 1 for d in range(4)])
    q = np.clip(np.round(w / shaped), -127, 127).astype(np.int8)
    bias_scales = np.float32(GRID[0]) * scales.astype(np.float32)
    return (b.const("w", q, quantization=(scales.astype(np.float32), 0, axis)),
            b.const("bias", np.round(bias / bias_scales).astype(np.int32), quantization=(bias_scales, 0)))


def _tensor(b, ring, name, shape, grid=GRID):
    if ring.quantized:
        return b.tensor(name, shape, I8, quantization=grid)
    return b.tensor(name, shape)


def _init(b, ring, shared_name="ring"):
    """The init subgraph: assign the zero buffer (the zero point's integers when quantized)."""
    init = b.subgraph("init")
    handle = init.tensor("handle", (), type_name="RESOURCE")
    init.op("VAR_HANDLE", [], [handle], container="", shared_name=shared_name)
    shape = (1, ring.history, 1, ring.channels)
    zeros = np.full(shape, GRID[1], I8) if ring.quantized else np.zeros(shape, np.float32)
    init.op("ASSIGN_VARIABLE", [handle, init.const("zeros", zeros, quantization=GRID if ring.quantized else None)], [])
    return init


def _state_subgraphs(b, ring):
    """Subgraphs and signatures 'state' (output: the variable, read) and 'set_state' (input s:
    assigned to the variable), each with its own VAR_HANDLE, as a converter writes a tf.Module's
    other tf.functions."""
    shape = (1, ring.history, 1, ring.channels)
    read, write = b.subgraph("state"), b.subgraph("set_state")
    for sg in (read, write):
        handle = sg.tensor("handle", (), type_name="RESOURCE")
        sg.op("VAR_HANDLE", [], [handle], container="", shared_name="ring")
        value = _tensor(sg, ring, "state", shape)
        if sg is read:
            sg.op("READ_VARIABLE", [handle], [value])
            sg.output(value)
            sg.signature("state", {}, {"state": value})
        else:
            sg.inputs.append(value)
            sg.op("ASSIGN_VARIABLE", [handle, value], [])
            sg.signature("set_state", {"s": value}, {})


def ring_model(ring, seed=0, reader=False, signatures=False, init=True):
    """One streaming layer (see the module docstring). Input x [1, frames, 1, channels]; output
    the convolution's [1, 1, 1, filters or channels]. `reader`: then |x| by an op with no GPU
    kernel (oplib.cpu_node) and a second READ_VARIABLE of the state, assigned by then, as a second output
    (a CPU node, or another partition, reads what the GPU assigned). `signatures`: signatures
    'step' (this), 'state' and 'set_state' (_state_subgraphs); "step": that one only. `init`:
    CALL_ONCE of the init subgraph first (else the first READ_VARIABLE reads a variable nothing
    assigned)."""
    assert not (reader and ring.quantized), "the CPU node takes float32 only"
    rng = np.random.default_rng(seed)
    b = ModelBuilder()
    x = b.input("x", (1, ring.frames, 1, ring.channels), I8 if ring.quantized else np.float32,
                quantization=GRID if ring.quantized else None)
    if init:
        b.op("CALL_ONCE", [], [], init_subgraph_index=_init(b, ring).index)
    handle = b.tensor("handle", (), type_name="RESOURCE")
    b.op("VAR_HANDLE", [], [handle], container="", shared_name="ring")
    state = _tensor(b, ring, "state", (1, ring.history, 1, ring.channels))
    b.op("READ_VARIABLE", [handle], [state])
    buffer = _tensor(b, ring, "buffer", (1, ring.span, 1, ring.channels))
    b.op("CONCATENATION", [state, x], [buffer], axis=1, fused_activation_function=0)
    out_channels = ring.filters if ring.conv == "CONV_2D" else ring.channels
    y = _tensor(b, ring, "y", (1, 1, 1, out_channels), OUT_GRID)
    conv_options = dict(padding=VALID, stride_w=1, stride_h=1, dilation_w_factor=1, dilation_h_factor=1,
                        fused_activation_function=0)
    if ring.conv == "DEPTHWISE_CONV_2D":
        conv_options["depth_multiplier"] = 1
    b.op(ring.conv, [buffer, *_conv_inputs(b, ring, rng)], [y], **conv_options)
    keep_from = ring.frames if ring.keep_from is None else ring.keep_from
    kept = ring.history if keep_from < 0 else ring.span - keep_from  # a negative begin counts from the end
    newest = _tensor(b, ring, "newest", (1, kept, 1, ring.channels))
    b.op("STRIDED_SLICE", [buffer, b.const("begin", np.array([0, keep_from, 0, 0], np.int32)),
                           b.const("end", np.zeros(4, np.int32)), b.const("strides", np.ones(4, np.int32))],
         [newest], begin_mask=13, end_mask=15, ellipsis_mask=0, new_axis_mask=0, shrink_axis_mask=0, offset=False)
    b.op("ASSIGN_VARIABLE", [handle, newest], [])
    b.output(y)
    if reader:
        magnitude = _tensor(b, ring, "magnitude", (1, ring.frames, 1, ring.channels))
        cpu_node(b, x, magnitude)  # an op the GPU lacks, between the assignment and the read
        after = _tensor(b, ring, "state_after", (1, ring.history, 1, ring.channels))
        b.op("READ_VARIABLE", [handle], [after])
        b.output(after)
    if signatures:
        b.signature("step", {"x": x}, {"y": y})
    if signatures is True:
        _state_subgraphs(b, ring)
    return b.build()


def frames(ring, steps, seed=1):
    """`steps` inputs of the model (int8 over the whole range when quantized)."""
    rng = np.random.default_rng(seed)
    shape = (1, ring.frames, 1, ring.channels)
    if ring.quantized:
        return [rng.integers(-128, 128, shape).astype(np.int8) for _ in range(steps)]
    return [rng.normal(0, 1, shape).astype(np.float32) for _ in range(steps)]
