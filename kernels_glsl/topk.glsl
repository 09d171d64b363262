// TOPK_V2 (gpu/kernels/scan.py) in three passes over rows of n elements (the last axis), each
// writing one vec4 of its output per invocation (per_element.glsl), every tensor read by
// row-major index: PASS 0 gives each input element its rank in TFLite's order (topk_v2.cc's
// TopContainer: larger first, a tie (0.0 and -0.0 too) by the lower index, NaN after every number
// and NaNs by index), as int32 bits into a scratch tensor of the input's shape; PASS 1 writes the
// values of ranks 0 .. k-1 of each row, PASS 2 their indices (int32 bits: the int view). An
// element compares itself with its whole row: n^2 reads a row, which scan.py's MAX_LINE bounds.
// Params: out_size, out_channels, out_offset; in_size, in_channels, in_offset (the input);
// rank_size, rank_channels, rank_offset (the scratch ranks); n (the row's length), k.

#include "row_major.glsl"

bool is_nan(float v) { return tfl_isnan(vec4(v)).x; }

// Whether element a (at index ia of its row) comes before element b (at ib).
bool before(float a, int ia, float b, int ib) {
  if (is_nan(a)) return is_nan(b) && ia < ib;
  if (is_nan(b)) return true;
  return a > b || (a == b && ia < ib);
}

float value_at(int index) { return stored_at(in_offset, in_size, in_channels, index, false); }

float element(int f) {
#if PASS == 0
  int first = f - f % n;  // the row's element 0
  float x = value_at(f);
  int rank = 0;
  for (int j = 0; j < n; ++j) {
    if (before(value_at(first + j), j, x, f - first)) ++rank;
  }
  return intBitsToFloat(rank);
#else
  int first = (f / k) * n;
  int wanted = f % k;
  int found = 0;
  for (int j = 0; j < n; ++j) {
    if (int_at(rank_offset, rank_size, rank_channels, first + j, false) == wanted) found = j;
  }
#if PASS == 1
  return value_at(first + found);
#else
  return intBitsToFloat(found);
#endif
#endif
}

#include "per_element.glsl"
