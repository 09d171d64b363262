"""The outputs README.md and docs/usage.md quote are a fresh run's (tools/doc_examples.py): each
quoting command runs once, here, and every line its blocks quote must be in its output, in order,
timings aside. A block gone stale: `python -m gles_delegate.tools.doc_examples --write`."""
import numpy as np
import pytest

from gles_delegate.tools import doc_examples

EXAMPLES = doc_examples.examples()


def test_the_outputs_the_docs_quote_are_marked():
    commands = {e.command for e in EXAMPLES}
    assert {"python -m gles_delegate.tools.demo", "summary selfie_segmentation", "gles-inspect selfie_segmentation",
            "gles-parity selfie_segmentation"} <= commands
    assert {e.path.name for e in EXAMPLES if e.command == "python -m gles_delegate.tools.demo"} == \
        {"README.md", "usage.md"}


@pytest.mark.parametrize("command", sorted({e.command for e in EXAMPLES}))
def test_a_quoted_output_is_a_fresh_runs(command):
    mismatch = doc_examples.renderer_mismatch()
    if mismatch:
        pytest.skip(mismatch)
    fresh = doc_examples.run(command)
    for example in (e for e in EXAMPLES if e.command == command):
        line = doc_examples.stale_line(example, fresh)
        assert line is None, (f"{example.path.name}: the output of {command!r} no longer shows {line!r}: "
                              "run python -m gles_delegate.tools.doc_examples --write")


QUOTED = ["node  time", "#2 (ADD)  12.5 ms", "...", "total: 3 dispatches"]


def example(lines):
    return doc_examples.Example(doc_examples.ROOT / "docs" / "usage.md", "gles-x", lines, (0, 0))


def test_timings_and_left_out_lines_do_not_make_a_block_stale():
    fresh = ["node   time", "#2 (ADD)   7.25 ms", "#3 (MUL)  1.0 ms", "total: 3 dispatches"]
    assert doc_examples.stale_line(example(QUOTED), fresh) is None
    changed = fresh[:-1] + ["total: 4 dispatches"]
    assert doc_examples.stale_line(example(QUOTED), changed) == "total: 3 dispatches"
    assert doc_examples.stale_line(example(QUOTED), fresh[::-1]) is not None  # the order is quoted too


def test_write_replaces_the_quoted_lines_with_their_fresh_values():
    fresh = ["node  time", "#2 (ADD)  9.0 ms", "#3 (MUL)  1.0 ms", "total: 4 dispatches"]
    assert doc_examples.refreshed(example(QUOTED), fresh) == ["node  time", "#2 (ADD)  9.0 ms", "...",
                                                              "total: 4 dispatches"]
    with pytest.raises(doc_examples.common.ToolError, match="cannot find where 'total: 3 dispatches' went"):
        doc_examples.refreshed(example(QUOTED), fresh[:-1] + ["in all: 4 dispatches"])


def test_under_another_numpy_only_fractional_figures_are_left_out(monkeypatch):
    """The numpy reference rounds differently under another numpy major version on some CPUs:
    an error figure may then differ from the quoted one, a count may not."""
    quoted = ["x: vs reference 4.10e-08 (2.72e-06)", "total: 3 dispatches"]
    fresh = ["x: vs reference 1.55e-07 (1.03e-05)", "total: 3 dispatches"]
    this_numpy = int(np.__version__.split(".")[0])
    monkeypatch.setattr(doc_examples, "DOCS_NUMPY", this_numpy)
    assert doc_examples.stale_line(example(quoted), fresh) is not None  # the docs' numpy: every figure counts
    monkeypatch.setattr(doc_examples, "DOCS_NUMPY", this_numpy + 1)
    assert doc_examples.stale_line(example(quoted), fresh) is None
    assert doc_examples.stale_line(example(quoted), fresh[:1] + ["total: 4 dispatches"]) == "total: 3 dispatches"
