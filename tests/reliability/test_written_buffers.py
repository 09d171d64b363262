"""Tensors an operator writes although the model gives them a buffer (converters leave one
there at times): LiteRT maps the buffer read-only and the operator overwrites it, so the values
are the operator's; a buffer with data fixes the tensor's shape. Ours, on the CPU and with the
GpuDelegate, as LiteRT."""
import numpy as np
import pytest

from gles_delegate import GpuDelegate, Interpreter, ModelError
from gles_delegate.tflite import ModelBuilder
from tests.litert import LiteRTInterpreter, RESOLVERS, run_litert

X = np.arange(12, dtype=np.float32).reshape(2, 6) - 5.5


def split_model(sizes, buffer):
    """SPLIT_V of x [2, 6] along axis 1 into `sizes`, then ADD 1 to each part; output 0 of the
    SPLIT_V carries `buffer` (a flat float32 array: empty is a buffer without data)."""
    b = ModelBuilder()
    x = b.input("x", X.shape)
    one = b.const("one", np.ones(1, np.float32))
    parts = [b.tensor("part0", (2, sizes[0]), data=buffer)] + \
        [b.tensor(f"part{k}", (2, size)) for k, size in enumerate(sizes[1:], 1)]
    b.op("SPLIT_V", [x, b.const("sizes", np.array(sizes, np.int32)), b.const("axis", np.array(1, np.int32))],
         parts, num_splits=len(sizes))
    for k, part in enumerate(parts):
        y = b.tensor(f"y{k}", (2, sizes[k]))
        b.op("ADD", [part, one], [y], fused_activation_function=0)
        b.output(y)
    b.output(parts[0])
    return b.build()


CASES = {"data": ([2, 4], np.full(4, 7, np.float32)), "no_data": ([2, 4], np.zeros(0, np.float32)),
         "zero_elements": ([0, 6], np.zeros(0, np.float32))}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("gpu", [False, True], ids=["cpu", "gpu"])
def test_an_operator_overwrites_the_buffer_of_its_output(case, gpu):
    model = split_model(*CASES[case])
    expected = run_litert(model, [X], resolver="builtin")
    with GpuDelegate() as delegate:
        interpreter = Interpreter(model_content=model, experimental_delegates=[delegate] if gpu else None)
        interpreter.allocate_tensors()
        interpreter.set_tensor(0, X)
        interpreter.invoke()
        got = [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]
    assert len(got) == len(expected) == 3
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(g, e)


@pytest.mark.parametrize("case, refused", [("data", True), ("no_data", False)])
def test_a_buffer_with_data_fixes_the_shape(case, refused):
    """Resizing x [2, 6] to [3, 6] would resize part0: LiteRT refuses it when part0's buffer holds
    data (a read-only mapping), and so do we, naming the operator and the tensor."""
    model = split_model(*CASES[case])
    litert = LiteRTInterpreter(model_content=model, experimental_op_resolver_type=RESOLVERS["builtin"])
    litert.resize_tensor_input(0, [3, 6])
    ours = Interpreter(model_content=model)
    ours.resize_tensor_input(0, [3, 6])
    if refused:
        with pytest.raises(RuntimeError, match="Attempting to resize a fixed-size tensor"):
            litert.allocate_tensors()
        with pytest.raises(ModelError, match=r"operator #0 \(SPLIT_V\) cannot resize tensor 2 \('part0'\) from "
                                             r"\[2, 2\] to \[3, 2\]: the model gives it a buffer"):
            ours.allocate_tensors()
        return
    x = np.arange(18, dtype=np.float32).reshape(3, 6)
    litert.allocate_tensors()
    litert.set_tensor(0, x)
    litert.invoke()
    ours.allocate_tensors()
    ours.set_tensor(0, x)
    ours.invoke()
    for d, e in zip(ours.get_output_details(), litert.get_output_details()):
        np.testing.assert_array_equal(ours.get_tensor(d["index"]), litert.get_tensor(e["index"]))
