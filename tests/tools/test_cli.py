"""Every tool's command line: out-of-range numbers, unusable models and unwritable output paths
are refused before any work starts, with one line on stderr and exit status 2."""
import pytest

from gles_delegate.tools import (bench_compare, bench_init, benchmark_model, build_quantized_mobilenet, common,
                                 compiler_report, demo, fetch_models, fuzz_models, inspect_model, parity_report,
                                 profile_model, supported_ops, top1_agreement)

TOOLS = [benchmark_model, inspect_model, parity_report, profile_model, bench_compare, bench_init, top1_agreement,
         compiler_report, fetch_models, fuzz_models, demo, supported_ops, build_quantized_mobilenet]
CHECKED_NUMBERS = {common.positive_int, common.non_negative_int, common.positive_float, common.non_negative_float,
                   common.thread_count}


def tool_id(module):
    return module.__name__.rsplit(".", 1)[-1]


def numeric_options(parser):
    return [a for a in parser._actions if a.type in (int, float) or a.type in CHECKED_NUMBERS]


@pytest.mark.parametrize("tool", TOOLS, ids=tool_id)
def test_numeric_options_refuse_out_of_range_values(tool, capsys):
    parser = tool.build_parser()
    for action in numeric_options(parser):
        assert action.type in CHECKED_NUMBERS, f"{action.option_strings}: a bare int / float accepts -3"
        for value, message in (("-3", "expected "), ("nan", "")):
            with pytest.raises(SystemExit) as exit_info:
                parser.parse_args([action.option_strings[0], value])
            assert exit_info.value.code == 2
            assert f"{action.option_strings[0]}: {message}" in capsys.readouterr().err


def test_benchmark_refuses_negative_num_runs(capsys):
    with pytest.raises(SystemExit) as exit_info:
        benchmark_model.main(["--num_runs", "-3", "--graph=x.tflite"])
    assert exit_info.value.code == 2
    assert "--num_runs: expected an integer >= 1, got -3" in capsys.readouterr().err


def test_thread_count_takes_minus_one_for_the_default():
    assert common.thread_count("-1") == -1 and common.thread_count("4") == 4
    for text in ("0", "-2"):
        with pytest.raises(Exception, match="expected -1"):
            common.thread_count(text)
