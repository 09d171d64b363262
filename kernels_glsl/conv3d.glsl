// CONV_3D and CONV_3D_TRANSPOSE (TRANSPOSED 1) on the merged-batch view of their rank-5 tensors
// (phwc4.py): [N, D, H, W, C] is held as (N * D) x H x W x C, so voxel (n, d, y, x) is pixel (y, x)
// of batch n * D + d.
//
// Per dim, tap k of output coordinate o reads input coordinate i (source()):
//   CONV_3D: i = o * stride - pad + k * dilation;
//   CONV_3D_TRANSPOSE, written as a gather so that one invocation sums each output without
//   atomics: input i adds tap k to o = i * stride - pad + k * dilation, so o reads
//   i = (o + pad - k * dilation) / stride where that division is exact.
// A tap outside the input reads 0 (it is skipped). Each invocation computes OUT_SLICES output
// slices of one output voxel, so every input vec4 it loads serves OUT_SLICES slices, as in
// transpose_conv.glsl.
//
// Defines: KD, KH, KW kernel size; OUT_SLICES; TRANSPOSED; EP_* the epilogue (epilogue.glsl).
// Params: in_size, out_size (w, h, slices, N * depth); in_depth, out_depth; in_offset, out_offset
//   (arena); weights_offset, bias_offset (constants); stride, dilation, pad (x, y), stride_d,
//   dilation_d, pad_d; out_channels.
// Weights: conv2d.glsl's rows with the depth and height taps as one axis:
//   [group][kd][ky][kx][in slice][OUT_SLICES][4 rows]. Bias: a row per slice.
// Grid: (out_w, out_h, N * out_depth * ceil(out slices / OUT_SLICES)).

#include "conv_common.glsl"
#include "conv_slices.glsl"

// The input coordinate tap k of output coordinate o reads along one dim, or -1 for none.
int source(int o, int k, int stride, int dilation, int pad, int size) {
#if TRANSPOSED
  int t = o + pad - k * dilation;
  if (t < 0 || t % stride != 0) return -1;
  int i = t / stride;
#else
  int i = o * stride - pad + k * dilation;
#endif
  return i < 0 || i >= size ? -1 : i;
}

void main() {
  ivec3 gid = ivec3(gl_GlobalInvocationID);
  if (any(greaterThanEqual(gid, grid))) return;
  int group, batch, unused;
  conv_layer(gid.z, group, batch, unused);
  int n = batch / out_depth;
  int od = batch % out_depth;
  int in_plane = in_size.x * in_size.y;

  vec4 acc[OUT_SLICES];
  for (int o = 0; o < OUT_SLICES; ++o) acc[o] = vec4(0.0);

  for (int kd = 0; kd < KD; ++kd) {
    int id = source(od, kd, stride_d, dilation_d, pad_d, in_depth);
    if (id < 0) continue;
    int in_batch = in_offset + (n * in_depth + id) * in_size.z * in_plane;
    for (int ky = 0; ky < KH; ++ky) {
      int iy = source(gid.y, ky, stride.y, dilation.y, pad.y, in_size.y);
      if (iy < 0) continue;
      for (int kx = 0; kx < KW; ++kx) {
        int ix = source(gid.x, kx, stride.x, dilation.x, pad.x, in_size.x);
        if (ix < 0) continue;
        int src = in_batch + iy * in_size.x + ix;
        int w = weights_offset + (((group * KD + kd) * KH + ky) * KW + kx) * in_size.z * ROWS_PER_STEP;
        accumulate_pixel(acc, src, in_plane, w);
      }
    }
  }

  store_slices(acc, group, batch, gid.xy);
}
