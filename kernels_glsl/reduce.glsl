// Reductions over any set of BHWC axes: OP 0 sum, 1 mean, 2 max, 3 min, 4 product.
//
// Positions are ivec4 (w, h, slice, batch). The result at a keep-dims position k (zero on every
// reduced axis) combines `elements` PHWC4 elements from k's element on. Reduced axes that are
// neighbours in memory (w, h, slices, batch order, size-1 axes skipped) merge into one run, so the
// elements form at most two runs: element i is at (i % run.x) * run.y + (i / run.x) * run.z
// (RUNS 2), or at i * run.y (RUNS 1, e.g. the whole H x W of a slice).
// With REDUCE_C the channels are reduced too: the 4 lanes are folded into one value at the end,
// and with MASK_C (max, min, product over channels that are not a multiple of 4) the padded
// channels, which hold 0, become the identity first.
// Accumulation is highp in every precision: a half-float sum overflows at 65504.
// Max and min skip NaN (common.glsl's tfl_max / tfl_min from a non-NaN start, as TFLite's max
// pooling does); with SCANNED (REDUCE_MAX / MIN) the result is instead that of LiteRT's builtin
// kernel, which scans the elements in row-major order (see scanned()).
// With ADDEND (rule fuse_add_into_reduce) each element is the sum of the input's and the
// addend's at addend_offset (a tensor of the input's shape and layout): the reduction of an ADD.
// With SQUARED (rule square_into_reduce) each element, after the addend, is squared: the
// reduction of a MUL of a tensor by itself. The result goes through the node's epilogue steps
// (epilogue.glsl) but in the GATHER variant, which has none.
//
// Variants:
//   PARALLEL 0: one invocation per output vec4, looping over the whole reduction.
//   PARALLEL 1: for long reductions with few outputs. The x-y plane of the first workgroup along x
//     and y reduces output gl_GlobalInvocationID.z: each of its LANES invocations folds a strided
//     share of the elements, then a tree in shared memory folds the lanes.
//   GATHER 1: the output's PHWC4 layout differs from the keep-dims layout (channels reduced or
//     dims dropped without keep_dims): each output channel is found by its row-major index.
// @highp in every precision: a half-float sum overflows at 65504, and NVIDIA runs mediump as fp16,
//  shared-memory folds included.

// combine(acc, x): GLSL's max / min on NaN are undefined; tfl_max / tfl_min keep acc, which is
// never NaN, so a NaN x is skipped. START: LiteRT's start value (numeric_limits lowest / max).
#if OP == 2
#define IDENTITY uintBitsToFloat(0xff800000u)  // -inf
#define START -TFL_FLT_MAX
highp vec4 combine(highp vec4 a, highp vec4 b) { return tfl_max(a, b); }
#elif OP == 3
#define IDENTITY uintBitsToFloat(0x7f800000u)  // +inf
#define START TFL_FLT_MAX
highp vec4 combine(highp vec4 a, highp vec4 b) { return tfl_min(a, b); }
#elif OP == 4
#define IDENTITY 1.0
highp vec4 combine(highp vec4 a, highp vec4 b) { return a * b; }
#else
#define IDENTITY 0.0
highp vec4 combine(highp vec4 a, highp vec4 b) { return a + b; }
#endif

// Element `e` of the input (PHWC4 index), padded channels set to the identity under MASK_C.
highp vec4 element(int e) {
  highp vec4 v = load(in_offset + e);
#if ADDEND
  v += load(addend_offset + e);
#endif
#if SQUARED
  v *= v;
#endif
#if MASK_C
  int s = (e / (in_size.x * in_size.y)) % in_size.z;
  v = mix(vec4(IDENTITY), v, lessThan(ivec4(4 * s) + ivec4(0, 1, 2, 3), ivec4(in_channels)));
#endif
  return v;
}

int offset_of(int i) {
#if RUNS == 1
  return i * run.y;
#else
  return (i % run.x) * run.y + (i / run.x) * run.z;
#endif
}

#define NO_RANK vec4(-1.0)
#if SCANNED
// LiteRT's builtin REDUCE_MAX scans acc = x < acc ? acc : x from acc = START in row-major order
// (MIN: x > acc): a NaN x becomes acc and the next element replaces it. So with no NaN the result
// is the extreme of START and every element; after the last NaN, the extreme of the elements
// after it; and NaN when a NaN is last. The kernel visits the elements in another order (lanes,
// a tree), so it finds each lane's last NaN by its row-major rank (max, an order-free fold), and
// only if there is one, folds again over the elements ranked after it.

// The extent of each axis (w, h, c, batch) within one output's reduction: the input's on a
// reduced axis, where k_size is 1 (or on an axis of size 1), else 1.
ivec4 scan_extent() {
  return ivec4(k_size.x == 1 ? in_size.x : 1, k_size.y == 1 ? in_size.y : 1, REDUCE_C == 1 ? in_channels : 1,
               k_size.w == 1 ? in_size.w : 1);
}

// The row-major rank of each lane of element e among the elements of its output (as a float:
// exact up to 2^24 elements an output).
highp vec4 ranks(int e) {
  ivec4 n = scan_extent();
  int plane = in_size.x * in_size.y;
  ivec3 p = ivec3(e % in_size.x, (e / in_size.x) % in_size.y, e / (plane * in_size.z)) % n.xyw;
  int pixel = (p.z * n.y + p.y) * n.x + p.x;
#if REDUCE_C
  return vec4(ivec4(pixel * n.z + 4 * ((e / plane) % in_size.z)) + ivec4(0, 1, 2, 3));
#else
  return vec4(pixel);
#endif
}

// The result from the extreme `acc` of the elements ranked after `last_nan` (all of them when
// it is NO_RANK).
highp vec4 scanned(highp vec4 acc, highp vec4 last_nan) {
  ivec4 n = scan_extent();
  acc = mix(acc, combine(acc, vec4(START)), lessThan(last_nan, vec4(0.0)));
  bvec4 nan_last = equal(last_nan, vec4(float(n.x * n.y * n.z * n.w - 1)));
  return mix(acc, vec4(uintBitsToFloat(0x7fc00000u)), nan_last);
}
#endif

// Combines elements first, first + step, ... of the reduction at PHWC4 index `base`; with
// SCANNED, only those ranked after `after`, and the largest rank of a NaN lane goes to last_nan.
// (Unrolling into four accumulators measured slower on an H200.)
highp vec4 reduce_at(int base, int first, int step, highp vec4 after, inout highp vec4 last_nan) {
  highp vec4 acc = vec4(IDENTITY);
  for (int i = first; i < elements; i += step) {
    int e = base + offset_of(i);
    highp vec4 v = element(e);
#if SCANNED
    // Ranks cost integer divisions: only with a NaN or after one.
    bvec4 nan = tfl_isnan(v);
    if (any(nan) || any(greaterThanEqual(after, vec4(0.0)))) {
      highp vec4 rank = ranks(e);
      last_nan = max(last_nan, mix(NO_RANK, rank, nan));
      v = mix(vec4(IDENTITY), v, greaterThan(rank, after));
    }
#endif
    acc = combine(acc, v);
  }
  return acc;
}

// The largest rank of the lanes of one output: with REDUCE_C, the four lanes are one output.
highp vec4 output_rank(highp vec4 rank) {
#if REDUCE_C
  return vec4(max(max(rank.x, rank.y), max(rank.z, rank.w)));
#else
  return rank;
#endif
}

// With SCANNED and a NaN (ranked last_nan, the output's), the reduction again over the elements
// ranked after it; else acc.
highp vec4 after_last_nan(highp vec4 acc, int base, int first, int step, highp vec4 last_nan) {
  highp vec4 unused = NO_RANK;
  if (SCANNED == 1 && any(greaterThanEqual(last_nan, vec4(0.0)))) acc = reduce_at(base, first, step, last_nan, unused);
  return acc;
}

// The reduction at `base` by one invocation, and the output's last NaN rank in last_nan.
highp vec4 reduce_whole(int base, out highp vec4 last_nan) {
  last_nan = NO_RANK;
  highp vec4 acc = reduce_at(base, 0, 1, NO_RANK, last_nan);
  last_nan = output_rank(last_nan);
  return after_last_nan(acc, base, 0, 1, last_nan);
}

// The reduced value(s) of a keep-dims position: a vec4 of 4 channels, or with REDUCE_C one value
// in x. MEAN divides by the number of values combined; ACTIVATION and CLAMP_FINITE are set when a pooling node
// runs as a reduction.
vec4 finish(highp vec4 acc, highp vec4 last_nan) {
#if REDUCE_C
  acc = combine(acc, acc.yxwz);
  acc = combine(acc, acc.zwxy);
#endif
#if SCANNED
  acc = scanned(acc, last_nan);
#endif
#if REDUCE_C
  acc = vec4(acc.x, 0.0, 0.0, 0.0);
#endif
#if OP == 1
  acc /= float(values);
#endif
  return activate(acc);
}

// PHWC4 index of input position k.
int input_index(ivec4 k) { return ((k.w * in_size.z + k.z) * in_size.y + k.y) * in_size.x + k.x; }

// Keep-dims position of the row-major index o over `k_size` (w, h, slices, batch).
ivec4 unravel(int o, ivec4 size) {
  return ivec4(o % size.x, (o / size.x) % size.y, (o / (size.x * size.y)) % size.z, o / (size.x * size.y * size.z));
}

#if PARALLEL
#define LANES (WG_X * WG_Y)
shared highp vec4 partial[WG_X * WG_Y * WG_Z];
#define FOLD_VALUE 0
#define FOLD_RANK 1  // by max: the ranks of the last NaNs (SCANNED)
highp vec4 fold(highp vec4 a, highp vec4 b, int op) { return op == FOLD_RANK ? max(a, b) : combine(a, b); }
#include "fold_lanes.glsl"

// The last NaN's rank among the workgroup's elements of the output, from each lane's in `rank`
// (NO_RANK without SCANNED).
highp vec4 fold_rank(int lane, int slot, highp vec4 rank) {
#if SCANNED
  partial[slot] = rank;
  fold_lanes(lane, slot, FOLD_RANK);
  memoryBarrierShared();
  barrier();
  rank = output_rank(partial[slot - lane]);
  barrier();  // every lane has read it before partial is written again
#endif
  return rank;
}

void main() {
  int lane = int(gl_LocalInvocationID.x) + WG_X * int(gl_LocalInvocationID.y);
  int slot = int(gl_LocalInvocationID.z) * LANES + lane;
  int o = int(gl_GlobalInvocationID.z);
  // No early return: every invocation of the workgroup must reach the barriers.
  bool live = gl_WorkGroupID.x == 0u && gl_WorkGroupID.y == 0u && o < grid.z;
  ivec4 k = unravel(o, k_size);
  highp vec4 last_nan = NO_RANK;
  highp vec4 acc = live ? reduce_at(input_index(k), lane, LANES, NO_RANK, last_nan) : vec4(IDENTITY);
  last_nan = fold_rank(lane, slot, last_nan);
  if (live) acc = after_last_nan(acc, input_index(k), lane, LANES, last_nan);
  partial[slot] = acc;
  fold_lanes(lane, slot, FOLD_VALUE);
  // o is also the output's PHWC4 index: the keep-dims layout is the output's in this variant.
  if (live && lane == 0) store(out_offset + o, keep_channels(epilogue(finish(partial[slot], last_nan), k), out_channels, k.z));
}

#elif GATHER
void main() {
  ivec3 gid = ivec3(gl_GlobalInvocationID);
  if (any(greaterThanEqual(gid, grid))) return;
  int s = gid.z % out_size.z;
  int b = gid.z / out_size.z;
  // Row-major index of channel 4s of this output element in the output's BHWC view; the same index
  // in the keep-dims shape (w, h, channels, batch) names the position to reduce.
  int first = ((b * out_size.y + gid.y) * out_size.x + gid.x) * out_channels + 4 * s;
  vec4 r = vec4(0.0);
  for (int j = 0; j < 4 && 4 * s + j < out_channels; j++) {
    int o = first + j;
    int c = o % k_channels;
    ivec4 k = unravel(o / k_channels, ivec4(k_size.xy, 1, k_size.w));
    highp vec4 last_nan;
    highp vec4 acc = reduce_whole(input_index(ivec4(k.xy, c / 4, k.w)), last_nan);
    r[j] = finish(acc, last_nan)[REDUCE_C == 1 ? 0 : c % 4];
  }
  store(out_offset + phwc4_index(out_size, gid.x, gid.y, gid.z), keep_channels(r, out_channels, s));
}

#else
void main() {
  ivec3 gid = ivec3(gl_GlobalInvocationID);
  if (any(greaterThanEqual(gid, grid))) return;
  ivec4 k = ivec4(gid.xy, gid.z % k_size.z, gid.z / k_size.z);
  highp vec4 last_nan;
  highp vec4 acc = reduce_whole(input_index(k), last_nan);
  vec4 r = epilogue(finish(acc, last_nan), k);
  store(out_offset + phwc4_index(k_size, gid.x, gid.y, gid.z), keep_channels(r, out_channels, k.z));
}
#endif
