// Elementwise ops on PHWC4, one vec4 (4 channels) per invocation: unary ops, broadcasting binary
// ops, and the chains of them that the rewrite rules fuse into one node.
//
// x is the node's first operand read at the output position p = (x, y, slice, batch) through
// ep_fetch, so it broadcasts like any epilogue operand (X_SRC: EP_SRC_CONST or EP_SRC_ARENA;
// X_SCALAR_C: its one channel covers all four; X_PLANE: see ep_fetch). Everything else is
// epilogue steps (epilogue.glsl): first the node's own op (a unary op, or a binary op with the
// second operand, then its fused activation), then the elementwise nodes fused after it.
// Params: x_offset, x_size (w, h, slices, batch)[, x_plane]; out_size, out_channels, out_offset.

void main() {
  ivec3 gid = ivec3(gl_GlobalInvocationID);
  if (any(greaterThanEqual(gid, grid))) return;
  int s = gid.z % out_size.z;
  ivec4 p = ivec4(gid.x, gid.y, s, gid.z / out_size.z);
  vec4 r = epilogue(ep_fetch(X_SRC == EP_SRC_CONST, x_offset, x_size, X_SCALAR_C == 1, p, X_PLANE), p);
  // Padded channels hold 0, and exp(0), log(0), 1 / sqrt(0), logistic(0) are not 0.
  store(out_offset + phwc4_index(out_size, gid.x, gid.y, gid.z), keep_channels(r, out_channels, s));
}
