// Landmarks2TransformMatrix (MediaPipe, version 2): landmarks [1, N, 3] -> matrix [1, 4, 4].
//
// The crop box: rotate the landmarks by rotation = target - atan2(right - left) (the eye line
// then points along the target angle), take the bounding box of the subset landmarks there, and
// return the matrix mapping output-crop pixel (u, v) to
//   center + R(-rotation) @ diag(scale * box size / output_size) @ ((u, v) - output_size / 2).
// cos / sin of the rotation come from the angle-difference identities with the normalized eye
// line and Python's cos / sin of the target: no trigonometry on the GPU.
//
// One workgroup of WG_X invocations: lane t takes subset points t, t + WG_X, ...; lane 0 then
// combines the lanes' boxes and writes the 4 rows of the matrix (elements 0..3 of the output).
// Defines: SUBSET_COUNT, SUBSET_IDXS (the comma-separated subset indices).
// Params: landmarks_offset, out_offset (arena); left_index, right_index; target (cos, sin of
//   target_rotation_radians); output_size (width, height); scale (scale_x, scale_y).

const int SUBSET[SUBSET_COUNT] = int[SUBSET_COUNT](SUBSET_IDXS);

shared highp vec4 boxes[WG_X];  // per lane: (min x, min y, max x, max y) of its rotated points

highp vec2 landmark(int i) { return load(landmarks_offset + i).xy; }

void main() {
  int lane = int(gl_LocalInvocationID.x);
  highp vec2 eye_line = landmark(right_index) - landmark(left_index);
  // Direction of the eye line, scaled first so that its squared length cannot overflow;
  // atan2(0, 0) = 0, the direction (1, 0).
  highp float longest = max(abs(eye_line.x), abs(eye_line.y));
  highp vec2 direction = vec2(1.0, 0.0);
  if (longest > 0.0) {
    direction = eye_line / longest;
    direction /= sqrt(dot(direction, direction));
  }
  // rotation = target - a, with (cos a, sin a) = direction.
  highp float c = target.x * direction.x + target.y * direction.y;
  highp float s = target.y * direction.x - target.x * direction.y;

  // Every lane starts from subset point 0, so a lane with no points of its own changes nothing.
  highp vec2 p = landmark(SUBSET[0]);
  highp vec2 r = vec2(c * p.x - s * p.y, s * p.x + c * p.y);
  highp vec4 box = vec4(r, r);
  for (int k = lane; k < SUBSET_COUNT; k += WG_X) {
    p = landmark(SUBSET[k]);
    r = vec2(c * p.x - s * p.y, s * p.x + c * p.y);
    box = vec4(min(box.xy, r), max(box.zw, r));
  }
  boxes[lane] = box;
  memoryBarrierShared();
  barrier();
  if (lane != 0 || any(greaterThanEqual(ivec3(gl_GlobalInvocationID), grid))) return;
  for (int t = 1; t < WG_X; ++t) box = vec4(min(box.xy, boxes[t].xy), max(box.zw, boxes[t].zw));

  highp vec2 middle = (box.xy + box.zw) * 0.5;
  highp vec2 center = vec2(c * middle.x + s * middle.y, -s * middle.x + c * middle.y);  // R(-rotation)
  highp vec2 size = scale * (box.zw - box.xy) / output_size;
  // R(-rotation) @ diag(size): the rows of the linear part.
  highp vec2 row_x = vec2(c * size.x, s * size.y);
  highp vec2 row_y = vec2(-s * size.x, c * size.y);
  highp vec2 half_output = output_size * 0.5;
  highp float tx = center.x - (row_x.x * half_output.x + row_x.y * half_output.y);
  highp float ty = center.y - (row_y.x * half_output.x + row_y.y * half_output.y);
  store(out_offset, vec4(row_x, 0.0, tx));
  store(out_offset + 1, vec4(row_y, 0.0, ty));
  store(out_offset + 2, vec4(0.0, 0.0, 1.0, 0.0));
  store(out_offset + 3, vec4(0.0, 0.0, 0.0, 1.0));
}
