// Transposed convolution (TRANSPOSE_CONV, and MediaPipe's Convolution2DTransposeBias) on PHWC4.
//
// Input pixel i adds tap k of its contribution to output pixel i * stride + k - pad. Written as a
// gather, so each output is summed by one invocation without atomics: output o takes the taps
// k = (o + pad) mod stride, that + stride, ... < K, reading input pixel (o + pad - k) / stride
// (the division is exact), which falls by one with each further tap.
// Each invocation computes OUT_SLICES output slices of one output pixel, so every input vec4 it
// loads serves OUT_SLICES slices.
//
// Defines: KH, KW kernel size; OUT_SLICES; EP_* the epilogue (epilogue.glsl).
// Params: in_size, out_size (w, h, slices, batch); in_offset, out_offset (arena);
//   weights_offset, bias_offset (constants); stride, pad (x, y); out_channels.
// Weights: as conv2d.glsl: [group][ky][kx][in slice][OUT_SLICES][4 rows]. Bias: a row per slice.
// Grid: (out_w, out_h, batch * ceil(out slices / OUT_SLICES)).

#include "conv_common.glsl"
#include "conv_slices.glsl"

void main() {
  ivec3 gid = ivec3(gl_GlobalInvocationID);
  if (any(greaterThanEqual(gid, grid))) return;
  int group, batch, in_batch;
  conv_layer(gid.z, group, batch, in_batch);
  int in_plane = in_size.x * in_size.y;
  ivec2 shifted = gid.xy + pad;      // >= 0: pad is never negative
  ivec2 phase = shifted % stride;    // the first tap that lands on this output

  vec4 acc[OUT_SLICES];
  for (int o = 0; o < OUT_SLICES; ++o) acc[o] = vec4(0.0);

  for (int ky = phase.y; ky < KH; ky += stride.y) {
    int iy = (shifted.y - ky) / stride.y;
    if (iy < 0) break;  // every further tap reads a row further up
    if (iy >= in_size.y) continue;
    for (int kx = phase.x; kx < KW; kx += stride.x) {
      int ix = (shifted.x - kx) / stride.x;
      if (ix < 0) break;
      if (ix >= in_size.x) continue;
      int src = in_batch + iy * in_size.x + ix;
      int w = weights_offset + ((group * KH + ky) * KW + kx) * in_size.z * ROWS_PER_STEP;
      accumulate_pixel(acc, src, in_plane, w);
    }
  }

  store_slices(acc, group, batch, gid.xy);
}
