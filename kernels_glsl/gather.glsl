// GATHER and EMBEDDING_LOOKUP with indices computed at run time (int32, as their bits: the int view):
// out[outer, i, inner] = params[outer, indices[i], inner], every tensor read and written through
// its row-major index. Each invocation writes one vec4 of the output (4 channels), gathering
// each channel on its own. TFLite fails the invoke on an index outside [0, axis_size); a shader
// cannot fail, so such an element reads 0 and sets the I/O buffer's status word io[status_offset]
// (common.glsl IO_STATUS), which fails the invoke once the runtime reads it.
// Params: out_size (w, h, slices, batch), out_channels, out_offset; in_size, in_channels,
// in_offset (params: constants with SOURCE_CONST, else the arena); idx_size, idx_channels,
// idx_offset; outer_stride (= indices count x inner), inner (elements after the axis), axis_size,
// status_offset (a float index into the I/O buffer).

#include "row_major.glsl"

float gathered(int f) {
  int outer = f / outer_stride;
  int rest = f % outer_stride;
  int component;
  int element = element_of(rest / inner, idx_size, idx_channels, component);
  int position = floatBitsToInt(load(idx_offset + element)[component]);
  if (position < 0 || position >= axis_size) {
    io[status_offset] = 1.0;  // every invocation that sees one writes the same value: no atomics
    return 0.0;
  }
  int source = (outer * axis_size + position) * inner + rest % inner;
  element = element_of(source, in_size, in_channels, component);
#if SOURCE_CONST
  return weight(in_offset + element)[component];
#else
  return load(in_offset + element)[component];
#endif
}

void main() {
  ivec3 gid = ivec3(gl_GlobalInvocationID);
  if (any(greaterThanEqual(gid, grid))) return;
  int s = gid.z % out_size.z;
  int b = gid.z / out_size.z;
  int first = ((b * out_size.y + gid.y) * out_size.x + gid.x) * out_channels + 4 * s;  // channel 4s
  vec4 r = vec4(0.0);  // padded channels stay zero
  for (int k = 0; k < 4; ++k) {
    if (4 * s + k < out_channels) r[k] = gathered(first + k);
  }
  store(out_offset + phwc4_index(out_size, gid.x, gid.y, gid.z), r);
}
