"""MediaPipe's custom ops (version 2, float32) on the GPU, mirroring ops/mediapipe.py:
  Landmarks2TransformMatrix  kernels_glsl/landmarks_to_matrix.glsl: one workgroup reduces the
                             rotated bounding box of the subset landmarks, then one invocation
                             writes the closed-form similarity transform
  TransformTensorBilinear    kernels_glsl/transform_tensor_bilinear.glsl: one vec4 of channels
                             per invocation, MediaPipe's pixel-centre and out-of-bounds rules
  TransformLandmarks         kernels_glsl/landmarks_transform.glsl: one landmark per invocation

Landmark tensors [1, N, D] are BHWC 1x1xNxD: landmark n is element n (x, y, z, 0). The matrix
[1, 4, 4] is BHWC 1x1x4x4: row r is element r, so a kernel reads the x and y rows as elements 0
and 1 of the matrix tensor (any matrix shape whose PHWC4 order is row-major works the same way).
"""
import math

from ...ops import mediapipe as reference
from ...registry import BINARY, UNARY, OpFacts
from ..phwc4 import bhwc
from .base import Dispatch

MATRIX_WORKGROUP = 64   # invocations reducing the subset of Landmarks2TransformMatrix
MAX_SUBSET = 4096       # subset indices live in a constant array of the shader


def _runtime_inputs_problem(node):
    for tensor in node.inputs:
        if tensor.is_const:
            return f"input tensor {tensor.index} is constant; the GPU kernel reads it from the arena"
    return None


def _matrix_layout_problem(node):
    """The kernels read the matrix as 4 consecutive vec4 rows: true when its PHWC4 element order
    is row-major: whole slices, and either one slice per pixel or one pixel per batch item."""
    s4 = bhwc(node.inputs[1].shape)
    if s4.c % 4 or (s4.slices > 1 and s4.h * s4.w > 1):
        return f"matrix shape {list(node.inputs[1].shape)} is not stored as 4 consecutive rows in PHWC4"
    return None


def _gpu_support(check, *extra):
    def support(node):
        problem = check(node)
        if problem is not None:
            return problem
        for rule in extra:
            problem = rule(node)
            if problem is not None:
                return problem
        return None
    return support


def _subset_problem(node):
    options = reference.parse_custom_options(node, reference.MATRIX_OPTION_KINDS)
    if len(options["subset_idxs"]) > MAX_SUBSET:
        return f"{len(options['subset_idxs'])} subset indices (the GPU kernel takes at most {MAX_SUBSET})"
    return None


# -- Landmarks2TransformMatrix ------------------------------------------------------------
def build_landmarks_to_matrix(node, env):
    """One workgroup of MATRIX_WORKGROUP invocations: landmarks [1, N, 3] -> matrix [1, 4, 4]."""
    options = reference.parse_custom_options(node, reference.MATRIX_OPTION_KINDS)
    landmarks, out = node.inputs[0], node.outputs[0]
    subset = [int(i) for i in options["subset_idxs"]]
    target = float(options["target_rotation_radians"])
    defines = {"SUBSET_COUNT": len(subset), "SUBSET_IDXS": ", ".join(map(str, subset))}
    params = {"landmarks_offset": env.arena(landmarks), "out_offset": env.arena(out),
              "left_index": int(options["left_rotation_idx"]), "right_index": int(options["right_rotation_idx"]),
              # cos / sin of the target rotation: the shader then needs no trigonometry at all.
              "target": (math.cos(target), math.sin(target)),
              "output_size": (float(options["output_width"]), float(options["output_height"])),
              "scale": (float(options["scale_x"]), float(options["scale_y"]))}
    workgroup = (MATRIX_WORKGROUP, 1, 1)
    return [Dispatch("landmarks_to_matrix", workgroup, defines, params, reads=(landmarks,), writes=(out,),
                     workgroup=workgroup)]


# -- TransformTensorBilinear --------------------------------------------------------------
def build_transform_tensor_bilinear(node, env):
    """One vec4 of channels per invocation: features [1, H, W, C] -> [1, out_h, out_w, C]."""
    features, matrix = node.inputs
    out = node.outputs[0]
    in4, out4 = bhwc(features.shape), bhwc(out.shape)
    params = {"in_size": in4.as_ivec4(), "out_size": out4.as_ivec4(), "channels": out4.c,
              "in_offset": env.arena(features), "matrix_offset": env.arena(matrix), "out_offset": env.arena(out)}
    return [Dispatch("transform_tensor_bilinear", (out4.w, out4.h, out4.slices), {}, params,
                     reads=(features, matrix), writes=(out,))]


# -- TransformLandmarks -------------------------------------------------------------------
def build_transform_landmarks(node, env):
    """One landmark per invocation: landmarks [1, N, D] -> [1, N, D], x and y mapped by the matrix."""
    landmarks, matrix = node.inputs
    out = node.outputs[0]
    count, channels = landmarks.shape[1], landmarks.shape[2]
    params = {"count": count, "channels": channels, "landmarks_offset": env.arena(landmarks),
              "matrix_offset": env.arena(matrix), "out_offset": env.arena(out)}
    return [Dispatch("landmarks_transform", (count, 1, 1), {}, params, reads=(landmarks, matrix), writes=(out,))]


SUPPORT = {
    "Landmarks2TransformMatrix": _gpu_support(reference.SUPPORT["Landmarks2TransformMatrix"],
                                              _runtime_inputs_problem, _subset_problem),
    "TransformTensorBilinear": _gpu_support(reference.SUPPORT["TransformTensorBilinear"],
                                            _runtime_inputs_problem, _matrix_layout_problem),
    "TransformLandmarks": _gpu_support(reference.SUPPORT["TransformLandmarks"],
                                       _runtime_inputs_problem, _matrix_layout_problem),
}
BUILD = {"Landmarks2TransformMatrix": build_landmarks_to_matrix,
         "TransformTensorBilinear": build_transform_tensor_bilinear,
         "TransformLandmarks": build_transform_landmarks}
FACTS = {"Landmarks2TransformMatrix": OpFacts(arity=UNARY), "TransformTensorBilinear": OpFacts(arity=BINARY),
         "TransformLandmarks": OpFacts(arity=BINARY)}
