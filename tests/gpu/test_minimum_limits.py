"""A device of OpenGL ES 3.1's minimum limits (ES31_MINIMUM_LIMITS: 128 invocations per
workgroup, 16 KiB of shared memory) and without EXT_buffer_storage (I/O by copies), as a small
board's GPU comes near: every kernel plans within them, so a model runs as fully on the GPU there
as here, with the same outputs. llvmpipe gives far more (and does not enforce what it reports),
so the context's limits are set to them."""
import numpy as np
import pytest

from gles_delegate import GpuDelegate, Interpreter
from gles_delegate.gpu import runtime
from gles_delegate.gpu.context import ES31_MINIMUM_LIMITS, acquire_shared, limited_to, release_shared
from gles_delegate.tools import common
from tests.oplib import In, single_op_model
from tests.tolerance import F32_U, F32_ULPS

# The MediaPipe models with split-K convolutions (few output pixels, many input channels):
# before conv.split_workgroup fit them, each lost 41-75 of its nodes to the CPU there.
SPLIT_MODELS = ("hand_landmark_lite", "palm_detection_lite", "pose_detection")


def test_the_limits_hold_while_limited_and_are_restored():
    context = acquire_shared()
    try:
        before = dict(context.limits), context.persistent_mapping
        with limited_to(ES31_MINIMUM_LIMITS, persistent_mapping=False) as limited:
            assert limited is context
            assert {k: context.limits[k] for k in ES31_MINIMUM_LIMITS} == ES31_MINIMUM_LIMITS
            with GpuDelegate() as delegate:
                assert delegate.context.limits["max_workgroup_invocations"] == 128
                x = np.ones((1, 8, 8, 4), np.float32)
                interpreter = Interpreter(model_content=single_op_model("ADD", [In(x), In(x)]),
                                          experimental_delegates=[delegate])
                interpreter.allocate_tensors()
                assert all(isinstance(p.io, runtime.CopiedIo) for p in delegate.partitions)
        assert (context.limits, context.persistent_mapping) == before
    finally:
        release_shared(context)


@pytest.mark.parametrize("limits, error", [({"max_workgroup_invocation": 128}, "not a limit"),
                                           ({"max_workgroup_invocations": 0}, "a positive int"),
                                           ({"max_workgroup_size": (128, 128)}, "a tuple of 3"),
                                           ({"max_shared_memory_bytes": 16384.0}, "a positive int")])
def test_a_limit_that_would_change_nothing_is_refused(limits, error):
    with pytest.raises(ValueError, match=error), limited_to(limits):
        pass
    with pytest.raises(TypeError, match="a dict"), limited_to([("max_workgroup_invocations", 128)]):
        pass


def outputs_and_summary(path, inputs):
    with GpuDelegate(precision="fp32") as delegate:
        interpreter = Interpreter(model_path=str(path), experimental_delegates=[delegate])
        interpreter.allocate_tensors()
        common.set_inputs(interpreter, inputs)
        interpreter.invoke()
        return common.read_outputs(interpreter), delegate.summary()


@pytest.mark.parametrize("name", SPLIT_MODELS)
def test_a_model_runs_as_fully_and_the_same_on_the_minimum_limits(name, mediapipe_models):
    path = mediapipe_models[name]
    inputs = common.seeded_inputs(Interpreter(model_path=str(path)).get_input_details(), 0)
    here, here_summary = outputs_and_summary(path, inputs)
    with limited_to(ES31_MINIMUM_LIMITS, persistent_mapping=False):  # nor EXT_buffer_storage
        small, small_summary = outputs_and_summary(path, inputs)
    assert small_summary["fallbacks"] == {} and small_summary["cpu_nodes"] == here_summary["cpu_nodes"] == 0
    assert small_summary["gpu_nodes"] == here_summary["gpu_nodes"]
    for a, b in zip(here, small):  # another workgroup shape: at most another order of the same sums
        np.testing.assert_allclose(b, a, rtol=0, atol=F32_ULPS * F32_U * float(np.max(np.abs(a))))
