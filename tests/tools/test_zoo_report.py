"""tools/zoo_report.py on models built with our writer (the zoo itself is built outside CI):
op histograms over every subgraph, the ops a model lacks, its status, its error against LiteRT
and the Markdown and JSON it writes."""
import copy
import json
import math

import numpy as np
import pytest

from gles_delegate import GpuDelegate, ops
from gles_delegate.gpu import kernels
from gles_delegate.tflite import ModelBuilder, read_model, write_model
from gles_delegate.tools import zoo_report

from .conftest import small_model_bytes


def custom_op_model_bytes():
    """x [1,4] -> RELU -> a custom op no runtime knows: it cannot load anywhere."""
    b = ModelBuilder()
    x = b.input("x", (1, 4))
    y, z = b.tensor("y", (1, 4)), b.tensor("z", (1, 4))
    b.op("RELU", [x], [y])
    b.op("NoSuchOp", [y], [z], custom=True)
    b.output(z)
    return b.build()


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    """A zoo directory: the tools' small model (an L2_POOL_2D on the CPU), a model with a custom op, a
    file that is not a model, and a manifest naming the small model's source and a skipped one."""
    directory = tmp_path_factory.mktemp("zoo")
    (directory / "small.tflite").write_bytes(small_model_bytes())
    (directory / "custom.tflite").write_bytes(custom_op_model_bytes())
    (directory / "garbage.tflite").write_bytes(b"\0\0\0\0TFL3" + b"\xff" * 16)
    manifest = {"models": {"small": {"source": "tests/tools/conftest.py", "inputs": [[1, 8, 8, 4], [1, 8, 8, 4]]}},
                "skipped": {"broken_net": "torch thing: ValueError: cannot export"}}
    (directory / "manifest.json").write_text(json.dumps(manifest))
    return directory


def test_histogram_counts_every_subgraph():
    model = read_model(small_model_bytes())
    model.subgraphs.append(copy.deepcopy(model.subgraphs[0]))  # a second subgraph (as a WHILE body would be)
    histogram = zoo_report.op_histogram(read_model(write_model(model)))
    assert histogram == {"ADD": 2, "LOGISTIC": 2, "MUL": 2, "L2_POOL_2D": 2, "RELU": 2}


def test_lacking_names_ops_missing_from_each_registry():
    op_without_gpu = next(op for op in sorted(ops.KERNELS) if op not in kernels.SUPPORT)
    histogram = {"ADD": 3, op_without_gpu: 1, "CUSTOM:NoSuchOp": 1}
    assert zoo_report.lacking(histogram) == (["CUSTOM:NoSuchOp"], [op_without_gpu, "CUSTOM:NoSuchOp"])


def test_refusals_count_nodes_per_op_with_the_first_reason(monkeypatch):
    model = read_model(small_model_bytes())
    model.subgraphs.append(copy.deepcopy(model.subgraphs[0]))
    monkeypatch.setitem(ops.SUPPORT, "RELU", lambda node: f"reference refuses {node.label}")
    monkeypatch.setitem(kernels.SUPPORT, "LOGISTIC", lambda node: f"GPU refuses {node.label}")
    with GpuDelegate() as delegate:
        reference, gpu = zoo_report.refusals(model, delegate)
    assert reference == {"RELU": {"count": 2, "reason": "reference refuses #3 (RELU)"}}
    assert gpu == {"LOGISTIC": {"count": 2, "reason": "GPU refuses #1 (LOGISTIC)"}}


def test_small_model_runs_with_its_cpu_node_and_matches_litert(zoo):
    result = zoo_report.examine(zoo / "small.tflite")
    assert (result["nodes"], result["gpu_nodes"], result["partitions"]) == (5, 4, 1), result
    assert zoo_report.status(result) == (zoo_report.WITH_CPU, "L2_POOL_2D x1")
    assert "L2_POOL_2D" in result["cpu_ops"]["L2_POOL_2D"]["reason"]
    assert result["litert"] == "ok" and result["max_rel"] <= zoo_report.TOLERANCES["fp32"], result
    assert result["no_gpu"] == ["L2_POOL_2D"] and result["no_reference"] == []


def test_fully_delegated_model_says_so(tmp_path):
    b = ModelBuilder()
    x = b.input("x", (1, 4, 4, 4))
    y = b.tensor("y", (1, 4, 4, 4))
    b.op("LOGISTIC", [x], [y])
    b.output(y)
    path = tmp_path / "logistic.tflite"
    path.write_bytes(b.build())
    result = zoo_report.examine(path, use_litert=False)
    assert zoo_report.status(result) == (zoo_report.FULL_GPU, "") and result["max_rel"] is None


def test_a_model_that_cannot_load_fails_with_its_first_error(zoo):
    result = zoo_report.examine(zoo / "custom.tflite")
    word, detail = zoo_report.status(result)
    assert word == zoo_report.FAILS and detail.startswith("at load: ModelError") and "NoSuchOp" in detail
    assert result["no_reference"] == ["CUSTOM:NoSuchOp"] and result["histogram"] == {"CUSTOM:NoSuchOp": 1, "RELU": 1}


def test_a_file_the_reader_refuses_fails_at_read(zoo):
    result = zoo_report.examine(zoo / "garbage.tflite")
    assert result["stage"] == "read" and result["error"].startswith("ModelError"), result


@pytest.mark.parametrize("ours, theirs, expected", [
    ([np.array([1.0, 2.0])], [np.array([1.0, 4.0])], 0.5),  # |2 - 4| / max|theirs| 4
    ([np.array([1.0]), np.array([0.5, 0.0])], [np.array([1.0]), np.array([0.0, 0.0])], 0.5),  # all-zero: scale 1
    ([np.array([np.nan, 1.0])], [np.array([np.nan, 1.0])], 0.0),  # NaN on both sides agrees
    ([np.array([np.nan, 1.0])], [np.array([0.0, 1.0])], math.inf),  # NaN on one side does not
    ([np.zeros((2, 3))], [np.zeros((3, 2))], math.inf),  # shapes differ
    ([np.zeros(2)], [np.zeros(2), np.zeros(2)], math.inf),  # output counts differ
])
def test_max_relative_error(ours, theirs, expected):
    assert zoo_report.max_relative_error(ours, theirs) == expected


def test_main_writes_the_markdown_and_json(zoo, tmp_path):
    markdown, numbers = tmp_path / "zoo.md", tmp_path / "zoo.json"
    assert zoo_report.main([str(zoo), "--write", str(markdown), "--json", str(numbers)]) == 0
    text = markdown.read_text()
    assert text.startswith("# Model zoo\n")
    assert "\n3 models: 0 run fully on the GPU, 1 run with CPU nodes, 2 fail." in text
    row = next(line for line in text.splitlines() if line.startswith("| small |"))
    assert row.split(" | ")[1:7] == ["tests/tools/conftest.py", "1x8x8x4 1x8x8x4", "5", "4", "1",
                                     "runs with CPU nodes: L2_POOL_2D x1"], row
    assert "| custom | `CUSTOM:NoSuchOp` | - | `CUSTOM:NoSuchOp` | - |" in text
    assert "- small: ADD 1, L2_POOL_2D 1, LOGISTIC 1, MUL 1, RELU 1" in text
    assert "- broken_net: torch thing: ValueError: cannot export" in text
    results = json.loads(numbers.read_text())
    assert [r["model"] for r in results] == ["custom", "garbage", "small"]
    assert "outputs" not in results[2]


def test_control_flow_is_no_reference_refusal():
    """A WHILE and its subgraphs' nodes run in the Interpreter (node.runtime): checked alone, the
    WHILE's reference check says only the Interpreter can call it, which is no missing support."""
    from tests.control_flow_models import counter_loop
    model = counter_loop((1, 4), np.full((1, 4), 1.5, np.float32))
    with GpuDelegate() as delegate:
        reference, _ = zoo_report.refusals(read_model(model), delegate)
    assert "WHILE" not in reference


def test_quantized_nodes_are_judged_through_their_float_view():
    """An int8 node the GPU runs through its float view is no GPU refusal (the raw kernel check,
    which sees int8 tensors, would say it is)."""
    from tests.test_quant import ONE_OP, quantized_model
    op, inputs, options = ONE_OP["add"](np.random.default_rng(0))
    model = read_model(quantized_model(op, inputs, options))
    with GpuDelegate() as delegate:
        _, gpu = zoo_report.refusals(model, delegate)
    assert gpu == {}, gpu


def token_model_bytes(vocabulary=50):
    """ids (int32 [1, 6]) -> RESHAPE [6] -> EMBEDDING_LOOKUP of a [vocabulary, 4] table, and a
    second int32 input `offset` added to nothing but a float CAST (not an index)."""
    b = ModelBuilder()
    ids, offset = b.input("ids", (1, 6), np.int32), b.input("offset", (1,), np.int32)
    flat, rows, as_float = b.tensor("flat", (6,), np.int32), b.tensor("rows", (6, 4)), b.tensor("f", (1,))
    b.op("RESHAPE", [ids, b.const("shape", np.int32([6]))], [flat])
    table = np.arange(vocabulary * 4, dtype=np.float32).reshape(vocabulary, 4)
    b.op("EMBEDDING_LOOKUP", [flat, b.const("table", table)], [rows])
    b.op("CAST", [offset], [as_float])
    b.output(rows)
    b.output(as_float)
    return b.build()


def test_token_ids_are_drawn_within_the_vocabulary(tmp_path):
    """Integer inputs read as indices (through moves) are drawn in [0, the indexed axis): a model
    with token ids runs in every tool instead of failing on an out-of-range id; other integer
    inputs keep the default range."""
    from gles_delegate.tools import common
    path = tmp_path / "tokens.tflite"
    path.write_bytes(token_model_bytes())
    ranges = common.index_ranges(path)
    assert ranges == {0: (0, 50)}
    details = [{"index": 0, "dtype": np.int32, "shape": (1, 6)}, {"index": 1, "dtype": np.int32, "shape": (64,)}]
    ids, other = common.seeded_inputs(details, 3, ranges)
    assert ids.min() >= 0 and ids.max() < 50 and other.min() < 0
    result = zoo_report.examine(path)
    assert result.get("error") is None and result["gpu_nodes"] == result["nodes"], result


def test_a_node_kept_off_the_gpu_by_a_dynamic_tensor_says_so(tmp_path):
    """The TF converter's Keras RNN loop: the nodes after it read what the loop body makes of
    dynamic tensors; the reason names the dynamic tensor, not the partition limit (0 = none)."""
    from tests.control_flow_models import keras_rnn_loop, rnn_case
    case = rnn_case(4, 2, n_in=3, n_hidden=8)
    path = tmp_path / "rnn.tflite"
    path.write_bytes(keras_rnn_loop(*case[:4], 4, 2))
    result = zoo_report.examine(path, use_litert=False)
    reasons = [entry["reason"] for entry in result["cpu_ops"].values()]
    assert reasons and not any("max_delegated_partitions" in r for r in reasons), result["cpu_ops"]


def test_latency_rows_become_a_table(tmp_path, zoo):
    """--latency renders bench_compare's rows (ms per runtime, ours against XNNPACK 16t and
    LiteRT GPU); a file that is no results.json is one line and exit 2."""
    rows = [{"model": "small", "ours_fp32": {"median_ms": 0.5, "renderer": "GPU X"}, "ours_auto": {"median_ms": 0.4},
             "xnnpack_16": {"median_ms": 0.8}, "litert_gpu": {"error": "refused"}}]
    (tmp_path / "results.json").write_text(json.dumps(rows))
    out = tmp_path / "zoo.md"
    assert zoo_report.main([str(zoo / "small.tflite"), "--no-litert", "--latency", str(tmp_path / "results.json"),
                            "--write", str(out)]) == 0
    text = out.read_text()
    assert "Measured on GPU X" in text and "| small | 0.500 | n/a | 0.400 | n/a | 0.800 | n/a | 0.50 | - |" in text
    rows[0]["ours_fastest"] = {"median_ms": 0.2}  # bench_compare --fastest: a column, and it against XNNPACK 16t
    (tmp_path / "results.json").write_text(json.dumps(rows))
    assert zoo_report.main([str(zoo / "small.tflite"), "--no-litert", "--latency", str(tmp_path / "results.json"),
                            "--write", str(out)]) == 0
    text = out.read_text()
    assert "--fastest` " in text and zoo_report.FASTEST_NOTE in text
    assert "| small | 0.500 | n/a | 0.400 | n/a | 0.800 | n/a | 0.200 | 0.50 | - | 0.25 |" in text
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(SystemExit) as exit_info:
        zoo_report.main([str(zoo / "small.tflite"), "--latency", str(tmp_path / "bad.json")])
    assert exit_info.value.code == 2
