// TransformLandmarks (MediaPipe, version 2): landmarks [1, N, 2 or 3], matrix [1, 4, 4] ->
// landmarks with (x, y) -> (M @ (x, y, 0, 1)).xy, z copied. One landmark (one vec4 element:
// x, y, z, 0) per invocation; the float32 order is MediaPipe's: x * m0 + y * m1 + m3.
// Params: count (N); channels (2 or 3); landmarks_offset, matrix_offset, out_offset.

void main() {
  ivec3 gid = ivec3(gl_GlobalInvocationID);
  if (any(greaterThanEqual(gid, grid))) return;
  highp vec4 p = load(landmarks_offset + gid.x);
  highp vec4 mx = load(matrix_offset);
  highp vec4 my = load(matrix_offset + 1);
  highp vec4 result = p;
  result.x = mx.x * p.x + mx.y * p.y + mx.w;
  result.y = my.x * p.x + my.y * p.y + my.w;
  store(out_offset + gid.x, keep_channels(result, channels, 0));
}
