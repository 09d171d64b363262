"""The MediaPipe models through LiteRT's Interpreter with our delegate: LiteRT replaces exactly
the nodes our own Interpreter puts on the GPU (plus the fp16 weights' DEQUANTIZE nodes both fold
into constants), and the outputs are within 1e-4 x max|LiteRT alone| (FP32), or LiteRT's own
spread between its CPU paths where that is larger (as tests/models/test_mediapipe_gpu.py)."""
import pytest

from gles_delegate import GpuDelegate, Interpreter
from gles_delegate.litert.native import native_delegates
from gles_delegate.tools.common import seeded_inputs
from gles_delegate.tools.fetch_models import MODEL_NAMES
from tests.litert import run_litert
from tests.models.test_mediapipe_reference import LITERT_CANNOT_RUN, relative_error

LiteRT = pytest.importorskip("ai_edge_litert.interpreter").Interpreter


def our_gpu_nodes(path):
    """Operator indices our own Interpreter runs on the GPU (allocate_tensors only)."""
    with GpuDelegate() as delegate:
        Interpreter(model_path=str(path), experimental_delegates=[delegate]).allocate_tensors()
        return sorted(n.index for p in delegate.partitions for n in p.nodes), delegate.summary()


@pytest.mark.parametrize("name", [n for n in MODEL_NAMES if n not in LITERT_CANNOT_RUN])
def test_litert_with_our_delegate(mediapipe_models, name):
    path = mediapipe_models[name]
    expected_nodes, expected_summary = our_gpu_nodes(path)
    values = seeded_inputs(Interpreter(model_path=str(path)).get_input_details(), seed=0)
    with GpuDelegate() as delegate:
        interp = LiteRT(model_path=str(path), experimental_delegates=[delegate])
        interp.allocate_tensors()
        for detail, value in zip(interp.get_input_details(), values):
            interp.set_tensor(detail["index"], value)
        interp.invoke()
        ours = [interp.get_tensor(d["index"]) for d in interp.get_output_details()]
        (native,) = native_delegates(delegate)
        plan = native.plans[0]
        replaced = sorted(i for k in native.kernels.values() for i in k.nodes)
        summary = delegate.summary()
    assert sorted(plan.gpu_nodes) == expected_nodes
    assert replaced == sorted(plan.gpu_nodes | plan.folded)
    same = ("gpu_nodes", "cpu_nodes", "partitions", "dispatches", "programs", "intermediate_bytes", "constant_bytes")
    assert {k: summary[k] for k in same} == {k: expected_summary[k] for k in same}
    assert summary.keys() == expected_summary.keys()
    data = path.read_bytes()
    for k, (a, b) in enumerate(zip(ours, run_litert(data, values))):
        err, bound = relative_error(a, b), 1e-4
        if err > bound:
            paths = [b] + [run_litert(data, values, resolver=r)[k] for r in ("builtin", "reference")]
            bound = max(relative_error(p, q) for p in paths for q in paths)
            err = min(relative_error(a, p) for p in paths)
        assert err <= bound, f"{name} output {k}: relative error {err:.3g} > {bound:.3g}"
