// MAX_POOL_2D (OP 0) and AVERAGE_POOL_2D (OP 1) on PHWC4, one output vec4 per invocation.
// The window of output (x, y) starts at (x, y) * stride - pad; only its in-bounds part is read, so
// padding never wins a max and an average divides by the number of elements it really summed
// (TFLite's semantics). Clipping the loop bounds instead of testing each tap keeps the inner loop
// free of branches.
// Explicit padding (a merged PAD) is zeros that do take part: the input is surrounded by zeros
// over [zeros_begin, zeros_end) (x, y); where a window reaches into them, a max also sees 0 and
// an average counts them. Without explicit padding that box is the input itself.
// The epilogue (epilogue.glsl, EP_*) runs on each value before it is stored.
// INTEGER_MEAN (an int8 / uint8 average, in the float view: gpu/kernels/pool.py): each stored
// value is (q - q_zero) * q_scale of an integer q (|q - q_zero| <= 255, so rounding recovers it in
// half storage too); the raw integers' sum is divided as TFLite's integer kernel divides it,
// (sum +- n / 2) / n truncated, and the result stored as a value of the grid again.

void main() {
  ivec3 gid = ivec3(gl_GlobalInvocationID);
  if (any(greaterThanEqual(gid, grid))) return;
  int s = gid.z % out_size.z;
  int b = gid.z / out_size.z;
  ivec2 start = gid.xy * stride - pad;
  ivec2 lo = max(start, ivec2(0));
  ivec2 hi = min(start + window, in_size.xy);
  ivec2 zeros_lo = max(start, zeros_begin);        // the window's part inside the zero-padded input
  ivec2 zeros_hi = min(start + window, zeros_end);
  int base = in_offset + (b * in_size.z + s) * in_size.y * in_size.x;
#if OP == 0
  vec4 acc = vec4(uintBitsToFloat(0xff800000u));  // -inf
#else
  highp vec4 acc = vec4(0.0);  // sums accumulate in float in every precision
#endif
  for (int y = lo.y; y < hi.y; y++) {
    for (int x = lo.x; x < hi.x; x++) {
      vec4 v = load(base + y * in_size.x + x);
#if OP == 0
      acc = tfl_max(acc, v);  // std::max(acc, v): a NaN tap never wins, as in TFLite's MaxPool
#elif INTEGER_MEAN
      acc += round(v / q_scale);
#else
      acc += v;
#endif
    }
  }
#if OP == 0
  if (any(lessThan(zeros_lo, lo)) || any(greaterThan(zeros_hi, hi))) acc = tfl_max(acc, vec4(0.0));
#else
  int count = (zeros_hi.x - zeros_lo.x) * (zeros_hi.y - zeros_lo.y);
#if INTEGER_MEAN
  ivec4 total = ivec4(acc) + count * q_zero;
  ivec4 q = ivec4(sign(vec4(total))) * ((abs(total) + count / 2) / count);
  acc = vec4(q - q_zero) * q_scale;
#else
  acc /= float(count);
#endif
#endif
  vec4 r = keep_channels(epilogue(activate(acc), ivec4(gid.xy, s, b)), channels, s);
  store(out_offset + phwc4_index(out_size, gid.x, gid.y, gid.z), r);
}
