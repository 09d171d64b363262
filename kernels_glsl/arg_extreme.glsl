// ARG_MAX / ARG_MIN over the channel axis (the last) of a PHWC4 input. Each invocation writes
// one vec4 of the int32 output (each index as its bits: the int view): 4 output elements, each
// the index of the extreme of one input row. The output's element of row-major index f reduces
// input row f, at (b, h, w) = f unravelled by the input's (batch, height, width): the output's
// shape is the input's without its last axis, whatever the rank.
//
// TFLite's running comparison (arg_min_max.cc over an axis with nothing after it): the first
// element starts as the extreme and only a strictly greater (IS_MAX) or smaller value replaces
// it, so ties keep the first index; comparisons with NaN are false (tested on the bits: a
// compiler may assume there is no NaN), so a NaN first stays the extreme and a NaN later never
// wins.
// Params: in_size (w, h, slices, batch), in_channels, in_offset; out_size, out_channels,
// out_offset.

// INT_VALUES: an int32 input (its bits: the int view), compared as integers (no NaN).
#if INT_VALUES
#define VALUE int
VALUE value_at(vec4 v, int k) { return floatBitsToInt(v[k]); }
#else
#define VALUE float
VALUE value_at(vec4 v, int k) { return v[k]; }
#endif

#if IS_MAX
bool better(VALUE a, VALUE b) { return a > b; }
#else
bool better(VALUE a, VALUE b) { return a < b; }
#endif

float row_extreme(int row) {
  int w = row % in_size.x;
  row /= in_size.x;
  int h = row % in_size.y;
  int b = row / in_size.y;
  VALUE best = VALUE(0);
  bool best_nan = false;
  int index = 0;
  for (int s = 0; s < in_size.z; ++s) {
    vec4 v = load(in_offset + phwc4_index(in_size, w, h, b * in_size.z + s));
#if INT_VALUES
    bvec4 nan = bvec4(false);
#else
    bvec4 nan = tfl_isnan(v);
#endif
    for (int k = 0; k < 4; ++k) {
      int c = 4 * s + k;
      if (c >= in_channels) break;
      if (c == 0) {
        best = value_at(v, k);
        best_nan = nan[k];
      } else if (!best_nan && !nan[k] && better(value_at(v, k), best)) {
        best = value_at(v, k);
        index = c;
      }
    }
  }
  return intBitsToFloat(index);
}

void main() {
  ivec3 gid = ivec3(gl_GlobalInvocationID);
  if (any(greaterThanEqual(gid, grid))) return;
  int s = gid.z % out_size.z;
  int b = gid.z / out_size.z;
  int first = ((b * out_size.y + gid.y) * out_size.x + gid.x) * out_channels + 4 * s;  // row of channel 4s
  vec4 r = vec4(0.0);  // padded channels stay zero
  for (int k = 0; k < 4; ++k) {
    if (4 * s + k < out_channels) r[k] = row_extreme(first + k);
  }
  store(out_offset + phwc4_index(out_size, gid.x, gid.y, gid.z), r);
}
