// Shared by every kernel: the workgroup size, the storage buffers and their accessors, and the
// fused activation. Python prepends #version, precision, the #defines and the Params block.
//
// Binding 0: the arena (every activation tensor of the partition, PHWC4, vec4 or half4).
// Binding 1: the constants (weights, biases, PHWC4-packed, vec4 or half4).
// Storage is half precision when STORAGE_HALF is 1: each vec4 is packed into a uvec2.

layout(local_size_x = WG_X, local_size_y = WG_Y, local_size_z = WG_Z) in;

// Precision 'auto' (gpu/compiler.py) keeps the tensors and weights it promoted to float in a
// third buffer of vec4 (binding 3, the float buffer: its weights first, then its tensors). A
// dispatch touching only float tensors defines FLOAT_BUFFER and reads and writes that buffer
// alone (with HALF_WEIGHTS, its weights are all half ones from binding 1); one touching both
// kinds of tensor or of weight defines STORAGE_MIXED, and an offset of FLOAT_BASE or more then
// names element offset - FLOAT_BASE of the float buffer (one branch per access, on a value that
// is the same for every invocation of an operand).
#if OUT_IO || defined(LANE_WRITES)
#define store store_tensor  // the storage's own store, behind the I/O and lane view ones below
#endif
#if defined(LANE_READS) || defined(IN_IO)
#define load load_tensor  // the storage's own load, behind the lane view and I/O ones below
#endif
// The I/O buffer (binding 2) as floats: read by kernels that load a partition input from it
// (IN_IO, IO_READS: convert_in), written by those that store a partition output there (OUT_IO,
// IO_WRITES: convert_out), set a status word (IO_STATUS: KernelEnv.status_word) or store to half
// storage (HALF_OVERFLOW_WORD).
#if defined(IN_IO) || (defined(IO_READS) && defined(HALF_OVERFLOW_WORD))
layout(std430, binding = 2) buffer Io { highp float io[]; };
#elif defined(IO_READS)
layout(std430, binding = 2) readonly buffer Io { highp float io[]; };
#elif OUT_IO || defined(IO_STATUS) || defined(HALF_OVERFLOW_WORD) || defined(IO_WRITES)
layout(std430, binding = 2) writeonly buffer Io { highp float io[]; };
#endif

// A store to half storage rounds a finite |v| of 65520 or more (half's largest, 65504, plus half
// a step) to inf, which LiteRT's float32 would have kept: such a store sets the partition's
// overflow word, io[HALF_OVERFLOW_WORD] (gpu/half_overflow.py reads it with the outputs). On the
// bits, in highp: an inf or NaN the kernel computed is not an overflow of the storage.
#ifdef HALF_OVERFLOW_WORD
void note_overflow(highp vec4 v) {
  highp vec4 size = abs(v);
  // Almost no store comes near half's range: one scalar test of the largest lane first, the
  // lanes' bits only past it (whether max() passes a NaN over or returns it, the test is right).
  if (max(max(size.x, size.y), max(size.z, size.w)) < 65520.0) return;
  highp uvec4 magnitude = floatBitsToUint(v) & 0x7fffffffu;
  if (any(bvec4(uvec4(greaterThanEqual(magnitude, uvec4(0x477ff000u))) & uvec4(lessThan(magnitude, uvec4(0x7f800000u))))))
    io[HALF_OVERFLOW_WORD] = 1.0;
}
#define NOTE_OVERFLOW(v) note_overflow(v)
#else
#define NOTE_OVERFLOW(v)
#endif

#if defined(STORAGE_MIXED)
layout(std430, binding = 0) buffer Arena { uvec2 arena[]; };
layout(std430, binding = 1) readonly buffer Consts { uvec2 consts[]; };
layout(std430, binding = 3) buffer Floats { vec4 floats[]; };
vec4 load(int i) {
  if (i >= FLOAT_BASE) return floats[i - FLOAT_BASE];
  uvec2 v = arena[i];
  return vec4(unpackHalf2x16(v.x), unpackHalf2x16(v.y));
}
vec4 weight(int i) {
  if (i >= FLOAT_BASE) return floats[i - FLOAT_BASE];
  uvec2 v = consts[i];
  return vec4(unpackHalf2x16(v.x), unpackHalf2x16(v.y));
}
void store(int i, vec4 v) {
  if (i >= FLOAT_BASE) {
    floats[i - FLOAT_BASE] = v;
  } else {
    NOTE_OVERFLOW(v);
    arena[i] = uvec2(packHalf2x16(v.xy), packHalf2x16(v.zw));
  }
}
#elif defined(FLOAT_BUFFER)
layout(std430, binding = 3) buffer Floats { vec4 arena[]; };
vec4 load(int i) { return arena[i]; }
void store(int i, vec4 v) { arena[i] = v; }
#if defined(HALF_WEIGHTS)
// Float tensors, half weights: weights a half holds exactly (a model's float16 weights) stay in
// the half constants buffer, where float copies would only cost bytes.
layout(std430, binding = 1) readonly buffer Consts { uvec2 consts[]; };
vec4 weight(int i) { uvec2 v = consts[i]; return vec4(unpackHalf2x16(v.x), unpackHalf2x16(v.y)); }
#else
vec4 weight(int i) { return arena[i]; }
#endif
#elif STORAGE_HALF
layout(std430, binding = 0) buffer Arena { uvec2 arena[]; };
layout(std430, binding = 1) readonly buffer Consts { uvec2 consts[]; };
vec4 load(int i) { uvec2 v = arena[i]; return vec4(unpackHalf2x16(v.x), unpackHalf2x16(v.y)); }
vec4 weight(int i) { uvec2 v = consts[i]; return vec4(unpackHalf2x16(v.x), unpackHalf2x16(v.y)); }
void store(int i, vec4 v) {
  NOTE_OVERFLOW(v);
  arena[i] = uvec2(packHalf2x16(v.xy), packHalf2x16(v.zw));
}
#else
layout(std430, binding = 0) buffer Arena { vec4 arena[]; };
layout(std430, binding = 1) readonly buffer Consts { vec4 consts[]; };
vec4 load(int i) { return arena[i]; }
vec4 weight(int i) { return consts[i]; }
void store(int i, vec4 v) { arena[i] = v; }
#endif

#ifdef LANE_READS
#undef load
// A lane view (rule lane_views, compiler.lane_accesses) has no storage of its own: its channels
// lie `shift` lanes into its whole's vec4s, from the whole's slice at its offset, so its vec4 at
// index i is lanes shift.. of the whole's vec4 at i and the next slice's (H x W elements on), and
// its lanes past its channels (the whole's next channels) read as zero. A dispatch reads up to 2:
// lane_rK_offset, lane_rK = (elements, H x W, shift, channels).
bool in_lane_view(int i, int first, ivec4 view) { return i >= first && i - first < view.x; }
vec4 lane_read(int i, int first, ivec4 view) {
  int valid = view.w - 4 * ((i - first) / view.y);  // the view's channels from this vec4's lane 0 on
  vec4 a = load_tensor(i);
  if (view.z != 0) {
    vec4 b = view.z + valid > 4 ? load_tensor(i + view.y) : vec4(0.0);
    a = view.z == 1 ? vec4(a.yzw, b.x) : view.z == 2 ? vec4(a.zw, b.xy) : vec4(a.w, b.xyz);
  }
  return mix(vec4(0.0), a, lessThan(ivec4(0, 1, 2, 3), ivec4(valid)));
}
vec4 load_lanes(int i) {
  if (in_lane_view(i, lane_r0_offset, lane_r0)) return lane_read(i, lane_r0_offset, lane_r0);
#if LANE_READS > 1
  if (in_lane_view(i, lane_r1_offset, lane_r1)) return lane_read(i, lane_r1_offset, lane_r1);
#endif
  return load_tensor(i);
}
#ifndef IN_IO
vec4 load(int i) { return load_lanes(i); }
#endif
#define load_stored load_lanes
#else
#define load_stored load_tensor
#endif

#ifdef LANE_WRITES
// Lanes 2 * pair and 2 * pair + 1 of element i, and nothing else: another invocation may store
// the element's other two at the same time (in half storage each pair is one uint).
void store_pair(int i, int pair, vec2 v) {
#if defined(STORAGE_MIXED)
  if (i >= FLOAT_BASE) {
    if (pair == 0) floats[i - FLOAT_BASE].xy = v; else floats[i - FLOAT_BASE].zw = v;
  } else {
    NOTE_OVERFLOW(vec4(v, 0.0, 0.0));
    if (pair == 0) arena[i].x = packHalf2x16(v); else arena[i].y = packHalf2x16(v);
  }
#elif STORAGE_HALF && !defined(FLOAT_BUFFER)
  NOTE_OVERFLOW(vec4(v, 0.0, 0.0));
  if (pair == 0) arena[i].x = packHalf2x16(v); else arena[i].y = packHalf2x16(v);
#else
  if (pair == 0) arena[i].xy = v; else arena[i].zw = v;
#endif
}
// A dispatch writing a lane view (lane_w0_offset, lane_w0 = (elements, H x W, shift, lanes
// stored)) stores its vec4 at index i into lanes shift.. of the whole's vec4 at i and the next
// slice's, two lanes at a time (its shift and lanes stored are even: rule lane_views), and only
// its own lanes: the whole's others are other tensors' (the view's last ones reach the whole's
// zero padding where it ends the whole).
void store_view(int i, vec4 v) {
  int e = i - lane_w0_offset;
  if (e < 0 || e >= lane_w0.x) {
    store_tensor(i, v);
    return;
  }
  int first = 4 * (e / lane_w0.y);  // the view's lane of this vec4's lane 0
  for (int pair = 0; pair < 2; ++pair) {
    int lane = lane_w0.z + 2 * pair;  // in the whole's vec4s from i on
    if (first + 2 * pair < lane_w0.w) store_pair(i + (lane / 4) * lane_w0.y, (lane % 4) / 2, pair == 0 ? v.xy : v.zw);
  }
}
#if !OUT_IO
#undef store
void store(int i, vec4 v) { store_view(i, v); }
#endif
#define store_storage store_view
#else
#define store_storage store_tensor
#endif

// (x, y, slice, batch) of element e of a PHWC4 tensor whose size is (w, h, slices, b): the
// position the I/O buffer's BHWC index is computed from (IN_IO, OUT_IO).
ivec4 phwc4_position(ivec4 size, int e) {
  int plane = size.x * size.y;
  return ivec4(e % size.x, (e % plane) / size.x, (e / plane) % size.z, e / (plane * size.z));
}

// v rounded to the nearest half (ties to even, overflow to inf), as a store to half storage
// rounds it. In integer arithmetic: a compiler may drop unpackHalf2x16(packHalf2x16(v)) as a
// mere change of precision, which GLSL ES lets it compute higher (NVIDIA's does: an H100 gave
// IN_IO's loads unrounded). In highp throughout: on a mediump value held in fp16 (NVIDIA's
// mediump), the sign bit taken below turned +inf into -inf (seen on an H200: RELU(+inf) gave 0,
// GREATER(inf, 1) false).
highp vec4 half_rounded(highp vec4 v) {
  NOTE_OVERFLOW(v);  // where it stands for a store, it overflows as the store would
  highp uvec4 bits = floatBitsToUint(v);
  highp uvec4 magnitude = bits & 0x7fffffffu;
  // Normal halves keep 10 of float's 23 mantissa bits: add just under half of the 13 dropped
  // (plus the lowest kept bit, for ties to even) and clear them.
  highp vec4 r = uintBitsToFloat((magnitude + 0xfffu + ((magnitude >> 13) & 1u)) & 0xffffe000u);
  highp vec4 size = abs(v);
  r = mix(r, roundEven(size * 16777216.0) * (1.0 / 16777216.0), lessThan(size, vec4(6.103515625e-05)));
  r = mix(r, vec4(uintBitsToFloat(0x7f800000u)), greaterThanEqual(size, vec4(65520.0)));
  r = uintBitsToFloat(floatBitsToUint(r) | (bits & 0x80000000u));
  return mix(r, v, isnan(v));
}

#ifdef IN_IO
#undef load
// v as the tensor's storage at index i holds it: what load(i) returns after store(i, v).
vec4 as_stored(int i, vec4 v) {
#if defined(STORAGE_MIXED)
  return i >= FLOAT_BASE ? v : half_rounded(v);
#elif STORAGE_HALF && !defined(FLOAT_BUFFER)
  return half_rounded(v);
#else
  return v;
#endif
}
// A partition input read straight from the I/O buffer by its one reader, the convert_in
// kernel's work done where the value is used (gpu/io_loads.py): element i of the PHWC4 tensor at
// in_io_tensor (size in_io_size, in_io_channels channels) is BHWC float32 from io[in_io_offset]
// on, in_io_strides the element step of its (w, h, c, b), its padded channels zero, rounded as
// its storage would round it; every other load reads storage.
vec4 load(int i) {
  int e = i - in_io_tensor;
  if (e < 0 || e >= in_io_size.x * in_io_size.y * in_io_size.z * in_io_size.w) return load_stored(i);
  ivec4 p = phwc4_position(in_io_size, e);  // (x, y, s, b)
  int first = in_io_offset + p.w * in_io_strides.w + p.y * in_io_strides.y + p.x * in_io_strides.x + 4 * p.z * in_io_strides.z;
  vec4 v = vec4(0.0);
  for (int k = 0; k < 4; k++) {
    if (4 * p.z + k < in_io_channels) v[k] = io[first + k * in_io_strides.z];
  }
  return as_stored(i, v);
}
#endif

#if OUT_IO
#undef store
// A partition output is stored straight into the I/O buffer as BHWC float32, the convert_out
// kernel's work done by the kernel that computes it (compiler.fuse_output_stores): element i of
// the PHWC4 tensor at out_io_tensor (size out_io_size, out_io_channels channels) goes to
// io[out_io_offset + its BHWC index], padded channels left out; every other store goes to the
// tensor's storage (store_storage: through a lane view's store where the dispatch writes one).
// OUT_IO 2: dispatches of the partition read the output too, so its storage keeps it as well.
void store(int i, vec4 v) {
  int e = i - out_io_tensor;
  bool outside = e < 0 || e >= out_io_size.x * out_io_size.y * out_io_size.z * out_io_size.w;
  if (outside || OUT_IO == 2) store_storage(i, v);
  if (outside) return;
  ivec4 p = phwc4_position(out_io_size, e);  // (x, y, s, b)
  int first = out_io_offset + ((p.w * out_io_size.y + p.y) * out_io_size.x + p.x) * out_io_channels + 4 * p.z;
  for (int k = 0; k < 4; k++) {
    if (4 * p.z + k < out_io_channels) io[first + k] = v[k];
  }
}
#endif

// Element (x = w, y = h, z = b * slices + s) of a PHWC4 tensor whose size is (w, h, slices, b).
int phwc4_index(ivec4 size, int x, int y, int z) { return (z * size.y + y) * size.x + x; }

// TFLite's std::max / std::min on floats, as the C++ evaluates them: std::max(a, b) is
// a < b ? b : a, std::min(a, b) is b < a ? b : a; a comparison with NaN is false, so when either
// operand is NaN the result is `a`. GLSL's max / min / clamp leave NaN undefined (llvmpipe and
// NVIDIA return the other operand, turning NaN into a bound), and compilers rewrite the
// comparison form into them (Mesa's NIR does), so NaN is tested on the bits (an integer test no
// fast-math rule removes) and selected. Every clamp that must let NaN through as LiteRT does (the
// RELU family, fused activations, max pooling) goes through these: tfl_clamp is std::min(
// std::max(x, lo), hi), ActivationFunctionWithMinMax's expression (lo, hi never NaN).
bvec4 tfl_isnan(vec4 x) { return greaterThan(floatBitsToUint(x) & uvec4(0x7fffffffu), uvec4(0x7f800000u)); }
bvec4 tfl_either_nan(vec4 a, vec4 b) { return bvec4(uvec4(tfl_isnan(a)) | uvec4(tfl_isnan(b))); }
vec4 tfl_max(vec4 a, vec4 b) { return mix(max(a, b), a, tfl_either_nan(a, b)); }
vec4 tfl_min(vec4 a, vec4 b) { return mix(min(a, b), a, tfl_either_nan(a, b)); }
vec4 tfl_clamp(vec4 x, vec4 lo, vec4 hi) { return mix(clamp(x, lo, hi), x, tfl_isnan(x)); }

// The largest finite float: TFLite's ActivationFunctionWithMinMax clamps to [lowest, max] even
// without an activation, so an overflow to +-inf is stored as +-FLT_MAX; NaN stays NaN. highp
// throughout: in half math (mediump, which NVIDIA runs as fp16) FLT_MAX is +inf, and NVIDIA's
// clamp to [-inf, inf] gave -inf for every finite value (seen on an H200).
#define TFL_FLT_MAX 3.40282347e38
highp vec4 tfl_finite(highp vec4 x) {
  highp vec4 bound = vec4(TFL_FLT_MAX);
  return mix(clamp(x, -bound, bound), x, tfl_isnan(x));
}

// Below this |x|, tanh and exp(x) - 1 come from their Taylor series: drivers build both from exp,
// whose absolute error (about 6e-8 on llvmpipe) is all of a small result (5.7e-4 of tanh(1e-4));
// std::tanh and std::expm1, TFLite's, are accurate relative to the result. At 0.125 the first
// term left out is under 4e-8 of the result (tanh: 62 x^9 / 2835; expm1: x^6 / 720).
#define TFL_SERIES_BELOW 0.125

// tanh as TFLite's std::tanh: NaN in, NaN out (llvmpipe's tanh returns -1 for NaN). The argument
// is clamped first: some drivers build tanh from exp and return NaN once exp overflows (early in
// half math); tanh(+-10) is +-1 to float precision.
vec4 tfl_tanh(vec4 x) {
  vec4 x2 = x * x;
  vec4 series = x * (1.0 + x2 * (-1.0 / 3.0 + x2 * (2.0 / 15.0 + x2 * (-17.0 / 315.0))));
  vec4 t = mix(tanh(clamp(x, vec4(-10.0), vec4(10.0))), series, lessThan(abs(x), vec4(TFL_SERIES_BELOW)));
  return mix(t, x, tfl_isnan(x));
}

// exp(x) - 1 as std::expm1, for x <= 0 (ELU's negative side).
vec4 tfl_expm1(vec4 x) {
  vec4 series = x * (1.0 + x * (0.5 + x * (1.0 / 6.0 + x * (1.0 / 24.0 + x * (1.0 / 120.0)))));
  return mix(exp(x) - 1.0, series, lessThan(abs(x), vec4(TFL_SERIES_BELOW)));
}

// Infinity, and every lane that is +-inf, tested on the bits as tfl_isnan is.
#define TFL_INF uintBitsToFloat(0x7f800000u)
bvec4 tfl_isinf(vec4 x) { return equal(floatBitsToUint(x) & uvec4(0x7fffffffu), uvec4(0x7f800000u)); }

// x^y as TFLite's POW computes it, C's powf: GLSL's pow is undefined for x < 0 and for x = 0
// with y <= 0 (llvmpipe gives NaN for (-2)^3, 0 for 0^0 and 0^-1, even 0 for NaN^1), so it only
// computes |x|^y for a finite |x| > 0 and a finite y; the rest is C's: |x|^y is 0 or +inf at
// |x| = 0 or inf and at y = +-inf (+inf where |x| > 1 and y > 0, or |x| < 1 and y < 0); a
// sign bit on x (-0 and -inf too) makes an odd integer power negative; a finite negative x to a
// non-integer power is NaN, as is a NaN operand, except that x^0 = 1 and 1^y = 1 for every x and
// y (NaN included), and (-1)^+-inf = 1.
vec4 tfl_pow(vec4 x, vec4 y) {
  vec4 ax = abs(x);
  bvec4 limit = bvec4(uvec4(equal(ax, vec4(0.0))) | uvec4(tfl_isinf(ax)) | uvec4(tfl_isinf(y)));
  vec4 beyond = mix(vec4(0.0), vec4(TFL_INF), equal(greaterThan(ax, vec4(1.0)), greaterThan(y, vec4(0.0))));
  vec4 r = mix(pow(ax, y), beyond, limit);
  bvec4 odd = equal(fract(0.5 * y), vec4(0.5));  // only an odd integer y halves to k + 0.5
  r = mix(r, -r, bvec4(uvec4(odd) & (floatBitsToUint(x) >> 31u)));
  bvec4 complex = bvec4(uvec4(lessThan(x, vec4(0.0))) & uvec4(not(tfl_isinf(x))) & uvec4(notEqual(y, trunc(y))));
  r = mix(r, vec4(uintBitsToFloat(0x7fc00000u)), bvec4(uvec4(complex) | uvec4(tfl_either_nan(x, y))));
  bvec4 one = bvec4(uvec4(equal(y, vec4(0.0))) | uvec4(equal(x, vec4(1.0))) | (uvec4(equal(ax, vec4(1.0))) & uvec4(tfl_isinf(y))));
  return mix(r, vec4(1.0), one);
}

// atan2(y, x) as TFLite's ATAN2 computes it, C's atan2f: GLSL's atan(y, x) is undefined at
// y = x = 0 and says nothing of signed zeros and infinities, so it only gives the angle of
// (|x|, |y|) in the first quadrant where both are finite and one is nonzero; the rest is C's:
// 0 at |y| = 0, pi / 2 at |x| = 0 or |y| = inf, pi / 4 at both inf, 0 at |x| = inf. A sign bit
// on x (-0 too) reflects the angle to pi - angle, one on y negates it; a NaN operand gives NaN.
#define TFL_PI 3.14159265358979
vec4 tfl_atan2(vec4 y, vec4 x) {
  vec4 ay = abs(y), ax = abs(x);
  vec4 a = atan(ay, ax);  // undefined where both are 0: replaced below, as are the infinities
  a = mix(a, vec4(0.5 * TFL_PI), bvec4(uvec4(equal(ax, vec4(0.0))) & uvec4(greaterThan(ay, vec4(0.0)))));
  a = mix(a, vec4(0.0), equal(ay, vec4(0.0)));
  a = mix(a, vec4(0.0), tfl_isinf(ax));
  a = mix(a, vec4(0.5 * TFL_PI), tfl_isinf(ay));
  a = mix(a, vec4(0.25 * TFL_PI), bvec4(uvec4(tfl_isinf(ax)) & uvec4(tfl_isinf(ay))));
  a = mix(a, TFL_PI - a, bvec4(floatBitsToUint(x) >> 31u));
  a = mix(a, -a, bvec4(floatBitsToUint(y) >> 31u));
  return mix(a, vec4(uintBitsToFloat(0x7fc00000u)), tfl_either_nan(y, x));
}

// TFLite's fused activations (ActivationFunctionType): 0 none, 1 relu, 2 relu_n1_to_1, 3 relu6,
// 4 tanh. NaN stays NaN (tfl_clamp). CLAMP_FINITE: the kernel's TFLite op ends in
// ActivationFunctionWithMinMax (conv, depthwise, transpose conv, FC, pooling), whose range is
// also the finite floats (tfl_finite); without it (CONCATENATION) infinities stay.
vec4 activate(vec4 x) {
#if ACTIVATION == 1
  x = tfl_max(x, vec4(0.0));
#elif ACTIVATION == 2
  x = tfl_clamp(x, vec4(-1.0), vec4(1.0));
#elif ACTIVATION == 3
  x = tfl_clamp(x, vec4(0.0), vec4(6.0));
#elif ACTIVATION == 4
  x = tfl_tanh(x);
#endif
#if CLAMP_FINITE
  x = tfl_finite(x);
#endif
  return x;
}

// v with the channels past `channels` in slice s set to zero (a select, so NaN or Inf computed
// for a padded channel, e.g. 0/0, never leaks).
vec4 keep_channels(vec4 v, int channels, int s) {
  return mix(vec4(0.0), v, lessThan(ivec4(4 * s) + ivec4(0, 1, 2, 3), ivec4(channels)));
}
