import sys, glob, numpy as np, warnings
warnings.filterwarnings("ignore")
from ai_edge_litert.interpreter import Interpreter as L
from gles_delegate import GpuDelegate
from gles_delegate.tools.common import seeded_inputs
RESIZE = {"melspectrogram": [1, 1280]}
def run(it, name, steps):
    it.allocate_tensors() if name not in RESIZE else None
    if name in RESIZE:
        it.resize_tensor_input(it.get_input_details()[0]["index"], RESIZE[name]); it.allocate_tensors()
    outs = []
    for s in range(steps):
        vals = seeded_inputs(it.get_input_details(), s)
        if name in RESIZE: vals = [v * 3000 for v in vals]
        for d, v in zip(it.get_input_details(), vals): it.set_tensor(d["index"], v)
        it.invoke()
        outs.append([it.get_tensor(d["index"]).copy() for d in it.get_output_details()])
    return outs
for path in sys.argv[1:]:
    name = path.split("/")[-1][:-7]
    steps = 4
    ref = run(L(model_path=path), name, steps)
    for prec in ("fp32", "auto"):
        with GpuDelegate(precision=prec) as d:
            try:
                got = run(L(model_path=path, experimental_delegates=[d]), name, steps)
            except Exception as e:
                print(name, prec, "ERROR", type(e).__name__, str(e)[:200]); continue
            s = d.summary()
        worst = 0.0
        for a_s, b_s in zip(got, ref):
            for a, b in zip(a_s, b_s):
                if a.dtype.kind in "iu":
                    worst = max(worst, float(np.max(np.abs(a.astype(np.int64) - b.astype(np.int64)), initial=0)))
                else:
                    worst = max(worst, float(np.max(np.abs(a - b), initial=0) / max(np.max(np.abs(b), initial=0), 1e-30)))
        print(f"{name:45s} {prec:5s} gpu {s['gpu_nodes']:4d} cpu {s['cpu_nodes']:3d} parts {s['partitions']} worst {worst:.3g}")
