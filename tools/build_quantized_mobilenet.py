"""Build quantized MobileNet v1 stand-ins with TensorFlow's converter (a development tool: needs
tensorflow, which is not a dependency of this package and is not used in CI).

    python tools/build_quantized_mobilenet.py OUT_DIR [--shared-models ../shared/models]

Writes, from the same He-initialised Keras MobileNet v1 (alpha 1.0, 224x224, 1001 classes) as
shared/models/build_keras_tflite.py:
  mobilenet_v1_int8.tflite          full-integer: int8 weights and activations, int8 I/O
  mobilenet_v1_int8_float_io.tflite full-integer inside, float I/O (QUANTIZE / DEQUANTIZE at the ends)
  mobilenet_v1_dynamic_range.tflite int8 weights, float activations (dynamic-range quantization)
Calibration: 32 seeded uniform [-1, 1) images.
"""
import argparse
import os
import sys

import numpy as np

from gles_delegate.tools import common


def stand_ins_dir(text):
    """argparse type of --shared-models: a directory holding build_keras_tflite.py."""
    if not os.path.isfile(os.path.join(text, "build_keras_tflite.py")):
        raise argparse.ArgumentTypeError(f"{text!r} holds no build_keras_tflite.py")
    return text


def build_parser():
    parser = common.tool_parser("python tools/build_quantized_mobilenet.py", __doc__)
    parser.add_argument("out", type=common.output_dir, help="directory for the three .tflite files")
    parser.add_argument("--shared-models", type=stand_ins_dir,
                        default=os.path.join(os.path.dirname(__file__), "..", "..", "shared", "models"),
                        help="the directory of build_keras_tflite.py (default: ../shared/models beside the "
                             "source tree)")
    return parser


def main(argv=None):
    return common.run_main(build_parser(), run, argv)


def run(args):
    sys.argv = [sys.argv[0], args.out]  # build_keras_tflite reads its output dir from argv at import
    sys.path.insert(0, os.path.abspath(args.shared_models))
    import build_keras_tflite as stand_ins  # noqa: E402  (TensorFlow is imported here)
    import keras
    import tensorflow as tf

    model = stand_ins.he_reinit(keras.applications.MobileNet(
        input_tensor=keras.Input((224, 224, 3), batch_size=1, name="input"), alpha=1.0, weights=None, classes=1001))
    rng = np.random.default_rng(0)
    calibration = [rng.uniform(-1, 1, (1, 224, 224, 3)).astype(np.float32) for _ in range(32)]

    def converter(integer, io_type=None):
        conv = tf.lite.TFLiteConverter.from_keras_model(model)
        conv.optimizations = [tf.lite.Optimize.DEFAULT]
        if integer:
            conv.representative_dataset = lambda: ([x] for x in calibration)
            conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        if io_type is not None:
            conv.inference_input_type = io_type
            conv.inference_output_type = io_type
        return conv.convert()

    os.makedirs(args.out, exist_ok=True)
    for name, data in (("mobilenet_v1_int8", converter(True, tf.int8)),
                       ("mobilenet_v1_int8_float_io", converter(True)),
                       ("mobilenet_v1_dynamic_range", converter(False))):
        path = os.path.join(args.out, name + ".tflite")
        with open(path, "wb") as f:
            f.write(data)
        print(f"{len(data):>9}  {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
