"""The calibration cache (gpu/serialization/calibration.py): a second start of precision 'auto'
with the same model, options and GPU builds the calibrated plan without calibrating; anything
else that could change the choice calibrates again, and a file it cannot trust is ignored."""
import numpy as np
import pytest

from gles_delegate import calibrate
from gles_delegate.gpu.context import acquire_shared, release_shared
from gles_delegate.gpu.serialization import CacheWarning
from gles_delegate.gpu.serialization.calibration import default_calibration_cache_dir
from tests.gpu.test_precision_auto import chain_model, count_calibrations, inputs, run

CANCELLATION = [("ADD", 1000.0), ("SUB", 1000.0), ("MUL", 2.0)]  # promotes x + 1000


def start(model, directory, **options):
    """(output, summary) of a start with the calibration cache in `directory`."""
    out, summary, _ = run(model, "auto", inputs(), calibration_cache_dir=str(directory), **options)
    return out, summary


def test_a_second_start_takes_the_choice_from_the_cache(tmp_path, monkeypatch):
    calls = count_calibrations(monkeypatch)
    model, _ = chain_model(CANCELLATION)
    (cold, cold_summary), (warm, warm_summary) = start(model, tmp_path), start(model, tmp_path)
    assert len(calls) == 1
    np.testing.assert_array_equal(cold, warm)
    assert warm_summary["promoted_tensors"] == cold_summary["promoted_tensors"] != {}
    assert warm_summary["float_bytes"] == cold_summary["float_bytes"]
    cold_entry, warm_entry = cold_summary["calibration"][0], warm_summary["calibration"][0]
    assert not cold_entry["cached"] and warm_entry["cached"]
    assert {**warm_entry, "cached": False} == cold_entry


def other_model():
    return chain_model([("ADD", 1000.0), ("SUB", 1000.0), ("MUL", 3.0)])[0]


@pytest.mark.parametrize("change", [
    lambda model: (other_model(), {}),
    lambda model: (model, {"auto_tolerance": 2e-2}),
    lambda model: (model, {"calibration_inputs": [[inputs(5)], [inputs(6)]]}),
    lambda model: (model, {"memory_strategy": "naive"}),
    lambda model: (model, {"gpu": "another GPU"}),
    lambda model: (model, {"settings": 4}),
], ids=["model", "auto_tolerance", "calibration_inputs", "compile-option", "gpu", "calibrate-settings"])
def test_anything_the_choice_depends_on_calibrates_again(change, tmp_path, monkeypatch):
    model, _ = chain_model(CANCELLATION)
    start(model, tmp_path)
    calls = count_calibrations(monkeypatch)
    model, options = change(model)
    context = acquire_shared()
    try:
        if "gpu" in options:
            monkeypatch.setattr(context, "renderer", options.pop("gpu"))
        if "settings" in options:
            monkeypatch.setattr(calibrate, "MAX_DEMOTION_RUNS", options.pop("settings"))
        _, summary = start(model, tmp_path, **options)
    finally:
        release_shared(context)
    assert len(calls) == 1 and not summary["calibration"][0]["cached"]


def test_an_entry_that_is_not_ours_is_ignored_and_rewritten(tmp_path, monkeypatch):
    model, _ = chain_model(CANCELLATION)
    cold, _ = start(model, tmp_path)
    (path,) = [p for p in tmp_path.iterdir() if not p.name.startswith(".")]
    data = bytearray(path.read_bytes())
    data[-2] ^= 0x20  # one character of the JSON (a reason, an index): the HMAC no longer matches
    path.write_bytes(bytes(data))
    calls = count_calibrations(monkeypatch)
    with pytest.warns(CacheWarning, match="ignoring calibration cache entry"):
        again, summary = start(model, tmp_path)
    assert len(calls) == 1 and not summary["calibration"][0]["cached"]
    np.testing.assert_array_equal(cold, again)
    _, summary = start(model, tmp_path)  # the rewritten entry serves
    assert len(calls) == 1 and summary["calibration"][0]["cached"]


def test_a_directory_it_cannot_write_warns_and_calibrates(tmp_path):
    model, _ = chain_model(CANCELLATION)
    blocked = tmp_path / "a-file"
    blocked.write_bytes(b"")
    with pytest.warns(CacheWarning, match="cannot write to calibration_cache_dir"):
        _, summary = start(model, blocked)
    assert summary["calibration"][0]["output_error"] <= summary["calibration"][0]["target"]


def test_the_default_directory(monkeypatch, tmp_path):
    monkeypatch.setenv("GLES_DELEGATE_CALIBRATION_CACHE", "")
    assert default_calibration_cache_dir() is None
    monkeypatch.setenv("GLES_DELEGATE_CALIBRATION_CACHE", str(tmp_path))
    assert default_calibration_cache_dir() == str(tmp_path)
    monkeypatch.delenv("GLES_DELEGATE_CALIBRATION_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_calibration_cache_dir() == str(tmp_path / "gles_delegate" / "calibration")
