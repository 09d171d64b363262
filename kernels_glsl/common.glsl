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
// 4 tanh. `kind` is a compile-time constant (a define), so the call folds to one branch.
vec4 activate_as(int kind, vec4 x) {
  if (kind == 1) return max(x, vec4(0.0));
  if (kind == 2) return clamp(x, vec4(-1.0), vec4(1.0));
  if (kind == 3) return clamp(x, vec4(0.0), vec4(6.0));
  if (kind == 4) return tanh(x);
  return x;
}

// The kernel's own fused activation (define ACTIVATION).
vec4 activate(vec4 x) { return activate_as(ACTIVATION, x); }

#if STORAGE_HALF
// v rounded to the nearest half (ties to even, overflow to inf), as a store to half storage
// rounds it. In integer arithmetic: a compiler may drop unpackHalf2x16(packHalf2x16(v)) as a
// mere change of precision, which GLSL ES lets it compute higher (NVIDIA's does).
vec4 stored_value(vec4 v) {
  uvec4 bits = floatBitsToUint(v);
  uvec4 magnitude = bits & 0x7fffffffu;
  // Normal halves keep 10 of float's 23 mantissa bits: add just under half of the 13 dropped
  // (plus the lowest kept bit, for ties to even) and clear them.
  vec4 r = uintBitsToFloat((magnitude + 0xfffu + ((magnitude >> 13) & 1u)) & 0xffffe000u);
  highp vec4 size = abs(v);
  r = mix(r, roundEven(size * 16777216.0) * (1.0 / 16777216.0), lessThan(size, vec4(6.103515625e-05)));
  r = mix(r, vec4(uintBitsToFloat(0x7f800000u)), greaterThanEqual(size, vec4(65520.0)));
  r = uintBitsToFloat(floatBitsToUint(r) | (bits & 0x80000000u));
  return mix(r, v, isnan(v));
}
#else
vec4 stored_value(vec4 v) { return v; }
#endif

// v with the channels past `channels` in slice s set to zero (a select, so NaN or Inf computed
// for a padded channel, e.g. 0/0, never leaks).
vec4 keep_channels(vec4 v, int channels, int s) {
  return mix(vec4(0.0), v, lessThan(ivec4(4 * s) + ivec4(0, 1, 2, 3), ivec4(channels)));
}
