// LOCAL_RESPONSE_NORMALIZATION (gpu/kernels/normalization.py), one vec4 (4 channels) of the output
// per invocation, as TFLite's local_response_norm.cc computes it: out = x * (bias + alpha * W)^-beta,
// W the sum of x^2 over channels c - radius .. c + radius clipped to the axis, C's powf (tfl_pow:
// a negative base to an integer power is defined). Highp in every precision
// (its @highp line below): the square of a half above 256 overflows half math.
// Params: size (w, h, slices, batch), channels, radius (at most channels), bias, alpha, beta,
// in_offset, out_offset.
// @highp in every precision: a sum of squares and C's powf, which overflow and lose digits in fp16.

void main() {
  ivec3 gid = ivec3(gl_GlobalInvocationID);
  if (any(greaterThanEqual(gid, grid))) return;
  int s = gid.z % size.z;
  int slice0 = gid.z - s;  // slice 0 of this batch
  ivec4 c = ivec4(4 * s) + ivec4(0, 1, 2, 3);
  highp vec4 window = vec4(0.0);
  for (int t = max(4 * s - radius, 0) / 4; t <= min(4 * s + 3 + radius, channels - 1) / 4; ++t) {
    highp vec4 v = load(in_offset + phwc4_index(size, gid.x, gid.y, slice0 + t));
    for (int k = 0; k < 4; ++k) {
      // A selection, not a product: a NaN or inf square outside the window stays out of it.
      window += mix(vec4(0.0), vec4(v[k] * v[k]), lessThanEqual(abs(c - ivec4(4 * t + k)), ivec4(radius)));
    }
  }
  highp vec4 x = load(in_offset + phwc4_index(size, gid.x, gid.y, gid.z));
  highp vec4 r = x * tfl_pow(vec4(bias) + vec4(alpha) * window, vec4(-beta));
  store(out_offset + phwc4_index(size, gid.x, gid.y, gid.z), keep_channels(r, channels, s));
}
