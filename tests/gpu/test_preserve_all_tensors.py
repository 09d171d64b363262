"""experimental_preserve_all_tensors with the GPU delegate: every intermediate readable with
get_tensor(), those a rewrite fused away inside a partition (no dispatch computes them) too."""
import numpy as np
import pytest

from gles_delegate import GpuDelegate, Interpreter
from tests.gpu.gpulib import PRECISIONS, assert_gpu_matches
from tests.gpu.transforms.rulelib import Chain, random

SHAPE = (1, 5, 6, 7)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_intermediates_a_rewrite_fused_away_are_read_back(precision):
    """ABS -> EXP -> MUL by itself: the chain fuses into one dispatch, and ABS's and EXP's outputs
    then had only their zero fill; they come from the reference kernels on what the GPU computed
    for their inputs."""
    c = Chain(SHAPE)
    e = c.op("EXP", c.op("ABS", c.x))
    model = c.build(c.op("MUL", e, e))
    x = random(SHAPE, 3)
    reference = Interpreter(model_content=model, experimental_preserve_all_tensors=True, cpu_backend="fallback")
    reference.allocate_tensors()
    with GpuDelegate(precision=precision) as delegate:
        interp = Interpreter(model_content=model, experimental_delegates=[delegate],
                             experimental_preserve_all_tensors=True)
        interp.allocate_tensors()
        fused = set().union(*(p.fused_away for p in delegate.partitions))
        assert fused, "the chain did not fuse: the test would not exercise fused-away tensors"
        for it in (reference, interp):
            it.set_tensor(it.get_input_details()[0]["index"], x)
            it.invoke()
        for index in sorted(fused):
            want = reference.get_tensor(index)
            assert np.abs(interp.get_tensor(index)).max() > 0, f"tensor {index} kept its zero fill"
            assert_gpu_matches(want, interp.get_tensor(index), precision, f"fused-away tensor {index}")
