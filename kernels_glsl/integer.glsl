// Integer ops of int32 tensors on PHWC4 (gpu/kernels/integer.py), one vec4 (4 channels) per
// invocation. An int32 tensor holds its bits in float storage (gpu/kernels/base.py: the int
// view): operands are read with ep_fetch (so they broadcast like any epilogue operand: A_SRC /
// B_SRC, A_SCALAR_C / B_SCALAR_C, A_PLANE / B_PLANE) and turned back into ints; the result is
// stored as its bits, or as 0.0 / 1.0 for a comparison (a bool). 32-bit integer arithmetic wraps,
// as TFLite's int32 kernels do on the CPU.
// INT_OP: the op (codes of integer.py). INT_CLAMP: clamp to [clamp_low, clamp_high] (the fused
// activation). IO_STATUS: a zero divisor sets io[status_offset] (the invoke fails).
// Params: a_offset, a_size[, a_plane]; b_...; out_size, out_channels, out_offset; clamp_low,
// clamp_high; status_offset.

ivec4 operand_a(ivec4 p) {
  return floatBitsToInt(ep_fetch(A_SRC == EP_SRC_CONST, a_offset, a_size, A_SCALAR_C == 1, p, A_PLANE));
}

#if INT_OP < 32
ivec4 operand_b(ivec4 p) {
  return floatBitsToInt(ep_fetch(B_SRC == EP_SRC_CONST, b_offset, b_size, B_SCALAR_C == 1, p, B_PLANE));
}
#endif

// C++'s truncating a / b, on magnitudes (GLSL leaves the sign of a negative integer quotient to
// the driver); INT_MIN / -1 wraps to INT_MIN, as x86 gives it.
ivec4 divide(ivec4 a, ivec4 b) {
  // magnitudes as uint: abs(INT_MIN) is INT_MIN, whose bits as a uint are 2^31 (a zero divisor is
  // flagged apart: 1 keeps the shader defined)
  ivec4 q = ivec4(uvec4(abs(a)) / max(uvec4(abs(b)), uvec4(1u)));
  return mix(q, -q, notEqual(lessThan(a, ivec4(0)), lessThan(b, ivec4(0))));
}

vec4 integer_op(ivec4 a, ivec4 b) {
  ivec4 r = a;
#if INT_OP == 0
  r = a + b;
#elif INT_OP == 1
  r = a - b;
#elif INT_OP == 2
  r = a * b;
#elif INT_OP == 3
  r = divide(a, b);
#elif INT_OP == 4
  // floor_div.cc: floor(a / b): the truncated quotient, less one where a remainder has the
  // other sign than b.
  r = divide(a, b);
  ivec4 rest = a - r * b;
  r -= ivec4(notEqual(rest, ivec4(0))) * ivec4(notEqual(lessThan(rest, ivec4(0)), lessThan(b, ivec4(0))));
#elif INT_OP == 5
  // floor_mod.cc: C++'s remainder, plus b where it is nonzero and of the other sign than b.
  r = a - divide(a, b) * b;
  r += b * ivec4(notEqual(r, ivec4(0))) * ivec4(notEqual(lessThan(r, ivec4(0)), lessThan(b, ivec4(0))));
#elif INT_OP == 6
  r = max(a, b);
#elif INT_OP == 7
  r = min(a, b);
#elif INT_OP == 8
  r = (a - b) * (a - b);
#elif INT_OP == 16
  return vec4(greaterThan(a, b));
#elif INT_OP == 17
  return vec4(greaterThanEqual(a, b));
#elif INT_OP == 18
  return vec4(lessThan(a, b));
#elif INT_OP == 19
  return vec4(lessThanEqual(a, b));
#elif INT_OP == 20
  return vec4(equal(a, b));
#elif INT_OP == 21
  return vec4(notEqual(a, b));
#elif INT_OP == 32
  r = mix(a, -a, lessThan(a, ivec4(0)));  // -INT_MIN wraps to INT_MIN, as std::abs gives it
#elif INT_OP == 33
  r = -a;
#endif
#ifdef INT_CLAMP
  r = clamp(r, ivec4(clamp_low), ivec4(clamp_high));
#endif
  return intBitsToFloat(r);
}

void main() {
  ivec3 gid = ivec3(gl_GlobalInvocationID);
  if (any(greaterThanEqual(gid, grid))) return;
  int s = gid.z % out_size.z;
  ivec4 p = ivec4(gid.x, gid.y, s, gid.z / out_size.z);
  ivec4 a = operand_a(p);
#if INT_OP < 32
  ivec4 b = operand_b(p);
#else
  ivec4 b = ivec4(0);
#endif
#ifdef IO_STATUS
  // Only the output's own channels: padded ones hold 0.
  if (any(bvec4(uvec4(equal(b, ivec4(0))) & uvec4(lessThan(ivec4(4 * s) + ivec4(0, 1, 2, 3), ivec4(out_channels))))))
    io[status_offset] = 1.0;
#endif
  store(out_offset + phwc4_index(out_size, gid.x, gid.y, gid.z), keep_channels(integer_op(a, b), out_channels, s));
}
