"""residual_through_concat: a GhostNet module's residual ADD over CONCATENATION(x, depthwise(x))
is applied by the depthwise convolution, which stores both halves (x + r_a through its
pass-through, depthwise(x) + r_b as an epilogue step): the ADD's dispatch goes, the results are
the reference's in every precision and, in half storage, the unfused graph's bit for bit."""
from types import SimpleNamespace

import numpy as np
import pytest

from gles_delegate.gpu import kernels
from gles_delegate.gpu.kernels import depthwise, epilogue
from gles_delegate.gpu.transforms import residual_through_concat
from tests.gpu.gpulib import PRECISIONS
from tests.gpu.transforms.rulelib import (Chain, assert_same_as_unfused, check_gpu, dispatches, dispatches_without,
                                          ops_of, random, rewrite_through, run_on_gpu, unfused_outputs, why)

RULE = "residual_through_concat"


def ghost_block(shape=(1, 9, 11, 16), half=None, activation=0, add_activation=0, swapped=False,
                shortcut_read=False, residual_shape=None):
    """x -> ghost module (1x1 conv to `half` channels, 3x3 depthwise of it, their concatenation,
    [dw, conv] when `swapped`) + r (x, or an input of `residual_shape`), GhostNet's bottleneck
    without its first module; `shortcut_read`: the concatenation is a model output too."""
    c = Chain(shape)
    half = half or shape[3] // 2
    a = c.conv(c.x, half, kernel=1, seed=5)
    b = c.depthwise(a, activation=activation)
    joined = c.op("CONCATENATION", *((b, a) if swapped else (a, b)), shape=shape, axis=3)
    residual = c.x
    if residual_shape:
        residual = c.b.input("r", residual_shape)
        c.shapes[residual] = residual_shape
    out = c.conv(c.op("ADD", joined, residual, fused_activation_function=add_activation), 8, kernel=1, seed=9)
    return c.build(out, joined) if shortcut_read else c.build(out)


def test_the_add_goes_and_the_convolution_stores_both_halves():
    model = ghost_block()
    graph, log = rewrite_through(model, RULE)
    assert ops_of(graph) == ["CONV_2D", "SLICE", "SLICE", "DEPTHWISE_CONV_2D", "CONCATENATION", "CONV_2D"]
    conv, concat = graph.nodes[3], graph.nodes[4]
    assert concat.inputs == [conv.outputs[1], conv.outputs[0]] and concat.outputs[0] is graph.nodes[5].inputs[0]
    assert conv.options[depthwise.PASS_THROUGH] is graph.nodes[1].outputs[0]
    assert [(s.op, s.operand is graph.nodes[2].outputs[0], s.stored) for s in conv.options["epilogue"]] == \
        [("ADD", True, True)]
    assert kernels.unsupported_reason(conv) is None
    values = [random((1, 9, 11, 16), 2)]
    # convert_in, the 1x1 conv, the depthwise storing both halves (the slices are views, the
    # concatenation in place), the next 1x1 conv
    assert (dispatches(model, values), dispatches_without(RULE, model, values)) == (4, 5)


def test_a_sum_that_leaves_the_partition_keeps_its_add():
    """The ADD would store a model output as float32 straight into the I/O buffer; the halves
    would be rounded to the arena's precision."""
    c = Chain((1, 6, 6, 8))
    a = c.conv(c.x, 4, kernel=1, seed=5)
    out = c.op("ADD", c.op("CONCATENATION", a, c.depthwise(a), shape=(1, 6, 6, 8), axis=3), c.x)
    model = c.build(out)
    graph, log = rewrite_through(model, RULE)
    assert "output leaves the partition" in why(log, RULE, "#3 (ADD)")
    for precision in PRECISIONS:
        check_gpu(model, [random((1, 6, 6, 8), 8)], precision)


@pytest.mark.parametrize("precision", [*PRECISIONS, "auto"])
@pytest.mark.parametrize("shape, activation", [((1, 9, 11, 16), 0), ((1, 20, 20, 40), 1), ((1, 5, 5, 8), 3)])
def test_the_module_matches_the_reference(shape, activation, precision):
    """The depthwise convolution's own activation applies before the residual, to its half only."""
    model = ghost_block(shape, activation=activation)
    _, log = check_gpu(model, [random(shape, 3, 2.0)], precision)
    assert any(r.rule == RULE and r.status == "APPLIED" for r in log)


@pytest.mark.parametrize("precision", ["fp16", "fp16_fp32acc"])
def test_half_storage_results_equal_the_unfused_graph(precision):
    """Both halves are rounded to half as their stores did before the add."""
    assert_same_as_unfused(RULE, ghost_block((1, 12, 10, 24), activation=1), [random((1, 12, 10, 24), 4, 3.0)],
                           precision)


def test_without_the_rounding_half_storage_results_differ(monkeypatch):
    """The test above can fail: the depthwise half added unrounded changes the output."""
    model, values = ghost_block((1, 12, 10, 24), activation=1), [random((1, 12, 10, 24), 4, 3.0)]
    unfused = unfused_outputs(RULE, model, values, "fp16_fp32acc")
    step = epilogue.Step
    unrounded = SimpleNamespace(**{**vars(epilogue), "Step": lambda op, operand, stored: step(op, operand)})
    monkeypatch.setattr(residual_through_concat, "epilogue", unrounded)  # this rule's steps alone
    fused = run_on_gpu(model, values, "fp16_fp32acc")
    assert not np.array_equal(fused[0], unfused[0])


@pytest.mark.parametrize("options, reason", [
    ({"shortcut_read": True}, "is read outside the module or leaves the partition"),
    ({"shape": (1, 9, 11, 12), "half": 6}, "channels a multiple of 4"),
    ({"swapped": True}, "second input is not a DEPTHWISE_CONV_2D of its first"),
    ({"add_activation": 1}, "applies an activation or epilogue steps"),
    ({"residual_shape": (1, 1, 1, 16)}, "is not a runtime float32 tensor of shape [1, 9, 11, 16]"),
])
def test_modules_the_convolution_cannot_apply_keep_the_add(options, reason):
    model = ghost_block(**options)
    graph, log = rewrite_through(model, RULE)
    add = next(n for n in graph.nodes if n.op == "ADD")
    assert reason in why(log, RULE, add.label)
    shapes = [options.get("shape", (1, 9, 11, 16))] + ([options["residual_shape"]] if "residual_shape" in options else [])
    check_gpu(model, [random(shape, 6 + k) for k, shape in enumerate(shapes)])


def test_a_full_epilogue_keeps_the_add(monkeypatch):
    """The residual is one more step of the convolution's epilogue: none when it is full."""
    monkeypatch.setattr(residual_through_concat, "epilogue", SimpleNamespace(**{**vars(epilogue), "MAX_STEPS": 0}))
    model = ghost_block()
    graph, log = rewrite_through(model, RULE)
    add = next(n for n in graph.nodes if n.op == "ADD")
    assert "epilogue of #1 (DEPTHWISE_CONV_2D) is full" in why(log, RULE, add.label)
    check_gpu(model, [random((1, 9, 11, 16), 6)])
