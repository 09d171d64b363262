// DYNAMIC_UPDATE_SLICE (gpu/kernels/gather.py): the operand with the update written at the start
// indices (int32, as their bits: the int view; constants with IDX_CONST), each start clamped to
// [0, operand dim - update dim] as TFLite clamps it so that the update fits. One vec4 of the
// output per invocation; each element is the update's where it lies in the update's box, else
// the operand's, moved as stored (floats, bools, int32 bits alike).
// Params: out_size, out_channels, out_offset; in_size, in_channels, in_offset (the operand: the
// constants with OPERAND_CONST); upd_size, upd_channels, upd_offset (UPDATE_CONST likewise);
// idx_size, idx_channels, idx_offset (the start indices); dims, upd_dims (the operand's and the
// update's dims, rank-4 with leading 1s); lead (4 - rank: the padded dims before the first start).

#include "row_major.glsl"

float element(int f) {
  ivec4 at;
  int rest = f;
  for (int k = 3; k >= 0; --k) {
    at[k] = rest % dims[k];
    rest /= dims[k];
  }
  int offset = 0;  // the element's row-major index in the update
  bool inside = true;
  for (int k = 0; k < 4; ++k) {
    int start = k < lead ? 0 : int_at(idx_offset, idx_size, idx_channels, k - lead, IDX_CONST == 1);
    int position = at[k] - clamp(start, 0, dims[k] - upd_dims[k]);
    inside = inside && position >= 0 && position < upd_dims[k];
    offset = offset * upd_dims[k] + position;
  }
  if (inside) return stored_at(upd_offset, upd_size, upd_channels, offset, UPDATE_CONST == 1);
  return stored_at(in_offset, in_size, in_channels, f, OPERAND_CONST == 1);
}

#include "per_element.glsl"
