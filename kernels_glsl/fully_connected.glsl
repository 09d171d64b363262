// FULLY_CONNECTED: out[r, u] = sum_k in[r, k] * W[u, k] + bias[u], rows r of K input values.
//
// Split-K: the K_SPLIT invocations of a workgroup along x share one output slice (4 units) of one
// row; lane t sums the chunks (4 input values each) t, t + K_SPLIT, ..., and the workgroup adds
// the partial sums in shared memory. One output slice then takes K_SPLIT threads instead of one:
// a single-row FC (a classifier head) still fills the GPU. Grid: (K_SPLIT, out slices, rows).
//
// Rows follow TFLite's row-major flattening of the input (BHWC order), not PHWC4 order. FLATTEN
// says how chunk k4 of row r (input values 4 * k4 .. 4 * k4 + 3) sits in the PHWC4 input:
//   0  the input's last dimension is K: row r is pixel r, chunk k4 is its slice k4
//   1  rows run across pixels, but C % 4 == 0 and K % 4 == 0: a chunk is one slice of one pixel
//   2  anything else: each value is gathered alone
// Defines: K_SPLIT (== WG_X), FLATTEN; EP_* the epilogue (epilogue.glsl), applied by lane 0.
// Params: in_size, out_size (w, h, slices, batch); in_channels; depth (K); chunks (ceil(K / 4));
//   out_channels; in_offset, out_offset (arena); weights_offset, bias_offset (constants).
// Weights: [out slice][chunk][4 rows]; row j holds the weights of the slice's 4 units for input
// value 4 * chunk + j (zero past K). Bias: one row per output slice.

#if WG_X != K_SPLIT
#error "the workgroup must be exactly K_SPLIT invocations wide: its lanes share one output"
#endif

// Element of slice `slice` of pixel `pixel` (the flat b, h, w index in BHWC order) of the input.
int input_index(int pixel, int slice) {
  int plane = in_size.x * in_size.y;
  return in_offset + ((pixel / plane) * in_size.z + slice) * plane + pixel % plane;
}

vec4 chunk(int row, int k4) {
#if FLATTEN == 0
  return load(input_index(row, k4));
#elif FLATTEN == 1
  int f = row * depth + 4 * k4;
  return load(input_index(f / in_channels, (f % in_channels) / 4));
#else
  vec4 v;
  for (int j = 0; j < 4; ++j) {
    int k = 4 * k4 + j;
    int f = row * depth + min(k, depth - 1);
    int c = f % in_channels;
    float value = load(input_index(f / in_channels, c / 4))[c % 4];
    v[j] = k < depth ? value : 0.0;  // past K: a select, so an Inf in the next row never leaks
  }
  return v;
#endif
}

#if K_SPLIT > 1
shared vec4 partial[WG_X * WG_Y * WG_Z];
#endif

void main() {
  ivec3 gid = ivec3(gl_GlobalInvocationID);
  int lane = int(gl_LocalInvocationID.x);
  int slice = gid.y;
  int row = gid.z;
  // No early return before the barrier: every invocation of the workgroup must reach it.
  bool in_grid = all(lessThan(gid, grid));
  vec4 acc = vec4(0.0);
  if (in_grid) {
    int w = weights_offset + (slice * chunks + lane) * 4;
    for (int k4 = lane; k4 < chunks; k4 += K_SPLIT) {
      vec4 x = chunk(row, k4);
      acc += x.x * weight(w) + x.y * weight(w + 1) + x.z * weight(w + 2) + x.w * weight(w + 3);
      w += 4 * K_SPLIT;
    }
  }
#if K_SPLIT > 1
  // The lanes of one output are adjacent in gl_LocalInvocationIndex (x varies fastest).
  int local = int(gl_LocalInvocationIndex);
  partial[local] = acc;
  memoryBarrierShared();
  barrier();
  if (lane != 0) return;
  for (int t = 1; t < K_SPLIT; ++t) acc += partial[local + t];
#endif
  if (!in_grid) return;
  int plane = out_size.x * out_size.y;
  int pixel = row % plane;
  int dst = out_offset + ((row / plane) * out_size.z + slice) * plane + pixel;
  vec4 v = epilogue(activate(acc + weight(bias_offset + slice)), ivec4(pixel % out_size.x, pixel / out_size.x, slice, row / plane));
  store(dst, keep_channels(v, out_channels, slice));
}
