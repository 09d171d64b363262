// FLOOR_DIV (DIVMOD_OP 0) and FLOOR_MOD (DIVMOD_OP 1) of float32 tensors (gpu/kernels/float_divmod.py),
// one vec4 (4 channels) per invocation, bit for bit as TFLite computes them on the CPU, from the
// operands' bits in integer arithmetic (a GPU's division is not correctly rounded: floor of it is
// one off where the quotient is an integer the division rounds below):
//   FLOOR_DIV: floor_div.cc's std::floor(double(a) / double(b)) converted to float: the quotient's
//     24-bit mantissas divided by long division to 56 bits and a sticky bit, rounded to a double's
//     53 bits (to nearest, ties to even), floored, then rounded to float's 24 bits. A zero divisor
//     sets io[status_offset] (TFLite fails the invoke on any zero divisor, float ones too).
//   FLOOR_MOD: floor_mod.cc's fmodf(a, b), which is exact (the mantissa of a reduced modulo b's one
//     bit by bit over the exponents between them), plus b where it is nonzero and its sign differs
//     from b's (a float addition, correctly rounded in highp).
// NaN, infinities and zeros as C++ gives them. A float32 subnormal remainder is built from its bits;
// a GPU that flushes subnormals (GLSL ES allows it; NVIDIA's does) stores it as zero and adds it
// as zero in FLOOR_MOD's adjustment: such results differ by less than the smallest normal.
// Operands through ep_fetch (they broadcast as any epilogue operand: A_SRC / B_SRC, A_SCALAR_C /
// B_SCALAR_C, A_PLANE / B_PLANE). Params: a_offset, a_size[, a_plane]; b_...; out_size,
// out_channels, out_offset; status_offset (FLOOR_DIV).
// @highp in every precision: the operands' bits, which half registers would not hold.

const uint SIGN = 0x80000000u;
const uint EXPONENT = 0x7f800000u;

vec4 operand_a(ivec4 p) { return ep_fetch(A_SRC == EP_SRC_CONST, a_offset, a_size, A_SCALAR_C == 1, p, A_PLANE); }
vec4 operand_b(ivec4 p) { return ep_fetch(B_SRC == EP_SRC_CONST, b_offset, b_size, B_SCALAR_C == 1, p, B_PLANE); }

bool is_nan(uint bits) { return (bits & ~SIGN) > EXPONENT; }
bool is_inf(uint bits) { return (bits & ~SIGN) == EXPONENT; }
float nan_value() { return uintBitsToFloat(0x7fc00000u); }

// |x| of a finite nonzero float's bits as m * 2^e with 2^23 <= m < 2^24 (a subnormal's mantissa
// shifted up, its exponent down).
uint mantissa(uint bits, out int e) {
  uint biased = (bits & EXPONENT) >> 23;
  uint m = bits & 0x7fffffu;
  if (biased == 0u) {
    int shift = 23 - findMSB(m);
    e = -149 - shift;
    return m << uint(shift);
  }
  e = int(biased) - 150;
  return m | 0x800000u;
}

// The float of magnitude m * 2^e (m < 2^25, exactly representable: no rounding) and sign `sign`.
float exact_float(uint m, int e, uint sign) {
  if (m == 0u) return uintBitsToFloat(sign);
  int shift = 23 - findMSB(m);  // normalize the leading bit to bit 23
  int biased = e - shift + 150;
  uint bits = biased >= 1 ? (uint(biased) << 23) | ((shift >= 0 ? m << uint(shift) : m >> uint(-shift)) & 0x7fffffu)
                          : (shift >= 0 ? m << uint(shift) : m >> uint(-shift)) >> uint(1 - biased);  // subnormal
  return uintBitsToFloat(sign | bits);
}

// -- 64-bit unsigned integers as uvec2 (x: low word, y: high word) ------------------------------
uvec2 u64_shl1(uvec2 v, uint bit) { return uvec2((v.x << 1) | bit, (v.y << 1) | (v.x >> 31)); }

uvec2 u64_shr(uvec2 v, int s) {  // 0 <= s < 64
  if (s == 0) return v;
  if (s >= 32) return uvec2(v.y >> uint(s - 32), 0u);
  return uvec2((v.x >> uint(s)) | (v.y << uint(32 - s)), v.y >> uint(s));
}

uvec2 u64_low_bits(uvec2 v, int s) {  // v mod 2^s, 0 <= s <= 64
  if (s >= 64) return v;
  if (s >= 32) return uvec2(v.x, s == 32 ? 0u : v.y & ((1u << uint(s - 32)) - 1u));
  return uvec2(s == 0 ? 0u : v.x & ((1u << uint(s)) - 1u), 0u);
}

uvec2 u64_bit(int s) { return s >= 32 ? uvec2(0u, 1u << uint(s - 32)) : uvec2(1u << uint(s), 0u); }

int u64_length(uvec2 v) { return v.y != 0u ? 33 + findMSB(v.y) : findMSB(v.x) + 1; }  // bits; 0 for 0

int u64_compare(uvec2 a, uvec2 b) {  // -1, 0, 1
  if (a.y != b.y) return a.y < b.y ? -1 : 1;
  return a.x == b.x ? 0 : (a.x < b.x ? -1 : 1);
}

uvec2 u64_add1(uvec2 v) {
  uint carry;
  uint low = uaddCarry(v.x, 1u, carry);
  return uvec2(low, v.y + carry);
}

// v rounded to nearest, ties to even, at bit s (0 < s < 64): v >> s plus one where the bits below
// exceed half, or equal it with `sticky` set or the kept value odd.
uvec2 round_shift(uvec2 v, int s, bool sticky) {
  uvec2 kept = u64_shr(v, s);
  int below = u64_compare(u64_low_bits(v, s), u64_bit(s - 1));
  if (below > 0 || (below == 0 && (sticky || (kept.x & 1u) == 1u))) kept = u64_add1(kept);
  return kept;
}

// -- FLOOR_DIV -----------------------------------------------------------------------------------
float floor_div(float a, float b) {
  uint ab = floatBitsToUint(a), bb = floatBitsToUint(b);
  uint sign = (ab ^ bb) & SIGN;
  if (is_nan(ab) || is_nan(bb) || (is_inf(ab) && is_inf(bb))) return nan_value();
  if (is_inf(ab)) return uintBitsToFloat(sign | EXPONENT);  // floor(+-inf)
  if ((bb & ~SIGN) == 0u) return 0.0;  // flagged: the invoke fails
  if ((ab & ~SIGN) == 0u || is_inf(bb)) return uintBitsToFloat(sign);  // floor(+-0) = +-0
  int ea, eb;
  uint ma = mantissa(ab, ea), mb = mantissa(bb, eb);
  // Q = floor(ma * 2^55 / mb), 2^54 < Q < 2^56; r its remainder (the sticky bit).
  uint first = ma >= mb ? 1u : 0u;
  uint r = ma - first * mb;
  uvec2 q = uvec2(first, 0u);
  for (int i = 0; i < 55; ++i) {
    r <<= 1;
    uint bit = r >= mb ? 1u : 0u;
    r -= bit * mb;
    q = u64_shl1(q, bit);
  }
  // The double: q rounded to 53 bits, times 2^e (a carry to 2^53 is still 53 bits' worth: exact).
  int shift = u64_length(q) - 53;
  uvec2 d = round_shift(q, shift, r != 0u);
  int e = ea - eb - 55 + shift;
  // floor of the double (of -d for a negative quotient: -ceil(d)), as magnitude m * 2^e.
  if (e < 0) {
    bool fraction;
    if (-e >= 64) {
      fraction = true;  // 0 < d < 1
      d = uvec2(0u);
    } else {
      fraction = u64_compare(u64_low_bits(d, -e), uvec2(0u)) != 0;
      d = u64_shr(d, -e);
    }
    if (fraction && sign != 0u) d = u64_add1(d);
    e = 0;
  }
  // To float: 24 bits, to nearest, ties to even (an integer: nothing below the bits dropped).
  int length = u64_length(d);
  if (length > 24) {
    int drop = length - 24;
    d = round_shift(d, drop, false);
    e += drop;
  }
  if (u64_length(d) + e > 128) return uintBitsToFloat(sign | EXPONENT);  // past float's range: inf
  return exact_float(d.x, e, sign);
}

// -- FLOOR_MOD -----------------------------------------------------------------------------------
float floor_mod(float a, float b) {
  uint ab = floatBitsToUint(a), bb = floatBitsToUint(b);
  if (is_nan(ab) || is_nan(bb) || is_inf(ab) || (bb & ~SIGN) == 0u) return nan_value();  // fmodf's NaN
  float rest = a;  // fmodf(a, b): a itself where |a| < |b|, b infinite, or a zero
  if (!is_inf(bb) && (ab & ~SIGN) != 0u && (ab & ~SIGN) >= (bb & ~SIGN)) {
    int ea, eb;
    uint ma = mantissa(ab, ea), mb = mantissa(bb, eb);
    uint r = ma >= mb ? ma - mb : ma;  // |a| >= |b| with both normalized: ea >= eb
    for (int i = 0; i < ea - eb; ++i) {
      r <<= 1;
      if (r >= mb) r -= mb;
    }
    rest = exact_float(r, eb, ab & SIGN);
  }
  uint rb = floatBitsToUint(rest);
  if ((rb & ~SIGN) != 0u && (rb & SIGN) != (bb & SIGN)) rest = rest + b;  // floor_mod.cc's adjustment
  return rest;
}

void main() {
  ivec3 gid = ivec3(gl_GlobalInvocationID);
  if (any(greaterThanEqual(gid, grid))) return;
  int s = gid.z % out_size.z;
  ivec4 p = ivec4(gid.x, gid.y, s, gid.z / out_size.z);
  vec4 a = operand_a(p), b = operand_b(p);
  vec4 r = vec4(0.0);
  for (int k = 0; k < 4; ++k) {
#if DIVMOD_OP == 0
    r[k] = floor_div(a[k], b[k]);
#else
    r[k] = floor_mod(a[k], b[k]);
#endif
  }
#ifdef IO_STATUS
  // Only the output's own channels: padded ones hold 0.
  if (any(bvec4(uvec4(equal(floatBitsToUint(b) & uvec4(~SIGN), uvec4(0u)))
                & uvec4(lessThan(ivec4(4 * s) + ivec4(0, 1, 2, 3), ivec4(out_channels))))))
    io[status_offset] = 1.0;
#endif
  store(out_offset + phwc4_index(out_size, gid.x, gid.y, gid.z), keep_channels(r, out_channels, s));
}
