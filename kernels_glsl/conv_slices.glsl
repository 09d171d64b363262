// Shared by transpose_conv.glsl and conv3d.glsl (after conv_common.glsl), which keep OUT_SLICES
// accumulators per invocation: one output pixel's slices of one group.

// Adds the in_size.z input slices of the pixel at arena index src (in_plane apart), times their
// weight rows from w on (ROWS_PER_STEP a slice), to acc.
void accumulate_pixel(inout vec4 acc[OUT_SLICES], int src, int in_plane, int w) {
  for (int s = 0; s < in_size.z; ++s) {
    vec4 x = load(src + s * in_plane);
    for (int o = 0; o < OUT_SLICES; ++o) {
      acc[o] += x.x * weight(w) + x.y * weight(w + 1) + x.z * weight(w + 2) + x.w * weight(w + 3);
      w += 4;
    }
  }
}

// Stores acc plus the bias, activated and through the epilogue, as output slices
// group * OUT_SLICES on of pixel xy of batch `batch`.
void store_slices(vec4 acc[OUT_SLICES], int group, int batch, ivec2 xy) {
  int out_plane = out_size.x * out_size.y;
  int pixel = xy.y * out_size.x + xy.x;
  for (int o = 0; o < OUT_SLICES; ++o) {
    int slice = group * OUT_SLICES + o;
    if (slice >= out_size.z) break;  // the last group's weights are zero-padded past the output
    vec4 r = epilogue(activate(acc[o] + weight(bias_offset + slice)), ivec4(xy, slice, batch));
    store(out_offset + (batch * out_size.z + slice) * out_plane + pixel, keep_channels(r, out_channels, slice));
  }
}
