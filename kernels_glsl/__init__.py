"""GLSL ES 3.10 compute-shader templates, one file per kernel family, plus the pieces gpu/shader.py
adds to them (common.glsl, epilogue.glsl) or inserts where a template says `#include "x.glsl"`
(fold_lanes.glsl, conv_common.glsl, convert.glsl, row_major.glsl, per_element.glsl);
gles_delegate/gpu/kernels/ specializes them."""
