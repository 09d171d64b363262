// Depthwise convolution (DEPTHWISE_CONV_2D) on PHWC4 tensors.
//
// Output channel c * M + m reads input channel c (M: the channel multiplier). With M == 1 output
// slice s reads input slice s, one vec4 per tap; otherwise each of the slice's 4 channels picks
// its own input channel.
//
// Each invocation computes a TILE_W x TILE_H tile of output pixels of one slice. It walks the
// tile's input patch of (TILE_W + KW - 1) x (TILE_H + KH - 1) pixels, loading each pixel once and
// adding it to every output of the tile that uses it: patch pixel (ix, iy) is tap
// (ix - tx, iy - ty) of output (tx, ty). That needs unit stride and dilation along an axis with
// a tile wider than 1; along an axis with a tile of 1 the patch is the KW (KH) taps, `dilation`
// apart, at any stride. Every branch on tx, ty, kx, ky is decided at compile time once the loops
// unroll.
//
// Defines: KH, KW kernel size; TILE_W, TILE_H; MULTIPLIER_ONE (M == 1); PADDED (some tap reads
//   outside the input: clamped and replaced by zero); EP_* the epilogue (epilogue.glsl).
// Params: in_size, out_size (w, h, slices, batch); in_offset, out_offset (arena); weights_offset,
//   bias_offset (constants); stride, dilation, pad (x, y); in_channels, out_channels, multiplier.
// Weights: [out slice][ky][kx], one vec4 row. Bias: one row per output slice.
// Grid: (ceil(out_w / TILE_W), ceil(out_h / TILE_H), batch * out slices).

#define PATCH_W (TILE_W + KW - 1)
#define PATCH_H (TILE_H + KH - 1)

// The 4 input values output slice `slice` multiplies at one pixel; `pixel` is the pixel's
// element in input slice 0.
vec4 fetch(int pixel, int slice) {
  int plane = in_size.x * in_size.y;
#if MULTIPLIER_ONE
  return load(pixel + slice * plane);
#else
  // Channels past the output's read the last input channel; their weights are zero.
  ivec4 c = min((ivec4(4 * slice) + ivec4(0, 1, 2, 3)) / multiplier, ivec4(in_channels - 1));
  return vec4(load(pixel + (c.x / 4) * plane)[c.x % 4], load(pixel + (c.y / 4) * plane)[c.y % 4],
              load(pixel + (c.z / 4) * plane)[c.z % 4], load(pixel + (c.w / 4) * plane)[c.w % 4]);
#endif
}

void main() {
  ivec3 gid = ivec3(gl_GlobalInvocationID);
  if (any(greaterThanEqual(gid, grid))) return;
  int slice = gid.z % out_size.z;
  int batch = gid.z / out_size.z;
  ivec2 tile = gid.xy * ivec2(TILE_W, TILE_H);  // output coordinate of tile pixel (0, 0)
  ivec2 origin = tile * stride - pad;           // input coordinate of patch pixel (0, 0)
  int in_batch = in_offset + batch * in_size.z * in_size.x * in_size.y;

  vec4 w[KH * KW];
  for (int k = 0; k < KH * KW; ++k) w[k] = weight(weights_offset + slice * KH * KW + k);
  vec4 acc[TILE_W * TILE_H];
  for (int t = 0; t < TILE_W * TILE_H; ++t) acc[t] = vec4(0.0);

  for (int iy = 0; iy < PATCH_H; ++iy) {
    for (int ix = 0; ix < PATCH_W; ++ix) {
      ivec2 c = origin + ivec2(ix, iy) * dilation;
#if PADDED
      bool inside = all(greaterThanEqual(c, ivec2(0))) && all(lessThan(c, in_size.xy));
      c = clamp(c, ivec2(0), in_size.xy - 1);
#endif
      vec4 v = fetch(in_batch + c.y * in_size.x + c.x, slice);
#if PADDED
      v = inside ? v : vec4(0.0);  // a select: a padded tap adds exactly 0, even next to Inf
#endif
      for (int ty = 0; ty < TILE_H; ++ty) {
        int ky = iy - ty;
        if (ky < 0 || ky >= KH) continue;
        for (int tx = 0; tx < TILE_W; ++tx) {
          int kx = ix - tx;
          if (kx < 0 || kx >= KW) continue;
          acc[ty * TILE_W + tx] += v * w[ky * KW + kx];
        }
      }
    }
  }

  vec4 b = weight(bias_offset + slice);
  int dst = out_offset + (batch * out_size.z + slice) * out_size.x * out_size.y;
  for (int ty = 0; ty < TILE_H; ++ty) {
    for (int tx = 0; tx < TILE_W; ++tx) {
      ivec2 o = tile + ivec2(tx, ty);
      if (all(lessThan(o, out_size.xy))) {
        vec4 v = epilogue(activate(acc[ty * TILE_W + tx] + b), ivec4(o, slice, batch));
        store(dst + o.y * out_size.x + o.x, keep_channels(v, out_channels, slice));
      }
    }
  }
}
