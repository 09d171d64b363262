// Elementwise unary ops on PHWC4, one vec4 (4 channels) per invocation.
// OP: 0 relu, 1 relu6, 2 relu_n1_to_1, 3 relu_0_to_1, 4 leaky relu / prelu, 5 logistic, 6 tanh,
//     7 exp, 8 log, 9 sqrt, 10 rsqrt, 11 abs, 12 neg, 13 hard swish, 14 elu, 15 gelu (tanh
//     approximation), 16 gelu (exact, through erfc).
// OP 4 reads its slope from ALPHA_SOURCE: 0 the float param `alpha` (LEAKY_RELU), 1 the constants
// (PRELU), 2 the arena (PRELU with a runtime slope). The slope tensor broadcasts like a binary
// operand: a dimension of size 1 is repeated, and one channel (ALPHA_SCALAR_C) covers all.

#if OP == 4 && ALPHA_SOURCE != 0
vec4 slope(ivec4 p) {
  p = min(p, alpha_size - 1);
  int i = alpha_offset + ((p.w * alpha_size.z + p.z) * alpha_size.y + p.y) * alpha_size.x + p.x;
#if ALPHA_SOURCE == 1
  vec4 a = weight(i);
#else
  vec4 a = load(i);
#endif
  return ALPHA_SCALAR_C == 1 ? vec4(a.x) : a;
}
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

// Some drivers build tanh from exp and return NaN once exp overflows (early in half math);
// tanh(+-10) is +-1 to float precision.
vec4 safe_tanh(vec4 x) { return tanh(clamp(x, vec4(-10.0), vec4(10.0))); }

vec4 apply_op(vec4 x, ivec4 p) {
#if OP == 0
  return max(x, vec4(0.0));
#elif OP == 1
  return clamp(x, vec4(0.0), vec4(6.0));
#elif OP == 2
  return clamp(x, vec4(-1.0), vec4(1.0));
#elif OP == 3
  return clamp(x, vec4(0.0), vec4(1.0));
#elif OP == 4
#if ALPHA_SOURCE == 0
  vec4 a = vec4(alpha);
#else
  vec4 a = slope(p);
#endif
  return mix(a * x, x, greaterThanEqual(x, vec4(0.0)));
#elif OP == 5
  // exp(-x) overflows to +inf for very negative x (early in half math) and 1 / inf = 0: still right.
  return 1.0 / (1.0 + exp(-x));
#elif OP == 6
  return safe_tanh(x);
#elif OP == 7
  return exp(x);
#elif OP == 8
  return log(x);
#elif OP == 9
  return sqrt(x);
#elif OP == 10
  return inversesqrt(x);
#elif OP == 11
  return abs(x);
#elif OP == 12
  return -x;
#elif OP == 13
  return x * clamp(x + 3.0, vec4(0.0), vec4(6.0)) * (1.0 / 6.0);
#elif OP == 14
  // exp of the clamped value, so the unused branch of the select cannot overflow.
  return mix(exp(min(x, vec4(0.0))) - 1.0, x, greaterThan(x, vec4(0.0)));
#elif OP == 15
  // 0.7978845608 = sqrt(2 / pi).
  return 0.5 * x * (1.0 + safe_tanh(0.7978845608 * (x + 0.044715 * x * x * x)));
#else
  return 0.5 * x * erfc4(-0.7071067812 * x);  // 0.5 x (1 + erf(x / sqrt 2))
#endif
}

void main() {
  ivec3 gid = ivec3(gl_GlobalInvocationID);
  if (any(greaterThanEqual(gid, grid))) return;
  int s = gid.z % size.z;
  int i = phwc4_index(size, gid.x, gid.y, gid.z);
  vec4 r = apply_op(load(in_offset + i), ivec4(gid.x, gid.y, s, gid.z / size.z));
  // Padded channels hold 0, and exp(0), log(0), 1 / sqrt(0), logistic(0) are not 0.
  store(out_offset + i, keep_channels(r, channels, s));
}
