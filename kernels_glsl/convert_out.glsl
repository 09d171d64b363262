// PHWC4 in the arena -> BHWC float32 in the I/O buffer. One invocation per (w, h, b * slices + s).
#define TO_PHWC4 0
#include "convert.glsl"
