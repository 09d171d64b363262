// CUMSUM along one axis (gpu/kernels/scan.py), one vec4 (4 channels) of the output per
// invocation. Each channel adds its line of the input in TFLite's order (cumsum.cc: an
// accumulator from 0, first to last, or last to first with REVERSE) up to its own position, or up
// to the one before it with EXCLUSIVE, so a float32 sum is the one TFLite's sequential scan
// computes; int32 values (INT_VALUES: their bits, the int view) add in 32-bit arithmetic, which
// wraps as TFLite's does. Every element is read through its row-major index: an invocation reads
// up to axis_size elements, which the short axes of the models that scan (position ids from a
// mask, a running count) keep cheap.
// Params: out_size, out_channels, out_offset; in_size, in_channels, in_offset; axis_size, inner
// (elements after the axis).
// @highp in every precision: a running sum in TFLite's order, which overflows at 65504 in fp16.

#include "row_major.glsl"

#if INT_VALUES
#define SCALAR int
#else
#define SCALAR float
#endif

SCALAR value_at(int index) {
#if INT_VALUES
  return int_at(in_offset, in_size, in_channels, index, false);
#else
  return stored_at(in_offset, in_size, in_channels, index, false);
#endif
}

SCALAR scanned(int f) {
  int position = (f / inner) % axis_size;
  int line = f - position * inner;  // the element at position 0 of f's line
  SCALAR sum = SCALAR(0);
#if REVERSE
  for (int j = axis_size - 1; j >= position + EXCLUSIVE; --j) sum += value_at(line + j * inner);
#else
  for (int j = 0; j <= position - EXCLUSIVE; ++j) sum += value_at(line + j * inner);
#endif
  return sum;
}

float element(int f) {
#if INT_VALUES
  return intBitsToFloat(scanned(f));
#else
  return scanned(f);
#endif
}

#include "per_element.glsl"
