// UNSORTED_SEGMENT_SUM / PROD / MAX / MIN (gpu/kernels/segment.py), one vec4 (4 channels) of the
// output per invocation: output[s, e] folds data[i, e] of every row i whose segment id is s, in
// row order from the op's identity, as TFLite's reference kernel does (sum and product in that
// order; max as std::max(acc, x) and min as std::min(acc, x): a NaN row never wins, chosen on
// the bits so no compiler folds it into GLSL's max). A negative id drops its row; an id past
// num_segments fails TFLite's invoke: every invocation walks every id, and one past sets the
// status word (IO_STATUS). INT_VALUES: int32 data (its bits: the int view), wrapping.
// SEGMENT_OP: 0 sum, 1 product, 2 max, 3 min. Highp: sums of halves overflow.
// Params: out_size, out_channels, out_offset; in_size, in_channels, in_offset (data); idx_size,
// idx_channels, idx_offset (segment ids); rows (ids), inner (elements a row), segments,
// status_offset.
// @highp in every precision: a segment's sum or product, which overflows at 65504 in fp16.

#include "row_major.glsl"

#if INT_VALUES
#define SCALAR int
SCALAR data_at(int i) { return int_at(in_offset, in_size, in_channels, i, false); }
SCALAR keep(bool keep_acc, SCALAR acc, SCALAR x) { return keep_acc ? acc : x; }
#define LOWEST (-2147483647 - 1)
#define HIGHEST 2147483647
#else
#define SCALAR float  // highp: the template is (its @highp line)
SCALAR data_at(int i) { return stored_at(in_offset, in_size, in_channels, i, false); }
SCALAR keep(bool keep_acc, SCALAR acc, SCALAR x) {
  return uintBitsToFloat(keep_acc || tfl_isnan(vec4(x)).x ? floatBitsToUint(acc) : floatBitsToUint(x));
}
#define LOWEST (-TFL_FLT_MAX)
#define HIGHEST TFL_FLT_MAX
#endif

#if SEGMENT_OP == 0
#define START SCALAR(0)
SCALAR fold(SCALAR acc, SCALAR x) { return acc + x; }
#elif SEGMENT_OP == 1
#define START SCALAR(1)
SCALAR fold(SCALAR acc, SCALAR x) { return acc * x; }
#elif SEGMENT_OP == 2
#define START LOWEST
SCALAR fold(SCALAR acc, SCALAR x) { return keep(!(acc < x), acc, x); }
#else
#define START HIGHEST
SCALAR fold(SCALAR acc, SCALAR x) { return keep(!(x < acc), acc, x); }
#endif

float element(int f) {
  int segment = f / inner;
  SCALAR acc = START;
  for (int i = 0; i < rows; ++i) {
    int id = int_at(idx_offset, idx_size, idx_channels, i, IDX_CONST == 1);
    if (id >= segments) io[status_offset] = 1.0;  // every invocation that sees one writes the same value
    if (id == segment) acc = fold(acc, data_at(i * inner + f % inner));
  }
#if INT_VALUES
  return intBitsToFloat(acc);
#else
  return acc;
#endif
}

#include "per_element.glsl"
