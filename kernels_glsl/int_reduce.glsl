// SUM, REDUCE_PROD, REDUCE_MAX and REDUCE_MIN of an int32 tensor (gpu/kernels/integer.py), one
// vec4 (4 channels) of the output per invocation: each output element combines the elements of
// the input whose kept coordinates are its own, read by row-major index as their bits (the int
// view), in 32-bit integer arithmetic, which wraps as TFLite's int32 reductions do (a wrapping
// sum or product is the same in any order). Dimensions are the input's, padded to 4 with leading
// 1s. INT_REDUCE: 0 sum, 1 product, 2 max, 3 min.
// Params: out_size, out_channels, out_offset; in_size, in_channels, in_offset; in_dims; kept_dims
// (in_dims with the reduced axes 1), reduced_dims (in_dims with the kept axes 1), count (the
// elements an output combines).

#include "row_major.glsl"

#if INT_REDUCE == 0
#define START 0
int combine(int acc, int x) { return acc + x; }
#elif INT_REDUCE == 1
#define START 1
int combine(int acc, int x) { return acc * x; }
#elif INT_REDUCE == 2
#define START (-2147483647 - 1)
int combine(int acc, int x) { return max(acc, x); }
#else
#define START 2147483647
int combine(int acc, int x) { return min(acc, x); }
#endif

float element(int f) {
  ivec4 kept = coordinates(f, kept_dims);  // the output's row-major order is the kept axes'
  int acc = START;
  for (int k = 0; k < count; ++k) {
    ivec4 p = kept + coordinates(k, reduced_dims);
    acc = combine(acc, int_at(in_offset, in_size, in_channels, row_major_index(p, in_dims), false));
  }
  return intBitsToFloat(acc);
}

#include "per_element.glsl"
