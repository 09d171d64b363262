// Shared by conv2d.glsl, transpose_conv.glsl and conv3d.glsl, which include it: grid z runs over batch x
// groups, a group being OUT_SLICES output slices, and a group's weights hold ROWS_PER_STEP rows
// per (tap, input slice).

#define ROWS_PER_STEP (OUT_SLICES * 4)  // weight rows per (tap, input slice)

// The output slice group and the batch of grid z, and the arena index of slice 0 of that
// batch's input.
void conv_layer(int z, out int group, out int batch, out int in_batch) {
  int groups = (out_size.z + OUT_SLICES - 1) / OUT_SLICES;
  group = z % groups;
  batch = z / groups;
  in_batch = in_offset + batch * in_size.z * (in_size.x * in_size.y);
}
