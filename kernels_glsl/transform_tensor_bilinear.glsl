// TransformTensorBilinear (MediaPipe, version 2): features [1, H, W, C], matrix [1, 4, 4] ->
// [1, out_h, out_w, C]. One invocation per output (u, v, channel slice).
//
// Output pixel (u, v) samples the features at (x, y) = M @ (u + 0.5, v + 0.5) - 0.5, computed
// as MediaPipe does: the pixel-centre correction folded into the matrix's translation first
// (row.w + (row.x * 0.5 + row.y * 0.5 - 0.5)), then row.x * u + row.y * v + that. A sample
// outside [0, W - 1] x [0, H - 1] gives 0; inside, the four neighbours blend bilinearly, a
// neighbour past the last row or column reading 0 (its weight is 0 there).
// Coordinates and weights are highp even in FP16 mode.
// Params: in_size, out_size (w, h, slices, b); channels; in_offset, matrix_offset, out_offset.

highp vec4 texel(int x, int y, int s) {
  if (x >= in_size.x || y >= in_size.y) return vec4(0.0);
  return load(in_offset + phwc4_index(in_size, x, y, s));
}

void main() {
  ivec3 gid = ivec3(gl_GlobalInvocationID);
  if (any(greaterThanEqual(gid, grid))) return;
  int s = gid.z;
  highp vec4 mx = load(matrix_offset);
  highp vec4 my = load(matrix_offset + 1);
  highp float u = float(gid.x), v = float(gid.y);
  highp float x = mx.x * u + mx.y * v + (mx.w + (mx.x * 0.5 + mx.y * 0.5 - 0.5));
  highp float y = my.x * u + my.y * v + (my.w + (my.x * 0.5 + my.y * 0.5 - 0.5));
  highp vec4 result = vec4(0.0);
  if (x >= 0.0 && x <= float(in_size.x - 1) && y >= 0.0 && y <= float(in_size.y - 1)) {
    highp float fx = floor(x), fy = floor(y);
    int x0 = int(fx), y0 = int(fy);
    highp float right = x - fx, lower = y - fy;
    highp vec4 upper_row = (1.0 - right) * texel(x0, y0, s) + right * texel(x0 + 1, y0, s);
    highp vec4 lower_row = (1.0 - right) * texel(x0, y0 + 1, s) + right * texel(x0 + 1, y0 + 1, s);
    result = lower * lower_row + (1.0 - lower) * upper_row;
  }
  store(out_offset + phwc4_index(out_size, gid.x, gid.y, s), keep_channels(result, channels, s));
}
