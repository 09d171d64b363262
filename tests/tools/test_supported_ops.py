"""docs/supported_ops.md is generated from the kernel registries: fail when it is stale."""
from gles_delegate import ops
from gles_delegate.gpu import kernels
from gles_delegate.tools import supported_ops


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
