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
// With TILE_SUMS each workgroup (WG_X x WG_Y invocations of one slice: depthwise.TILE_BLOCK) also
// adds up the values it stored, a tree in shared memory, and stores the sum at (batch, block
// down, block across, slice) of the tile sums tensor: a mean over H x W then reads those.
//
// With TAP_WINDOWS (rule mixed_depthwise: channel groups with kernels of their own sizes, each
// placed in the KH x KW filter where its padding puts it) 4 constant rows per slice hold each
// lane's window of taps: first row, end row, first column, end column. A lane reads zero at a
// tap outside its window (a select on the input: its zero weight times an infinite input would
// be NaN where the group's own kernel never read that pixel), and a patch pixel that no lane of
// the slice uses is not loaded (a branch on values the invocations of a slice share), so a slice
// of 3x3 channels costs what a 3x3 kernel does (SKIP_TAPS: on a grid too small to fill the GPU
// the branches cost more than the loads, which without them can all be in flight at once). The
// sum of each output keeps its kernel's order, the skipped taps adding exact zeros.
//
// PASS_THROUGH (rule residual_through_concat): each output pixel's own input value plus the
// residual's value there is stored at passed_offset too (stride 1, multiplier 1, an output of
// the input's size): the other half of a residual ADD over the concatenation [x, output].
//
// PRELOAD_WEIGHTS: the KH x KW weights of the slice go to registers first, where a tile of
// several pixels reuses them; else (a large kernel, whose array would spill) each tap loads its
// weight where it uses it.
//
// Defines: KH, KW kernel size; TILE_W, TILE_H; MULTIPLIER_ONE (M == 1); PADDED (some tap reads
//   outside the input: clamped and replaced by zero); TILE_SUMS; TAP_WINDOWS; SKIP_TAPS;
//   PRELOAD_WEIGHTS; PASS_THROUGH with RESIDUAL_* (its residual's source); EP_* the epilogue
//   (epilogue.glsl).
// Params: in_size, out_size (w, h, slices, batch); in_offset, out_offset (arena); weights_offset,
//   bias_offset (constants); stride, dilation, pad (x, y); in_channels, out_channels, multiplier;
//   with TILE_SUMS sums_offset (arena), sums_size (blocks across, blocks down, slices, batch);
//   with TAP_WINDOWS windows_offset (constants); with PASS_THROUGH passed_offset (arena) and
//   residual_offset, residual_size.
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

// Computes and stores the tile of invocation gid; returns the sum of the values it stored.
vec4 convolve_tile(ivec3 gid) {
  int slice = gid.z % out_size.z;
  int batch = gid.z / out_size.z;
  ivec2 tile = gid.xy * ivec2(TILE_W, TILE_H);  // output coordinate of tile pixel (0, 0)
  ivec2 origin = tile * stride - pad;           // input coordinate of patch pixel (0, 0)
  int in_batch = in_offset + batch * in_size.z * in_size.x * in_size.y;

#if PRELOAD_WEIGHTS
  vec4 w[KH * KW];
  for (int k = 0; k < KH * KW; ++k) w[k] = weight(weights_offset + slice * KH * KW + k);
#define W(k) w[k]
#else
#define W(k) weight(weights_offset + slice * KH * KW + (k))
#endif
  vec4 acc[TILE_W * TILE_H];
  for (int t = 0; t < TILE_W * TILE_H; ++t) acc[t] = vec4(0.0);
#if TAP_WINDOWS
  int rows = windows_offset + 4 * slice;
  vec4 top = weight(rows), bottom = weight(rows + 1), left = weight(rows + 2), right = weight(rows + 3);
  // A lane's window is a box: a tap is in it when its row and its column are (per lane, ~0u or 0).
  uvec4 row_on[KH], column_on[KW];
  for (int ky = 0; ky < KH; ++ky) {
    row_on[ky] = uvec4(greaterThanEqual(vec4(ky), top)) & uvec4(lessThan(vec4(ky), bottom));
  }
  for (int kx = 0; kx < KW; ++kx) {
    column_on[kx] = uvec4(greaterThanEqual(vec4(kx), left)) & uvec4(lessThan(vec4(kx), right));
  }
#if SKIP_TAPS
  // The patch pixels some lane reads: rows [used.x, used.y), columns [used.z, used.w).
  ivec4 used = ivec4(min(min(top.x, top.y), min(top.z, top.w)), max(max(bottom.x, bottom.y), max(bottom.z, bottom.w)),
                     min(min(left.x, left.y), min(left.z, left.w)), max(max(right.x, right.y), max(right.z, right.w)));
  used.yw += ivec2(TILE_H, TILE_W) - 1;
#endif
#define TAP(v, ky, kx) mix(vec4(0.0), v, bvec4(row_on[ky] & column_on[kx]))
#else
#define TAP(v, ky, kx) v
#endif

  for (int iy = 0; iy < PATCH_H; ++iy) {
#if TAP_WINDOWS && SKIP_TAPS
    if (iy < used.x || iy >= used.y) continue;
#endif
    for (int ix = 0; ix < PATCH_W; ++ix) {
#if TAP_WINDOWS && SKIP_TAPS
      if (ix < used.z || ix >= used.w) continue;
#endif
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
          acc[ty * TILE_W + tx] += TAP(v, ky, kx) * W(ky * KW + kx);
        }
      }
    }
  }

  vec4 b = weight(bias_offset + slice);
  int dst = out_offset + (batch * out_size.z + slice) * out_size.x * out_size.y;
  highp vec4 total = vec4(0.0);
  for (int ty = 0; ty < TILE_H; ++ty) {
    for (int tx = 0; tx < TILE_W; ++tx) {
      ivec2 o = tile + ivec2(tx, ty);
      if (all(lessThan(o, out_size.xy))) {
        vec4 v = keep_channels(epilogue(activate(acc[ty * TILE_W + tx] + b), ivec4(o, slice, batch)), out_channels, slice);
        store(dst + o.y * out_size.x + o.x, v);
        total += v;
#if PASS_THROUGH
        vec4 residual = ep_operand(RESIDUAL_SRC, RESIDUAL_SCALAR_C == 1, false, residual_offset, residual_size,
                                   RESIDUAL_PLANE, 0.0, ivec4(o, slice, batch));
        vec4 passed = fetch(in_batch + o.y * in_size.x + o.x, slice) + residual;
        store(passed_offset + (batch * out_size.z + slice) * out_size.x * out_size.y + o.y * out_size.x + o.x,
              keep_channels(passed, out_channels, slice));
#endif
      }
    }
  }
  return total;
}

#if TILE_SUMS
shared highp vec4 sums[WG_X * WG_Y];

// Tree step: slots [step, 2 step) fold into [0, step). Unrolled in main: GLSL ES 3.10 allows a
// barrier only there, outside control flow.
#define FOLD(step) memoryBarrierShared(); barrier(); if (lane < step) sums[lane] += sums[lane + step]

void main() {
  ivec3 gid = ivec3(gl_GlobalInvocationID);
  int lane = int(gl_LocalInvocationIndex);
  // No early return: every invocation reaches the barriers; one past the grid adds nothing.
  sums[lane] = all(lessThan(gid, grid)) ? convolve_tile(gid) : vec4(0.0);
#if WG_X * WG_Y != 64
#error TILE_SUMS folds 64 invocations
#endif
  FOLD(32);
  FOLD(16);
  FOLD(8);
  FOLD(4);
  FOLD(2);
  FOLD(1);
  ivec2 block = ivec2(gl_WorkGroupID.xy);
  if (lane == 0) store(sums_offset + (gid.z * sums_size.y + block.y) * sums_size.x + block.x, sums[0]);
}
#else
void main() {
  ivec3 gid = ivec3(gl_GlobalInvocationID);
  if (any(greaterThanEqual(gid, grid))) return;
  convolve_tile(gid);
}
#endif
