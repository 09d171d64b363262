"""CPU nodes through LiteRT's kernels (gles_delegate/cpu_litert.py): nodes the reference lacks, the
cpu_backend option, LiteRT absent, resize, preserve_all_tensors, threads. With the GPU delegate:
tests/gpu/test_cpu_litert.py."""
import re
import sys

import numpy as np
import pytest

from gles_delegate import Interpreter, ModelError, ops
from gles_delegate.tflite import ModelBuilder
from tests.cpu_litert_models import (LITERT_ONLY, ClaimsNothing, conv3d_model, diag_model, hybrid_transpose_conv_model,
                                     int16_conv_model, litert_outputs, random_input, random_model, run,
                                     runtime_segment_model, runtime_shape_random_model, segment_model)
from tests.litert import LiteRTInterpreter
from tests.oplib import In, assert_close, first_node, single_op_model, unknown_custom_op_model
from tests.tolerance import sum_bound
from tests.threads import run_in_threads

ALL = ["#0 (MUL)", "#1 (TANH)", "#2 (SEGMENT_SUM)", "#3 (MATRIX_DIAG)", "#4 (LOGISTIC)", "#5 (ADD)"]


@pytest.fixture
def no_litert(monkeypatch):
    """ai-edge-litert as if it were not installed: importing it fails."""
    monkeypatch.setitem(sys.modules, "ai_edge_litert.interpreter", None)


def test_the_test_ops_have_no_reference_kernel():
    assert not set(LITERT_ONLY) & set(ops.KERNELS)


@pytest.mark.parametrize("backend, litert_runs, reference", [
    ("auto", [ALL], []),  # the run holding SEGMENT_SUM: the whole model
    ("fallback", [ALL[2:4]], ALL[:2] + ALL[4:]),
    ("litert", [ALL], []),
])
def test_nodes_the_reference_lacks_run_on_litert(backend, litert_runs, reference):
    model, x = segment_model(), random_input((8, 4))
    (ours,), summary = run(model, [x], cpu_backend=backend)
    (theirs,) = litert_outputs(model, [x])
    assert_close(ours, theirs, what=backend)
    assert summary["litert_partitions"] == litert_runs
    assert summary["reference_nodes"] == reference
    assert summary["cpu_backend"] == backend and summary["litert"]


def test_litert_backend_matches_the_reference_on_a_model_the_reference_runs():
    rng = np.random.default_rng(1)
    inputs = [In(rng.standard_normal((1, 9, 9, 3)).astype(np.float32)),
              In(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), const=True),
              In(rng.standard_normal(4).astype(np.float32), const=True)]
    model = single_op_model("CONV_2D", inputs, {"padding": 0, "stride_w": 2, "stride_h": 1,
                                                "fused_activation_function": 1})
    x = inputs[0].value
    (reference,), summary = run(model, [x], cpu_backend="reference")
    (ours,), litert_summary = run(model, [x], cpu_backend="litert")
    assert_close(ours, reference, sum_bound(first_node(model), [i.value for i in inputs])[0])
    assert summary["reference_nodes"] == ["#0 (CONV_2D)"] and summary["litert_nodes"] == []
    assert litert_summary["litert_nodes"] == ["#0 (CONV_2D)"] and litert_summary["reference_nodes"] == []


def test_reference_backend_refuses_the_node_clearly():
    with pytest.raises(ModelError, match=r"operator #2 \(SEGMENT_SUM\) cannot run on the CPU: no reference kernel "
                                         r"for op SEGMENT_SUM; cpu_backend='reference'"):
        Interpreter(model_content=segment_model(), cpu_backend="reference").allocate_tensors()


def test_without_litert_auto_names_the_node_and_the_package(no_litert):
    with pytest.raises(ModelError, match=r"operator #2 \(SEGMENT_SUM\) cannot run on the CPU: no reference kernel "
                                         r"for op SEGMENT_SUM; installing ai-edge-litert"):
        Interpreter(model_content=segment_model()).allocate_tensors()
    with pytest.raises(ValueError, match="cpu_backend='litert' needs ai-edge-litert"):
        Interpreter(model_content=segment_model(), cpu_backend="litert")
    # Everything the reference runs still runs, and says so.
    (out,), summary = run(_abs_model(), [np.float32([-1, 2])])
    np.testing.assert_array_equal(out, [1, 2])
    assert summary["litert"] is None and summary["reference_nodes"] == ["#0 (ABS)"]


@pytest.mark.parametrize("backend", ["auto", "fallback", "litert"])
def test_a_resource_typed_tensor_is_not_handed_to_litert(backend):
    """A SOFTMAX writing a RESOURCE tensor (a gles-fuzz dtype mutation): the reference refuses the
    int32 it holds as, and LiteRT's kernel crashed the process on the type as written; now a
    ModelError naming the node and the tensor."""
    b = ModelBuilder()
    x = b.input("x", (1, 4))
    out = b.tensor("out", (1, 4), type_name="RESOURCE")
    b.op("SOFTMAX", [x], [out], beta=1.0)
    b.output(out)
    with pytest.raises(ModelError, match=r"operator #0 \(SOFTMAX\) cannot run on the CPU: .*nor through LiteRT: "
                                         r"tensor 1 is of type RESOURCE"):
        Interpreter(model_content=b.build(), cpu_backend=backend).allocate_tensors()


VARIANTS = {"int16_conv": (int16_conv_model, "#0 (CONV_2D)", "input type int16"),
            "hybrid_transpose_conv": (hybrid_transpose_conv_model, "#0 (TRANSPOSE_CONV)", "filter int8")}


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("backend", ["auto", "fallback"])
def test_a_variant_the_reference_lacks_runs_on_litert(variant, backend):
    """A node of an op the reference has, of a variant it has no kernel for (16x8 activations,
    dynamic-range weights): LiteRT's kernels run it, with LiteRT's very outputs;
    cpu_backend='reference' refuses it, naming the node and the variant."""
    make, label, what = VARIANTS[variant]
    model, x = make()
    (ours,), summary = run(model, [x], cpu_backend=backend)
    (theirs,) = litert_outputs(model, [x])
    assert ours.dtype == theirs.dtype and np.array_equal(ours, theirs)
    assert summary["litert_nodes"] == [label] and summary["reference_nodes"] == []
    with pytest.raises(ModelError, match=rf"operator {re.escape(label)} cannot run on the CPU: .*{what}.*"
                                         r"cpu_backend='reference' keeps it off LiteRT"):
        Interpreter(model_content=model, cpu_backend="reference").allocate_tensors()


@pytest.mark.parametrize("variant", VARIANTS)
def test_without_litert_a_variant_the_reference_lacks_names_the_package(no_litert, variant):
    make, label, what = VARIANTS[variant]
    with pytest.raises(ModelError, match=rf"operator {re.escape(label)} cannot run on the CPU: .*{what}.*"
                                         r"installing ai-edge-litert"):
        Interpreter(model_content=make()[0]).allocate_tensors()


def _abs_model():
    b = ModelBuilder()
    x = b.input("x", (2,))
    y = b.tensor("y", (2,))
    b.op("ABS", [x], [y])
    b.output(y)
    return b.build()


@pytest.mark.parametrize("value, error", [("gpu", ValueError), (None, TypeError)])
def test_bad_cpu_backend(value, error):
    with pytest.raises(error, match="cpu_backend must be one of auto, fallback, litert, reference"):
        Interpreter(model_content=_abs_model(), cpu_backend=value)


def test_a_version_litert_lacks_is_a_model_error_naming_the_node():
    with pytest.raises(ModelError, match=r"operator #2 \(SEGMENT_SUM\) .*cannot run through LiteRT: Didn't find op "
                                         r"for builtin opcode 'SEGMENT_SUM' version '99'"):
        Interpreter(model_content=segment_model(version=99), cpu_backend="fallback").allocate_tensors()


def test_custom_ops_stay_on_the_reference_and_say_why():
    with pytest.raises(ModelError, match=r"#0 \(MysteryOp\).*no reference kernel.*nor through LiteRT: custom op "
                                         r"MysteryOp is not in LiteRT's builtin resolver"):
        Interpreter(model_content=unknown_custom_op_model(), cpu_backend="litert").allocate_tensors()


@pytest.mark.parametrize("backend", ["auto", "fallback"])
@pytest.mark.parametrize("shape", [(4, 5), (1, 2, 7), (3, 1)])
def test_resize_remakes_the_litert_interpreter(backend, shape):
    model = diag_model((2, 3) if len(shape) == 2 else (1, 1, 1))
    x = random_input(shape, seed=len(shape))
    (ours,), summary = run(model, [x], shape=shape, cpu_backend=backend)
    (theirs,) = litert_outputs(model, [x], shape=shape)
    assert ours.shape == tuple(shape) + (shape[-1],)
    assert_close(ours, theirs, what=str(shape))
    assert "#1 (MATRIX_DIAG)" in summary["litert_nodes"]


@pytest.mark.filterwarnings("ignore:Warning. Enabling `experimental_preserve_all_tensors`")
def test_preserve_all_tensors_reads_the_sub_models_intermediates():
    model, x = segment_model(), random_input((8, 4), seed=3)
    interpreter = Interpreter(model_content=model, experimental_preserve_all_tensors=True)
    interpreter.allocate_tensors()
    interpreter.set_tensor(0, x)
    interpreter.invoke()
    theirs = LiteRTInterpreter(model_content=model, experimental_preserve_all_tensors=True)
    theirs.allocate_tensors()
    theirs.set_tensor(0, x)
    theirs.invoke()
    names = {"scaled", "squashed", "summed", "diag", "gated"}  # inside the sub-model (auto: the whole model)
    details = [d for d in theirs.get_tensor_details() if d["name"] in names]
    assert len(details) == len(names)
    for detail in details:
        assert_close(interpreter.get_tensor(detail["index"]), theirs.get_tensor(detail["index"]),
                     what=detail["name"])


def test_invoke_from_many_threads():
    """One interpreter invoked from several threads at once (all on the same input: its lock
    serializes the invokes, LiteRT's interpreters are not thread-safe), and several interpreters
    at once, each on its own input."""
    model = segment_model()
    inputs = [random_input((8, 4), seed=k) for k in range(4)]
    expected = [litert_outputs(model, [x])[0] for x in inputs]
    shared = Interpreter(model_content=model, cpu_backend="fallback")
    shared.allocate_tensors()
    shared.set_tensor(0, inputs[0])

    def work(k):
        for _ in range(10):
            shared.invoke()
            out = shared.get_tensor(shared.get_output_details()[0]["index"])
            assert_close(out, expected[0], what=f"shared, thread {k}")
            own, _ = run(model, [inputs[k]])
            assert_close(own[0], expected[k], what=f"own, thread {k}")
    run_in_threads([lambda k=k: work(k) for k in range(4)])


def _runtime_ids_model():
    """x [6, 2], ids [6] (a runtime input) -> SEGMENT_SUM -> y declared [3, 2]: LiteRT makes the
    output dynamic, its shape decided by the ids' values at invoke."""
    b = ModelBuilder()
    x = b.input("x", (6, 2))
    ids = b.input("ids", (6,), np.int32)
    y = b.tensor("y", (3, 2))
    b.op("SEGMENT_SUM", [x, ids], [y])
    b.output(y)
    return b.build()


def test_a_dynamic_output_in_the_declared_shape_runs_and_another_is_a_model_error():
    x = random_input((6, 2))
    ids = np.int32([0, 0, 1, 1, 2, 2])
    (ours,), _ = run(_runtime_ids_model(), [x, ids])
    assert_close(ours, litert_outputs(_runtime_ids_model(), [x, ids])[0])
    interpreter = Interpreter(model_content=_runtime_ids_model())
    interpreter.allocate_tensors()
    interpreter.set_tensor(0, x)
    interpreter.set_tensor(1, np.int32([0, 0, 0, 1, 1, 1]))  # two segments: shape [2, 2]
    with pytest.raises(ModelError, match=r"operator #0 \(SEGMENT_SUM\) produced shape \[2, 2\] for tensor 2 through "
                                         r"LiteRT, the model declares \[3, 2\]"):
        interpreter.invoke()


def test_signature_runner_resizes_through_litert():
    b = ModelBuilder()
    x = b.input("x", (2, 3), shape_signature=(-1, -1))
    y = b.tensor("y", (2, 3, 3))
    b.op("MATRIX_DIAG", [x], [y])
    b.output(y)
    b.signature("serving_default", {"x": x}, {"y": y})
    runner = Interpreter(model_content=b.build()).get_signature_runner()
    for shape in ((2, 3), (4, 5), (1, 1)):
        value = random_input(shape, seed=shape[1])
        out = runner(x=value)["y"]
        np.testing.assert_array_equal(out, np.eye(shape[1], dtype=np.float32) * value[..., None, :])


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_scalar_tensors_through_litert(dtype):
    """0-d inputs and outputs (a loop counter's ADD): LiteRT's view of a 0-d tensor is a numpy
    scalar, not an array, and copying into it once failed at invoke."""
    b = ModelBuilder()
    x, y = b.input("x", (), dtype), b.input("y", (), dtype)
    s, out = b.tensor("s", (), dtype), b.tensor("out", (), dtype)
    b.op("ADD", [x, y], [s], fused_activation_function=0)
    b.op("MUL", [s, x], [out], fused_activation_function=0)
    b.output(out)
    model = b.build()
    values = [np.array(3, dtype), np.array(4, dtype)]
    (ours,), summary = run(model, values, cpu_backend="litert")
    assert summary["litert_nodes"] == ["#0 (ADD)", "#1 (MUL)"]
    assert ours.shape == () and ours.dtype == dtype and ours == litert_outputs(model, values)[0] == 21


@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("backend", ["auto", "fallback"])
def test_conv3d_runs_on_litert_with_its_options(transpose, backend):
    """CONV_3D and CONV_3D_TRANSPOSE read their options from Conv3DOptions: the LiteRT
    sub-model once could not be written ('takes no builtin options'). Both have reference
    kernels (ops/conv3d.py), which 'fallback' runs instead: within the sum bound of LiteRT's."""
    model, x = conv3d_model(transpose)
    (ours,), summary = run(model, [x], cpu_backend=backend)
    (theirs,) = litert_outputs(model, [x])
    on_litert = backend == "auto"
    op = "CONV_3D_TRANSPOSE" if transpose else "CONV_3D"
    assert summary["litert_nodes"] == ([f"#0 ({op})"] if on_litert else [])
    if on_litert:
        assert ours.shape == theirs.shape and np.array_equal(ours, theirs)
    else:
        node = first_node(model)
        constants = [np.asarray(t.data) for t in node.inputs[:2]]
        assert_close(ours, theirs, sum_bound(node, constants + [x] if transpose else [x, constants[1]])[0])


def test_seeded_random_ops_give_litert_s_values_invoke_after_invoke():
    """RANDOM_UNIFORM / RANDOM_STANDARD_NORMAL run on LiteRT's kernels with their seeds
    (RandomOptions): each invoke draws the next values, as LiteRT's own interpreter does."""
    model, x = random_model(), random_input((2, 3))
    ours, theirs = Interpreter(model_content=model), LiteRTInterpreter(model_content=model)
    for interpreter in (ours, theirs):
        interpreter.allocate_tensors()
    for _ in range(2):
        outputs = []
        for interpreter in (ours, theirs):
            interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
            interpreter.invoke()
            outputs.append([interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()])
        for mine, litert in zip(*outputs):
            np.testing.assert_array_equal(mine, litert)
    assert ours.cpu_summary()["litert_nodes"] == ["#0 (RANDOM_UNIFORM)", "#1 (ADD)", "#2 (RANDOM_STANDARD_NORMAL)",
                                                  "#3 (MUL)"]


SEGMENT_IDS = [np.int32([0, 0, 1, 2, 2, 2]), np.int32([0, 1, 2, 3, 4, 5]), np.int32([0, 0, 0, 0, 0, 0])]


@pytest.mark.parametrize("backend", ["auto", "fallback", "litert"])
def test_an_output_the_runtime_ids_size_is_dynamic(backend):
    """SEGMENT_SUM of runtime ids, its output declared [-1]: a dynamic tensor whose shape each
    invoke takes from LiteRT, as LiteRT's own interpreter gives it (allocate once ran it on
    stand-in ids of 1, which LiteRT refuses: 'current_segment_id != 0')."""
    model, x = runtime_segment_model(), np.arange(6, dtype=np.float32)
    ours = Interpreter(model_content=model, cpu_backend=backend)
    ours.allocate_tensors()
    for ids in SEGMENT_IDS:
        ours.set_tensor(0, x)
        ours.set_tensor(1, ids)
        ours.invoke()
        (theirs,) = litert_outputs(model, [x, ids])
        out = ours.get_tensor(ours.get_output_details()[0]["index"])
        np.testing.assert_array_equal(out, theirs)
        assert list(ours.get_output_details()[0]["shape"]) == [ids[-1] + 1]
    ours.set_tensor(1, np.int32([1, 1, 2, 2, 2, 2]))
    with pytest.raises(ModelError, match=r"operator #0 \(SEGMENT_SUM\) failed in LiteRT: .*segment_sum"):
        ours.invoke()


def test_reference_backend_refuses_runtime_ids_without_a_lookup_key():
    with pytest.raises(ModelError) as raised:
        Interpreter(model_content=runtime_segment_model(), cpu_backend="reference").allocate_tensors()
    message = str(raised.value)
    assert re.match(r"operator #0 \(SEGMENT_SUM\) cannot run on the CPU: no reference kernel for op SEGMENT_SUM",
                    message)
    assert "resized" not in message and "'SEGMENT_SUM'" not in message


@pytest.mark.parametrize("shape", [(2, 3), (4, 1)])
def test_a_runtime_shape_operand_makes_a_dynamic_output(shape):
    """RANDOM_UNIFORM of a runtime shape (its output declared [-1, -1]): LiteRT's shape and
    values, and, node by node (beside a delegate), the reference's ABS after it on the dynamic
    tensor."""
    model, value = runtime_shape_random_model(), np.int32(shape)
    (ours,), summary = run(model, [value], experimental_delegates=[ClaimsNothing()])
    (theirs,) = litert_outputs(model, [value])
    assert ours.shape == tuple(shape)
    np.testing.assert_array_equal(ours, theirs)
    assert summary["litert_nodes"] == ["#0 (RANDOM_UNIFORM)"] and summary["reference_nodes"] == ["#1 (ABS)"]


def test_a_model_the_reference_would_share_runs_whole_on_litert_with_litert_s_shapes():
    """Without a delegate, the same model runs as the file whole on LiteRT (the ABS of a dynamic
    tensor would be the reference's, node by node: whole_model.py); each invoke's output has
    LiteRT's shape in the data and in the details, as LiteRT's own interpreter gives them."""
    model = runtime_shape_random_model()
    ours, theirs = Interpreter(model_content=model), LiteRTInterpreter(model_content=model)
    for interpreter in (ours, theirs):
        interpreter.allocate_tensors()
    assert ours._whole_on_litert() and ours.cpu_summary()["reference_nodes"] == []
    for shape in ((2, 3), (4, 1), (1, 5)):
        got = []
        for interpreter in (ours, theirs):
            interpreter.set_tensor(interpreter.get_input_details()[0]["index"], np.int32(shape))
            interpreter.invoke()
            detail = interpreter.get_output_details()[0]
            got.append((interpreter.get_tensor(detail["index"]), list(detail["shape"])))
        (mine, mine_shape), (litert, litert_shape) = got
        assert mine.shape == tuple(shape) and mine_shape == litert_shape == list(shape)
        np.testing.assert_array_equal(mine, litert)
