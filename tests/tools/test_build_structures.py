"""build_structures: the MixNet-like and EdgeNeXt-like models it writes run on the GPU as the
reference computes them, each channel-group structure taken by its rule."""
import numpy as np

from gles_delegate.tools import build_structures
from tests.gpu.transforms.rulelib import check_gpu, statuses


def test_the_models_run_and_their_rules_apply(tmp_path, capsys):
    assert build_structures.main([str(tmp_path / "out")]) == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["edgenext_like.tflite", "mixnet_like.tflite"]
    rng = np.random.default_rng(1)
    expected = {"mixnet_like": ("mixed_depthwise", 2), "edgenext_like": ("lane_views", 4)}
    for name, (rule, applied) in expected.items():
        model = (tmp_path / "out" / f"{name}.tflite").read_bytes()
        shape = (1, 20, 20, 40) if name == "mixnet_like" else (1, 20, 20, 24)
        _, log = check_gpu(model, [rng.uniform(-1, 1, shape).astype(np.float32)])
        assert [status for status, _ in statuses(log, rule)].count("APPLIED") == applied, name
