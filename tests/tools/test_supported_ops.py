"""docs/supported_ops.md is generated from the kernel registries: fail when it is stale."""
import numpy as np

from gles_delegate import ops
from gles_delegate.gpu import kernels
from gles_delegate.tflite import ModelBuilder, schema
from gles_delegate.tools import supported_ops
from tests.litert import RESOLVERS, LiteRTInterpreter


def test_committed_supported_ops_doc_is_current():
    committed = supported_ops.DOC_PATH.read_text() if supported_ops.DOC_PATH.exists() else ""
    assert committed == supported_ops.render(), (
        "docs/supported_ops.md is stale: run `python -m gles_delegate.tools.supported_ops --write`")


def test_every_registered_op_has_a_row():
    text = supported_ops.render()
    for op in set(ops.KERNELS) | set(kernels.BUILD):
        row = next(line for line in text.splitlines() if line.startswith(f"| `{op}` |"))
        cpu, gpu = row.split(" | ")[1:3]
        assert (cpu != "-") == (op in ops.KERNELS) and (gpu != "-") == (op in kernels.BUILD), row


def test_every_builtin_op_is_listed():
    text = supported_ops.render()
    for op in schema.BUILTIN_OP_CODES:
        if not op.startswith(supported_ops.STABLEHLO_PREFIX):
            assert f"`{op}`" in text, op
    status = supported_ops.builtin_status()
    assert not set(status) & set(ops.KERNELS)
    assert {op for op, where in status.items() if where == "none"} == supported_ops.LITERT_UNREGISTERED - \
        {op for op in supported_ops.LITERT_UNREGISTERED if op.startswith("STABLEHLO_")} - set(supported_ops.NOT_OPS)
    assert all(where in ("litert", "none") for where in status.values())


def litert_registers(op):
    """Whether LiteRT's builtin resolver registers `op` at some version 1 to 8: building its
    interpreter fails with "Didn't find op" only when it does not (a one-op model whose
    tensors need not suit the op: the resolver is asked before any kernel looks at them)."""
    for version in range(1, 9):
        b = ModelBuilder()
        x, y = b.input("x", (1,), np.float32), b.tensor("y", (1,), np.float32)
        b.op(op, [x], [y], version=version)
        b.output(y)
        try:
            LiteRTInterpreter(model_content=b.build(), experimental_op_resolver_type=RESOLVERS["builtin"])
        except (RuntimeError, ValueError) as exc:
            if "Didn't find op for builtin opcode" in str(exc):
                continue
        return True
    return False


def test_litert_unregistered_list_matches_litert():
    registered = {op for op in schema.BUILTIN_OP_CODES if op != "CUSTOM" and litert_registers(op)}
    assert set(schema.BUILTIN_OP_CODES) - registered - {"CUSTOM"} == supported_ops.LITERT_UNREGISTERED
    assert "ADD" in registered and "BROADCAST_TO" in registered  # BROADCAST_TO from version 2
