"""gles_delegate/registry.py: a duplicate op fails at import, candidates run in their stated order
(the first whose support check passes), and the real registries are built that way."""
import types

import numpy as np
import pytest

from gles_delegate import ops, registry
from gles_delegate.gpu import kernels
from gles_delegate.graph import Node, Tensor
from gles_delegate.ops.checks import Unimplemented


def module(name, **tables):
    return types.SimpleNamespace(__name__=f"pkg.{name}", **tables)


def node(op="OP", dtype=np.float32):
    return Node(0, op, [Tensor(0, "x", (2,), np.dtype(dtype))], [Tensor(1, "y", (2,), np.dtype(dtype))])


FLOAT = module("float", SUPPORT={"OP": lambda n: None if n.inputs[0].dtype == np.float32 else "not float"},
               KERNELS={"OP": lambda n, inputs: "float"})
INT = module("int", SUPPORT={"OP": lambda n: None if n.inputs[0].dtype == np.int8 else "not int8"},
             KERNELS={"OP": lambda n, inputs: "int"})


def test_merge_joins_the_tables_and_skips_modules_without_one():
    a, b = module("a", FACTS={"X": 1}), module("b", FACTS={"Y": 2})
    assert registry.merge([a, b, module("c")], "FACTS") == {"X": 1, "Y": 2}


def test_merge_fails_on_an_op_of_two_modules_naming_both():
    a, b = module("a", FACTS={"X": 1}), module("b", FACTS={"X": 2})
    with pytest.raises(registry.RegistryError, match="X is in FACTS of both pkg.a and pkg.b"):
        registry.merge([a, b], "FACTS")


def test_an_op_of_two_modules_without_an_order_fails():
    with pytest.raises(registry.RegistryError, match="OP is in KERNELS of both pkg.float and pkg.int"):
        registry.candidates([FLOAT, INT], "KERNELS")


def test_an_order_must_name_exactly_the_op_s_modules():
    with pytest.raises(registry.RegistryError, match=r"order of OP names \['int'\]"):
        registry.candidates([FLOAT, INT], "KERNELS", {"OP": (INT,)})
    with pytest.raises(registry.RegistryError, match=r"order of OTHER"):
        registry.candidates([FLOAT, INT], "KERNELS", {"OTHER": (INT,)})


@pytest.mark.parametrize("order", [(INT, FLOAT), (FLOAT, INT)], ids=["int-first", "float-first"])
def test_the_first_candidate_whose_check_passes_runs_the_node(order):
    owners = registry.candidates([FLOAT, INT], "KERNELS", {"OP": order})["OP"]
    assert owners == order
    support, run = registry.resolve("OP", owners, "KERNELS")
    assert support(node()) is None and run(node(), []) == "float"
    assert support(node(dtype=np.int8)) is None and run(node(dtype=np.int8), []) == "int"


def test_the_stated_order_decides_when_several_candidates_pass():
    anything = module("anything", KERNELS={"OP": lambda n, inputs: "anything"})
    for order, expected in (((anything, FLOAT), "anything"), ((FLOAT, anything), "float")):
        _, run = registry.resolve("OP", order, "KERNELS")
        assert run(node(), []) == expected


def test_a_node_no_candidate_takes_gets_every_reason():
    support, run = registry.resolve("OP", (INT, FLOAT), "KERNELS")
    assert support(node(dtype=np.int32)) == "int: not int8; float: not float"
    with pytest.raises(ValueError, match="no OP kernel runs it: int: not int8; float: not float"):
        run(node(dtype=np.int32), [])


def test_a_variant_one_candidate_lacks_keeps_its_kind_in_the_joined_reason():
    """A candidate that finds the node well formed but of a variant it has no kernel for
    (Unimplemented) makes the joined reason Unimplemented: cpu_litert runs such nodes on LiteRT."""
    lacking = module("lacking", SUPPORT={"OP": lambda n: Unimplemented(f"{n.inputs[0].dtype} not implemented")})
    support, _ = registry.resolve("OP", (INT, lacking), "KERNELS")
    reason = support(node(dtype=np.int16))
    assert reason == "int: not int8; lacking: int16 not implemented" and isinstance(reason, Unimplemented)
    assert type(registry.resolve("OP", (INT, FLOAT), "KERNELS")[0](node(dtype=np.int16))) is str


def test_one_candidate_is_used_as_it_is():
    assert registry.resolve("OP", (FLOAT,), "KERNELS") == (FLOAT.SUPPORT["OP"], FLOAT.KERNELS["OP"])


def test_hybrid_and_float_convolutions_are_candidates_of_the_reference_registry():
    assert [m.__name__ for m in ops.CANDIDATES["CONV_2D"]] == ["gles_delegate.ops.hybrid", "gles_delegate.ops.conv"]
    x = Tensor(0, "x", (1, 3, 3, 1), np.dtype(np.float32))
    w = Tensor(1, "w", (1, 1, 1, 1), np.dtype(np.float32), data=np.ones((1, 1, 1, 1), np.float32))
    out = Tensor(2, "y", (1, 3, 3, 1), np.dtype(np.float32))
    conv = Node(0, "CONV_2D", [x, w], [out], options={"padding": 1, "stride_h": 1, "stride_w": 1})
    assert ops.unsupported_reason(conv) is None
    assert np.array_equal(ops.run_node(conv, [np.full((1, 3, 3, 1), 2, np.float32), w.data])[0],
                          np.full((1, 3, 3, 1), 2, np.float32))


def test_every_gpu_op_has_one_kernel_or_a_stated_order():
    assert set(kernels.CANDIDATES) == set(kernels.SUPPORT) == set(kernels.BUILD)
    assert all(len(owners) == 1 or op in kernels.ORDER for op, owners in kernels.CANDIDATES.items())
    assert set(kernels.FACTS) <= set(kernels.BUILD)


def test_the_tests_cpu_node_has_no_gpu_kernel():
    """oplib.cpu_node, the op tests use for a CPU node, is no GPU op: when it gets a kernel, the
    tests that need a CPU node would silently stop having one (ATAN2 and PACK did)."""
    from gles_delegate.tflite import ModelBuilder
    from tests.oplib import cpu_node, first_node
    b = ModelBuilder()
    x, out = b.input("x", (1, 3, 4, 5)), b.tensor("out", (1, 3, 4, 5))
    cpu_node(b, x, out)
    b.output(out)
    node = first_node(b.build())
    assert "no GPU kernel" in kernels.unsupported_reason(node)
