// Basic LSTM kernel: concat[b] = [x[b], prev_activation[b]] (n_input + depth channels), gathered
// channel by channel (the seam is rarely on a slice boundary). Grid: (out slices, batch).
// Params: x_offset, x_slices, n_input; prev_offset, depth; out_offset, out_slices.

void main() {
  ivec3 gid = ivec3(gl_GlobalInvocationID);
  if (any(greaterThanEqual(gid, grid))) return;
  int b = gid.y;
  vec4 v = vec4(0.0);
  for (int k = 0; k < 4; ++k) {
    int c = 4 * gid.x + k;
    if (c < n_input) {
      v[k] = load(x_offset + b * x_slices + c / 4)[c % 4];
    } else if (c < n_input + depth) {
      int d = c - n_input;
      v[k] = load(prev_offset + b * ((depth + 3) / 4) + d / 4)[d % 4];
    }
  }
  store(out_offset + b * out_slices + gid.x, v);
}
