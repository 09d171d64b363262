// ONE_HOT (gpu/kernels/one_hot.py), one vec4 (4 channels) of the output per invocation: the
// output is the indices' shape with an axis of `depth` inserted; an element is on_value where its
// position along that axis equals its index (int32, as their bits: the int view), else off_value
// (an index outside [0, depth) gives a line of off_value, as TFLite's kernel does). on_bits and
// off_bits are the values as the output stores them (a float's bits, a bool's 0.0 / 1.0, an
// int32's own bits), so every output dtype is written exactly.
// Params: out_size, out_channels, out_offset; idx_size, idx_channels, idx_offset; depth, inner
// (output elements after the new axis); on_bits, off_bits.

#include "row_major.glsl"

float element(int f) {
  int position = (f / inner) % depth;
  int index = int_at(idx_offset, idx_size, idx_channels, (f / (inner * depth)) * inner + f % inner, false);
  return intBitsToFloat(index == position ? on_bits : off_bits);
}

#include "per_element.glsl"
