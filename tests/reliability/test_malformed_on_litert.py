"""Malformed nodes under cpu_backend='litert' (gles-fuzz --seed 4103 --cpu-backend litert: 10 of
13 findings): an input the op requires omitted (-1), too few inputs, malformed sparsity. LiteRT's
kernels read such a node's inputs unchecked and crashed the process (SIGSEGV, std::bad_alloc);
now the reference's structural checks (ops.checks.Malformed) refuse them with a ModelError
naming the node, as under 'auto'. Each case runs in a subprocess: a crash fails the test, not
pytest."""
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from gles_delegate import ModelError, ops
from gles_delegate.graph import Node, Tensor
from gles_delegate.ops.checks import Malformed
from gles_delegate.tflite import schema
from gles_delegate.tflite import ModelBuilder, read_model, write_model
from gles_delegate.tools.fuzz_models import small_models
from tests.cpu_litert_models import litert_outputs, random_input, run
from tests.oplib import assert_close

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TIMEOUT = 120

_RUN = """
import json, sys
import numpy as np
from gles_delegate import Interpreter
try:
    interpreter = Interpreter(model_path=sys.argv[1], cpu_backend="litert")
    interpreter.allocate_tensors()
    for detail in interpreter.get_input_details():
        interpreter.set_tensor(detail["index"], np.zeros(detail["shape"], detail["dtype"]))
    interpreter.invoke()
    print(json.dumps({"error": None, "message": ""}))
except Exception as exc:
    print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
"""


def run_on_litert(tmp_path, model):
    """{'error': the exception's class name or None, 'message'} of allocate + invoke of `model`
    under cpu_backend='litert', in a fresh process; the test fails if that process dies."""
    path = tmp_path / "model.tflite"
    path.write_bytes(model)
    result = subprocess.run([sys.executable, "-c", _RUN, str(path)], capture_output=True, text=True,
                            timeout=TIMEOUT, cwd=ROOT)
    assert result.returncode == 0, f"the process died (exit status {result.returncode}): {result.stderr[-2000:]}"
    return json.loads(result.stdout.strip().splitlines()[-1])


def add_without_its_second_input():
    b = ModelBuilder()
    x, y = b.input("x", (2, 3)), b.tensor("y", (2, 3))
    b.op("ADD", [x, -1], [y])
    b.output(y)
    return b.build()


def conv_without_weights():
    """The std::bad_alloc of the fuzz trial (pose_detection's CONV_2D, weights omitted)."""
    b = ModelBuilder()
    x, y = b.input("x", (1, 4, 4, 2)), b.tensor("y", (1, 4, 4, 3))
    bias = b.const("bias", np.zeros(3, np.float32))
    b.op("CONV_2D", [x, -1, bias], [y], padding=0, stride_w=1, stride_h=1)
    b.output(y)
    return b.build()


def concatenation_with_an_input_omitted():
    b = ModelBuilder()
    x, y = b.input("x", (2, 3)), b.tensor("y", (2, 6))
    b.op("CONCATENATION", [x, -1], [y], axis=1)
    b.output(y)
    return b.build()


def strided_slice(operands):
    """STRIDED_SLICE of x [4, 4] to [2, 4] on `operands` ('begin', 'end', 'strides' or -1)."""
    b = ModelBuilder()
    x, y = b.input("x", (4, 4)), b.tensor("y", (2, 4))
    consts = {name: b.const(name, np.array(value, np.int32))
              for name, value in (("begin", [0, 0]), ("end", [2, 4]), ("strides", [1, 1]))}
    b.op("STRIDED_SLICE", [x] + [consts.get(k, -1) for k in operands], [y])
    b.output(y)
    return b.build()


def slice_of_one_input():
    """Fuzz case 2140 (a QUANTIZE retyped SLICE) crashed LiteRT alone too; this one LiteRT's
    Prepare refuses (NumInputs(node) != 3), but the reference's check comes first."""
    b = ModelBuilder()
    x, y = b.input("x", (4, 4)), b.tensor("y", (2, 2))
    b.op("SLICE", [x], [y])
    b.output(y)
    return b.build()


def dequantize_without_input():
    b = ModelBuilder()
    x, t, y = b.input("x", (2, 3)), b.tensor("t", (2, 3)), b.tensor("y", (2, 3))
    b.op("TANH", [x], [t])
    b.op("DEQUANTIZE", [-1], [y])
    b.output(t)
    b.output(y)
    return b.build()


def assign_variable_of_one_input():
    """Fuzz case 6518: the seed's HARD_SWISH retyped ASSIGN_VARIABLE (1 input, 1 output)."""
    b = ModelBuilder()
    x, t, y = b.input("x", (2, 3)), b.tensor("t", (2, 3)), b.tensor("y", (2, 3))
    b.op("TANH", [x], [t])
    b.op("ASSIGN_VARIABLE", [t], [y])
    b.output(y)
    return b.build()


def densify_of_a_dropped_level():
    """The fuzzer's sparse seed (DENSIFY of a CSR [4, 4] weight into a FULLY_CONNECTED) with one
    dim_metadata level dropped."""
    model = read_model(small_models()["sparse"])
    model.subgraphs[0].tensors[1].sparsity.dim_metadata.pop(1)
    return write_model(model)


CASES = {
    "ADD, input omitted": (add_without_its_second_input, r"#0 \(ADD\).*input 1 is omitted"),
    "CONV_2D, weights omitted": (conv_without_weights, r"#0 \(CONV_2D\).*input 1 is omitted"),
    "CONCATENATION, input omitted": (concatenation_with_an_input_omitted,
                                     r"#0 \(CONCATENATION\).*input 1 is omitted"),
    "STRIDED_SLICE, end omitted": (lambda: strided_slice(["begin", -1, "strides"]),
                                   r"#0 \(STRIDED_SLICE\).*input 2 is omitted"),
    "STRIDED_SLICE, 2 inputs": (lambda: strided_slice(["begin"]), r"#0 \(STRIDED_SLICE\).*takes 4 inputs, got 2"),
    "SLICE, 1 input": (slice_of_one_input, r"#0 \(SLICE\).*takes 3 inputs, got 1"),
    "DEQUANTIZE, input omitted": (dequantize_without_input, r"#1 \(DEQUANTIZE\).*input 0 is omitted"),
    "ASSIGN_VARIABLE, 1 input": (assign_variable_of_one_input,
                                 r"#1 \(ASSIGN_VARIABLE\).*takes two inputs and no outputs, got 1 and 1"),
    "DENSIFY, a sparsity level dropped": (densify_of_a_dropped_level,
                                          r"#0 \(DENSIFY\).*traversal_order \(2\) and dim_metadata \(1\)"),
}


@pytest.mark.parametrize("case", CASES)
def test_a_malformed_node_is_a_model_error_under_litert(tmp_path, case):
    build, message = CASES[case]
    outcome = run_on_litert(tmp_path, build())
    assert outcome["error"] == "ModelError", outcome
    assert re.search(message, outcome["message"]), outcome["message"]


def conv_with_fused_tanh():
    """A well-formed CONV_2D with a fused TANH, which TFLite's conv kernel ignores (it only
    clamps): the reference refuses it (ops.checks.check_activation), not as malformed."""
    b = ModelBuilder()
    x, y = b.input("x", (1, 4, 4, 2)), b.tensor("y", (1, 4, 4, 3))
    w = b.const("w", random_input((3, 1, 1, 2), seed=1))
    bias = b.const("bias", random_input((3,), seed=2))
    b.op("CONV_2D", [x, w, bias], [y], padding=0, stride_w=1, stride_h=1, fused_activation_function=4)
    b.output(y)
    return b.build()


def test_litert_still_takes_a_well_formed_node_the_reference_refuses():
    model, x = conv_with_fused_tanh(), random_input((1, 4, 4, 2))
    with pytest.raises(ModelError, match=r"#0 \(CONV_2D\).*fused activation"):
        run(model, [x], cpu_backend="auto")
    (ours,), summary = run(model, [x], cpu_backend="litert")
    (theirs,) = litert_outputs(model, [x])
    assert_close(ours, theirs)
    assert summary["litert_nodes"] == ["#0 (CONV_2D)"]


# The ops a LiteRT sub-model may hold (cpu_litert.litert_refusal keeps custom ops and ops with
# subgraphs on the reference).
BUILTIN_OPS = sorted(op for op in ops.SUPPORT if op in schema.BUILTIN_OP_CODES and op not in ops.control_flow.KERNELS)


@pytest.mark.parametrize("op", BUILTIN_OPS)
def test_every_op_s_check_finds_input_0_omitted_malformed(op):
    """What makes 'litert' refuse a node is the reason's type: every builtin op's check must give
    Malformed for an omitted input 0 (too many inputs for the ops of fewer than 4)."""
    def tensor(index):
        return Tensor(index=index, name=f"t{index}", shape=(2, 3), dtype=np.dtype(np.float32))
    node = Node(index=0, op=op, inputs=[None, tensor(1), tensor(2), tensor(3)], outputs=[tensor(4)],
                runtime=object())  # resource variables check their arity once the Interpreter is there
    reason = ops.SUPPORT[op](node)
    assert isinstance(reason, Malformed), f"{op}: {type(reason).__name__} {reason!r}"
