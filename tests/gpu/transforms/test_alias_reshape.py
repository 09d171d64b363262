"""alias_reshape: a reshape between identical PHWC4 layouts costs no dispatch: its output shares
its input's storage."""
import numpy as np
import pytest

from gles_delegate import GpuDelegate, Interpreter
from gles_delegate.gpu.kernels.layout import ALIAS
from tests.gpu.transforms.rulelib import Chain, check_gpu, random, rewrite, statuses, why

RULE = "alias_reshape"


@pytest.mark.parametrize("shape,new_shape", [((1, 4, 5, 8), (1, 20, 8)), ((1, 1, 1, 12), (1, 12)),
                                             ((2, 3), (2, 1, 1, 3)), ((1, 3, 4, 2), (12, 2))])
def test_same_layout_reshape_is_an_alias(shape, new_shape):
    c = Chain(shape)
    r = c.op("RESHAPE", c.op("ABS", c.x), c.const(new_shape, np.int32), shape=new_shape)
    model = c.build(c.op("NEG", r))
    graph, log = rewrite(model, RULE)
    assert graph.nodes[1].options[ALIAS]
    assert statuses(log, RULE) == [("APPLIED", "#1 (RESHAPE)")]
    summary, _ = check_gpu(model, [random(shape)])
    assert summary["dispatches"] == 3  # convert in, ABS, NEG storing the output: no gather


def test_an_aliased_tensor_can_still_be_read_back():
    """experimental_preserve_all_tensors reads every intermediate after the dispatch writing it;
    the alias shares the data of the tensor it renames."""
    c = Chain((1, 4, 5, 8))
    a = c.op("ABS", c.x)
    r = c.op("RESHAPE", a, c.const((1, 20, 8), np.int32), shape=(1, 20, 8))
    model = c.build(c.op("SOFTMAX", r, beta=1.0))  # not elementwise: no epilogue for the reshape to take
    x = random((1, 4, 5, 8))
    with GpuDelegate() as delegate:
        interp = Interpreter(model_content=model, experimental_delegates=[delegate],
                             experimental_preserve_all_tensors=True)
        interp.allocate_tensors()
        interp.set_tensor(interp.get_input_details()[0]["index"], x)
        interp.invoke()
        index = next(t["index"] for t in interp.get_tensor_details() if t["name"].endswith("reshape"))
        np.testing.assert_array_equal(interp.get_tensor(index), np.abs(x).reshape(1, 20, 8))


def test_a_reshape_across_slices_is_a_copy():
    c = Chain((1, 2, 2, 8))
    model = c.build(c.op("NEG", c.op("RESHAPE", c.op("ABS", c.x), c.const((1, 2, 16), np.int32), shape=(1, 2, 16))))
    graph, log = rewrite(model, RULE)
    assert ALIAS not in graph.nodes[1].options
    assert "moves values" in why(log, RULE, "#1 (RESHAPE)")
    summary, _ = check_gpu(model, [random((1, 2, 2, 8))])
    assert summary["dispatches"] == 3  # convert_in, ABS, the reshape's copy applying the NEG
