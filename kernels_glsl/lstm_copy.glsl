// Copy the hidden state of the last time step into the output state (after the steps, which
// read it at step 0). One vec4 per invocation; grid: (slices, batch).
// Params: src_offset, src_base, src_strides (b, slice); dst_offset, dst_strides (b, slice).

void main() {
  ivec3 gid = ivec3(gl_GlobalInvocationID);
  if (any(greaterThanEqual(gid, grid))) return;
  vec4 v = load(src_offset + src_base + gid.y * src_strides.x + gid.x * src_strides.y);
  store(dst_offset + gid.y * dst_strides.x + gid.x * dst_strides.y, v);
}
