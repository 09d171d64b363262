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
// Defines: CENTER; ACTIVATION, CLAMP_FINITE and EP_* (the output stage and epilogue, common.glsl).
// Params: size (w, h, slices, batch); channels; epsilon; in_offset, out_offset (arena);
//   gamma_offset, beta_offset (constants, one vec4 per slice).

void main() {
  ivec3 gid = ivec3(gl_GlobalInvocationID);
  if (any(greaterThanEqual(gid, grid))) return;
  int plane = size.x * size.y;
  int base = gid.z * size.z * plane + gid.y * size.x + gid.x;  // slice 0 of pixel (x, y, batch z)
  highp float mean = 0.0;
#if CENTER
  highp float sum = 0.0;
  for (int s = 0; s < size.z; ++s) {
    highp vec4 v = load(in_offset + base + s * plane);  // highp before the dot: fp16's is mediump
    sum += dot(v, vec4(1.0));
  }
  mean = sum / float(channels);
#endif
  highp float squares = 0.0;
  for (int s = 0; s < size.z; ++s) {
    highp vec4 d = keep_channels(load(in_offset + base + s * plane) - mean, channels, s);
    squares += dot(d, d);
  }
  highp float scale = inversesqrt(squares / float(channels) + epsilon);
  for (int s = 0; s < size.z; ++s) {
    highp vec4 d = load(in_offset + base + s * plane) - mean;
    vec4 v = epilogue(activate(d * scale * weight(gamma_offset + s) + weight(beta_offset + s)), ivec4(gid.x, gid.y, s, gid.z));
    store(out_offset + base + s * plane, keep_channels(v, channels, s));
  }
}
