// STABLEHLO_REDUCE_WINDOW / REDUCE_WINDOW (gpu/kernels/reduce_window.py), one vec4 (4 channels) of
// the output per invocation, each element as LiteRT's kernel computes it: init, then
// acc = op(acc, x) for the window's taps in row-major order, x the input element a tap reads or
// init where it falls on the padding or between base-dilated elements. OP: 0 add, 1 mul, 2 max
// (acc >= x ? acc : x, so a NaN wins only where it comes last), 3 min (acc <= x ? acc : x).
// Dimensions are the op's own, padded to 4 with leading 1s; the input is read by row-major index.
// Highp in every precision (its @highp line below): a window sum of halves overflows.
// Params: out_size, out_channels, out_offset; in_size, in_channels, in_offset (the input's BHWC
// view); out_dims, in_dims, window, strides, base_dilations, window_dilations, pad_before, dilated
// (ivec4s: x the first dimension); taps (the window's element count); init.
// @highp in every precision: a window's sum or product, which overflows at 65504 in fp16.

#include "row_major.glsl"

// acc, or x: chosen as bit patterns, with NaN tested on the bits, so that no compiler folds the
// choice into max / min, whose results at NaN and at 0.0 against -0.0 GLSL leaves open.
highp float pick(bool keep_acc, highp float acc, highp float x) {
  bool either_nan = tfl_either_nan(vec4(acc), vec4(x)).x;
  return uintBitsToFloat(keep_acc && !either_nan ? floatBitsToUint(acc) : floatBitsToUint(x));
}

highp float combine(highp float acc, highp float x) {
#if OP == 0
  return acc + x;
#elif OP == 1
  return acc * x;
#elif OP == 2
  return pick(acc >= x, acc, x);
#else
  return pick(acc <= x, acc, x);
#endif
}

float element(int f) {
  ivec4 first = coordinates(f, out_dims) * strides - pad_before;  // the window's first tap, dilated input
  highp float acc = init;
  for (int k = 0; k < taps; ++k) {
    ivec4 p = first + coordinates(k, window) * window_dilations;
    highp float x = init;
    if (all(greaterThanEqual(p, ivec4(0))) && all(lessThan(p, dilated)) && all(equal(p % base_dilations, ivec4(0)))) {
      ivec4 q = p / base_dilations;
      x = stored_at(in_offset, in_size, in_channels, row_major_index(q, in_dims), false);
    }
    acc = combine(acc, x);
  }
  return acc;
}

#include "per_element.glsl"
