"""The GPU against the reference on NaN, +-inf and +-FLT_MAX (issue 17, item 5), in every
precision: NaN (and in fp32 +-inf) exactly where the reference (which follows LiteRT,
tests/ops/test_nonfinite.py) has it. GLSL's min / max / clamp on NaN are undefined (llvmpipe turned NaN into a bound); the kernels
clamp with common.glsl's tfl_max / tfl_min / tfl_clamp."""
import warnings

import numpy as np
import pytest

from gles_delegate import GpuDelegate, Interpreter
from tests.gpu.gpulib import PRECISIONS, check_gpu
from tests.litert import run_litert
from tests.nonfinite_cases import cases
from tests.oplib import run_ours

CASES = cases()


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_nonfinite_matches_reference(case, precision):
    name, op, inputs, options = case
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        reference, gpu = check_gpu(op, inputs, options, precision)
    assert np.array_equal(np.isnan(gpu[0]), np.isnan(reference[0])), name
    if precision == "fp32":  # half storage holds no FLT_MAX: TFLite's clamp of inf to it shows in fp32 only
        assert np.array_equal(np.isinf(gpu[0]), np.isinf(reference[0])), f"{name}: +-inf where the reference has +-FLT_MAX"


# End to end (issue 17, item 5): every input at FLT_MAX. Sums of +-1e38 products overflow both
# ways, so inf - inf makes NaN; where it does depends on the order of summation. LiteRT's builtin
# kernels (those our reference follows) give NaN at every output of these models, as do the
# reference and the GPU; XNNPACK (LiteRT's default CPU path) sums in another order and, on
# mobilenet_v1, gives finite outputs instead.
@pytest.mark.parametrize("name", ["selfie_segmentation", "face_detection_short_range"])
def test_flt_max_inputs_end_to_end(mediapipe_models, name):
    data = mediapipe_models[name].read_bytes()
    details = Interpreter(model_content=data).get_input_details()
    values = [np.full(d["shape"], np.finfo(np.float32).max, np.float32) for d in details]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        reference = run_ours(data, values)
        with GpuDelegate() as delegate:
            gpu = run_ours(data, values, experimental_delegates=[delegate])
            assert delegate.summary()["cpu_nodes"] == 0
    theirs = run_litert(data, values, resolver="default" if name == "selfie_segmentation" else "builtin")
    for k, (ours_ref, ours_gpu, litert) in enumerate(zip(reference, gpu, theirs)):
        assert np.array_equal(np.isnan(ours_ref), np.isnan(litert)), f"{name} output {k}: reference vs LiteRT"
        assert np.array_equal(np.isnan(ours_gpu), np.isnan(ours_ref)), f"{name} output {k}: GPU vs reference"
