"""Run one-op models on the GPU delegate and compare with the numpy reference kernels."""
import numpy as np

from gles_delegate import GpuDelegate
from gles_delegate.gpu import kernels
from gles_delegate.gpu.kernels.base import KernelEnv
from tests.oplib import In, feeds, run_ours, single_op_model, single_op_node

PRECISIONS = ("fp32", "fp16", "fp16_fp32acc")
# MIN_INVOCATIONS of the conv-family kernels that force 1 x 1 blocks / the largest blocks.
NO_BLOCKING, MOST_BLOCKING = 10 ** 9, 0


def tolerance(precision, reference):
    """Allowed max abs error: FP32 1e-5 x max|ref| + 1e-6; half storage 1e-2 x max|ref| + 1e-4."""
    scale = float(np.max(np.abs(reference), initial=0.0))
    return 1e-5 * scale + 1e-6 if precision == "fp32" else 1e-2 * scale + 1e-4


def assert_gpu_matches(reference, gpu, precision, what=""):
    assert gpu.shape == reference.shape, f"{what}: shape {gpu.shape} != {reference.shape}"
    assert np.array_equal(np.isnan(gpu), np.isnan(reference)), f"{what}: NaN positions differ"
    finite = ~np.isnan(reference)
    err = float(np.max(np.abs(gpu[finite].astype(np.float64) - reference[finite]), initial=0.0))
    limit = tolerance(precision, reference[finite])
    assert err <= limit, f"{what} [{precision}]: max abs error {err:.3g} > {limit:.3g}"


def dispatches(op, inputs, options=None, **model_kwargs):
    """The dispatches the GPU kernel builds (FP32) for the node of a one-op model: which template
    variant runs, with which defines."""
    return kernels.BUILD[op](single_op_node(op, inputs, options, **model_kwargs), KernelEnv("fp32", {}))


def run_gpu(model, values, precision="fp32", **options):
    """Outputs of `model` on the GPU delegate, and the delegate's summary."""
    with GpuDelegate(precision=precision, **options) as delegate:
        outputs = run_ours(model, values, experimental_delegates=[delegate])
        return outputs, delegate.summary()


def as_stored(inputs, precision):
    """The op's inputs as the GPU holds them: in half-storage modes every float32 input, runtime
    or constant, rounded to half. The reference runs on these, so a half-storage run is judged
    on what it computes, not on the rounding of its inputs (which a cancelling sum or mean can
    make larger than any tolerance relative to a small result)."""
    if precision == "fp32":
        return inputs
    return [s if s is None or s.value.dtype != np.float32 else
            In(s.value.astype(np.float16).astype(np.float32), const=s.const, quant=s.quant) for s in inputs]


def check_gpu(op, inputs, options=None, precision="fp32", gpu_nodes=1, **model_kwargs):
    """Build a one-op model, run it on the reference (on the inputs as stored, as_stored) and on
    the GPU, compare every output. Asserts the node really ran on the GPU (gpu_nodes)."""
    model = single_op_model(op, inputs, options, **model_kwargs)
    stored = as_stored(inputs, precision)
    reference = run_ours(single_op_model(op, stored, options, **model_kwargs), feeds(stored))
    gpu, summary = run_gpu(model, feeds(inputs), precision)
    assert summary["gpu_nodes"] == gpu_nodes, f"{op} did not run on the GPU: {summary}"
    for k, (r, g) in enumerate(zip(reference, gpu)):
        assert_gpu_matches(r, g, precision, what=f"{op} output {k}")
    return reference, gpu
