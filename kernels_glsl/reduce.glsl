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
// With ADDEND (rule fuse_add_into_reduce) each element is the sum of the input's and the
// addend's at addend_offset (a tensor of the input's shape and layout): the reduction of an ADD.
//
// Variants:
//   PARALLEL 0: one invocation per output vec4, looping over the whole reduction.
//   PARALLEL 1: for long reductions with few outputs. The x-y plane of the first workgroup along x
//     and y reduces output gl_GlobalInvocationID.z: each of its LANES invocations folds a strided
//     share of the elements, then a tree in shared memory folds the lanes.
//   GATHER 1: the output's PHWC4 layout differs from the keep-dims layout (channels reduced or
//     dims dropped without keep_dims): each output channel is found by its row-major index.

#if OP == 2
#define IDENTITY uintBitsToFloat(0xff800000u)  // -inf
highp vec4 combine(highp vec4 a, highp vec4 b) { return max(a, b); }
#elif OP == 3
#define IDENTITY uintBitsToFloat(0x7f800000u)  // +inf
highp vec4 combine(highp vec4 a, highp vec4 b) { return min(a, b); }
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

// Combines elements first, first + step, ... of the reduction at PHWC4 index `base`. (Unrolling
// into four accumulators measured slower on an H200.)
highp vec4 reduce_at(int base, int first, int step) {
  highp vec4 acc = vec4(IDENTITY);
  for (int i = first; i < elements; i += step) acc = combine(acc, element(base + offset_of(i)));
  return acc;
}

// The reduced value(s) of a keep-dims position: a vec4 of 4 channels, or with REDUCE_C one value
// in x. MEAN divides by the number of values combined; ACTIVATION and CLAMP_FINITE are set when a pooling node
// runs as a reduction.
vec4 finish(highp vec4 acc) {
#if REDUCE_C
  acc = combine(acc, acc.yxwz);
  acc = combine(acc, acc.zwxy);
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
highp vec4 fold(highp vec4 a, highp vec4 b, int op) { return combine(a, b); }  // one way: op unused
#include "fold_lanes.glsl"

void main() {
  int lane = int(gl_LocalInvocationID.x) + WG_X * int(gl_LocalInvocationID.y);
  int slot = int(gl_LocalInvocationID.z) * LANES + lane;
  int o = int(gl_GlobalInvocationID.z);
  // No early return: every invocation of the workgroup must reach the barriers.
  bool live = gl_WorkGroupID.x == 0u && gl_WorkGroupID.y == 0u && o < grid.z;
  ivec4 k = unravel(o, k_size);
  partial[slot] = live ? reduce_at(input_index(k), lane, LANES) : vec4(IDENTITY);
  fold_lanes(lane, slot, OP);
  // o is also the output's PHWC4 index: the keep-dims layout is the output's in this variant.
  if (live && lane == 0) store(out_offset + o, keep_channels(finish(partial[slot]), out_channels, k.z));
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
    r[j] = finish(reduce_at(input_index(ivec4(k.xy, c / 4, k.w)), 0, 1))[REDUCE_C == 1 ? 0 : c % 4];
  }
  store(out_offset + phwc4_index(out_size, gid.x, gid.y, gid.z), keep_channels(r, out_channels, s));
}

#else
void main() {
  ivec3 gid = ivec3(gl_GlobalInvocationID);
  if (any(greaterThanEqual(gid, grid))) return;
  ivec4 k = ivec4(gid.xy, gid.z % k_size.z, gid.z / k_size.z);
  vec4 r = finish(reduce_at(input_index(k), 0, 1));
  store(out_offset + phwc4_index(k_size, gid.x, gid.y, gid.z), keep_channels(r, out_channels, k.z));
}
#endif
