"""LiteRT's Interpreter with our delegate: graph outputs lent from the GPU partition's mapped I/O
buffer (litert/memory.py), so that get_tensor() copies them once, as our Interpreter's does; and
the memory LiteRT points at stays valid and sized through invokes, re-plans, close, fork and frees."""
import os
import subprocess
import sys

import numpy as np
import pytest

from gles_delegate import GpuDelegate, Interpreter, callee_subgraphs
from gles_delegate.gpu.runtime import MappedIo
from gles_delegate.litert import abi, memory
from gles_delegate.litert.native import native_delegates
from gles_delegate.tflite import ModelBuilder, read_model
from tests.control_flow_models import if_model
from tests.forking import in_forked_child
from tests.litert_delegate.models import add_model, mixed_model, segmentation_head_model
from tests.litert_delegate.test_litert_delegate import litert_alone, run
from tests.oplib import assert_close

LiteRT = pytest.importorskip("ai_edge_litert.interpreter").Interpreter
# segmentation_head_model sizes: 9 -> 7.7 KB of I/O, which the kernels read and write in the
# mapped buffer itself; 33 -> 104 KB, copied between it and device memory (gpu/runtime.MappedIo).
DIRECT, STAGED = 9, 33


def image(size, seed):
    return np.random.default_rng(seed).uniform(-1, 1, (1, size, size, 3)).astype(np.float32)


def kernels(delegate):
    return [k for native in native_delegates(delegate) for k in native.kernels.values()]


def address(interp, index):
    """Where LiteRT's tensor `index` now is (its TfLiteTensor.data), through a view dropped at once."""
    return interp.tensor(index)().ctypes.data


def mapped_outputs(delegate):
    """{tensor index: address of its slot in a live partition's mapped I/O buffer}."""
    return {index: view.ctypes.data for k in kernels(delegate) for p in k.partitions
            for index, view in p.io.outputs}


def allocation_type(kernel, index):
    return kernel.memory.litert_tensor(index).allocation_type


def ours_on(data, inputs):
    """Our Interpreter's outputs for each input of `inputs` (the same shaders: the exact oracle
    of the I/O path)."""
    with GpuDelegate() as delegate:
        interp = Interpreter(model_content=data, experimental_delegates=[delegate])
        interp.allocate_tensors()
        return [run(interp, x).copy() for x in inputs]


def cast_tail_model(size=6):
    """x -> CONV_2D -> y (a graph output) -> CAST to int64 -> CAST to float32 -> z (a graph
    output): the GPU computes y, LiteRT's CPU kernels read it for z = trunc(y)."""
    b = ModelBuilder()
    x = b.input("x", (1, size, size, 3))
    w = b.const("w", np.random.default_rng(5).standard_normal((4, 3, 3, 3)).astype(np.float32))
    y, z = b.tensor("y", (1, size, size, 4)), b.tensor("z", (1, size, size, 4))
    q = b.tensor("q", (1, size, size, 4), np.int64)
    b.op("CONV_2D", [x, w, b.const("bias", np.zeros(4, np.float32))], [y], padding=0, stride_w=1, stride_h=1,
         fused_activation_function=0)
    b.op("CAST", [y], [q])
    b.op("CAST", [q], [z])
    b.output(y)
    b.output(z)
    return b.build()


@pytest.mark.parametrize("size", [DIRECT, STAGED])
def test_a_graph_output_is_lent_from_the_mapped_buffer(size):
    """LiteRT's output tensor is the partition's mapped slot itself (kTfLiteCustom): no copy into
    LiteRT's arena; get_tensor() reads the values of each invoke."""
    data = segmentation_head_model(size)
    inputs = [image(size, seed) for seed in range(3)]
    expected = ours_on(data, inputs)
    with GpuDelegate() as delegate:
        interp = LiteRT(model_content=data, experimental_delegates=[delegate])
        interp.allocate_tensors()
        out = interp.get_output_details()[0]["index"]
        results = [run(interp, x) for x in inputs]
        (kernel,) = kernels(delegate)
        assert address(interp, out) == mapped_outputs(delegate)[out]
        assert allocation_type(kernel, out) == abi.CUSTOM
        for got, want in zip(results, expected):  # each a copy: later invokes left it alone
            np.testing.assert_array_equal(got, want)
        del interp


def test_a_resize_moves_the_output_to_memory_of_its_new_size_then_lends_again():
    """A re-plan releases the partition whose mapping LiteRT pointed at: before that, the output
    moves to the kernel's memory, sized by the kernel's prepare to the new shape (get_tensor
    reads exactly that many bytes); the next invoke lends the new partition's slot."""
    data = add_model()
    with GpuDelegate() as delegate:
        interp = LiteRT(model_content=data, experimental_delegates=[delegate])
        interp.allocate_tensors()
        out = interp.get_output_details()[0]["index"]
        for batch in (1, 3, 2):
            if batch > 1:
                interp.resize_tensor_input(0, [batch, 4, 4, 3])
                interp.allocate_tensors()
                (kernel,) = kernels(delegate)
                held, owner = kernel.memory.lent[out]
                assert owner is None and held.shape == (batch, 4, 4, 3)  # the kernel's, of the new size
                assert address(interp, out) == held.ctypes.data
                assert interp.get_tensor(out).shape == (batch, 4, 4, 3)
            x = np.linspace(-2, 2, batch * 48, dtype=np.float32).reshape(batch, 4, 4, 3)
            np.testing.assert_array_equal(run(interp, x), np.maximum(x + np.float32(0.5), 0))
            assert address(interp, out) == mapped_outputs(delegate)[out]
        del interp


def test_preserve_all_tensors_lends_the_graph_output_of_its_kernel():
    """experimental_preserve_all_tensors: a kernel per node; the one computing the graph output
    (the ADD, #4) lends it, the intermediates stay in LiteRT's arena and keep their values."""
    data = mixed_model()
    x = np.random.default_rng(0).standard_normal((1, 8, 8, 4)).astype(np.float32)
    theirs = LiteRT(model_content=data, experimental_preserve_all_tensors=True)
    theirs.allocate_tensors()
    run(theirs, x)
    with GpuDelegate(max_delegated_partitions=0) as delegate:
        interp = LiteRT(model_content=data, experimental_delegates=[delegate], experimental_preserve_all_tensors=True)
        interp.allocate_tensors()
        run(interp, x)
        out = interp.get_output_details()[0]["index"]
        assert len(kernels(delegate)) == 3
        assert {i for k in kernels(delegate) for i in k.memory.lent} == {out}
        assert address(interp, out) == mapped_outputs(delegate)[out]
        for detail in theirs.get_tensor_details():
            want = theirs.get_tensor(detail["index"])
            if want.dtype == np.float32 and want.size:
                assert_close(interp.get_tensor(detail["index"]), want, what=detail["name"])
        del interp


def test_an_output_a_cpu_node_reads_is_lent_before_that_node_runs():
    """y is a graph output the GPU computes and LiteRT's CASTs read in the same invoke: they
    read the lent memory, set before the kernel's invoke returned."""
    data = cast_tail_model()
    with GpuDelegate() as delegate:
        interp = LiteRT(model_content=data, experimental_delegates=[delegate])
        interp.allocate_tensors()
        y, z = (d["index"] for d in interp.get_output_details())
        for seed in range(3):
            interp.set_tensor(interp.get_input_details()[0]["index"], image(6, seed) * 4)
            interp.invoke()
            assert address(interp, y) == mapped_outputs(delegate)[y]
            np.testing.assert_array_equal(interp.get_tensor(z), np.trunc(interp.get_tensor(y)))
        assert delegate.summary()["cpu_nodes"] == 2
        del interp


def test_a_tensor_view_reads_the_lent_memory():
    """LiteRT's tensor() view of an output is over the lent slot; LiteRT refuses invoke while it
    lives (its own rule: the memory under a view must not change), and runs once it is gone."""
    data = segmentation_head_model(DIRECT)
    with GpuDelegate() as delegate:
        interp = LiteRT(model_content=data, experimental_delegates=[delegate])
        interp.allocate_tensors()
        out = interp.get_output_details()[0]["index"]
        expected = run(interp, image(DIRECT, 1))
        view = interp.tensor(out)()
        np.testing.assert_array_equal(view, expected)
        with pytest.raises(RuntimeError, match="reference to internal data"):
            interp.invoke()
        del view
        interp.invoke()
        del interp


def test_interpreters_on_one_delegate_keep_their_own_outputs():
    """Two LiteRT interpreters and our own on one delegate, invoked in turn: each output is its
    own invoke's (each interpreter's kernels have partitions, and mappings, of their own)."""
    data = segmentation_head_model(STAGED)
    inputs = [image(STAGED, seed) for seed in range(3)]
    expected = ours_on(data, inputs)
    with GpuDelegate() as delegate:
        first, second = (LiteRT(model_content=data, experimental_delegates=[delegate]) for _ in range(2))
        ours = Interpreter(model_content=data, experimental_delegates=[delegate])
        interpreters = (first, second, ours)
        for interp, x in zip(interpreters, inputs):
            interp.allocate_tensors()
            interp.set_tensor(interp.get_input_details()[0]["index"], x)
            interp.invoke()
        for interp, want in zip(interpreters, expected):
            np.testing.assert_array_equal(interp.get_tensor(interp.get_output_details()[0]["index"]), want)
        del first, second, ours, interpreters


def test_closing_the_delegate_keeps_the_last_outputs_readable():
    """close() releases the partitions: the lent outputs move to the kernel's memory first, so
    LiteRT's get_tensor() still reads the last invoke's values (not the unmapped buffer)."""
    data = segmentation_head_model(STAGED)
    delegate = GpuDelegate()
    interp = LiteRT(model_content=data, experimental_delegates=[delegate])
    interp.allocate_tensors()
    out = interp.get_output_details()[0]["index"]
    expected = run(interp, image(STAGED, 2))
    slot = address(interp, out)
    (kernel,) = kernels(delegate)
    delegate.close()
    assert address(interp, out) != slot and allocation_type(kernel, out) == abi.CUSTOM
    np.testing.assert_array_equal(interp.get_tensor(out), expected)
    with pytest.raises(RuntimeError, match="GpuDelegate was closed"):
        interp.invoke()
    np.testing.assert_array_equal(interp.get_tensor(out), expected)


VIEW_OVER_CLOSE = """
import numpy as np
from ai_edge_litert.interpreter import Interpreter
from gles_delegate import GpuDelegate
from tests.litert_delegate.models import segmentation_head_model
delegate = GpuDelegate()
interp = Interpreter(model_content=segmentation_head_model(257), experimental_delegates=[delegate])
interp.allocate_tensors()
interp.set_tensor(0, np.random.default_rng(0).uniform(-1, 1, (1, 257, 257, 3)).astype(np.float32))
interp.invoke()
out = interp.get_output_details()[0]["index"]
expected = interp.get_tensor(out)
view = interp.tensor(out)()
delegate.close()
assert np.array_equal(view, expected) and np.array_equal(interp.get_tensor(out), expected)
print("read")
"""


def test_a_tensor_view_held_over_close_reads_the_last_outputs():
    """A tensor() view LiteRT made of a lent output is over the mapping itself; close() re-points
    LiteRT, not the view, so the mapping stays while the view lives (it read unmapped memory:
    SIGSEGV on the 5.5 MB output, hence a subprocess)."""
    done = subprocess.run([sys.executable, "-c", VIEW_OVER_CLOSE], capture_output=True, text=True, timeout=300,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert done.returncode == 0 and done.stdout.strip() == "read", done.stderr[-2000:]


def test_a_mapping_kept_for_a_view_is_freed_with_the_interpreter(monkeypatch):
    """The mapping a view kept past close() is freed (and the context's hold dropped) when LiteRT
    frees the kernel; without a view, and at a re-plan (LiteRT allows no view there), none is kept."""
    freed, free_kept = [], MappedIo.free_kept
    monkeypatch.setattr(MappedIo, "free_kept", lambda io: (freed.append(io), free_kept(io)))
    data = add_model()
    for hold_view in (False, True):
        delegate = GpuDelegate()
        interp = LiteRT(model_content=data, experimental_delegates=[delegate])
        interp.allocate_tensors()
        out = interp.get_output_details()[0]["index"]
        for batch in (1, 2):
            interp.resize_tensor_input(0, [batch, 4, 4, 3])
            interp.allocate_tensors()
            run(interp, np.ones((batch, 4, 4, 3), np.float32))
        (kernel,) = kernels(delegate)
        assert kernel.memory.kept == []
        view = interp.tensor(out)() if hold_view else None
        delegate.close()
        assert len(kernel.memory.kept) == hold_view
        np.testing.assert_array_equal(interp.get_tensor(out), np.full((2, 4, 4, 3), 1.5, np.float32))
        del view, interp
        assert kernel.memory.kept == [] and len(freed) == hold_view


def test_freeing_the_kernel_gives_the_output_back_to_the_arena():
    """When LiteRT frees the kernel (its interpreter goes, or it undoes the delegate), the output
    is LiteRT's arena tensor again, without memory until LiteRT's next allocation."""
    data = segmentation_head_model(DIRECT)
    with GpuDelegate() as delegate:
        interp = LiteRT(model_content=data, experimental_delegates=[delegate])
        interp.allocate_tensors()
        out = interp.get_output_details()[0]["index"]
        run(interp, image(DIRECT, 0))
        (kernel,) = kernels(delegate)
        tensor = kernel.memory.litert_tensor(out)  # valid while the interpreter lives
        kernel.release()  # what LiteRT's free callback does
        assert (tensor.allocation_type, tensor.data) == (abi.ARENA_RW, None) and not kernel.memory.lent
        del tensor, interp


def test_a_fork_child_reads_the_outputs_from_plain_memory():
    """A forked child may not inherit the driver's mapping (NVIDIA's): before the fork, LiteRT's
    output moves to the kernel's memory, which the child reads; the parent's next invoke lends
    the mapping again."""
    data = segmentation_head_model(STAGED)
    with GpuDelegate() as delegate:
        interp = LiteRT(model_content=data, experimental_delegates=[delegate])
        interp.allocate_tensors()
        out = interp.get_output_details()[0]["index"]
        expected = run(interp, image(STAGED, 3))
        slot = address(interp, out)
        assert in_forked_child(lambda: address(interp, out) != slot
                               and np.array_equal(interp.get_tensor(out), expected))
        np.testing.assert_array_equal(interp.get_tensor(out), expected)
        run(interp, image(STAGED, 4))
        assert address(interp, out) == slot
        del interp


def test_an_invoke_failing_a_status_word_leaves_the_last_good_output():
    """A partition whose kernels set status words (a GATHER of runtime indices) is not lent:
    the failing invoke wrote its mapping, and LiteRT's output keeps the last good values."""
    from tests.oplib import In, single_op_model
    table = np.arange(1, 13, dtype=np.float32).reshape(4, 3)
    model = single_op_model("GATHER", [In(table, const=True), In(np.array([1, 3], np.int32))], {"axis": 0})
    with GpuDelegate() as delegate:
        interp = LiteRT(model_content=model, experimental_delegates=[delegate])
        interp.allocate_tensors()
        index, out = interp.get_input_details()[0]["index"], interp.get_output_details()[0]["index"]
        interp.set_tensor(index, np.array([3, 0], np.int32))
        interp.invoke()
        interp.set_tensor(index, np.array([4, 0], np.int32))
        with pytest.raises(RuntimeError, match="gather index out of range"):
            interp.invoke()
        np.testing.assert_array_equal(interp.get_tensor(out), table[[3, 0]])
        assert not any(k.memory.lent for k in kernels(delegate))
        del interp


def test_outputs_of_called_subgraphs_are_not_lent(monkeypatch):
    """An IF's branches are subgraphs LiteRT may point its own tensors into (a shallow copy):
    their kernels lend nothing; the IF's own output, in the entry subgraph, is LiteRT's CPU
    node's. The outputs are LiteRT's alone. (Branches count as large: small ones are LiteRT's.)"""
    monkeypatch.setattr(callee_subgraphs, "CALLEE_WORK_MAX", -1)
    data = if_model((2, 3))
    model = read_model(data)
    assert memory.lendable_outputs(model) == {0: set(model.subgraphs[0].outputs), 1: set(), 2: set()}
    x, y = np.full((2, 3), 2.5, np.float32), np.arange(6, dtype=np.float32).reshape(2, 3)
    with GpuDelegate() as delegate:
        interp = LiteRT(model_content=data, experimental_delegates=[delegate])
        interp.allocate_tensors()
        for condition, want in ((True, x * y), (False, x - y)):
            for detail, value in zip(interp.get_input_details(), (np.array([condition]), x, y)):
                interp.set_tensor(detail["index"], value)
            interp.invoke()
            np.testing.assert_array_equal(interp.get_tensor(interp.get_output_details()[0]["index"]), want)
        assert kernels(delegate) and not any(k.memory.lent for k in kernels(delegate))
        del interp


def test_only_float32_outputs_are_lent():
    """The mapped buffer holds float32 words: a bool or int32 output is converted into LiteRT's
    own memory, as before."""
    from tests.gpu.test_float_view import masked_model
    shape = (1, 3, 4, 10)
    data = masked_model(shape)
    x = np.random.default_rng(11).uniform(-2, 2, shape).astype(np.float32)
    expected = litert_alone(data, x)  # the first (float32) output
    with GpuDelegate() as delegate:
        interp = LiteRT(model_content=data, experimental_delegates=[delegate])
        interp.allocate_tensors()
        first = run(interp, x)
        details = interp.get_output_details()
        lent = {index for k in kernels(delegate) for index in k.memory.lent}
        assert lent == {d["index"] for d in details if d["dtype"] == np.float32}
        assert len(lent) < len(details)
        assert np.abs(first - expected).max() <= 1e-5 * np.abs(expected).max()
        del interp


DELETE_ORDERS = """
import gc, numpy as np
from ai_edge_litert.interpreter import Interpreter
from gles_delegate import GpuDelegate
from tests.litert_delegate.models import segmentation_head_model
x = np.ones((1, 33, 33, 3), np.float32)
def make(d):
    it = Interpreter(model_content=segmentation_head_model(33), experimental_delegates=[d]); it.allocate_tensors()
    it.set_tensor(0, x); it.invoke(); return it, it.get_tensor(3)
def same(it, want):
    assert np.array_equal(it.get_tensor(3), want)
d = GpuDelegate(); it, want = make(d); del d; gc.collect(); same(it, want); it.invoke(); del it; gc.collect()
d = GpuDelegate(); it, want = make(d); del it; gc.collect(); d.close(); del d; gc.collect()
d = GpuDelegate(); it, want = make(d); d.close(); same(it, want); del d; gc.collect(); same(it, want); del it
d = GpuDelegate(); (a, want), (b, _) = make(d), make(d); d.close(); del d; gc.collect(); same(b, want); del a, b
gc.collect()
print("survived")
"""


def test_any_delete_order_leaves_litert_reading_valid_memory():
    """In a child process (a read of freed memory could crash it): the interpreter, the delegate
    and close() in every order, LiteRT reading the lent output between them."""
    done = subprocess.run([sys.executable, "-c", DELETE_ORDERS], capture_output=True, text=True, timeout=300,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert done.returncode == 0 and "survived" in done.stdout, done.stderr[-2000:]
