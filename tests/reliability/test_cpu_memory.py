"""The Interpreter's CPU tensors share memory where their lifetimes allow (tensor_memory.py), as
LiteRT's arena does: the peak RSS of a chain of ADDs on the reference kernels stays a few
tensors, not one per tensor (cpu_backend 'auto' runs such a chain as one LiteRT sub-model, whose
intermediates LiteRT plans).

Run as a script for the figures of docs/reliability.md:
    python -m tests.reliability.test_cpu_memory 64 33554432   (64 ADDs of 32 MiB tensors)
"""
import json
import os
import subprocess
import sys

import numpy as np

from gles_delegate.tflite import ModelBuilder

MiB = 1 << 20
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def add_chain(count, elements):
    """x -> ADD(t, 1.0) `count` times -> y, float32 tensors of `elements` each."""
    b = ModelBuilder()
    t = b.input("x", (elements,))
    for k in range(count):
        out = b.tensor(f"t{k}", (elements,))
        b.op("ADD", [t, b.const(f"one{k}", np.ones(1, np.float32))], [out], fused_activation_function=0)
        t = out
    b.output(t)
    return b.build()


_MEASURE = """
import json, resource, sys
import numpy as np
runtime, path = sys.argv[1], sys.argv[2]
if runtime == "litert":
    from ai_edge_litert.interpreter import Interpreter
    interpreter = Interpreter(model_path=path)
else:
    from gles_delegate import Interpreter
    interpreter = Interpreter(model_path=path, cpu_backend=runtime)
x = interpreter.get_input_details()[0]
value = np.zeros(x["shape"], np.float32)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
interpreter.allocate_tensors()
interpreter.set_tensor(x["index"], value)
interpreter.invoke()
y = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"peak_growth_kib": after - before, "y": float(y[0])}))
"""


def peak_growth(tmp_path, count, elements, runtime="fallback"):
    """(growth of the peak RSS over allocate, set, invoke and get of add_chain(count, elements),
    in bytes, measured in a fresh process; y[0]). runtime: 'litert' (LiteRT's Interpreter), else
    ours with that cpu_backend."""
    path = tmp_path / f"chain_{count}_{elements}.tflite"
    path.write_bytes(add_chain(count, elements))
    result = subprocess.run([sys.executable, "-c", _MEASURE, runtime, str(path)], capture_output=True, text=True,
                            timeout=600, cwd=ROOT, check=True)
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    return figures["peak_growth_kib"] * 1024, figures["y"]


def test_a_chain_of_adds_peaks_at_a_few_tensors(tmp_path):
    # 64 ADDs of 4 MiB tensors on the reference kernels: 65 tensors (260 MiB) were all kept,
    # each in memory of its own (a peak of +238 MiB).
    growth, y = peak_growth(tmp_path, 64, MiB)
    assert y == 64.0
    assert growth < 16 * 4 * MiB, f"peak RSS grew {growth / MiB:.0f} MiB"


if __name__ == "__main__":
    import pathlib
    import tempfile
    with tempfile.TemporaryDirectory() as folder:
        count, elements = int(sys.argv[1]), int(sys.argv[2]) // 4
        for runtime in ("fallback", "reference", "auto", "litert"):
            growth, _ = peak_growth(pathlib.Path(folder), count, elements, runtime)
            who = "LiteRT" if runtime == "litert" else f"ours, cpu_backend={runtime!r}"
            print(f"{who}: {count} ADDs of {elements * 4 / MiB:g} MiB tensors, peak RSS +{growth / MiB:.0f} MiB")


def test_what_the_caller_reads_keeps_its_value_and_preserving_keeps_every_tensor():
    from gles_delegate import Interpreter
    x = np.arange(16, dtype=np.float32)
    for preserve in (False, True):
        interpreter = Interpreter(model_content=add_chain(8, 16), experimental_preserve_all_tensors=preserve,
                                  cpu_backend="fallback")
        interpreter.allocate_tensors()
        interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
        interpreter.invoke()
        np.testing.assert_array_equal(interpreter.get_tensor(interpreter.get_input_details()[0]["index"]), x)
        np.testing.assert_array_equal(interpreter.get_tensor(interpreter.get_output_details()[0]["index"]), x + 8)
        names = {d["name"]: d["index"] for d in interpreter.get_tensor_details()}
        # t0 .. t6 are intermediates: they share memory unless every tensor is preserved.
        assert bool(interpreter._main.storage.shared) != preserve
        if preserve:
            for k in range(8):
                np.testing.assert_array_equal(interpreter.get_tensor(names[f"t{k}"]), x + k + 1)
