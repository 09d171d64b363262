// LSTM input contributions: out[t, b, unit slice q] = bias[q] + sum_k W[q, k] * in[t, b, k] for
// every time step t and batch item b at once (the recurrent steps then only add h @ R^T).
// Also the basic kernel's pre-activations (one time step, the concatenated input).
// One invocation per output vec4; grid: (unit slices, batch, time).
// Params: in_offset, in_strides (element strides of t, b and the input slice); chunks (input
//   slices); out_offset, out_strides (t, b, unit slice); units (zero past them);
//   weights_offset: [unit slice][chunk][4 rows], row j holding the 4 units' weights of input
//   value 4 * chunk + j; bias_offset: one row per unit slice.

void main() {
  ivec3 gid = ivec3(gl_GlobalInvocationID);
  if (any(greaterThanEqual(gid, grid))) return;
  int q = gid.x;
  int source = in_offset + gid.z * in_strides.x + gid.y * in_strides.y;
  int w = weights_offset + q * chunks * 4;
  highp vec4 acc = vec4(0.0);
  for (int k = 0; k < chunks; ++k) {
    highp vec4 v = load(source + k * in_strides.z);
    acc += v.x * weight(w) + v.y * weight(w + 1) + v.z * weight(w + 2) + v.w * weight(w + 3);
    w += 4;
  }
  acc += weight(bias_offset + q);
  store(out_offset + gid.z * out_strides.x + gid.y * out_strides.y + q * out_strides.z, keep_channels(acc, units, q));
}
