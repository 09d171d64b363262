// BATCH_MATMUL: out[b, m, n] = sum_k lhs[b, m, k] * rhs[b, k, n] on PHWC4 tensors, lhs stored
// transposed ([..., K, M]) when ADJ_X, rhs ([..., N, K]) when ADJ_Y.
//
// Each invocation computes one output vec4: row m, columns 4 * n4 .. 4 * n4 + 3. Per step of four
// contracted values it takes a = lhs[m, 4k4 .. 4k4 + 3] and a 4x4 block of rhs, and adds
// rhs_block * a (rows k, columns n) or, when ADJ_Y (rows n, columns k), a * rhs_block.
// Grid: (ceil(N / 4), M, outer batches * inner batches).
//
// Every operand is addressed through strides in vec4 elements (outer batch, inner batch, row,
// slice), 0 for a batch dimension it broadcasts; a value's lane is its column % 4. Past K: a
// contracted axis stored as channels reads the zero padding; stored as rows, the read is clamped
// and replaced by 0 (a select, so nothing of the next matrix or an Inf leaks in). Past N the
// columns are computed from clamped reads and zeroed by keep_channels.
//
// Defines: ADJ_X, ADJ_Y; LHS_CONST, RHS_CONST (the operand lives in the constants buffer);
//   EP_* the epilogue (epilogue.glsl) applied to each value before it is stored.
// Params: lhs_strides, rhs_strides, out_strides (outer batch, inner batch, row, slice);
//   lhs_offset, rhs_offset (arena or constants), out_offset; lhs_base, rhs_base, out_base (in
//   vec4 elements: where a view starts in the tensor holding it, matmul.View); out_size (w, h,
//   slices, batch);
//   depth (K); cols (N); batch_inner (inner batches: grid z = outer * batch_inner + inner).

vec4 lhs_load(int i) {
#if LHS_CONST
  return weight(i);
#else
  return load(i);
#endif
}

vec4 rhs_load(int i) {
#if RHS_CONST
  return weight(i);
#else
  return load(i);
#endif
}

// The element (row, slice) of a matrix starting at `base`.
int element(ivec4 strides, int base, int row, int slice) { return base + row * strides.z + slice * strides.w; }

// The output's (x, y, slice, batch) coordinate of its element i (i relative to out_offset).
ivec4 coordinate(int i) {
  int plane = out_size.x * out_size.y;
  int layer = i / plane;
  return ivec4(i % out_size.x, (i % plane) / out_size.x, layer % out_size.z, layer / out_size.z);
}

void main() {
  ivec3 gid = ivec3(gl_GlobalInvocationID);
  if (any(greaterThanEqual(gid, grid))) return;
  int n4 = gid.x;
  int m = gid.y;
  ivec2 batch = ivec2(gid.z / batch_inner, gid.z % batch_inner);
  int lhs0 = lhs_offset + lhs_base + batch.x * lhs_strides.x + batch.y * lhs_strides.y;
  int rhs0 = rhs_offset + rhs_base + batch.x * rhs_strides.x + batch.y * rhs_strides.y;
  vec4 acc = vec4(0.0);
  for (int k4 = 0; 4 * k4 < depth; ++k4) {
    vec4 a;
#if ADJ_X
    for (int j = 0; j < 4; ++j) {  // lhs stored [K, M]: column m of rows 4k4 + j
      int k = 4 * k4 + j;
      float v = lhs_load(element(lhs_strides, lhs0, min(k, depth - 1), m / 4))[m % 4];
      a[j] = k < depth ? v : 0.0;
    }
#else
    a = lhs_load(element(lhs_strides, lhs0, m, k4));
#endif
    mat4 block;
#if ADJ_Y
    for (int j = 0; j < 4; ++j) {  // rhs stored [N, K]: block[j] is row n = 4n4 + j
      block[j] = rhs_load(element(rhs_strides, rhs0, min(4 * n4 + j, cols - 1), k4));
    }
    acc += a * block;  // component j: dot(a, block[j])
#else
    for (int i = 0; i < 4; ++i) {  // rhs stored [K, N]: block[i] is row k = 4k4 + i
      int k = 4 * k4 + i;
      vec4 v = rhs_load(element(rhs_strides, rhs0, min(k, depth - 1), n4));
      block[i] = k < depth ? v : vec4(0.0);
    }
    acc += block * a;  // sum_i a[i] * block[i]
#endif
  }
  int dst = element(out_strides, batch.x * out_strides.x + batch.y * out_strides.y, m, n4);
  vec4 v = epilogue(acc, coordinate(dst));
  store(out_offset + out_base + dst, keep_channels(v, cols, n4));
}
