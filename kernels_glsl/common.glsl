// Shared by every kernel: the workgroup size, the storage buffers and their accessors, and the
// fused activation. Python prepends #version, precision, the #defines and the Params block.
//
// Binding 0: the arena (every activation tensor of the partition, PHWC4, vec4 or half4).
// Binding 1: the constants (weights, biases, PHWC4-packed, vec4 or half4).
// Storage is half precision when STORAGE_HALF is 1: each vec4 is packed into a uvec2.

layout(local_size_x = WG_X, local_size_y = WG_Y, local_size_z = WG_Z) in;

#if STORAGE_HALF
layout(std430, binding = 0) buffer Arena { uvec2 arena[]; };
layout(std430, binding = 1) readonly buffer Consts { uvec2 consts[]; };
vec4 load(int i) { uvec2 v = arena[i]; return vec4(unpackHalf2x16(v.x), unpackHalf2x16(v.y)); }
vec4 weight(int i) { uvec2 v = consts[i]; return vec4(unpackHalf2x16(v.x), unpackHalf2x16(v.y)); }
void store(int i, vec4 v) { arena[i] = uvec2(packHalf2x16(v.xy), packHalf2x16(v.zw)); }
#else
layout(std430, binding = 0) buffer Arena { vec4 arena[]; };
layout(std430, binding = 1) readonly buffer Consts { vec4 consts[]; };
vec4 load(int i) { return arena[i]; }
vec4 weight(int i) { return consts[i]; }
void store(int i, vec4 v) { arena[i] = v; }
#endif

// Element (x = w, y = h, z = b * slices + s) of a PHWC4 tensor whose size is (w, h, slices, b).
int phwc4_index(ivec4 size, int x, int y, int z) { return (z * size.y + y) * size.x + x; }

// TFLite's fused activations (ActivationFunctionType): 0 none, 1 relu, 2 relu_n1_to_1, 3 relu6,
// 4 tanh.
vec4 activate(vec4 x) {
#if ACTIVATION == 1
  return max(x, vec4(0.0));
#elif ACTIVATION == 2
  return clamp(x, vec4(-1.0), vec4(1.0));
#elif ACTIVATION == 3
  return clamp(x, vec4(0.0), vec4(6.0));
#elif ACTIVATION == 4
  return tanh(x);
#else
  return x;
#endif
}

// v with the channels past `channels` in slice s set to zero (a select, so NaN or Inf computed
// for a padded channel, e.g. 0/0, never leaks).
vec4 keep_channels(vec4 v, int channels, int s) {
  return mix(vec4(0.0), v, lessThan(ivec4(4 * s) + ivec4(0, 1, 2, 3), ivec4(channels)));
}
