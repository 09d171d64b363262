"""Every tool's command line: out-of-range numbers, unusable models and unwritable output paths
are refused before any work starts, with one line on stderr and exit status 2."""
from pathlib import Path

import pytest

from gles_delegate import ModelError
from gles_delegate.tools import (bench_compare, bench_init, bench_invoke, bench_scale, benchmark_model,
                                 build_quantized_mobilenet, build_structures, common, compiler_report, demo,
                                 doc_examples, fetch_models, fuzz_graphs, fuzz_models, inspect_model, parity_report,
                                 profile_model, supported_ops, top1_agreement)

TOOLS = [benchmark_model, inspect_model, parity_report, profile_model, bench_compare, bench_init, top1_agreement,
         compiler_report, fetch_models, fuzz_models, demo, supported_ops, build_quantized_mobilenet, doc_examples,
         bench_invoke, build_structures, bench_scale, fuzz_graphs]
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


# -- unusable models and output paths: one line, exit status 2, before any work ----------------
README = Path(__file__).resolve().parents[2] / "README.md"
MODEL_ARGS = {benchmark_model: ["--graph"], inspect_model: [], parity_report: [], profile_model: [], bench_compare: [],
              bench_init: ["--models"], top1_agreement: [], compiler_report: [], demo: ["--model"]}
OUTPUT_OPTIONS = {benchmark_model: ["--json", "--serialization_dir"], inspect_model: ["--dot"],
                  parity_report: ["--out"], bench_compare: ["--out"], bench_init: ["--out"],
                  compiler_report: ["--markdown"], fetch_models: ["--dir"], fuzz_models: ["--out", "--json"],
                  fuzz_graphs: ["--out", "--json"], build_quantized_mobilenet: [None],
                  build_structures: [None]}  # None: a positional argument


def refused(main, argv, capsys):
    """main(argv)'s stderr, asserting it exits with status 2 before doing anything (nothing on
    stdout) and says why in one line, without a traceback."""
    with pytest.raises(SystemExit) as exit_info:
        main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert exit_info.value.code == 2, err
    assert out == "" and len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("tool", list(MODEL_ARGS), ids=tool_id)
@pytest.mark.parametrize("model", ["directory", "README.md"])
def test_an_unusable_model_is_refused_in_one_line(tool, model, tmp_path, capsys):
    path = tmp_path if model == "directory" else README  # tmp_path: a directory without .tflite files
    err = refused(tool.main, MODEL_ARGS[tool] + [path], capsys)
    assert err.startswith(f"{tool.build_parser().prog}: error: argument ") and repr(str(path)) in err
    assert ("directory" in err) if model == "directory" else ("is not a .tflite model" in err)


@pytest.mark.parametrize("tool, option", [(t, o) for t, options in OUTPUT_OPTIONS.items() for o in options],
                         ids=lambda v: tool_id(v) if hasattr(v, "__name__") else str(v))
def test_an_unwritable_output_path_is_refused_before_any_work(tool, option, small_model, capsys):
    bad = README / "out"  # below a file: neither a directory nor a file can be made there
    model = MODEL_ARGS[tool] + [small_model] if tool in MODEL_ARGS else []
    err = refused(tool.main, model + ([option] if option else []) + [bad], capsys)
    assert repr(str(bad)) in err and "README.md" in err


def test_a_missing_model_is_refused(tmp_path, capsys):
    err = refused(bench_init.main, ["--models", tmp_path / "nope.tflite"], capsys)
    assert "argument --models: no such model file" in err and "selfie_segmentation" in err


def test_an_output_file_in_a_missing_directory_is_refused(small_model, tmp_path, capsys):
    err = refused(benchmark_model.main, ["--graph", small_model, "--json", tmp_path / "missing" / "bench.json"], capsys)
    assert "argument --json: cannot write" in err and "is not a directory" in err


def test_fetch_models_refuses_an_unwritable_directory(capsys):
    err = refused(fetch_models.main, ["--dir", "/proc/nope"], capsys)
    assert "argument --dir: cannot write '/proc/nope': '/proc' takes no new file" in err


def test_parity_checks_its_default_report_directory_first(small_model, monkeypatch, capsys):
    monkeypatch.chdir("/proc")  # ./parity_small cannot be made here
    assert "cannot write 'parity_small'" in refused(parity_report.main, [small_model], capsys)


@pytest.mark.parametrize("setting, why", [("nosuch.THING=1", "no module gles_delegate.nosuch"),
                                          ("gpu.runtime.NO_SUCH=1", "gles_delegate.gpu.runtime has no NO_SUCH"),
                                          ("gpu.runtime.FLUSH_FIRST=x", "gles_delegate.gpu.runtime.FLUSH_FIRST is a number, not 'x'"),
                                          ("FLUSH_FIRST", "expected MODULE.NAME=VALUE")])
def test_profile_refuses_a_bad_setting(setting, why, small_model, capsys):
    assert f"argument --set: {why}" in refused(profile_model.main, [small_model, "--set", setting], capsys)


def failed_in_one_line(main, argv, capsys):
    """The error line main(argv) ends with, asserting it exits with status 2 and says why in that
    one line, without a traceback (progress lines before it, on either stream, are allowed)."""
    with pytest.raises(SystemExit) as exit_info:
        main([str(a) for a in argv])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if ": error: " in line]
    assert exit_info.value.code == 2 and errors == err.splitlines()[-1:] and "Traceback" not in err, err
    return errors[0]


@pytest.mark.parametrize("tool", list(MODEL_ARGS), ids=tool_id)
def test_a_truncated_model_is_refused_in_one_line(tool, small_model, tmp_path, capsys):
    """A file that passes the argument check (the TFL3 identifier) but not the reader: one line
    naming the ModelError, exit status 2, in every tool (gles-bench-init: from its worker)."""
    truncated = tmp_path / "truncated.tflite"
    truncated.write_bytes(small_model.read_bytes()[:len(small_model.read_bytes()) // 2])
    extra = ["--out", tmp_path / "report"] if tool is parity_report else []
    err = failed_in_one_line(tool.main, MODEL_ARGS[tool] + [truncated] + extra, capsys)
    assert "ModelError: " in err


@pytest.mark.parametrize("tool", [*MODEL_ARGS, supported_ops], ids=tool_id)
def test_a_bad_gl_api_variable_is_refused_before_any_work(tool, small_model, monkeypatch, capsys):
    monkeypatch.setenv("GLES_DELEGATE_GL_API", "bogus")
    argv = MODEL_ARGS[tool] + [small_model] if tool in MODEL_ARGS else []
    err = refused(tool.main, argv, capsys)
    assert "error: environment variable GLES_DELEGATE_GL_API must be one of" in err and "'bogus'" in err


def test_run_main_states_ordinary_failures_in_one_line_and_leaves_bugs_their_traceback(capsys):
    parser = common.tool_parser("gles-test", "A tool.")
    for failure in (ModelError("tensor 3:\nbad shape"), FileNotFoundError(2, "No such file or directory", "x"),
                    common.ToolError("ai-edge-litert is not installed")):
        def body(args):
            raise failure
        err = refused(lambda argv: common.run_main(parser, body, argv), [], capsys)
        assert err.startswith(f"gles-test: error: {type(failure).__name__}: ")
    with pytest.raises(KeyError):
        common.run_main(parser, lambda args: {}["bug"], [])


# -- --help ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("tool", TOOLS, ids=tool_id)
def test_help_describes_the_tool_and_every_option(tool):
    parser = tool.build_parser()
    first_paragraph = tool.__doc__.strip().split("\n\n")[0]
    assert parser.description == first_paragraph and first_paragraph.endswith(".")
    undocumented = [a.option_strings or [a.dest] for a in parser._actions if not a.help]
    assert not undocumented, f"options without help: {undocumented}"
    assert "%(default)" not in parser.format_help()  # argparse fills these in: no placeholder left


@pytest.mark.parametrize("tool", TOOLS, ids=tool_id)
def test_help_describes_every_choice_of_an_option_it_explains(tool):
    """--precision's help explains each precision: every one of its choices is named there (auto was not)."""
    for action in tool.build_parser()._actions:
        if action.choices and action.help and "fp32 (" in action.help:
            assert all(f"{choice} (" in action.help for choice in action.choices), action.help
