// The main of a kernel that writes one vec4 (4 channels) of its output per invocation, each channel
// the template's `element(f)` of its row-major index f in the output, as the output stores it
// (gather.glsl, scan.glsl, one_hot.glsl); padded channels stay zero.
// Params: out_size (w, h, slices, batch), out_channels, out_offset.
void main() {
  ivec3 gid = ivec3(gl_GlobalInvocationID);
  if (any(greaterThanEqual(gid, grid))) return;
  int s = gid.z % out_size.z;
  int b = gid.z / out_size.z;
  int first = ((b * out_size.y + gid.y) * out_size.x + gid.x) * out_channels + 4 * s;  // channel 4s
  vec4 r = vec4(0.0);  // padded channels stay zero
  for (int k = 0; k < 4; ++k) {
    if (4 * s + k < out_channels) r[k] = element(first + k);
  }
  store(out_offset + phwc4_index(out_size, gid.x, gid.y, gid.z), r);
}
