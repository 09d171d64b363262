"""GLSL ES 3.10 compute-shader templates, one file per kernel family; gles_delegate/gpu/kernels/ specializes them."""
