"""Quantized models through the GpuDelegate (the float view of quant.py, integrated in
delegate.partition): every node on the GPU, outputs within one quantization step of LiteRT's
int8 kernels on >= 99% of elements, in every precision; preserve_all_tensors gives the model's
integers for intermediates; enable_quantized_inference=False keeps them on the CPU."""
import numpy as np
import pytest

from gles_delegate import GpuDelegate, Interpreter
from tests.gpu.gpulib import PRECISIONS
from tests.litert import run_litert
from tests.oplib import In, run_ours, single_op_model
from tests.test_quant import ONE_OP, quantized_model, two_op_model


def assert_within_one_step(ours, theirs, scale, share=0.99):
    step = 1 if theirs.dtype.kind in "iu" else scale
    diff = np.abs(ours.astype(np.float64) - theirs.astype(np.float64))
    assert diff.max(initial=0) <= 2 * step * (1 + 1e-6), f"off by up to {diff.max()}"
    assert np.mean(diff <= step * (1 + 1e-6)) >= share, f"only {np.mean(diff <= step):.4f} within one step"


def run_on_gpu(model, feeds, precision, **options):
    with GpuDelegate(precision=precision, **options) as delegate:
        outputs = run_ours(model, feeds, experimental_delegates=[delegate])
        return outputs, delegate.summary()


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("name", sorted(ONE_OP))
def test_one_op_quantized_model_on_the_gpu(name, precision):
    rng = np.random.default_rng(0)
    op, inputs, options, *out_quant = ONE_OP[name](rng)
    model = quantized_model(op, inputs, options, out_quant=out_quant[0] if out_quant else None)
    feeds = [s.value for s in inputs if s is not None and not s.const]
    ours, summary = run_on_gpu(model, feeds, precision)
    assert summary["cpu_nodes"] == 0, summary
    theirs = run_litert(model, feeds, resolver="builtin")
    for a, b in zip(ours, theirs):
        assert a.dtype == b.dtype
        assert_within_one_step(a, b, 1)


@pytest.mark.parametrize("float_io", [False, True], ids=["int8 io", "float io"])
def test_small_quantized_model_and_its_intermediates(float_io):
    model, feed = two_op_model(np.random.default_rng(1), float_io)
    with GpuDelegate() as delegate:
        interp = Interpreter(model_content=model, experimental_delegates=[delegate],
                             experimental_preserve_all_tensors=True)
        interp.allocate_tensors()
        interp.set_tensor(interp.get_input_details()[0]["index"], feed)
        interp.invoke()
        assert delegate.summary()["cpu_nodes"] == 0
        _, litert = run_litert(model, [feed], resolver="builtin", preserve_all_tensors=True)
        for detail in interp.get_tensor_details():
            if detail["dtype"] is np.int8 and detail["name"] in ("conv", "flat", "fc"):
                ours, theirs = interp.get_tensor(detail["index"]), litert.get_tensor(detail["index"])
                assert ours.dtype == np.int8, detail["name"]
                assert_within_one_step(ours, theirs, 1)


def test_quantized_inference_can_be_turned_off():
    model, feed = two_op_model(np.random.default_rng(2))
    ours, summary = run_on_gpu(model, [feed], "fp32", enable_quantized_inference=False)
    assert summary["gpu_nodes"] == 0 and summary["cpu_nodes"] == 3
    assert np.array_equal(ours[0], run_ours(model, [feed])[0])  # the integer reference kernels


def test_cached_quantized_partition_captures_integers(tmp_path):
    """A warm start from serialization_dir rebuilds the float view, so preserved intermediates
    are still the model's integers."""
    model, feed = two_op_model(np.random.default_rng(3))
    captured = []
    for _ in range(2):  # cold (stores the entry), then warm (loads it)
        with GpuDelegate(serialization_dir=str(tmp_path)) as delegate:
            interp = Interpreter(model_content=model, experimental_delegates=[delegate],
                                 experimental_preserve_all_tensors=True)
            interp.allocate_tensors()
            interp.set_tensor(interp.get_input_details()[0]["index"], feed)
            interp.invoke()
            conv = next(d["index"] for d in interp.get_tensor_details() if d["name"] == "conv")
            captured.append((delegate.summary()["cache_hit"], interp.get_tensor(conv)))
    assert [hit for hit, _ in captured] == [False, True]
    assert captured[1][1].dtype == np.int8 and np.array_equal(captured[0][1], captured[1][1])


def test_fake_quant_steps_fuse_into_the_producing_kernels():
    """After every quantized op the view snaps values to the grid; those per-tensor steps run in
    the producing kernel's epilogue: only the boundary DEQUANTIZE / QUANTIZE keep a dispatch."""
    model, feed = two_op_model(np.random.default_rng(4))
    with GpuDelegate() as delegate:
        ours = run_ours(model, [feed], experimental_delegates=[delegate])
        templates = delegate.partitions[0].plan.templates
        log = delegate.rewrite_log
    assert templates.count("quantize") == 2, templates
    assert any(r.rule == "fuse_elementwise" and r.status == "APPLIED" and "QUANTIZE_AND_DEQUANTIZE" in r.node
               for r in log)
    assert_within_one_step(ours[0], run_litert(model, [feed], resolver="builtin")[0], 1)


def _moves(rng):
    """One-op int8 / uint8 models of the layout ops streaming models use, {name: (model, feeds,
    quantum)}: quantum 0 where the op only moves integers of one grid (exact), 1 where TFLite's
    kernel requantizes (uint8 CONCATENATION of inputs on other grids)."""
    grid = (0.05, -3)
    x = In(rng.integers(-128, 128, (1, 6, 1, 8)).astype(np.int8), quant=grid)
    ints = [In(np.array(v, np.int32), const=True) for v in ([0, 4, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1])]
    rows = In(rng.integers(-128, 128, (1, 2, 1, 8)).astype(np.int8), quant=grid)  # a cache's new rows
    slice_options = dict(begin_mask=13, end_mask=15, ellipsis_mask=0, new_axis_mask=0, shrink_axis_mask=0, offset=False)
    parts = [In(rng.integers(0, 256, (1, 2, 3, c)).astype(np.uint8), quant=(s, z)) for c, s, z in
             ((3, 0.02, 128), (5, 0.07, 10), (4, 0.04, 200))]
    cases = {
        "strided slice": (single_op_model("STRIDED_SLICE", [x, *ints], slice_options, output_quant=[grid]), [x.value], 0),
        "split_v": (single_op_model("SPLIT_V", [x, In(np.array([4, 2], np.int32), const=True),
                                               In(np.array(1, np.int32), const=True)], {"num_splits": 2},
                                    output_quant=[grid, grid], n_outputs=2), [x.value], 0),
        "split": (single_op_model("SPLIT", [In(np.array(3, np.int32), const=True), x], {"num_splits": 2},
                                  output_dtypes=[np.dtype(np.int8)] * 2, output_quant=[grid, grid], n_outputs=2),
                  [x.value], 0),
        "concatenation int8": (single_op_model("CONCATENATION", [x, x], {"axis": 1, "fused_activation_function": 0},
                                               output_quant=[grid]), [x.value, x.value], 0),
        "pack int8": (single_op_model("PACK", [x, x], {"axis": 2, "values_count": 2}, output_quant=[grid]),
                      [x.value, x.value[:, ::-1].copy()], 0),
        "unpack int8": (single_op_model("UNPACK", [x], {"num": 6, "axis": 1}, n_outputs=6,
                                        output_dtypes=[np.dtype(np.int8)] * 6, output_quant=[grid] * 6), [x.value], 0),
        "gather_nd int8": (single_op_model("GATHER_ND", [x, In(np.array([[0, 5], [0, 1]], np.int32))],
                                           output_quant=[grid]), [x.value, np.array([[0, 5], [0, 1]], np.int32)], 0),
        "update_slice int8": (single_op_model("DYNAMIC_UPDATE_SLICE", [x, rows, In(np.array([0, 3, 0, 0], np.int32))],
                                              output_quant=[grid]), [x.value, rows.value, np.array([0, 3, 0, 0], np.int32)],
                              0),
        "broadcast_to int8": (single_op_model("BROADCAST_TO", [x, In(np.array([2, 6, 3, 8], np.int32), const=True)],
                                              version=2, output_quant=[grid]), [x.value], 0),
        "concatenation uint8 requantized": (
            single_op_model("CONCATENATION", parts, {"axis": 3, "fused_activation_function": 0},
                            output_quant=[(0.06, 100)]), [p.value for p in parts], 1),
    }
    return cases


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("name", ["strided slice", "split_v", "split", "concatenation int8",
                                  "concatenation uint8 requantized", "pack int8", "unpack int8",
                                  "broadcast_to int8", "gather_nd int8", "update_slice int8"])
def test_quantized_layout_ops_of_streaming_models(name, precision):
    """The ops a streaming keyword spotter moves its int8 frames with run on the GPU through the
    float view and give LiteRT's integers (a requantizing uint8 CONCATENATION within one step)."""
    model, feeds, quantum = _moves(np.random.default_rng(5))[name]
    ours, summary = run_on_gpu(model, feeds, precision)
    assert summary["cpu_nodes"] == 0, summary
    for got, expected in zip(ours, run_litert(model, feeds, resolver="builtin")):
        assert got.dtype == expected.dtype and got.shape == expected.shape
        assert np.abs(got.astype(np.int64) - expected).max(initial=0) <= quantum


def requantize_then_logistic(source, target):
    """QUANTIZE int8 -> int8 (`source` -> `target` grids) -> LOGISTIC, both tensors outputs."""
    from gles_delegate.tflite import ModelBuilder
    b = ModelBuilder("requantize")
    x = b.input("x", (1, 4, 4, 16), np.int8, quantization=source)
    requantized = b.tensor("requantized", (1, 4, 4, 16), np.int8, quantization=target)
    squashed = b.tensor("squashed", (1, 4, 4, 16), np.int8, quantization=(1 / 256, -128))
    b.op("QUANTIZE", [x], [requantized])
    b.op("LOGISTIC", [requantized], [squashed])
    b.output(requantized)
    b.output(squashed)
    return b.build()


@pytest.mark.parametrize("precision", PRECISIONS)
def test_requantize_is_tflites_fixed_point_one(precision):
    """An int8 -> int8 QUANTIZE is TFLite's Requantize, whose Q31 multiply rounds twice (a value
    like -18.38 steps becomes -19): the GPU gives its integers exactly, as the reference does,
    not the real value rounded once, which is one step off there; a LOGISTIC of the 0.1-wide
    grid made that step 4-7 steps of its output (gles-fuzz-graphs --families quant, seed 21)."""
    x = np.arange(-128, 128).astype(np.int8).reshape(1, 4, 4, 16)
    model = requantize_then_logistic((0.01976091, -21), (0.0999951, -17))
    expected = run_ours(model, [x], cpu_backend="reference")
    ours, summary = run_on_gpu(model, [x], precision)
    assert summary["cpu_nodes"] == 0, summary
    np.testing.assert_array_equal(ours[0], expected[0])
    assert_within_one_step(ours[1], expected[1], 1, share=1.0)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("dtype,grid", [(np.int8, (0.1, -18)), (np.uint8, (0.05, 130))])
def test_an_integer_average_pool_rounds_its_ties_as_tflite(dtype, grid, precision):
    """TFLite's integer AVERAGE_POOL_2D rounds the mean of the raw integers (zero point included)
    half away from zero: a mean of -9.5 on zero point -18 is -10 there, where rounding the real
    mean (the float view's fake-quant step) gave -9, and 5.5 gave 5 (gles-fuzz-graphs' recurring
    int8 finding, a pool's tie grown by the next op). Every pair below is a tie; the GPU gives
    LiteRT's integers exactly, padded windows (fewer cells) too."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(7)
    first = rng.integers(info.min, info.max, (1, 6, 5, 3))
    x = np.clip(np.stack([first, first + 1], axis=3).reshape(1, 6, 10, 3), info.min, info.max).astype(dtype)
    for padding, stride in ((1, 2), (0, 1)):  # VALID pairs (all ties), SAME 2x2 windows
        options = {"padding": padding, "stride_w": stride, "stride_h": 1, "filter_width": 2,
                   "filter_height": 1 + padding, "fused_activation_function": 0}
        model = single_op_model("AVERAGE_POOL_2D", [In(x, quant=grid)], options, output_quant=[grid])
        ours, summary = run_on_gpu(model, [x], precision)
        assert summary["cpu_nodes"] == 0
        assert np.array_equal(ours[0], run_litert(model, [x], resolver="builtin")[0])
