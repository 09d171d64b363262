// Epilogue: elementwise steps a kernel applies to an output value before it stores it
// (gpu/kernels/epilogue.py picks the codes). `epilogue(v, p)` runs steps 0 .. EP_COUNT - 1 on
// value v of output position p = (x, y, slice, batch); every kernel that writes a float output
// at a known position calls it, so fused activations, residual adds and whole chains of
// elementwise nodes cost no dispatch and no round trip through memory of their own.
//
// Per step k (defines): EPk_OP the op code (EP_OP_<op>; a unary op's is < EP_BINARY); EPk_SRC
//   where its operand comes from: none, the scalar param epk_value, the constants or the arena
//   (both at epk_offset, a PHWC4 tensor of size epk_size (w, h, slices, batch) that broadcasts
//   like a binary operand: a dimension of size 1 repeats, and with EPk_SCALAR_C its one channel
//   covers all four; with EPk_ZERO_C the operand has fewer slices than the output and reads
//   as zero past them); EPk_SWAP: the operand is the left-hand side;
//   EPk_STORED: the step starts a node fused into this kernel, whose input the unfused graph
//   stored and read back: with STORAGE_HALF the value is rounded to half first, as that round
//   trip did, so fusion changes no result in any precision (it only saves the memory traffic).
// Params per step: epk_offset, epk_size, epk_value (unused ones are zero).
//
// Op codes are named constants EP_OP_<op> (e.g. EP_OP_RELU, EP_OP_ADD), defined with EP_BINARY,
// EP_MAX and EP_SRC_* ahead of this text from epilogue.py's tables (glsl_defines()); they are
// compile-time constants, so each call below folds to the one op it names. Every op of those
// tables has its line below (tests/gpu/test_epilogue.py checks it).

#if EP_COUNT > EP_MAX
#error "more epilogue steps than the template holds"
#endif

// erfc (GLSL has no erf): for z >= 0, t exp(-z^2 + P(t)) with t = 1 / (1 + z / 2) and P the
// Chebyshev fit of Numerical Recipes 6.2 (relative error < 1.2e-7, also far in the tail, where
// 1 + erf(z) would cancel); below 0, 2 - erfc(-z).
vec4 erfc4(vec4 z) {
  vec4 a = abs(z);
  vec4 t = 1.0 / (1.0 + 0.5 * a);
  vec4 p = -1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806
           + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))));
  vec4 tail = t * exp(p - a * a);
  return mix(2.0 - tail, tail, greaterThanEqual(z, vec4(0.0)));
}

// The float view (gpu/kernels/base.py) holds a bool as 0.0 / 1.0; any nonzero value is true. A
// comparison with a NaN operand is false (NOT_EQUAL: true), as in C++: tested on the bits, since
// a compiler may assume there is no NaN.
vec4 ep_truth(vec4 x) { return vec4(bvec4(uvec4(notEqual(x, vec4(0.0))) | uvec4(tfl_isnan(x)))); }
vec4 ep_compare(bvec4 holds, vec4 a, vec4 b, float if_nan) {
  return mix(vec4(holds), vec4(if_nan), tfl_either_nan(a, b));
}

// LiteRT's float -> int32 CAST (ops/elementwise.py float_to_integer): truncate toward zero,
// saturate at the bounds, NaN gives INT_MAX. 2147483520 is the largest float below 2^31.
ivec4 tfl_to_int(vec4 x) {
  ivec4 r = ivec4(clamp(trunc(x), vec4(-2147483648.0), vec4(2147483520.0)));
  bvec4 high = bvec4(uvec4(greaterThanEqual(x, vec4(2147483648.0))) | uvec4(tfl_isnan(x)));
  return mix(r, ivec4(2147483647), high);
}

// The RELU family and HARD_SWISH clamp as TFLite's C++ does (common.glsl's tfl_clamp): NaN in,
// NaN out; GLSL's max / clamp would turn NaN into a bound.
vec4 ep_unary(int op, vec4 x, vec4 a) {
  // -- the float view's steps --
  if (op == EP_OP_LOGICAL_NOT) return 1.0 - ep_truth(x);
  if (op == EP_OP_CAST_TO_FLOAT) return x;  // a bool's view is its float value
  if (op == EP_OP_CAST_TO_BOOL) return ep_truth(x);  // static_cast<bool>: NaN is true
  if (op == EP_OP_CAST_TO_INT32) return intBitsToFloat(tfl_to_int(x));
  // The value of an int32 tensor is its bits (the int view).
  if (op == EP_OP_CAST_INT_TO_FLOAT) return vec4(floatBitsToInt(x));
  if (op == EP_OP_CAST_INT_TO_BOOL) return vec4(notEqual(floatBitsToInt(x), ivec4(0)));
  if (op == EP_OP_CAST_INT_TO_INT) return x;
  // -- float math --
  if (op == EP_OP_RELU) return tfl_max(x, vec4(0.0));
  if (op == EP_OP_RELU6) return tfl_clamp(x, vec4(0.0), vec4(6.0));
  if (op == EP_OP_RELU_N1_TO_1) return tfl_clamp(x, vec4(-1.0), vec4(1.0));
  if (op == EP_OP_RELU_0_TO_1) return tfl_clamp(x, vec4(0.0), vec4(1.0));
  // The slope is the operand (PRELU's code is LEAKY_RELU's).
  if (op == EP_OP_LEAKY_RELU) return mix(a * x, x, greaterThanEqual(x, vec4(0.0)));
  // exp(-x) overflows to +inf for very negative x (early in half math) and 1 / inf = 0: still right.
  if (op == EP_OP_LOGISTIC) return 1.0 / (1.0 + exp(-x));
  if (op == EP_OP_TANH) return tfl_tanh(x);
  if (op == EP_OP_EXP) return exp(x);
  if (op == EP_OP_LOG) return log(x);
  if (op == EP_OP_SQRT) return sqrt(x);
  if (op == EP_OP_RSQRT) return inversesqrt(x);
  if (op == EP_OP_ABS) return abs(x);
  if (op == EP_OP_NEG) return -x;
  if (op == EP_OP_SQUARE) return x * x;
  if (op == EP_OP_SIGN) return sign(x);
  // The GPU reduces sin / cos arguments in its own float precision: the absolute error grows
  // with |x| (gpu/kernels/elementwise.py says how far).
  if (op == EP_OP_SIN) return sin(x);
  if (op == EP_OP_COS) return cos(x);
  if (op == EP_OP_FLOOR) return floor(x);
  if (op == EP_OP_CEIL) return ceil(x);
  // TFLite's ROUND: halves to even (only the sign of a zero result may differ: -0.4 gives -0).
  if (op == EP_OP_ROUND) return roundEven(x);
  if (op == EP_OP_HARD_SWISH) return x * tfl_clamp(x + 3.0, vec4(0.0), vec4(6.0)) * (1.0 / 6.0);
  // x * LOGISTIC(x) (a LOGISTIC and a MUL of the graph): the sigmoid as EP_OP_LOGISTIC computes
  // it, not rounded to the storage precision in between as the unfused graph stored it.
  if (op == EP_OP_SWISH) return x * (1.0 / (1.0 + exp(-x)));
  // exp of the clamped value, so the unused branch of the select cannot overflow.
  if (op == EP_OP_ELU) return mix(tfl_expm1(min(x, vec4(0.0))), x, greaterThan(x, vec4(0.0)));
  // TFLite's 0.5 x (1 + tanh(z)), z = sqrt(2 / pi) (x + 0.044715 x^3), as x / (1 + exp(-2z)):
  // for x < -1, 1 + tanh(z) cancels (in half math to a half ulp of 1, 1.7e-2 of an output:
  // gles-fuzz-graphs seed 122 case 299); exp(-2z) overflows to +inf for very negative x, and
  // x / inf is the -0 the limit is.
  if (op == EP_OP_GELU) return x / (1.0 + exp(-1.5957691216 * (x + 0.044715 * x * x * x)));
  // TFLite's rounding (a fake-quant step's round(x / scale)): halves away from zero.
  if (op == EP_OP_ROUND_HALF_AWAY) return sign(x) * floor(abs(x) + 0.5);
  if (op == EP_OP_GELU_EXACT) return 0.5 * x * erfc4(-0.7071067812 * x);  // 0.5 x (1 + erf(x / sqrt 2))
  return x;
}

vec4 ep_binary(int op, vec4 a, vec4 b) {
  // -- the float view's steps: 1.0 where the relation holds --
  if (op == EP_OP_GREATER) return ep_compare(greaterThan(a, b), a, b, 0.0);
  if (op == EP_OP_GREATER_EQUAL) return ep_compare(greaterThanEqual(a, b), a, b, 0.0);
  if (op == EP_OP_LESS) return ep_compare(lessThan(a, b), a, b, 0.0);
  if (op == EP_OP_LESS_EQUAL) return ep_compare(lessThanEqual(a, b), a, b, 0.0);
  if (op == EP_OP_EQUAL) return ep_compare(equal(a, b), a, b, 0.0);
  if (op == EP_OP_NOT_EQUAL) return ep_compare(notEqual(a, b), a, b, 1.0);
  if (op == EP_OP_LOGICAL_AND) return ep_truth(a) * ep_truth(b);
  if (op == EP_OP_LOGICAL_OR) return max(ep_truth(a), ep_truth(b));
  // -- float math --
  // TFLite's float ADD / SUB / MUL / DIV end in ActivationFunctionWithMinMax: an overflow to
  // +-inf is +-FLT_MAX there (tfl_finite), whatever the fused activation.
  if (op == EP_OP_ADD) return tfl_finite(a + b);
  if (op == EP_OP_SUB) return tfl_finite(a - b);
  if (op == EP_OP_MUL) return tfl_finite(a * b);
  if (op == EP_OP_DIV) return tfl_finite(a / b);
  // TFLite's MaximumOp / MinimumOp: a > b ? a : b and a < b ? a : b, so a NaN b wins, a NaN a
  // loses: std::max(b, a) / std::min(b, a) (common.glsl).
  if (op == EP_OP_MAXIMUM) return tfl_max(b, a);
  if (op == EP_OP_MINIMUM) return tfl_min(b, a);
  if (op == EP_OP_SQUARED_DIFFERENCE) return (a - b) * (a - b);
  if (op == EP_OP_POW) return tfl_pow(a, b);  // C's powf, not GLSL's pow (common.glsl)
  if (op == EP_OP_ATAN2) return tfl_atan2(a, b);  // C's atan2f (common.glsl)
  return a;
}

// Element p (w, h, slice, batch) of a PHWC4 tensor of `size` at `offset` in the constants or
// the arena, broadcast: min(p, size - 1) picks element 0 along a dimension of size 1. `plane` 0:
// stored in that layout; else stored in a layout of its own whose H x W is `plane` (a runtime
// [N, C] stored Nx1x1xC read as 1x1xNxC against a rank-3 output): both hold the same row-major
// pixels, so the pixel's row-major index in `size` finds it (gpu/kernels/epilogue.py Source).
vec4 ep_fetch(bool from_consts, int offset, ivec4 size, bool scalar_c, ivec4 p, int plane) {
  p = min(p, size - 1);
  int i;
  if (plane > 0) {
    int pixel = (p.w * size.y + p.y) * size.x + p.x;
    i = offset + ((pixel / plane) * size.z + p.z) * plane + pixel % plane;
  } else {
    i = offset + ((p.w * size.z + p.z) * size.y + p.y) * size.x + p.x;
  }
  vec4 v = from_consts ? weight(i) : load(i);
  return scalar_c ? vec4(v.x) : v;
}

// zero_c: the operand has fewer slices than the output, and zeros past them (a channel PAD of
// zeros folded into this read: rule pad_into_operand).
vec4 ep_operand(int src, bool scalar_c, bool zero_c, int offset, ivec4 size, int plane, float value, ivec4 p) {
  if (src == EP_SRC_SCALAR) return vec4(value);
  if (src == EP_SRC_NONE) return vec4(0.0);
  if (zero_c && p.z >= size.z) return vec4(0.0);
  return ep_fetch(src == EP_SRC_CONST, offset, size, scalar_c, p, plane);
}

#if STORAGE_HALF && !defined(STORAGE_MIXED)
// (A mixed-storage kernel of precision 'auto' reads some operands from float storage, which a
// round to half would undo: it keeps every value as computed.)
highp vec4 ep_stored(highp vec4 v) { return half_rounded(v); }
#else
vec4 ep_stored(vec4 v) { return v; }
#endif

vec4 ep_step(int op, bool swap, vec4 v, vec4 operand) {
  if (op < EP_BINARY) return ep_unary(op, v, operand);
  return swap ? ep_binary(op, operand, v) : ep_binary(op, v, operand);
}

#define EP_APPLY(OP, SRC, SWAP, SCALAR_C, ZERO_C, STORED, offset, size, plane, value) v = ep_step(OP, SWAP == 1, STORED == 1 ? ep_stored(v) : v, ep_operand(SRC, SCALAR_C == 1, ZERO_C == 1, offset, size, plane, value, p))

vec4 epilogue(vec4 v, ivec4 p) {
#if EP_COUNT > 0
  EP_APPLY(EP0_OP, EP0_SRC, EP0_SWAP, EP0_SCALAR_C, EP0_ZERO_C, EP0_STORED, ep0_offset, ep0_size, EP0_PLANE, ep0_value);
#endif
#if EP_COUNT > 1
  EP_APPLY(EP1_OP, EP1_SRC, EP1_SWAP, EP1_SCALAR_C, EP1_ZERO_C, EP1_STORED, ep1_offset, ep1_size, EP1_PLANE, ep1_value);
#endif
#if EP_COUNT > 2
  EP_APPLY(EP2_OP, EP2_SRC, EP2_SWAP, EP2_SCALAR_C, EP2_ZERO_C, EP2_STORED, ep2_offset, ep2_size, EP2_PLANE, ep2_value);
#endif
#if EP_COUNT > 3
  EP_APPLY(EP3_OP, EP3_SRC, EP3_SWAP, EP3_SCALAR_C, EP3_ZERO_C, EP3_STORED, ep3_offset, ep3_size, EP3_PLANE, ep3_value);
#endif
#if EP_COUNT > 4
  EP_APPLY(EP4_OP, EP4_SRC, EP4_SWAP, EP4_SCALAR_C, EP4_ZERO_C, EP4_STORED, ep4_offset, ep4_size, EP4_PLANE, ep4_value);
#endif
#if EP_COUNT > 5
  EP_APPLY(EP5_OP, EP5_SRC, EP5_SWAP, EP5_SCALAR_C, EP5_ZERO_C, EP5_STORED, ep5_offset, ep5_size, EP5_PLANE, ep5_value);
#endif
#if EP_COUNT > 6
  EP_APPLY(EP6_OP, EP6_SRC, EP6_SWAP, EP6_SCALAR_C, EP6_ZERO_C, EP6_STORED, ep6_offset, ep6_size, EP6_PLANE, ep6_value);
#endif
#if EP_COUNT > 7
  EP_APPLY(EP7_OP, EP7_SRC, EP7_SWAP, EP7_SCALAR_C, EP7_ZERO_C, EP7_STORED, ep7_offset, ep7_size, EP7_PLANE, ep7_value);
#endif
  return v;
}
