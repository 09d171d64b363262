"""Run one-op models on the GPU delegate and compare with the numpy reference kernels."""
import textwrap

import numpy as np
import pytest

from gles_delegate import GpuDelegate, Interpreter, ModelError
from gles_delegate.gpu import kernels
from gles_delegate.gpu.complex_view import as_complex, as_floats
from gles_delegate.gpu.kernels.base import KernelEnv
from tests.oplib import In, feeds, run_ours, single_op_model, single_op_node
from tests.tolerance import F16_U, F16_ULPS, F32_U, sum_bound, ulp_bound

PRECISIONS = ("fp32", "fp16", "fp16_fp32acc")
F16_MAX = float(np.finfo(np.float16).max)
# Python source of a start in a fresh process (argv: model path, serialization_dir, seed): a
# delegate with that serialization_dir, the model allocated, seeded U(-1, 1) inputs set, one
# invoke timed (first_invoke_s); `delegate` and `interpreter` are left for the code after it.
START_IN_A_PROCESS = textwrap.dedent("""
    import sys, time
    import numpy as np
    from gles_delegate import GpuDelegate, Interpreter
    delegate = GpuDelegate(serialization_dir=sys.argv[2])
    interpreter = Interpreter(model_path=sys.argv[1], experimental_delegates=[delegate])
    interpreter.allocate_tensors()
    rng = np.random.default_rng(int(sys.argv[3]))
    for d in interpreter.get_input_details():
        interpreter.set_tensor(d["index"], rng.uniform(-1, 1, d["shape"]).astype(d["dtype"]))
    start = time.perf_counter()
    interpreter.invoke()
    first_invoke_s = time.perf_counter() - start
""")
# MIN_INVOCATIONS of the conv-family kernels that force 1 x 1 blocks / the largest blocks.
NO_BLOCKING, MOST_BLOCKING = 10 ** 9, 0


def tolerance(precision, reference, node=None, inputs=None):
    """Allowed abs error of each element of `reference` (an array broadcastable to its shape),
    the reference output of `node` on `inputs` as stored: a summing node's tolerance.sum_bound in
    the precision the kernel accumulates in, any other's tolerance.ulp_bound; half storage adds
    F16_ULPS half ulps of max|reference| for the rounding of the output (and of intermediates
    inside the kernel)."""
    sums = None if node is None else sum_bound(node, inputs, F16_U if precision == "fp16" else F32_U)
    if precision == "fp32":
        return ulp_bound(reference) if sums is None else sums[0]
    return ulp_bound(reference, F16_ULPS, np.float16) + (0.0 if sums is None else sums[0])


def assert_gpu_matches(reference, gpu, precision, what="", node=None, inputs=None, extra=0.0):
    """The GPU's output within tolerance(precision, reference, node, inputs) + `extra` (per
    element, broadcastable) of the reference, NaN where it has NaN. In half storage a reference
    value beyond half's range (+-FLT_MAX, say) must come back as an overflow of its sign.
    complex64 outputs compare as their pairs [..., 2] (`extra` broadcast over those)."""
    assert gpu.shape == reference.shape, f"{what}: shape {gpu.shape} != {reference.shape}"
    reference, gpu = as_floats(reference), as_floats(gpu)
    assert np.array_equal(np.isnan(gpu), np.isnan(reference)), f"{what}: NaN positions differ"
    finite = ~np.isnan(reference)
    if precision != "fp32" and reference.dtype.kind == "f":
        beyond = finite & (np.abs(reference) > F16_MAX)
        overflowed = (np.sign(gpu) == np.sign(reference)) & (np.abs(gpu) >= F16_MAX)
        assert np.all(overflowed[beyond]), f"{what} [{precision}]: a value beyond half's range did not overflow"
        finite &= ~beyond
    limit = np.broadcast_to(tolerance(precision, reference, node, inputs) + extra, reference.shape)[finite]
    ours, theirs = gpu[finite].astype(np.float64), reference[finite].astype(np.float64)
    with np.errstate(invalid="ignore"):  # inf - inf: an infinity where the reference has it, no error
        err = np.where(ours == theirs, 0.0, np.abs(ours - theirs))
    if np.any(err > limit):
        k = int(np.argmax(err - limit))
        raise AssertionError(f"{what} [{precision}]: max abs error {err.max():.3g}; {err[k]:.3g} > its bound "
                             f"{limit[k]:.3g}")


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
    return [s if s is None or s.value.dtype not in (np.float32, np.complex64) else
            In(_half_rounded(s.value), const=s.const, quant=s.quant) for s in inputs]


def _half_rounded(value):
    """A float32 array, or the parts of a complex64 one, rounded to half (+-inf past its range)."""
    with np.errstate(over="ignore"):
        rounded = as_floats(value).astype(np.float16).astype(np.float32)
    return as_complex(rounded) if value.dtype == np.complex64 else rounded


def check_gpu(op, inputs, options=None, precision="fp32", gpu_nodes=1, extra=0.0, judged_as=None, **model_kwargs):
    """Build a one-op model, run it on the reference (on the inputs as stored, as_stored) and on
    the GPU, compare every output (within `extra` more than tolerance(), per element, where an
    op's error depends on more than its output). Asserts the node really ran on the GPU
    (gpu_nodes; None: either, the reference's result all the same). judged_as: the precision
    whose storage and tolerance the comparison takes (default `precision`): 'fp32' for a run at
    'auto' whose half storage overflows, which its float32 twin computes again (gpu/half_overflow.py)."""
    judged_as = judged_as or precision
    model = single_op_model(op, inputs, options, **model_kwargs)
    stored = as_stored(inputs, judged_as)
    reference = run_ours(single_op_model(op, stored, options, **model_kwargs), feeds(stored))
    gpu, summary = run_gpu(model, feeds(inputs), precision)
    assert gpu_nodes is None or summary["gpu_nodes"] == gpu_nodes, f"{op} did not run on the GPU: {summary}"
    node, stored_values = single_op_node(op, stored, options, **model_kwargs), [None if s is None else s.value for s in stored]
    for k, (r, g) in enumerate(zip(reference, gpu)):
        assert_gpu_matches(r, g, judged_as, f"{op} output {k}", node if k == 0 else None, stored_values, extra)
    return reference, gpu


def invoked_keeping_every_tensor(model, delegate, x):
    """An Interpreter of `model` (one input) on `delegate` that keeps every tensor
    (experimental_preserve_all_tensors), invoked once on `x`."""
    interp = Interpreter(model_content=model, experimental_delegates=[delegate], experimental_preserve_all_tensors=True)
    interp.allocate_tensors()
    interp.set_tensor(interp.get_input_details()[0]["index"], x)
    interp.invoke()
    return interp


def fails_then_runs(model, bad, good, match):
    """Run `model` (one node, which must go to the GPU) with the GPU delegate: each list of input
    values in `bad` fails the invoke with a ModelError matching `match` (what a shader flags in
    its status word: an index out of range), then `good` runs; returns its first output."""
    with GpuDelegate() as delegate:
        interp = Interpreter(model_content=model, experimental_delegates=[delegate])
        interp.allocate_tensors()
        assert delegate.summary()["gpu_nodes"] == 1
        indices = [d["index"] for d in interp.get_input_details()]

        def feed(values):
            for index, value in zip(indices, values):
                interp.set_tensor(index, value)
        for values in bad:
            feed(values)
            with pytest.raises(ModelError, match=match):
                interp.invoke()
        feed(good)
        interp.invoke()
        return interp.get_tensor(interp.get_output_details()[0]["index"])
