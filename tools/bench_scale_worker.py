"""One start of gles-bench-scale (tools/bench_scale.py) in a process of its own: JSON on stdout.

    python -P bench_scale_worker.py RUNTIME MODEL NODES

RUNTIME 'ours' (our Interpreter) or 'litert' (LiteRT's), with a GpuDelegate; MODEL a chain of
NODES ADDs of 1 (bench_scale.scale_model). Only the standard library is imported before the
measurement starts, so the gles_delegate measured is the first on PYTHONPATH: this tree's, or
another tree's for --against (which needs no copy of this file).
"""
import contextlib
import json
import sys
import time


@contextlib.contextmanager
def timed(phases, name):
    """phases[name] = {'wall': s, 'cpu': s}: the wall-clock seconds of the block and the CPU
    seconds of this process in it (every thread: llvmpipe's rasterizer threads too)."""
    wall, cpu = time.perf_counter(), time.process_time()
    yield
    phases[name] = {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}


def measure(runtime, model_path, nodes):
    """{'phases': {phase: timed()} of load / allocate / invoke, 'error': the largest |output - expected|
    relative to the expected value, 'package': where gles_delegate came from}. load: making
    the Interpreter (LiteRT's calls our delegate's Prepare there: reading, partitioning and
    compiling); allocate: allocate_tensors(); invoke: the first invoke(). The GL context
    (GpuDelegate()) is made before and not counted."""
    import numpy as np
    import gles_delegate
    from gles_delegate import GpuDelegate, Interpreter
    if runtime == "litert":
        from ai_edge_litert.interpreter import Interpreter
    delegate = GpuDelegate()
    phases = {}
    with timed(phases, "load"):
        interpreter = Interpreter(model_path=model_path, experimental_delegates=[delegate])
    with timed(phases, "allocate"):
        interpreter.allocate_tensors()
    detail = interpreter.get_input_details()[0]
    x = np.random.default_rng(0).random(detail["shape"], np.float32)
    interpreter.set_tensor(detail["index"], x)
    with timed(phases, "invoke"):
        interpreter.invoke()
    last = interpreter.get_tensor(interpreter.get_output_details()[-1]["index"])
    expected = x.astype(np.float64) + nodes
    error = float(np.max(np.abs(last - expected) / expected))
    return {"phases": phases, "error": error, "package": gles_delegate.__file__}


if __name__ == "__main__":
    print(json.dumps(measure(sys.argv[1], sys.argv[2], int(sys.argv[3]))))
