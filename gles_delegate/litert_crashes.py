"""Nodes LiteRT's kernels crash the process on (each found by gles-fuzz against ai-edge-litert
2.3): kept off every LiteRT interpreter this package makes (a sub-model of CPU nodes, a loop's
copied subgraphs, the model file whole), so that the reference, which computes them or refuses
them with a ModelError, runs them instead."""
import numpy as np


def crash_reason(node):
    """Why LiteRT's kernels would crash the process on `node` (each found by gles-fuzz), or
    None: what keeps it off a LiteRT sub-model, and the model file off LiteRT whole."""
    if node.op == "DEPTHWISE_CONV_2D" and len(node.inputs) == 2:
        # TFLite's Prepare takes the 2-input form; LiteRT 2.3's Eval then reads the bias it lacks.
        return "a DEPTHWISE_CONV_2D without its bias input crashes LiteRT's kernel (SIGSEGV)"
    tensors = [t for t in node.inputs + node.outputs if t is not None]
    return next((why for why in map(_unsafe_quantization, tensors) if why is not None), None)


def _unsafe_quantization(tensor):
    """Why LiteRT's kernels are not safe with integer `tensor`'s quantization, or None: a scale
    that is not a positive normal float, or zero points outside its type's range or not one per
    scale (gles-fuzz: each crashed LiteRT 2.3's QUANTIZE; the reference computes with them)."""
    q = tensor.quantization
    if q is None or np.dtype(tensor.dtype).kind not in "iu":
        return None
    scales, zero_points, info = np.asarray(q.scales, np.float64), np.asarray(q.zero_points), np.iinfo(tensor.dtype)
    unsafe = f"tensor {tensor.index} has a quantization LiteRT's kernels are not safe with"
    if not np.all(np.isfinite(scales) & (scales >= np.finfo(np.float32).tiny)):
        return f"{unsafe}: a scale that is not a positive normal float"
    if zero_points.size not in (0, 1, scales.size) or np.any((zero_points < info.min) | (zero_points > info.max)):
        return f"{unsafe}: zero points outside {tensor.dtype} or not one per scale"
    return None
