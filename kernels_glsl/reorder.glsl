// REVERSE_SEQUENCE (OP 0) and MATRIX_SET_DIAG (OP 1) (gpu/kernels/reorder.py), one vec4 (4
// channels) of the output per invocation, each element copied from the stored value it moves from
// (so every dtype the storage holds comes back exactly), tensors read by row-major index;
// dimensions are the input's, padded to 4 with leading 1s.
// OP 0: element c of the output is x's with c[seq_dim] reversed within the first seq_lengths[b]
//   of its line, b = c[batch_dim] (a length below 2 leaves the line; one past the dimension fails
//   TFLite's invoke: the status word). OP 1: x's elements, but those on the diagonal of each
//   innermost matrix, which come from the diagonal (its elements one row of min(M, N) a matrix).
// Params: out_size, out_channels, out_offset; in_size, in_channels, in_offset (x); aux_size,
// aux_channels, aux_offset (seq_lengths, int32, or the diagonal); dims; seq_dim, batch_dim
// (padded), status_offset; diagonal (min(M, N)).

#include "row_major.glsl"

float element(int f) {
  ivec4 c = coordinates(f, dims);
#if OP == 0
  int length = int_at(aux_offset, aux_size, aux_channels, c[batch_dim], AUX_CONST == 1);
  if (length > dims[seq_dim]) io[status_offset] = 1.0;  // every invocation that sees one writes the same value
  if (length > 1 && c[seq_dim] < length) c[seq_dim] = length - 1 - c[seq_dim];
  return stored_at(in_offset, in_size, in_channels, row_major_index(c, dims), false);
#else
  if (c.z == c.w) {
    return stored_at(aux_offset, aux_size, aux_channels, (c.x * dims.y + c.y) * diagonal + c.z, AUX_CONST == 1);
  }
  return stored_at(in_offset, in_size, in_channels, f, false);
#endif
}

#include "per_element.glsl"
