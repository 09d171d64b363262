"""A template declares highp math in its own text (a line beginning "// @highp", shader.py):
assemble() then writes `precision highp float;` in the half modes too; a template without one
computes in mediump there, also where a template it includes has such a line."""
import pytest

from gles_delegate.gpu import shader

WG = {"WG_X": 1, "WG_Y": 1, "WG_Z": 1}


@pytest.fixture
def source_tree(tmp_path, monkeypatch):
    """kernels_glsl in tmp_path, the template caches emptied before and after."""
    monkeypatch.setattr(shader, "SOURCE_TREE", tmp_path)
    for cached in (shader.template, shader.full_precision, shader._assemble):
        if hasattr(cached, "cache_clear"):
            cached.cache_clear()
    yield tmp_path
    monkeypatch.undo()
    shader.template.cache_clear()
    shader.full_precision.cache_clear()


def precision_line(name, math_half):
    source = shader.assemble(name, WG, {"n": 1}, storage_half=math_half, math_half=math_half)
    return source.splitlines()[1]


def test_a_template_with_an_at_highp_line_is_highp_in_every_mode(source_tree):
    for name in ("common", "epilogue"):
        (source_tree / f"{name}.glsl").write_text("// shared\n")
    (source_tree / "summing.glsl").write_text("// a sum\n// @highp in every precision: a sum.\nvoid main() {}\n")
    (source_tree / "plain.glsl").write_text("// a move\nvoid main() {}\n")
    (source_tree / "including.glsl").write_text('#include "marked_part.glsl"\nvoid main() {}\n')
    (source_tree / "marked_part.glsl").write_text("// @highp in every precision: its own reason.\n")
    (source_tree / "prose.glsl").write_text("// says @highp mid-line: no marker\nvoid main() {}\n")
    assert precision_line("summing", True) == precision_line("summing", False) == "precision highp float;"
    assert precision_line("plain", True) == "precision mediump float;"
    assert precision_line("plain", False) == "precision highp float;"
    assert precision_line("including", True) == "precision mediump float;"  # the include's line is not its own
    assert precision_line("prose", True) == "precision mediump float;"


@pytest.mark.parametrize("name", ["reduce", "softmax", "lrn", "reduce_window", "segment", "scan", "se_gate",
                                  "fft", "complex_part"])
def test_the_summing_templates_declare_highp(name):
    """The templates whose sums overflow half math (and complex_part's bit tests) keep highp."""
    assert shader.full_precision(name)
    assert shader.assemble(name, WG, {"n": 1}, True, True).splitlines()[1] == "precision highp float;"


@pytest.mark.parametrize("name", ["elementwise", "conv2d", "pool"])
def test_plain_templates_compute_in_mediump_in_half_modes(name):
    assert not shader.full_precision(name)
