// Normalizations over the channels of each pixel of a PHWC4 tensor, by OP:
//   0 SOFTMAX, 1 LOG_SOFTMAX (gpu/kernels/softmax.py), numerically stable as TFLite computes them:
//     m = max(x), e = exp((x - m) * beta), softmax = e / sum(e), log_softmax = (x - m) - log(sum(e))
//     (beta is 1 for LOG_SOFTMAX);
//   2 L2_NORMALIZATION (gpu/kernels/normalization.py), as TFLite's l2norm.cc computes it:
//     x / max(sqrt(sum(x^2)), epsilon), std::max's NaN included (a NaN sum stays NaN, tfl_max);
//     then its epilogue (rules fuse_*: an activation, a scale, a fake-quant step, ...).
// Padded channels take part in neither the max nor the sum, and are written as 0. The whole
// template is highp in every precision (its @highp line below): a half-float sum
// overflows at 65504, and so does the square of a half above 256.
//
// PARALLEL 0: one invocation per pixel, a pass over its slices per reduction, then one to write.
// PARALLEL 1: for many channels (e.g. [1, 1001] logits): the x-y plane of the first workgroup along
//   x and y handles pixel gl_GlobalInvocationID.z, each lane a strided share of the slices; the
//   max and the sum are folded across lanes in shared memory.
// @highp in every precision: the sum of exponentials, which overflows at 65504 in fp16.

#define OP_LOG_SOFTMAX 1
#define OP_L2 2
#define NEG_INF uintBitsToFloat(0xff800000u)

highp float max4(highp vec4 v) { return max(max(v.x, v.y), max(v.z, v.w)); }

// The max over the channels of slices first, first + step, ... of one pixel, whose slice s is
// element base + s * plane of the tensor.
highp float local_max(int base, int plane, int first, int step) {
  highp float m = NEG_INF;
  for (int s = first; s < size.z; s += step) {
    vec4 v = load(in_offset + base + s * plane);
    m = max(m, max4(mix(vec4(NEG_INF), v, lessThan(ivec4(4 * s) + ivec4(0, 1, 2, 3), ivec4(channels)))));
  }
  return m;
}

// The terms of slice s that the sum adds: exp((v - m) * beta), or v^2 for L2_NORMALIZATION.
highp vec4 term(vec4 v, highp float m, int s) {
#if OP == OP_L2
  highp vec4 x = keep_channels(v, channels, s);
  return x * x;
#else
  return keep_channels(exp((v - m) * beta), channels, s);
#endif
}

highp float local_sum(int base, int plane, int first, int step, highp float m) {
  highp float sum = 0.0;
  for (int s = first; s < size.z; s += step) {
    sum += dot(term(load(in_offset + base + s * plane), m, s), vec4(1.0));
  }
  return sum;
}

// Writes slices first, first + step, ... of the pixel at (pixel.x, pixel.y, batch pixel.z).
void write_slices(int base, int plane, int first, int step, highp float m, highp float sum, ivec3 pixel) {
#if OP == OP_L2
  highp float inv_norm = 1.0 / tfl_max(vec4(sqrt(sum)), vec4(epsilon)).x;
#else
  highp float log_sum = log(sum);
  highp float inv_sum = 1.0 / sum;
#endif
  for (int s = first; s < size.z; s += step) {
    vec4 v = load(in_offset + base + s * plane);
#if OP == OP_L2
    vec4 r = keep_channels(epilogue(v * inv_norm, ivec4(pixel.xy, s, pixel.z)), channels, s);
#elif OP == OP_LOG_SOFTMAX
    vec4 r = keep_channels((v - m) - log_sum, channels, s);
#else
    vec4 r = term(v, m, s) * inv_sum;
#endif
    store(out_offset + base + s * plane, r);
  }
}

#if PARALLEL
#define LANES (WG_X * WG_Y)
#define BY_MAX 0
#define BY_SUM 1
shared highp float partial[WG_X * WG_Y * WG_Z];
highp float fold(highp float a, highp float b, int op) { return op == BY_MAX ? max(a, b) : a + b; }
#include "fold_lanes.glsl"

// The fold of the z-layer's LANES slots (starting at `layer`) by max or by sum, read by every lane.
highp float fold_layer(int lane, int layer, int op) {
  fold_lanes(lane, layer + lane, op);
  memoryBarrierShared();
  barrier();
  return partial[layer];
}

void main() {
  int lane = int(gl_LocalInvocationID.x) + WG_X * int(gl_LocalInvocationID.y);
  int layer = int(gl_LocalInvocationID.z) * LANES;
  int pixel = int(gl_GlobalInvocationID.z);
  // No early return: every invocation of the workgroup must reach the barriers.
  bool live = gl_WorkGroupID.x == 0u && gl_WorkGroupID.y == 0u && pixel < grid.z;
  int plane = size.x * size.y;
  int hw = pixel % plane;
  int base = (pixel / plane) * size.z * plane + hw;  // slice 0 of this pixel
#if OP == OP_L2
  highp float m = 0.0;  // no max: the terms are squares
#else
  partial[layer + lane] = live ? local_max(base, plane, lane, LANES) : NEG_INF;
  highp float m = fold_layer(lane, layer, BY_MAX);
  barrier();  // everyone has read the max before the slots are reused
#endif
  partial[layer + lane] = live ? local_sum(base, plane, lane, LANES, m) : 0.0;
  highp float sum = fold_layer(lane, layer, BY_SUM);
  if (live) write_slices(base, plane, lane, LANES, m, sum, ivec3(hw % size.x, hw / size.x, pixel / plane));
}

#else
void main() {
  ivec3 gid = ivec3(gl_GlobalInvocationID);
  if (any(greaterThanEqual(gid, grid))) return;
  int plane = size.x * size.y;
  int base = gid.z * size.z * plane + gid.y * size.x + gid.x;  // slice 0 of pixel (x, y, batch z)
#if OP == OP_L2
  highp float m = 0.0;
#else
  highp float m = local_max(base, plane, 0, 1);
#endif
  highp float sum = local_sum(base, plane, 0, 1, m);
  write_slices(base, plane, 0, 1, m, sum, gid);
}
#endif
