"""Build a zoo of small random-weight models as .tflite files, outside CI, for
`python -m gles_delegate.tools.zoo_report ZOO_DIR` (docs/model_zoo.md is its report).

Not part of the package's dependencies, nor imported by it or by the tests: PyTorch, litert-torch,
TensorFlow and onnx2tf live in three venvs of their own (litert-torch alone pulls a multi-GB torch,
jax and transformers; onnx2tf pins TensorFlow 2.19 and numpy 1.26). Setup, once (torch and
torchvision come from this machine's local wheel index; transformers 5.25.0 is what litert-torch
0.10.0 pulls in):

    python3 -m venv /work/venvs/zoo-torch
    /work/venvs/zoo-torch/bin/pip install torch==2.14.1 torchvision==0.29.1
    /work/venvs/zoo-torch/bin/pip install litert-torch==0.10.0 timm==1.0.31 tflite==2.18.0 transformers==5.25.0
    python3 -m venv /work/venvs/zoo-tf
    /work/venvs/zoo-tf/bin/pip install tensorflow==2.21.0 tf_keras==2.21.0 tflite==2.18.0 ai-edge-litert==2.3.0
    python3 -m venv /work/venvs/zoo-onnx
    /work/venvs/zoo-onnx/bin/pip install torch==2.14.1
    /work/venvs/zoo-onnx/bin/pip install onnx2tf==1.29.24 sng4onnx sne4onnx   # onnx2tf pins the rest
    /work/venvs/zoo-onnx/bin/pip install torchvision==0.29.1 tflite==2.18.0

Build (each venv builds the models of its framework into the same directory; manifest.json there
merges the runs; default directory /work/zoo):

    /work/venvs/zoo-torch/bin/python tools/build_zoo.py [OUT_DIR] [--only NAME ...]
    /work/venvs/zoo-tf/bin/python tools/build_zoo.py [OUT_DIR] [--only NAME ...]
    /work/venvs/zoo-onnx/bin/python tools/build_zoo.py [OUT_DIR] [--only NAME ...]
    python -m gles_delegate.tools.zoo_report OUT_DIR --write docs/model_zoo.md

Torch models (torchvision, timm, transformers encoders from configs and hand-written modules;
batch 1, NCHW as litert-torch keeps it) are converted with litert_torch.convert(model,
sample_args).export(path); token-id inputs are int64 in torch and int32 in the .tflite. Keras 3 and
tf_keras models, and tf.Module models (a streaming keyword spotter whose state is resource
variables, float32 and full-integer int8; an in-graph spectrogram), with tf.lite.TFLiteConverter.
The zoo-onnx venv exports a few of the torch models with torch.onnx and converts them with onnx2tf
(channels-last inputs). Weights are random and seeded (seed 0): each framework's
default initialisation, then, for models with batch norm, the running statistics re-estimated from
a few random batches (train-mode forward passes without gradients, cumulative average), so that
activations keep their scale through deep networks and outputs are not near-constant.
Random inputs are uniform in [-1, 1), as gles_delegate.tools.common.seeded_inputs draws them;
token ids uniform over the vocabulary (the manifest's input_ranges: seeded_inputs draws integers
in [-1000, 1000], which an embedding lookup refuses). The stateful model is checked over
STREAM_CALLS successive calls from a zero state.
A model whose build or conversion fails is skipped with its reason (printed, and kept under
"skipped" in the manifest). The manifest holds, per model: file, source, framework, converter,
input shapes, dtypes (of the .tflite) and value ranges, output shapes, op counts over every subgraph,
the standard deviation of its outputs on a random input, its input sensitivity (std of the change
of the outputs between two random inputs / std of the outputs: near 0 would mean near-constant
outputs), and the converted model's error against the framework (max abs / max |framework|).
"""
import argparse
import collections
import json
import os
import sys
import time
import traceback
from pathlib import Path

import numpy as np

SEED = 0
BN_BATCHES, BN_BATCH_SIZE = 4, 4  # random batches that re-estimate the batch-norm statistics


def op_counts(data):
    """{op: count} over every subgraph of .tflite bytes (custom ops as 'CUSTOM:<code>')."""
    import tflite
    model = tflite.Model.GetRootAsModel(data, 0)
    names = {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}
    codes = []
    for i in range(model.OperatorCodesLength()):
        code = model.OperatorCodes(i)
        # Builtin codes above 127 live in builtin_code; older files only set the deprecated byte.
        number = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
        name = names.get(number, str(number))
        codes.append(f"CUSTOM:{code.CustomCode().decode()}" if name == "CUSTOM" else name)
    counts = collections.Counter()
    for s in range(model.SubgraphsLength()):
        subgraph = model.Subgraphs(s)
        counts.update(codes[subgraph.Operators(k).OpcodeIndex()] for k in range(subgraph.OperatorsLength()))
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def input_types(data):
    """The dtype names of the main subgraph's inputs of .tflite bytes ('float32', 'int32', 'int8', ...)."""
    import tflite
    model = tflite.Model.GetRootAsModel(data, 0)
    names = {v: k.lower() for k, v in vars(tflite.TensorType).items() if not k.startswith("_")}
    subgraph = model.Subgraphs(0)
    return [names.get(subgraph.Tensors(subgraph.Inputs(k)).Type(), "?") for k in range(subgraph.InputsLength())]


class Ints(collections.namedtuple("Ints", "shape high")):
    """An input spec of int64 token ids uniform over [0, high) (a plain shape tuple is float32 in
    [-1, 1)). litert-torch makes such an input int32 in the .tflite."""


def shape_of(spec):
    return tuple(spec.shape) if isinstance(spec, Ints) else tuple(spec)


def batched(spec, batch):
    """The spec with its first dimension replaced by `batch`."""
    shape = (batch,) + shape_of(spec)[1:]
    return Ints(shape, spec.high) if isinstance(spec, Ints) else shape


def random_inputs(shapes, rng):
    """Seeded arrays of the given specs: float32 uniform in [-1, 1) for a shape, int64 uniform in
    [0, high) for Ints."""
    return [rng.integers(0, s.high, s.shape).astype(np.int64) if isinstance(s, Ints)
            else rng.uniform(-1, 1, s).astype(np.float32) for s in shapes]


def input_sensitivity(first, second):
    """How much outputs change with the input: std(first - second) / std(first) over the outputs of
    two random inputs (near 0: the model maps every input to nearly the same output)."""
    return min(float(np.std(np.asarray(a, np.float64) - b)) / (float(np.std(a)) or 1.0)
               for a, b in zip(first, second))


def as_arrays(outputs):
    """A model's output or outputs as a list of numpy arrays."""
    return [np.asarray(o) for o in (outputs if isinstance(outputs, (tuple, list)) else [outputs])]


def runner(interpreter):
    """fn(inputs) -> outputs of an allocated TFLite / LiteRT interpreter (lists of arrays)."""
    def run(inputs):
        for detail, x in zip(interpreter.get_input_details(), inputs):
            interpreter.set_tensor(detail["index"], x)
        interpreter.invoke()
        return [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]
    return run


def check(framework, converted, sample, other):
    """The record's checks: framework(inputs) and converted(inputs) run the model before and after
    conversion (lists of arrays in and out); output shapes and standard deviations on `sample`,
    input sensitivity between `sample` and `other`, and the converted model's error on `sample`."""
    expected = framework(sample)
    return {"outputs": [list(e.shape) for e in expected], "output_std": [float(np.std(e)) for e in expected],
            "input_sensitivity": input_sensitivity(expected, framework(other)),
            "error_vs_framework": relative_error(converted(sample), expected)}


def relative_error(ours, theirs):
    """max over outputs of max |ours - theirs| / max |theirs|."""
    worst = 0.0
    for a, b in zip(ours, theirs):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        worst = max(worst, float(np.max(np.abs(a - b))) / (float(np.max(np.abs(b))) or 1.0))
    return worst


# -- torch ----------------------------------------------------------------------------------------
def torch_models():
    """{name: (source, builder, input shapes)}: builder() returns an nn.Module."""
    import torch
    from torch import nn
    import torchvision.models as tv
    from torchvision.models import segmentation
    from torchvision.models.vision_transformer import VisionTransformer

    class FirstOutput(nn.Module):
        """The 'out' entry of a model that returns a dict (torchvision's segmentation models)."""
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, x):
            return self.model(x)["out"]

    class UNet(nn.Module):
        """A small U-Net: 3 levels (16, 32, 64 channels), max-pool down, transposed conv up,
        skip connections by concatenation, 1x1 conv to 4 classes."""
        def __init__(self, widths=(16, 32, 64), classes=4):
            super().__init__()
            def block(cin, cout):
                return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                                     nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())
            chans = (3,) + tuple(widths)
            self.down = nn.ModuleList(block(chans[k], chans[k + 1]) for k in range(len(widths)))
            self.up = nn.ModuleList(nn.ConvTranspose2d(widths[k + 1], widths[k], 2, stride=2)
                                    for k in range(len(widths) - 1))
            self.merge = nn.ModuleList(block(2 * widths[k], widths[k]) for k in range(len(widths) - 1))
            self.head = nn.Conv2d(widths[0], classes, 1)

        def forward(self, x):
            skips = []
            for k, block in enumerate(self.down):
                x = block(x if k == 0 else nn.functional.max_pool2d(x, 2))
                skips.append(x)
            for k in reversed(range(len(self.up))):
                x = self.merge[k](torch.cat([self.up[k](x), skips[k]], dim=1))
            return self.head(x)

    class Encoder(nn.Module):
        """Two nn.TransformerEncoderLayer blocks (dim 128, 4 heads, feed-forward 256, GELU)."""
        def __init__(self):
            super().__init__()
            layer = nn.TransformerEncoderLayer(128, 4, 256, dropout=0.0, activation="gelu", batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

        def forward(self, x):
            return self.encoder(x)

    def audio_conv1d():
        """A keyword-spotting style Conv1d net on a 1 s, 4 kHz waveform."""
        layers, cin = [], 1
        for cout, kernel, stride in ((16, 9, 4), (32, 9, 4), (64, 5, 2), (64, 3, 2)):
            layers += [nn.Conv1d(cin, cout, kernel, stride, padding=kernel // 2, bias=False), nn.BatchNorm1d(cout),
                       nn.ReLU(), nn.MaxPool1d(2)]
            cin = cout
        return nn.Sequential(*layers, nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(cin, 12))

    def video_c3d():
        """A small C3D-style video classifier on 8 frames of 64x64: Conv3d blocks with batch norm and
        ReLU (3x3x3, then strided in space, then a (2+1)D net's 3x1x1 temporal conv), a global pool."""
        def block(cin, cout, kernel, stride, padding):
            return [nn.Conv3d(cin, cout, kernel, stride, padding, bias=False), nn.BatchNorm3d(cout), nn.ReLU()]
        return nn.Sequential(*block(3, 16, 3, 1, 1), *block(16, 32, 3, (1, 2, 2), 1),
                             *block(32, 32, (3, 1, 1), 1, (1, 0, 0)), nn.AdaptiveAvgPool3d(1), nn.Flatten(),
                             nn.Linear(32, 10))

    class Recurrent(nn.Module):
        """nn.LSTM or nn.GRU (2 layers, hidden 32, batch_first) then a Linear head on the last step."""
        def __init__(self, kind):
            super().__init__()
            self.rnn = getattr(nn, kind)(16, 32, num_layers=2, batch_first=True)
            self.head = nn.Linear(32, 10)

        def forward(self, x):
            return self.head(self.rnn(x)[0][:, -1])

    def timm_model(name):
        def build():
            import timm
            return timm.create_model(name, pretrained=False)
        return build

    def convnextv2_atto():
        """timm's convnextv2_atto with each GRN's scale and shift drawn at random: timm zeroes both,
        which makes GRN the identity, and the converter then drops it."""
        model = timm_model("convnextv2_atto")()
        with torch.no_grad():
            for module in model.modules():
                if type(module).__name__ == "GlobalResponseNorm":
                    module.weight.normal_(0.0, 0.5)
                    module.bias.normal_(0.0, 0.1)
        return model

    class LastHidden(nn.Module):
        """A transformers model's last_hidden_state only."""
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, x):
            return self.model(x).last_hidden_state

    def transformer(kind, config_kind, **config):
        """A transformers model (class name `kind`) built from a config with random weights."""
        def build():
            import transformers
            from transformers.models.whisper.modeling_whisper import WhisperEncoder
            cls = WhisperEncoder if kind == "WhisperEncoder" else getattr(transformers, kind)
            return LastHidden(cls(getattr(transformers, config_kind)(**config)))
        return build

    image, image160, tokens = [(1, 3, 224, 224)], [(1, 3, 160, 160)], [Ints((1, 32), 1000)]
    return {
        "resnet18": ("torchvision resnet18", lambda: tv.resnet18(), image),
        "mobilenet_v3_small": ("torchvision mobilenet_v3_small", lambda: tv.mobilenet_v3_small(), image),
        "efficientnet_b0": ("torchvision efficientnet_b0", lambda: tv.efficientnet_b0(), image),
        "regnet_x_400mf": ("torchvision regnet_x_400mf (grouped conv)", lambda: tv.regnet_x_400mf(), image),
        "shufflenet_v2_x0_5": ("torchvision shufflenet_v2_x0_5", lambda: tv.shufflenet_v2_x0_5(), image),
        "squeezenet1_1": ("torchvision squeezenet1_1", lambda: tv.squeezenet1_1(), image),
        "vit_tiny_96": ("torchvision VisionTransformer: 4 layers, dim 192, 3 heads, patch 16, 96x96",
                        lambda: VisionTransformer(96, 16, 4, 3, 192, 768, num_classes=100), [(1, 3, 96, 96)]),
        "deeplabv3_mobilenet_v3_large": (
            "torchvision deeplabv3_mobilenet_v3_large, 21 classes, 224x224",
            lambda: FirstOutput(segmentation.deeplabv3_mobilenet_v3_large(weights=None, weights_backbone=None,
                                                                          num_classes=21, aux_loss=False)), image),
        "unet_small": ("hand-written U-Net: 3 levels, 16-64 channels, transposed-conv upsampling", UNet,
                       [(1, 3, 128, 128)]),
        "transformer_encoder": ("nn.TransformerEncoder: 2 layers, dim 128, 4 heads, seq 32", Encoder,
                                [(1, 32, 128)]),
        "audio_conv1d": ("hand-written Conv1d keyword spotter on 4000 samples", audio_conv1d, [(1, 1, 4000)]),
        "convnext_atto": ("timm convnext_atto (LayerNorm2d, 7x7 depthwise, GELU)", timm_model("convnext_atto"), image),
        "mobilevit_xxs": ("timm mobilevit_xxs (unfold attention), 256x256", timm_model("mobilevit_xxs"),
                          [(1, 3, 256, 256)]),
        "edgenext_xx_small": ("timm edgenext_xx_small (cross-covariance attention: F.normalize), 160x160",
                              timm_model("edgenext_xx_small"), image160),
        "convnextv2_atto": ("timm convnextv2_atto (GRN, its scale and shift random), 160x160", convnextv2_atto,
                            image160),
        "mixnet_s": ("timm mixnet_s (mixed-kernel depthwise: split, concat), 160x160", timm_model("mixnet_s"),
                     image160),
        "ghostnet_100": ("timm ghostnet_100 (ghost modules: concat), 160x160", timm_model("ghostnet_100"), image160),
        "bert_tiny": ("transformers BertModel: 2 layers, hidden 128, 2 heads, vocab 1000, seq 32; last hidden state",
                      transformer("BertModel", "BertConfig", vocab_size=1000, hidden_size=128, num_hidden_layers=2,
                                  num_attention_heads=2, intermediate_size=512, max_position_embeddings=64), tokens),
        "gpt2_tiny": ("transformers GPT2Model: 2 layers, n_embd 128, 2 heads, vocab 1000, seq 32, causal; last hidden "
                      "state", transformer("GPT2Model", "GPT2Config", vocab_size=1000, n_embd=128, n_layer=2, n_head=2,
                                           n_positions=64), tokens),
        "t5_encoder_tiny": ("transformers T5EncoderModel: 2 layers, d_model 128, 4 heads, vocab 1000, seq 32, "
                            "relative position buckets; last hidden state",
                            transformer("T5EncoderModel", "T5Config", vocab_size=1000, d_model=128, d_kv=32, d_ff=256,
                                        num_layers=2, num_heads=4), tokens),
        # init_std 0.1, not Whisper's 0.02: at 0.02 the convolutions' output is small next to the sinusoidal
        # positions and the outputs barely depend on the input (input sensitivity 0.04).
        "whisper_encoder_tiny": ("transformers WhisperEncoder: 2 layers, d_model 128, 2 heads, 80 mel bins x 100 "
                                 "frames, init_std 0.1; last hidden state",
                                 transformer("WhisperEncoder", "WhisperConfig", num_mel_bins=80, d_model=128,
                                             encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=256,
                                             max_source_positions=50, init_std=0.1), [(1, 80, 100)]),
        "video_c3d": ("hand-written C3D-style video classifier (Conv3d, BatchNorm3d), 8 frames of 64x64", video_c3d,
                      [(1, 3, 8, 64, 64)]),
        "torch_lstm": ("nn.LSTM: 2 layers, hidden 32, seq 20, features 16", lambda: Recurrent("LSTM"),
                       [(1, 20, 16)]),
        "torch_gru": ("nn.GRU: 2 layers, hidden 32, seq 20, features 16", lambda: Recurrent("GRU"), [(1, 20, 16)]),
    }


def reestimate_batch_norm(model, shapes, rng):
    """Replace the batch-norm running statistics (all default 0 / 1 after init) by their
    cumulative average over BN_BATCHES random batches: train-mode forward passes without
    gradients, then eval mode. A model without batch norm is only put in eval mode."""
    import torch
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # None: a cumulative moving average over the batches seen
    if norms:
        model.train()
        with torch.no_grad():
            for _ in range(BN_BATCHES):
                model(*[torch.from_numpy(x) for x in random_inputs([batched(s, BN_BATCH_SIZE) for s in shapes], rng)])
    return model.eval()


def randomize_zero_weights(model):
    """Give every weight matrix initialized to all zeros (torchvision's VisionTransformer zeroes
    its classifier head) seeded normal values: a zero head makes every output 0 whatever the
    input, and a comparison of zeros tests nothing."""
    import torch
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() >= 2 and not parameter.any():
                parameter.normal_(0.0, 0.02)
    return model


def build_torch(name, builder, shapes, out_dir, rng):
    """Build, re-estimate batch norm, convert with litert-torch, check against torch: the record."""
    import litert_torch
    import torch
    torch.manual_seed(SEED)
    model = reestimate_batch_norm(randomize_zero_weights(builder()), shapes, rng)
    sample, other = random_inputs(shapes, rng), random_inputs(shapes, rng)
    edge = litert_torch.convert(model, tuple(torch.from_numpy(x) for x in sample))
    edge.export(str(out_dir / f"{name}.tflite"))

    def framework(inputs):
        with torch.no_grad():
            return as_arrays(model(*[torch.from_numpy(x) for x in inputs]))

    def converted(inputs):  # litert-torch's .tflite takes int64 token ids as int32
        return as_arrays(edge(*[torch.from_numpy(x.astype(np.int32) if x.dtype == np.int64 else x) for x in inputs]))
    return {"framework": f"torch {torch.__version__}", "converter": f"litert-torch {litert_torch.__version__}",
            **check(framework, converted, sample, other)}


# -- Keras ----------------------------------------------------------------------------------------
def keras_models():
    """{name: (source, builder, input shapes)}: builder() returns a Keras 3 or tf_keras model."""
    import keras
    import tf_keras

    def recurrent(api, kind):
        def build():
            layer = getattr(api.layers, kind)
            return api.Sequential([api.Input((20, 16), batch_size=1), layer(32, return_sequences=True),
                                   layer(32), api.layers.Dense(10)])
        return build

    def conv3d():
        """Conv3D 3x3x3, Conv3D strided in space, a 3x1x1 temporal Conv3D, GlobalAveragePooling3D, Dense."""
        layers = keras.layers
        return keras.Sequential([keras.Input((8, 32, 32, 3), batch_size=1),
                                 layers.Conv3D(16, 3, padding="same", activation="relu"),
                                 layers.Conv3D(32, 3, strides=(1, 2, 2), padding="same", activation="relu"),
                                 layers.Conv3D(32, (3, 1, 1), padding="valid"), layers.GlobalAveragePooling3D(),
                                 layers.Dense(10)])

    def unet3d():
        """A 3D U-Net level: Conv3D down (stride 2), Conv3DTranspose up, the skip concatenated, a
        1x1x1 Conv3D to 2 classes per voxel (a volume segmentation head)."""
        layers = keras.layers
        volume = keras.Input((8, 32, 32, 4), batch_size=1)
        down = layers.Conv3D(16, 3, strides=2, padding="same", activation="relu")(volume)
        down = layers.Conv3D(16, 3, padding="same", activation="relu")(down)
        up = layers.Conv3DTranspose(8, 3, strides=2, padding="same", activation="relu")(down)
        return keras.Model(volume, layers.Conv3D(2, 1)(layers.Concatenate()([up, volume])))

    recurrent_models = {
        f"{prefix}_{kind.lower()}": (f"{label} {kind}: 2 layers, hidden 32, seq 20, features 16",
                                     recurrent(api, kind), [(1, 20, 16)])
        for prefix, label, api in (("keras3", f"Keras {keras.__version__}", keras),
                                   ("tf_keras", f"tf_keras {tf_keras.__version__}", tf_keras))
        for kind in ("LSTM", "GRU")
    }
    return {**recurrent_models,
            "keras3_conv3d": (f"Keras {keras.__version__} Conv3D video classifier, 8 frames of 32x32", conv3d,
                              [(1, 8, 32, 32, 3)]),
            "keras3_unet3d": (f"Keras {keras.__version__} 3D U-Net level (Conv3D, Conv3DTranspose, skip), 8x32x32x4",
                              unet3d, [(1, 8, 32, 32, 4)])}


def convert_keras(model):
    """(.tflite bytes, how): TFLiteConverter.from_keras_model, else from a concrete function."""
    import tensorflow as tf
    try:
        return tf.lite.TFLiteConverter.from_keras_model(model).convert(), "from_keras_model"
    except Exception as exc:  # Keras 3 models need the concrete-function path on some releases
        print(f"  from_keras_model failed ({type(exc).__name__}: {str(exc)[:200]}); trying a concrete function")
    specs = [tf.TensorSpec(i.shape, i.dtype) for i in model.inputs]
    function = tf.function(lambda *a: model(*a, training=False)).get_concrete_function(*specs)
    return tf.lite.TFLiteConverter.from_concrete_functions([function], model).convert(), "from_concrete_functions"


def build_keras(name, builder, shapes, out_dir, rng):
    """Build (default seeded initialisation), convert with the TF converter, check against Keras."""
    import keras
    import tensorflow as tf
    keras.utils.set_random_seed(SEED)
    tf.random.set_seed(SEED)
    model = builder()
    data, how = convert_keras(model)
    (out_dir / f"{name}.tflite").write_bytes(data)
    interpreter = tf.lite.Interpreter(model_content=data)
    interpreter.allocate_tensors()

    converted = runner(interpreter)
    return {"framework": f"tensorflow {tf.__version__}", "converter": f"TFLiteConverter.{how}",
            **check(lambda inputs: as_arrays(model(*inputs, training=False)), converted,
                    random_inputs(shapes, rng), random_inputs(shapes, rng))}


# -- TensorFlow modules ---------------------------------------------------------------------------
STREAM_FEATURES, STREAM_CALLS = 40, 12  # the keyword spotter's features per frame; calls per check


def tf_models():
    """{name: (source, builder, input shapes, build function)}: the tf.Module models of
    tools/zoo_tf_modules.py (seeded random weights)."""
    from zoo_tf_modules import tf_modules  # beside this file, on sys.path when run as a script
    modules = tf_modules(SEED, STREAM_FEATURES)

    stream = "streaming keyword spotter (resource-variable ring buffers, conv/MixConv/depthwise), 40 features a frame"
    return {
        "streaming_kws_int8": (f"tf.Module {stream}; full-integer PTQ, int8 in and out", modules["StreamingKws"],
                               [(1, 1, STREAM_FEATURES)], build_streaming(quantized=True)),
        "streaming_kws_float32": (f"tf.Module {stream}; float32", modules["StreamingKws"], [(1, 1, STREAM_FEATURES)],
                                  build_streaming(quantized=False)),
        "spectrogram_cnn": ("tf.Module log-mel spectrogram in graph (stft: RFFT2D, COMPLEX_ABS) + conv classifier, "
                            "4000 samples", modules["Spectrogram"], [(1, 4000)], build_tf_function),
        "greedy_tagger": ("tf.Module greedy tagging step: dense logits, tf.argmax (int64) read back by "
                          "tf.gather, tf.one_hot and the outputs", modules["GreedyTagger"], [(1, 16, 32)],
                          build_tf_function),
    }


def litert_interpreter():
    """(its name and version, Interpreter class): ai-edge-litert's when installed, else tf.lite's."""
    try:
        from importlib.metadata import version
        from ai_edge_litert.interpreter import Interpreter
        return f"ai-edge-litert {version('ai-edge-litert')}", Interpreter
    except ImportError:
        import tensorflow as tf
        return f"tf.lite {tf.__version__}", tf.lite.Interpreter


def quantize(x, detail):
    """A float array as the input `detail` takes it (int8 through its scale and zero point)."""
    if np.dtype(detail["dtype"]) == np.float32:
        return x
    scale, zero = detail["quantization"]
    info = np.iinfo(detail["dtype"])
    return np.clip(np.round(x / scale + zero), info.min, info.max).astype(detail["dtype"])


def dequantize(x, detail):
    if np.dtype(detail["dtype"]) == np.float32:
        return x
    scale, zero = detail["quantization"]
    return (x.astype(np.float32) - zero) * scale


def build_streaming(quantized):
    """The build function of the streaming keyword spotter: SavedModel -> TFLiteConverter (the
    variables stay variables: VAR_HANDLE / READ_VARIABLE / ASSIGN_VARIABLE, CALL_ONCE), full-integer
    post-training quantization when `quantized`. The check runs STREAM_CALLS successive calls from
    a zero state through the module and through a fresh LiteRT interpreter, and fails the build
    unless the converted model's output to one frame given twice changes (its state does)."""
    def build(name, builder, shapes, out_dir, rng):
        import tempfile
        import tensorflow as tf
        tf.random.set_seed(SEED)
        module = builder()
        sample, other, calibration = ([random_inputs(shapes, rng)[0] for _ in range(n)]
                                      for n in (STREAM_CALLS, STREAM_CALLS, 200))
        with tempfile.TemporaryDirectory() as saved:
            tf.saved_model.save(module, saved, signatures=module.__call__.get_concrete_function())
            converter = tf.lite.TFLiteConverter.from_saved_model(saved)
            if quantized:
                converter.optimizations = {tf.lite.Optimize.DEFAULT}
                converter._experimental_variable_quantization = True  # int8 states, as microWakeWord converts
                converter.target_spec.supported_ops = {tf.lite.OpsSet.TFLITE_BUILTINS_INT8}
                converter.inference_input_type = converter.inference_output_type = tf.int8
                converter.representative_dataset = lambda: ([x] for x in calibration)  # one stream, in order
            for conversions in range(1, 9):
                data = converter.convert()
                # TF 2.21's converter leaves one state variable float32 (with a DEQUANTIZE / QUANTIZE
                # pair) in about half its runs, at random even in one process: convert again.
                if not quantized or not {"QUANTIZE", "DEQUANTIZE"} & set(op_counts(data)):
                    break
        (out_dir / f"{name}.tflite").write_bytes(data)
        runtime, interpreter_class = litert_interpreter()

        def framework(frames):
            module.reset()
            return [np.concatenate([module(x).numpy() for x in frames])]

        def converted(frames):  # a fresh interpreter: its variables start at CALL_ONCE's zeros
            interpreter = interpreter_class(model_content=data)
            interpreter.allocate_tensors()
            (inp,), (out,) = interpreter.get_input_details(), interpreter.get_output_details()
            outputs = []
            for x in frames:
                interpreter.set_tensor(inp["index"], quantize(x, inp))
                interpreter.invoke()
                outputs.append(dequantize(interpreter.get_tensor(out["index"]), out))
            return [np.concatenate(outputs)]
        twice = converted([sample[0], sample[0]])[0]
        if np.array_equal(twice[0], twice[1]):
            raise RuntimeError(f"{runtime}: one frame given twice gave the same outputs (the state did not change)")
        how = ", full-integer PTQ (int8 in/out, variables quantized)" if quantized else ""
        checked = check(framework, converted, sample, other)
        checked["outputs"] = [[1, *shape[1:]] for shape in checked["outputs"]]  # one call's, not the calls'
        return {"framework": f"tensorflow {tf.__version__}", "converter": f"TFLiteConverter.from_saved_model{how}",
                "runtime": runtime, "stream_calls": STREAM_CALLS, "state_changes_between_invokes": True,
                "conversions": conversions, **checked}
    return build


def build_tf_function(name, builder, shapes, out_dir, rng):
    """A stateless tf.Module: its __call__'s concrete function through the TF converter with
    TFLite builtins only, checked against the module."""
    import tensorflow as tf
    tf.random.set_seed(SEED)
    module = builder()
    converter = tf.lite.TFLiteConverter.from_concrete_functions([module.__call__.get_concrete_function()], module)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    data = converter.convert()
    (out_dir / f"{name}.tflite").write_bytes(data)
    runtime, interpreter_class = litert_interpreter()
    interpreter = interpreter_class(model_content=data)
    interpreter.allocate_tensors()
    signature = interpreter.get_signature_runner()
    names = interpreter.get_signature_list()["serving_default"]

    def converted(inputs):  # by the signature's names (output_0, ...): the converter may order
        outputs = signature(**dict(zip(names["inputs"], inputs)))  # a tuple's outputs otherwise
        return [outputs[name] for name in sorted(names["outputs"], key=lambda n: (len(n), n))]
    return {"framework": f"tensorflow {tf.__version__}", "converter": "TFLiteConverter.from_concrete_functions, "
            "TFLITE_BUILTINS only", "runtime": runtime,
            **check(lambda inputs: as_arrays(module(*inputs)), converted, random_inputs(shapes, rng),
                    random_inputs(shapes, rng))}


# -- onnx2tf ---------------------------------------------------------------------------------------
def onnx_models():
    """{name: (source, builder, input shapes)}: torch models of torch_models(), exported with
    torch.onnx (the TorchScript exporter, opset 17) and converted by onnx2tf (NCHW -> NHWC).
    transformer_encoder is not among them: onnx2tf 1.29.24 made its GELU a Flex op (CUSTOM:FlexErf)
    and read its (1, 32, 128) input as NCW, and the result was 0.28 off torch."""
    torch = torch_models()
    return {f"{name}_onnx2tf": (f"{torch[name][0]}; torch.onnx -> onnx2tf", *torch[name][1:])
            for name in ("mobilenet_v3_small", "audio_conv1d")}


def to_layout(x, shape):
    """x as a tensor of `shape`: itself, or with its channel axis (1) moved last, as onnx2tf lays
    out ranks 3 and 4."""
    for candidate in (x, np.moveaxis(x, 1, -1)):
        if list(candidate.shape) == list(shape):
            return np.ascontiguousarray(candidate)
    raise ValueError(f"onnx2tf's tensor has shape {list(shape)}; torch's {list(x.shape)}")


def build_onnx(name, builder, shapes, out_dir, rng):
    """Build as build_torch does, export to ONNX, convert with onnx2tf (its float32 .tflite), check
    against torch (inputs and outputs moved to onnx2tf's channels-last layout where it moved them)."""
    import tempfile
    import onnx2tf
    import onnx2tf.onnx2tf as internals
    import torch
    torch.manual_seed(SEED)
    model = reestimate_batch_norm(randomize_zero_weights(builder()), shapes, rng)
    sample, other = random_inputs(shapes, rng), random_inputs(shapes, rng)
    # onnx2tf downloads sample images from GitHub to check a model with 3-channel image inputs, and
    # fails without a network: seeded random ones instead.
    internals.download_test_image_data = lambda: np.random.default_rng(SEED).random((20, 128, 128, 3), np.float32)
    with tempfile.TemporaryDirectory() as work:
        onnx_path = Path(work) / f"{name}.onnx"
        torch.onnx.export(model, tuple(torch.from_numpy(x) for x in sample), str(onnx_path), dynamo=False,
                          opset_version=17, input_names=[f"input_{k}" for k in range(len(shapes))])
        onnx2tf.convert(input_onnx_file_path=str(onnx_path), output_folder_path=f"{work}/tf", non_verbose=True)
        data = (Path(work) / "tf" / f"{name}_float32.tflite").read_bytes()
    (out_dir / f"{name}.tflite").write_bytes(data)
    runtime, interpreter_class = litert_interpreter()
    interpreter = interpreter_class(model_content=data)
    interpreter.allocate_tensors()
    inputs, outputs = interpreter.get_input_details(), interpreter.get_output_details()

    def framework(values):
        with torch.no_grad():
            return as_arrays(model(*[torch.from_numpy(x) for x in values]))

    def converted(values):
        for detail, x in zip(inputs, values):
            interpreter.set_tensor(detail["index"], to_layout(x, detail["shape"]))
        interpreter.invoke()
        return [interpreter.get_tensor(d["index"]) for d in outputs]
    expected = framework(sample)
    checked = check(lambda values: [to_layout(e, d["shape"]) for e, d in zip(framework(values), outputs)],
                    converted, sample, other)
    return {"framework": f"torch {torch.__version__}",
            "converter": f"torch.onnx (TorchScript, opset 17) + onnx2tf {onnx2tf.__version__}", "runtime": runtime,
            "inputs": [[int(n) for n in d["shape"]] for d in inputs], "torch_inputs": [list(s) for s in shapes],
            "torch_outputs": [list(e.shape) for e in expected], **checked}


# -- main -----------------------------------------------------------------------------------------
def frameworks():
    """[(models, build function)] of the frameworks this interpreter can import."""
    try:
        import onnx2tf  # noqa: F401  (the onnx2tf venv: only its models; its TensorFlow is onnx2tf's pin)
        return [(onnx_models, build_onnx)]
    except ImportError:
        pass
    found = []
    try:
        import litert_torch  # noqa: F401  (the torch venv)
        found.append((torch_models, build_torch))
    except ImportError:
        pass
    try:
        import tensorflow  # noqa: F401  (the TensorFlow venv)
        import tf_keras  # noqa: F401
        found += [(keras_models, build_keras), (tf_models, None)]
    except ImportError:
        pass
    return found


def update_manifest(path, name, record=None, skipped=None):
    """Record one model in the manifest at `path`: its record, or why it was skipped. Read, changed
    and replaced (through a rename) per model, so the two venvs' builds may share a directory."""
    manifest = json.loads(path.read_text()) if path.exists() else {}
    models, skips = manifest.setdefault("models", {}), manifest.setdefault("skipped", {})
    models.pop(name, None)
    skips.pop(name, None)
    if record is not None:
        models[name] = record
    else:
        skips[name] = skipped
    temp = path.with_name(f".{path.name}.{os.getpid()}")
    temp.write_text(json.dumps(manifest, indent=1, sort_keys=True))
    os.replace(temp, path)


def build_one(name, source, builder, shapes, build, out_dir):
    """Build and convert one model; its manifest record, or None (skipped: the reason printed and
    recorded)."""
    path = out_dir / f"{name}.tflite"
    start = time.perf_counter()
    try:
        record = build(name, builder, shapes, out_dir, np.random.default_rng(SEED))
    except Exception as exc:  # a conversion failure is a finding: skip the model, say why
        why = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:300]}"
        print(f"  SKIPPED: {why}\n" + "".join(traceback.format_exc().splitlines(True)[-6:]), flush=True)
        path.unlink(missing_ok=True)
        update_manifest(out_dir / "manifest.json", name, skipped=f"{source}: {why}")
        return None
    data = path.read_bytes()
    record = {"file": path.name, "source": source, "inputs": [list(shape_of(s)) for s in shapes],
              "input_dtypes": input_types(data),
              "input_ranges": [[0, s.high - 1] if isinstance(s, Ints) else [-1, 1] for s in shapes], **record,
              "bytes": len(data), "ops": op_counts(data), "build_s": round(time.perf_counter() - start, 1)}
    print(f"  ok: {len(data) / 1e6:.2f} MB, {sum(record['ops'].values())} ops, output std {record['output_std']}, "
          f"input sensitivity {record['input_sensitivity']:.2g}, "
          f"error vs framework {record['error_vs_framework']:.2g}", flush=True)
    update_manifest(out_dir / "manifest.json", name, record=record)
    return record


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", nargs="?", default="/work/zoo", help="zoo directory (default /work/zoo)")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="build only these models")
    args = parser.parse_args(argv)
    found = frameworks()
    if not found:
        parser.error("none of onnx2tf, litert_torch, tensorflow + tf_keras can be imported: run this under one of the "
                     "venvs named at the top of tools/build_zoo.py")
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    for models, build in found:
        for name, (source, builder, shapes, *own) in models().items():  # own: the model's own build function
            if not args.only or name in args.only:
                print(f"{name}: {source}", flush=True)
                build_one(name, source, builder, shapes, own[0] if own else build, out_dir)
    print(f"manifest: {out_dir / 'manifest.json'}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.exit(main())
