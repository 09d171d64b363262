// BHWC float32 in the I/O buffer -> PHWC4 in the arena. One invocation per (w, h, b * slices + s).
layout(std430, binding = 2) readonly buffer Io { float io[]; };

void main() {
  ivec3 gid = ivec3(gl_GlobalInvocationID);
  if (any(greaterThanEqual(gid, grid))) return;
  int s = gid.z % size.z;
  int b = gid.z / size.z;
  int base = io_offset + ((b * size.y + gid.y) * size.x + gid.x) * channels;
  vec4 v = vec4(0.0);
  for (int k = 0; k < 4; k++) {
    int c = 4 * s + k;
    if (c < channels) v[k] = io[base + c];
  }
  store(tensor_offset + phwc4_index(size, gid.x, gid.y, gid.z), v);
}
