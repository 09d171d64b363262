// BHWC float32 in the I/O buffer -> PHWC4 in the arena. One invocation per (w, h, b * slices + s).
#define TO_PHWC4 1
#include "convert.glsl"
