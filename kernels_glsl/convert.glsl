// Copies a tensor between BHWC float32 in the I/O buffer and PHWC4 in the arena: into the arena
// with TO_PHWC4 1 (convert_in.glsl), out of it with TO_PHWC4 0 (convert_out.glsl); those two
// define TO_PHWC4 and include this text; common.glsl declares the I/O buffer (IO_READS,
// IO_WRITES). One invocation per (w, h, b * slices + s).

void main() {
  ivec3 gid = ivec3(gl_GlobalInvocationID);
  if (any(greaterThanEqual(gid, grid))) return;
  int s = gid.z % size.z;
  int b = gid.z / size.z;
  // Channel 4s of this pixel in the I/O buffer; io_strides: the element step of w, h, c and b
  // (row-major BHWC, or a permutation of it: compiler.permute_on_input).
  int first = io_offset + b * io_strides.w + gid.y * io_strides.y + gid.x * io_strides.x + 4 * s * io_strides.z;
  int element = tensor_offset + phwc4_index(size, gid.x, gid.y, gid.z);
#if TO_PHWC4
  vec4 v = vec4(0.0);
  for (int k = 0; k < 4; k++) {
    if (4 * s + k < channels) v[k] = io[first + k * io_strides.z];  // the padded channels stay zero
  }
  store(element, v);
#else
  vec4 v = load(element);
  for (int k = 0; k < 4; k++) {
    if (4 * s + k < channels) io[first + k * io_strides.z] = v[k];
  }
#endif
}
