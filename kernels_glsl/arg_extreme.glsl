// ARG_MAX / ARG_MIN over one axis of a PHWC4 input (gpu/kernels/select.py). Each invocation
// writes one vec4 of the int32 output (each index as its bits: the int view): 4 output elements,
// each the index of the extreme of one line of the input along the axis (per_element.glsl).
// LAST_AXIS 1: the output's element of row-major index f reduces input row f, at (b, h, w) = f
// unravelled by the input's (batch, height, width), read a vec4 of channels at a time.
// LAST_AXIS 0: output element f = (o, i) reduces the line of input elements (o * axis_size + k) *
// inner + i, k < axis_size, each read by its row-major index (row_major.glsl); the shapes are the
// input's and the output's as they are, whatever the rank.
//
// TFLite's running comparison (arg_min_max.cc): the first element starts as the extreme and only
// a strictly greater (IS_MAX) or smaller value replaces it, so ties keep the first index;
// comparisons with NaN are false (tested on the bits: a compiler may assume there is no NaN), so
// a NaN first stays the extreme and a NaN later never wins, except that where elements follow
// the axis (NAN_YIELDS: inner > 1, float values) TFLite's kernel lets a number replace a NaN
// extreme (ops/select.py's nan_yields).
// Params: in_size (w, h, slices, batch), in_channels, in_offset; out_size, out_channels,
// out_offset; LAST_AXIS 0: axis_size, inner (elements after the axis).

#include "row_major.glsl"

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

#if LAST_AXIS
float element(int row) {
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
#else
bool stored_nan(float raw) {
#if INT_VALUES
  return false;
#else
  return (floatBitsToUint(raw) & 0x7fffffffu) > 0x7f800000u;
#endif
}

VALUE as_value(float raw) { return value_at(vec4(raw), 0); }

float element(int f) {
  int first = (f / inner) * axis_size * inner + f % inner;
  float raw = stored_at(in_offset, in_size, in_channels, first, false);
  VALUE best = as_value(raw);
  bool best_nan = stored_nan(raw);
  int index = 0;
  for (int k = 1; k < axis_size; ++k) {
    raw = stored_at(in_offset, in_size, in_channels, first + k * inner, false);
    bool nan = stored_nan(raw);
    bool replace = !best_nan && !nan && better(as_value(raw), best);
#if NAN_YIELDS
    replace = replace || (best_nan && !nan);
#endif
    if (replace) {
      best = as_value(raw);
      best_nan = nan;
      index = k;
    }
  }
  return intBitsToFloat(index);
}
#endif

#include "per_element.glsl"
