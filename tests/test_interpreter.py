"""The Interpreter API against ai_edge_litert's: details dicts, set/get, errors, signatures, resize;
the public API's type hints."""
import configparser
import inspect
import typing
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter as LiteRT

import gles_delegate
from gles_delegate import Interpreter, InterpreterOptions, ModelError
from gles_delegate.tflite import ModelBuilder
from gles_delegate.tflite.writer import quantize_params
from tests.oplib import unknown_custom_op_model


def add_model(shape=(1, 4, 4, 3), signature=True):
    b = ModelBuilder()
    x = b.input("x", shape, shape_signature=(-1,) + tuple(shape[1:]))
    c = b.const("c", np.full(shape[-1], 0.5, np.float32))
    y = b.tensor("y", shape)
    b.op("ADD", [x, c], [y], fused_activation_function=1)
    b.output(y)
    if signature:
        b.signature("serving_default", {"input": x}, {"output": y})
    return b.build()


def quantized_model():
    b = ModelBuilder()
    x = b.input("xq", (1, 3), np.int8, quantization=quantize_params(0.5, -3))
    y = b.tensor("yq", (1, 3), np.int8, quantization=quantize_params([0.1, 0.2, 0.3], [0, 1, 2], 1))
    b.op("ADD", [x, x], [y])
    b.output(y)
    return b.build()


def assert_same_details(ours, theirs):
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert set(a) == set(b)
        for key in ("name", "index", "dtype", "quantization"):
            assert a[key] == b[key], key
        for key in ("shape", "shape_signature"):
            assert a[key].dtype == b[key].dtype and np.array_equal(a[key], b[key]), key
        for key, value in b["quantization_parameters"].items():
            mine = a["quantization_parameters"][key]
            if isinstance(value, np.ndarray):
                assert mine.dtype == value.dtype and np.array_equal(mine, value), key
            else:
                assert mine == value, key


@pytest.mark.parametrize("model", [add_model(), quantized_model()], ids=["float", "quantized"])
def test_details_match_litert(model):
    ours, theirs = Interpreter(model_content=model), LiteRT(model_content=model)
    assert_same_details(ours.get_input_details(), theirs.get_input_details())
    assert_same_details(ours.get_output_details(), theirs.get_output_details())


def test_details_match_litert_on_real_models(mediapipe_models):
    for name in ("selfie_segmentation", "pose_detection", "hand_landmark_full"):
        ours, theirs = Interpreter(model_path=str(mediapipe_models[name])), LiteRT(model_path=str(mediapipe_models[name]))
        assert_same_details(ours.get_input_details(), theirs.get_input_details())
        assert_same_details(ours.get_output_details(), theirs.get_output_details())
        assert_same_details(ours.get_tensor_details(), theirs.get_tensor_details()[:len(ours.get_tensor_details())])


def test_set_invoke_get_and_tensor_view():
    interp = Interpreter(model_content=add_model())
    interp.allocate_tensors()
    x = np.arange(48, dtype=np.float32).reshape(1, 4, 4, 3) - 24
    interp.set_tensor(0, x)
    interp.invoke()
    out = interp.get_output_details()[0]["index"]
    assert np.array_equal(interp.get_tensor(out), np.maximum(x + 0.5, 0))
    view = interp.tensor(out)()
    assert np.shares_memory(view, interp.tensor(out)())


@pytest.mark.parametrize("make", [LiteRT, Interpreter], ids=["litert", "ours"])
def test_held_tensor_arrays_block_reallocation(make):
    """An array from tensor() would silently stop being the tensor once allocate_tensors() or
    resize_tensor_input() replaced the storage: LiteRT refuses both while one (or a slice of one)
    is alive, and so do we. Holding the function is fine."""
    interp = make(model_content=add_model())
    interp.allocate_tensors()
    input_fn = interp.tensor(0)
    row = input_fn()[0, 1]
    for call in (interp.allocate_tensors, lambda: interp.resize_tensor_input(0, [2, 4, 4, 3])):
        with pytest.raises(RuntimeError, match="There is at least 1 reference to internal data"):
            call()
    del row
    interp.resize_tensor_input(0, [2, 4, 4, 3])
    interp.allocate_tensors()
    assert input_fn().shape == (2, 4, 4, 3)


def test_writes_through_a_held_tensor_array_reach_invoke():
    """Ours keeps tensor() arrays valid across invoke() (LiteRT refuses to invoke while one is alive)."""
    interp = Interpreter(model_content=add_model())
    interp.allocate_tensors()
    x, out = interp.tensor(0)(), interp.get_output_details()[0]["index"]
    for value in (1.0, 2.0):
        x.fill(value)
        interp.invoke()
        assert np.array_equal(interp.get_tensor(out), np.full(x.shape, value + 0.5, np.float32))
    with pytest.raises(ValueError, match="read-only"):
        interp.tensor(1)()[...] = 0  # a constant: the model's data


def test_set_tensor_errors_name_what_was_expected():
    interp = Interpreter(model_content=add_model())
    with pytest.raises(ValueError, match="allocate_tensors"):
        interp.set_tensor(0, np.zeros((1, 4, 4, 3), np.float32))
    interp.allocate_tensors()
    with pytest.raises(ValueError, match="expected float32"):
        interp.set_tensor(0, np.zeros((1, 4, 4, 3), np.float64))
    with pytest.raises(ValueError, match=r"expected \[1, 4, 4, 3\]"):
        interp.set_tensor(0, np.zeros((1, 4, 4, 2), np.float32))
    with pytest.raises(ValueError, match="out of range"):
        interp.set_tensor(99, np.zeros(1, np.float32))
    with pytest.raises(ValueError, match="constant"):
        interp.set_tensor(1, np.zeros(3, np.float32))


def test_invoke_before_allocate_is_an_error():
    with pytest.raises(ValueError, match="allocate_tensors"):
        Interpreter(model_content=add_model()).invoke()


def test_constructor_errors():
    with pytest.raises(ValueError, match="exactly one"):
        Interpreter()
    with pytest.raises(TypeError, match="model_content"):
        Interpreter(model_content="not bytes")
    with pytest.raises(ModelError):
        Interpreter(model_content=b"definitely not a flatbuffer")
    with pytest.raises(TypeError, match="InterpreterOptions"):
        Interpreter(model_content=add_model(), options={"num_threads": 2})


@pytest.mark.parametrize("num_threads", ["x", -5, -1, 0, 1.5, np.int64(2), None, 1, 4])
def test_num_threads_is_checked_as_litert_does(num_threads):
    """LiteRT takes None or an int >= 1 and raises ValueError for anything else."""
    try:
        LiteRT(model_content=add_model(), num_threads=num_threads)
    except ValueError:
        for make in (lambda: Interpreter(model_content=add_model(), num_threads=num_threads),
                     lambda: InterpreterOptions(num_threads=num_threads),
                     lambda: InterpreterOptions().set_num_threads(num_threads)):
            with pytest.raises(ValueError, match=r"num_threads must be an int >= 1 or None, got"):
                make()
        return
    Interpreter(model_content=add_model(), num_threads=num_threads)
    Interpreter(model_content=add_model(), options=InterpreterOptions().set_num_threads(num_threads))


def test_delegates_are_checked_at_construction():
    """Not at allocate_tensors, where a str's own partition() used to fail on our arguments."""
    with pytest.raises(TypeError, match=r"experimental_delegates\[1\] must be a delegate such as GpuDelegate"
                                        r".*got str 'foo'"):
        Interpreter(model_content=add_model(), experimental_delegates=[Recorder(), "foo"])
    with pytest.raises(TypeError, match="experimental_delegates must be a list of delegates, got Recorder"):
        Interpreter(model_content=add_model(), experimental_delegates=Recorder())
    with pytest.raises(TypeError, match="add_delegate.*got NoneType"):
        InterpreterOptions().add_delegate(None)
    options = InterpreterOptions()
    options.delegates.append(object())
    with pytest.raises(TypeError, match=r"options.delegates\[0\] must be a delegate.*got object"):
        Interpreter(model_content=add_model(), options=options)


def test_unsupported_op_fails_at_allocate_naming_the_node():
    interp = Interpreter(model_content=unknown_custom_op_model())
    with pytest.raises(ModelError, match=r"#0 \(MysteryOp\).*no reference kernel"):
        interp.allocate_tensors()


class Recorder:
    """A delegate that claims nothing and records how many candidate nodes it was offered."""

    def __init__(self):
        self.seen = []

    def can_run(self, node):
        return False

    def partition(self, graph, candidates):
        self.seen.append(len(candidates))
        return []


def test_interpreter_options_add_delegate_order():
    first, second = Recorder(), Recorder()
    opts = InterpreterOptions().add_delegate(second)
    interp = Interpreter(model_content=add_model(), experimental_delegates=[first], options=opts)
    interp.allocate_tensors()
    assert first.seen == [1] and second.seen == [1]


def test_signature_runner():
    interp = Interpreter(model_content=add_model())
    assert interp.get_signature_list() == {"serving_default": {"inputs": ["input"], "outputs": ["output"]}}
    runner = interp.get_signature_runner()
    x = np.ones((1, 4, 4, 3), np.float32)
    result = runner(input=x)
    assert set(result) == {"output"} and np.allclose(result["output"], 1.5)
    assert runner.get_input_details()["input"]["index"] == 0
    with pytest.raises(ValueError, match="takes inputs"):
        runner(wrong=x)
    with pytest.raises(ValueError, match="no signature"):
        interp.get_signature_runner("nope")


def test_signature_runner_resizes_inputs_as_litert_does():
    """An input of another shape resizes the signature's input and re-allocates."""
    x = np.random.default_rng(0).uniform(-1, 1, (3, 4, 4, 3)).astype(np.float32)
    ours = Interpreter(model_content=add_model()).get_signature_runner()
    theirs = LiteRT(model_content=add_model()).get_signature_runner()
    for value in (x, x[:1], x[:2], x[0]):  # x[0]: another rank, which LiteRT resizes to as well
        result, expected = ours(input=value), theirs(input=value)
        assert result["output"].shape == value.shape
        assert np.array_equal(result["output"], expected["output"])
        assert np.array_equal(ours.get_output_details()["output"]["shape"],
                              theirs.get_output_details()["output"]["shape"])


def test_resize_input_replans_shapes():
    interp = Interpreter(model_content=add_model())
    interp.resize_tensor_input(0, [2, 4, 4, 3], strict=True)
    interp.allocate_tensors()
    assert list(interp.get_input_details()[0]["shape"]) == [2, 4, 4, 3]
    x = np.full((2, 4, 4, 3), -1.0, np.float32)
    interp.set_tensor(0, x)
    interp.invoke()
    assert interp.get_tensor(interp.get_output_details()[0]["index"]).shape == (2, 4, 4, 3)
    with pytest.raises(ValueError, match="fixed"):
        interp.resize_tensor_input(0, [1, 5, 4, 3], strict=True)
    with pytest.raises(ValueError, match="not an input"):
        interp.resize_tensor_input(2, [1, 4, 4, 3])


def _public_functions():
    """(name, function) of every public function and method of the public API, __init__ included."""
    yield "load_delegate", gles_delegate.load_delegate
    for cls in (Interpreter, InterpreterOptions, gles_delegate.SignatureRunner, gles_delegate.GpuDelegate,
                gles_delegate.GpuDelegateOptions, gles_delegate.CompatibilityList):
        for name, member in vars(cls).items():
            if name.startswith("_") and name not in ("__init__", "__call__", "__enter__", "__exit__"):
                continue
            function = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
            if inspect.isfunction(function):
                yield f"{cls.__name__}.{name}", function


def test_public_api_is_typed():
    """Every parameter and every return of the public API is annotated (and the annotations
    resolve), and the package carries the py.typed marker that setup.cfg installs."""
    untyped = []
    for name, function in _public_functions():
        hints = typing.get_type_hints(function)
        wanted = [p for p in inspect.signature(function).parameters if p != "self"] + ["return"]
        untyped += [f"{name}({p})" for p in wanted if p not in hints]
    assert not untyped, f"no type hint: {untyped}"
    assert resources.files("gles_delegate").joinpath("py.typed").is_file()
    setup = configparser.ConfigParser()
    setup.read(Path(__file__).parents[1] / "setup.cfg")
    assert "py.typed" in setup["options.package_data"]["gles_delegate"].split()


def test_bad_tensor_and_subgraph_indices_are_refused_as_in_litert():
    """get_tensor of a subgraph the model lacks read the main subgraph's tensor; a tensor index
    of another type was reported as out of range."""
    ours, theirs = Interpreter(model_content=add_model()), LiteRT(model_content=add_model())
    for interpreter in (ours, theirs):
        interpreter.allocate_tensors()
        for subgraph in (1, -1):
            with pytest.raises(ValueError, match="subgraph index"):
                interpreter.get_tensor(0, subgraph)
    assert ours.get_tensor(0, 0).shape == theirs.get_tensor(0, 0).shape
    with pytest.raises(TypeError, match="a tensor index is an int, not str"):
        ours.set_tensor("0", np.zeros((1, 4, 4, 3), np.float32))


def test_load_delegate_options_must_be_a_dict():
    with pytest.raises(TypeError, match="dict of {name: str}, not str"):
        gles_delegate.load_delegate("gles", "notadict")


def test_a_resize_to_the_allocated_shape_changes_nothing_as_in_litert():
    """LiteRT's ResizeInputTensor returns at once when the input is allocated at that shape: the
    next invoke needs no allocate_tensors(), and a live tensor() view stays valid."""
    x = np.linspace(-1, 1, 48, dtype=np.float32).reshape(1, 4, 4, 3)
    for interpreter in (Interpreter(model_content=add_model()), LiteRT(model_content=add_model())):
        interpreter.allocate_tensors()
        view = interpreter.tensor(0)
        interpreter.resize_tensor_input(0, [1, 4, 4, 3])
        view()[...] = x
        interpreter.invoke()
        np.testing.assert_allclose(interpreter.get_tensor(interpreter.get_output_details()[0]["index"]),
                                   np.maximum(x + 0.5, 0))
