"""docs/usage.md against the code it documents: every option and each of its values, every
summary() key, and the printed summary() example with the keys a real run returns."""
import ast
import dataclasses
import re
import typing
from pathlib import Path

import numpy as np

from gles_delegate import GpuDelegate, GpuDelegateOptions
from gles_delegate.gpu.memory import STRATEGIES
from tests.oplib import In, run_ours, single_op_model

USAGE = (Path(__file__).resolve().parents[1] / "docs" / "usage.md").read_text()


def _section(title):
    """The text of docs/usage.md under `### title`, up to the next heading."""
    return re.split(r"\n#+ ", USAGE.split(f"### {title}\n", 1)[1], maxsplit=1)[0]


def _table_row(field):
    """The options table's row naming `field` in its first cell; a row whose values are "as
    above" (fields that share a type) is read with the row above it."""
    lines = _section("GpuDelegateOptions").splitlines()
    rows = [k for k, line in enumerate(lines) if line.startswith("| `") and f"`{field}`" in line.split("|")[1]]
    assert len(rows) == 1, f"docs/usage.md has {len(rows)} rows for option {field}"
    row = lines[rows[0]]
    return lines[rows[0] - 1] + row if "| as above |" in row else row


def _choices(annotation):
    """The string values a Literal (or Optional Literal) annotation allows."""
    found = []
    for arg in typing.get_args(annotation) or ():
        found += [a for a in typing.get_args(arg) if isinstance(a, str)] if typing.get_args(arg) else \
            ([arg] if isinstance(arg, str) else [])
    return found


def test_every_option_and_value_is_in_the_options_table():
    hints = typing.get_type_hints(GpuDelegateOptions)
    for field in dataclasses.fields(GpuDelegateOptions):
        row = _table_row(field.name)
        values = list(STRATEGIES) if field.name == "memory_strategy" else _choices(hints[field.name])
        for value in values:
            assert f'`"{value}"`' in row, f"docs/usage.md: option {field.name} does not list {value!r}"


def _summary_example():
    """The dict printed under "print(delegate.summary())" in docs/usage.md."""
    block = USAGE.split("`print(delegate.summary())`", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    return ast.literal_eval(block.strip())


def test_summary_keys_are_documented_and_the_example_is_a_real_one():
    x = In(np.ones((1, 4, 4, 3), np.float32))
    with GpuDelegate() as delegate:
        run_ours(single_op_model("TANH", [x]), [x.value], experimental_delegates=[delegate])
        keys = set(delegate.summary())
    table = set(re.findall(r"`(\w+)`", "\n".join(
        line.split("|")[1] for line in _section("summary() keys").splitlines() if line.startswith("| `"))))
    assert keys <= table, f"summary() keys missing from docs/usage.md: {keys - table}"
    example = _summary_example()
    assert set(example) == keys, f"the printed example's keys differ: {set(example) ^ keys}"


# The usage.md section of each console tool documented there, and the tool.
TOOL_SECTIONS = {"The demo": "demo", "gles-benchmark": "benchmark_model", "gles-inspect": "inspect_model",
                 "gles-parity": "parity_report", "gles-top1": "top1_agreement", "gles-bench-invoke": "bench_invoke"}


def test_every_option_of_a_tool_is_in_its_section():
    import importlib
    for title, module in TOOL_SECTIONS.items():
        parser = importlib.import_module(f"gles_delegate.tools.{module}").build_parser()
        section = _section(title)
        missing = [a.option_strings[-1] for a in parser._actions
                   if a.option_strings and a.help != "==SUPPRESS==" and "-h" not in a.option_strings
                   and not any(f"`{o}" in section or f"[{o}" in section or f" {o}" in section for o in a.option_strings)]
        assert not missing, f"docs/usage.md, {title}: options {missing} are not described"
