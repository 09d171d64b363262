// SELECT / SELECT_V2 on PHWC4: out = condition ? x : y, one vec4 (4 channels) per invocation.
// The condition, x and y are read at the output position p = (x, y, slice, batch) through
// ep_fetch, so each broadcasts like an epilogue operand (C_SRC / X_SRC / Y_SRC: EP_SRC_CONST or
// EP_SRC_ARENA; *_SCALAR_C: its one channel covers all four). The condition is a bool in the
// float view (0.0 / 1.0); the choice is a select, so a NaN or inf in the value not chosen never
// leaks. Then the epilogue (elementwise nodes fused after the select).
// Params: c_, x_, y_offset and c_, x_, y_size (w, h, slices, batch); out_size, out_channels,
// out_offset.

void main() {
  ivec3 gid = ivec3(gl_GlobalInvocationID);
  if (any(greaterThanEqual(gid, grid))) return;
  int s = gid.z % out_size.z;
  ivec4 p = ivec4(gid.x, gid.y, s, gid.z / out_size.z);
  vec4 c = ep_fetch(C_SRC == EP_SRC_CONST, c_offset, c_size, C_SCALAR_C == 1, p, C_PLANE);
  vec4 x = ep_fetch(X_SRC == EP_SRC_CONST, x_offset, x_size, X_SCALAR_C == 1, p, X_PLANE);
  vec4 y = ep_fetch(Y_SRC == EP_SRC_CONST, y_offset, y_size, Y_SCALAR_C == 1, p, Y_PLANE);
  vec4 r = epilogue(mix(y, x, notEqual(c, vec4(0.0))), p);
  store(out_offset + phwc4_index(out_size, gid.x, gid.y, gid.z), keep_channels(r, out_channels, s));
}
