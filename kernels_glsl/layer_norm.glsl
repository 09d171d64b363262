// LAYER_NORM (gpu/kernels/layer_norm.py; only the rewrite rule fuse_layer_norm makes it): the
// layer normalization a converter writes as eight or more nodes, over the channels (the last
// axis) of each pixel of a PHWC4 tensor:
//   y = (x - mean) * inversesqrt(variance + epsilon) * gamma + beta
// with the mean and the (biased) variance over the `channels` real channels. Padded channels
// take no part in either; gamma and beta are 0 there, so they are written as 0. One invocation
// per pixel, three passes over its slices (the mean, the squared deviations, the output); the
// sums are highp in every precision, as the MEAN kernel's are. Then the output stage of the last
// node it replaces (the clamp to the finite floats) and its epilogue (rules fuse_*: an activation,
// a residual ADD, ...).
//
// CENTER 0: an RMS normalization (rule fuse_rms_norm): the mean taken as 0, so the second pass
// sums the squares of x itself and the first is skipped.
// LANES > 1 (few pixels: a transformer's tokens): a workgroup of LANES invocations per pixel, each
// taking every LANES-th slice of each pass, the sums added up through shared memory; grid
// (LANES, pixels, 1). One invocation looping over hundreds of channels three times left the
// GPU idle: 17 us for 25 tokens of 168 channels on an H100.
// Defines: CENTER; LANES; ACTIVATION, CLAMP_FINITE and EP_* (the output stage and epilogue, common.glsl).
// Params: size (w, h, slices, batch); channels; epsilon; in_offset, out_offset (arena);
//   gamma_offset, beta_offset (constants, one vec4 per slice).

#if LANES > 1
shared highp float partial[LANES];

// The sum of `value` over the workgroup's lanes, in every lane: each adds the LANES (at most
// layer_norm.MAX_LANES) slots up itself, in one order, so that all get the same sum.
highp float lanes_sum(int lane, highp float value) {
  partial[lane] = value;
  memoryBarrierShared();
  barrier();
  highp float total = 0.0;
  for (int i = 0; i < LANES; ++i) total += partial[i];
  barrier();  // every lane has read the slots before they are written again
  return total;
}
#define FIRST_SLICE int(gl_LocalInvocationID.x)
#define SUM(value) lanes_sum(FIRST_SLICE, value)
#else
#define FIRST_SLICE 0
#define SUM(value) (value)
#endif

void main() {
#if LANES > 1
  // One pixel per workgroup: `live` is the same in all its lanes, which all reach the barriers.
  int pixel = int(gl_WorkGroupID.y);
  bool live = pixel < grid.y;
  ivec3 gid = ivec3(pixel % size.x, (pixel / size.x) % size.y, pixel / (size.x * size.y));
#else
  ivec3 gid = ivec3(gl_GlobalInvocationID);
  if (any(greaterThanEqual(gid, grid))) return;
  bool live = true;
#endif
  int plane = size.x * size.y;
  int base = gid.z * size.z * plane + gid.y * size.x + gid.x;  // slice 0 of pixel (x, y, batch z)
  int slices = live ? size.z : 0;
  highp float mean = 0.0;
#if CENTER
  highp float sum = 0.0;
  for (int s = FIRST_SLICE; s < slices; s += LANES) {
    highp vec4 v = load(in_offset + base + s * plane);  // highp before the dot: fp16's is mediump
    sum += dot(v, vec4(1.0));
  }
  mean = SUM(sum) / float(channels);
#endif
  highp float squares = 0.0;
  for (int s = FIRST_SLICE; s < slices; s += LANES) {
    highp vec4 d = keep_channels(load(in_offset + base + s * plane) - mean, channels, s);
    squares += dot(d, d);
  }
  highp float scale = inversesqrt(SUM(squares) / float(channels) + epsilon);
  for (int s = FIRST_SLICE; s < slices; s += LANES) {
    highp vec4 d = load(in_offset + base + s * plane) - mean;
    vec4 v = epilogue(activate(d * scale * weight(gamma_offset + s) + weight(beta_offset + s)), ivec4(gid.x, gid.y, s, gid.z));
    store(out_offset + base + s * plane, keep_channels(v, channels, s));
  }
}
