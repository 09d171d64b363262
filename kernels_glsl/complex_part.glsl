// REAL (PART 0), IMAG (PART 1) and COMPLEX_ABS (PART 2) of a complex view [..., 2]
// (gpu/complex_view.py): one invocation per output vec4 (out_size, out_channels); output value e
// (row-major) reads the pair at pixel e of the view, its vec4 (re, im, 0, 0); then the epilogue
// steps fused after the node. Highp in every precision (its @highp line below).
// @highp in every precision: |z| scales by exponents and tests infinities and NaN on the bits,
//  which fp16 registers would not hold.

// x * 2^e in two steps of at most 2^+-64 each: NVIDIA's ldexp multiplies by 2^e as a float, which
// is inf past 2^127 (then 0 * inf = NaN: |2e38| gave NaN on an H200) and 0 below 2^-126.
vec4 scale2(vec4 x, ivec4 e) {
  ivec4 half_e = e / 2;
  return ldexp(ldexp(x, half_e), e - half_e);
}

// |re + i im| as hypot: both parts scaled by the power of 2 of the larger (exact), so the squares
// neither overflow nor vanish; an infinite part gives +inf (even beside NaN), else NaN gives NaN.
vec4 magnitude(vec4 re, vec4 im) {
  vec4 a = abs(re), b = abs(im);
  ivec4 e;
  frexp(max(a, b), e);
  vec4 sa = scale2(a, -e), sb = scale2(b, -e);
  vec4 r = scale2(sqrt(sa * sa + sb * sb), e);
  r = mix(r, vec4(uintBitsToFloat(0x7fc00000u)), tfl_either_nan(re, im));
  return mix(r, vec4(TFL_INF), bvec4(uvec4(tfl_isinf(re)) | uvec4(tfl_isinf(im))));
}

void main() {
  ivec3 gid = ivec3(gl_GlobalInvocationID);
  if (any(greaterThanEqual(gid, grid))) return;
  int s = gid.z % out_size.z, batch = gid.z / out_size.z;
  int first = ((batch * out_size.y + gid.y) * out_size.x + gid.x) * out_channels + 4 * s;
  vec4 re = vec4(0.0), im = vec4(0.0);
  for (int k = 0; k < 4; k++) {
    if (4 * s + k < out_channels) {
      vec2 pair = load(in_offset + first + k).xy;
      re[k] = pair.x;
      im[k] = pair.y;
    }
  }
#if PART == 0
  vec4 r = re;
#elif PART == 1
  vec4 r = im;
#else
  vec4 r = magnitude(re, im);
#endif
  r = epilogue(r, ivec4(gid.x, gid.y, s, batch));
  store(out_offset + phwc4_index(out_size, gid.x, gid.y, gid.z), keep_channels(r, out_channels, s));
}
