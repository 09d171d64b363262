// 2D convolution (CONV_2D) on PHWC4 tensors.
//
// Each invocation computes OUT_SLICES output slices (4 channels each) for PIXELS output pixels:
// every weight row it loads serves PIXELS pixels, and every input vec4 serves OUT_SLICES slices.
// Grid: (ceil(pixels / PIXELS), rows * K_SPLIT, batch * groups) where a group is OUT_SLICES
// output slices; a row is an output row, or the whole plane when POINTWISE.
//
// Split-K: where the output alone is too small to fill the GPU (a deep layer on a small plane),
// the K_SPLIT invocations of a workgroup along y share one output block (of any blocking); lane t
// sums the input slices t, t + K_SPLIT, ... of every tap and the workgroup adds the partial sums
// of the block in shared memory. The lanes run along y, not x, so that neighbours along x still
// read neighbouring pixels of one input slice and the same weights.
//
// Defines:
//   KH, KW       kernel size (compile-time loop bounds, so the tap loops unroll)
//   OUT_SLICES   output slices per invocation; PIXELS: output pixels per invocation
//   K_SPLIT      lanes per output block (== WG_Y when > 1)
//   POINTWISE    1x1 kernel, stride 1, no padding: output pixel q reads input pixel q, so pixels
//                are counted flat over the H x W plane (blocks cross rows, no coordinates)
//   PADDED       some tap reads outside the input: those reads are clamped and replaced by zero
//   GATED        a squeeze-excite MUL (rule channel_gate) fused in: each input vec4 is multiplied
//                by the gate's vec4 of its batch and slice (a [B, 1, 1, C] tensor at gate_offset)
//                as it is loaded, as the MUL computed and stored it (ep_stored); a padded tap
//                still reads zero
//   EP_*         the epilogue (epilogue.glsl) applied to each value before it is stored
// Params: in_size, out_size (w, h, slices, batch); in_offset, out_offset (arena);
//   weights_offset, bias_offset (constants); stride, dilation, pad (x, y); out_channels;
//   group_channels (output, input channels of one convolution group: (O, C) when ungrouped);
//   window (the most input slices one group of OUT_SLICES output slices reads); gate_offset (arena,
//   with GATED).
// Grouped convolution: output channel o reads input channels (o / group_channels.x) *
// group_channels.y onwards, so a group of output slices reads only the `window` input slices from
// the first one its channels need (in_slice0). Channels of another convolution group inside those
// slices have zero weights (an Inf there gives NaN where TFLite skips it: its groups never read it).
// Weights: [group][ky][kx][window slice][OUT_SLICES][4 rows]; row r of block o holds the 4
// output channels of slice group * OUT_SLICES + o for input channel 4 * (in_slice0 + slice) + r,
// so the inner loop reads the weights strictly in order. Bias: one row per output slice.

#include "conv_common.glsl"

#define BLOCK (OUT_SLICES * PIXELS)
#if K_SPLIT > 1
#if WG_Y != K_SPLIT
#error "split-K needs a workgroup exactly K_SPLIT high"
#endif
shared vec4 partial[WG_X * WG_Y * WG_Z * BLOCK];
#endif

void main() {
  ivec3 gid = ivec3(gl_GlobalInvocationID);
  // No early return before the split's barrier: every invocation of the workgroup must reach it.
  bool in_grid = all(lessThan(gid, grid));
#if K_SPLIT == 1
  if (!in_grid) return;
#endif
  int lane = gid.y % K_SPLIT;
  gid = min(gid, grid - 1);  // an invocation past the grid computes a valid block, stores nothing
  gid.y /= K_SPLIT;
  int group, batch, in_batch;
  conv_layer(gid.z, group, batch, in_batch);
  int in_plane = in_size.x * in_size.y;
  int out_plane = out_size.x * out_size.y;

  // out_pixel[p]: the pixel's index in the output plane. Blocks past the edge recompute the last
  // pixel (its reads stay inside the input) and do not store it.
  int first = gid.x * PIXELS;
#if POINTWISE
  int extent = out_plane;
#else
  int extent = out_size.x;
  ivec2 origin[PIXELS];  // input coordinate of tap (0, 0)
#endif
  int out_pixel[PIXELS];
  for (int p = 0; p < PIXELS; ++p) {
    int q = min(first + p, extent - 1);
#if POINTWISE
    out_pixel[p] = q;
#else
    origin[p] = ivec2(q, gid.y) * stride - pad;
    out_pixel[p] = gid.y * out_size.x + q;
#endif
  }

  vec4 acc[BLOCK];  // acc[o * PIXELS + p]
  for (int i = 0; i < BLOCK; ++i) acc[i] = vec4(0.0);

  int w_group = weights_offset + group * (KH * KW * window * ROWS_PER_STEP);
  int in_slice0 = (4 * OUT_SLICES * group / group_channels.x) * group_channels.y / 4;
  int slices = min(window, in_size.z - in_slice0);
  for (int ky = 0; ky < KH; ++ky) {
    for (int kx = 0; kx < KW; ++kx) {
      int src[PIXELS];  // input element of slice 0 for this tap
#if PADDED
      bool inside[PIXELS];
#endif
      for (int p = 0; p < PIXELS; ++p) {
#if POINTWISE
        src[p] = in_batch + out_pixel[p];
#else
        ivec2 c = origin[p] + ivec2(kx, ky) * dilation;
#if PADDED
        inside[p] = all(greaterThanEqual(c, ivec2(0))) && all(lessThan(c, in_size.xy));
        c = clamp(c, ivec2(0), in_size.xy - 1);
#endif
        src[p] = in_batch + c.y * in_size.x + c.x;
#endif
      }
      for (int s = lane; s < slices; s += K_SPLIT) {
        int w = w_group + ((ky * KW + kx) * window + s) * ROWS_PER_STEP;
        vec4 x[PIXELS];
#if GATED
        vec4 gate = load(gate_offset + batch * in_size.z + in_slice0 + s);
#endif
        for (int p = 0; p < PIXELS; ++p) {
          x[p] = load(src[p] + (in_slice0 + s) * in_plane);
#if GATED
          // TFLite's float MUL clamps to the finite floats (epilogue.glsl's ep_binary).
          x[p] = ep_stored(tfl_finite(x[p] * gate));
#endif
#if PADDED
          // A select, not a multiply: a zero-padded tap contributes exactly 0 even next to Inf.
          x[p] = inside[p] ? x[p] : vec4(0.0);
#endif
        }
        for (int o = 0; o < OUT_SLICES; ++o) {
          vec4 w0 = weight(w);
          vec4 w1 = weight(w + 1);
          vec4 w2 = weight(w + 2);
          vec4 w3 = weight(w + 3);
          w += 4;
          for (int p = 0; p < PIXELS; ++p) {
            acc[o * PIXELS + p] += x[p].x * w0 + x[p].y * w1 + x[p].z * w2 + x[p].w * w3;
          }
        }
      }
    }
  }

#if K_SPLIT > 1
  // Lane t of a block sits WG_X * t after lane 0 in gl_LocalInvocationIndex.
  int local = int(gl_LocalInvocationIndex);
  for (int i = 0; i < BLOCK; ++i) partial[local * BLOCK + i] = acc[i];
  memoryBarrierShared();
  barrier();
  if (lane != 0) return;
  for (int t = 1; t < K_SPLIT; ++t) {
    for (int i = 0; i < BLOCK; ++i) acc[i] += partial[(local + WG_X * t) * BLOCK + i];
  }
#endif
  if (!in_grid) return;
  for (int o = 0; o < OUT_SLICES; ++o) {
    int slice = group * OUT_SLICES + o;
    if (slice >= out_size.z) break;  // the last group's weights are zero-padded past the output
    vec4 b = weight(bias_offset + slice);
    int dst = out_offset + (batch * out_size.z + slice) * out_plane;
    for (int p = 0; p < PIXELS; ++p) {
      if (first + p < extent) {
        ivec4 at = ivec4(out_pixel[p] % out_size.x, out_pixel[p] / out_size.x, slice, batch);
        vec4 v = epilogue(activate(acc[o * PIXELS + p] + b), at);
        store(dst + out_pixel[p], keep_channels(v, out_channels, slice));
      }
    }
  }
}
