// GATHER and EMBEDDING_LOOKUP with indices computed at run time, GATHER_ND (ND) and SCATTER_ND
// (SCATTER, below) with runtime or constant (IDX_CONST) indices (int32, as their bits: the int view):
// out[outer, i, inner] = params[outer, indices[i], inner] (with batch_dims, indices[b, i] for
// the outer rows of batch item b); with ND,
// out[row, inner] = params[indices[row, 0], ..., indices[row, depth - 1], inner]; every tensor read
// and written through its row-major index. Each invocation writes one vec4 of the output (4
// channels), gathering each channel on its own. TFLite fails the invoke on an index outside its
// dim; a shader cannot fail, so such an element reads 0 and sets the I/O buffer's status word
// io[status_offset] (common.glsl IO_STATUS), which fails the invoke once the runtime reads it.
// Params: out_size (w, h, slices, batch), out_channels, out_offset; in_size, in_channels,
// in_offset (params: constants with SOURCE_CONST, else the arena); idx_size, idx_channels,
// idx_offset; inner (elements after the gathered dims), status_offset (a float index into the
// I/O buffer); GATHER: outer_stride (= index rows of a batch item x inner), axis_size,
// outer_per_batch (outer rows of one batch item: all of them without batch_dims), rows_per_batch
// (index rows of one batch item: all of them without batch_dims); ND and SCATTER: depth
// (dims each index row picks), nd_dims (those dims' sizes); SCATTER: rows (index rows), upd_size,
// upd_channels, upd_offset (the updates: constants with UPDATE_CONST).

#include "row_major.glsl"

int index_at(int i) { return int_at(idx_offset, idx_size, idx_channels, i, IDX_CONST == 1); }

bool outside(int position, int size) {
  if (position >= 0 && position < size) return false;
  io[status_offset] = 1.0;  // every invocation that sees one writes the same value: no atomics
  return true;
}

#if SCATTER
// SCATTER_ND: zeros, and each update row added where its index row points, in index order (as
// TFLite adds duplicates): out[r, inner] = sum of updates[i, inner] over the rows i indexing r.
// Every invocation walks every index row (so each also sees, and reports, one out of range).
float update_at(int i) { return stored_at(upd_offset, upd_size, upd_channels, i, UPDATE_CONST == 1); }

float element(int f) {
  int target = f / inner;  // the row-major index of f's position in the first depth dims
  highp float sum = 0.0;
  for (int i = 0; i < rows; ++i) {
    int position = 0;
    bool inside = true;
    for (int k = 0; k < depth; ++k) {
      int p = index_at(i * depth + k);
      if (outside(p, nd_dims[k])) inside = false;
      position = position * nd_dims[k] + p;
    }
    if (inside && position == target) sum += update_at(i * inner + f % inner);
  }
  return sum;
}
#else
float element(int f) {
#if ND
  int row = f / inner;
  int source = 0;
  for (int k = 0; k < depth; ++k) {
    int position = index_at(row * depth + k);
    if (outside(position, nd_dims[k])) return 0.0;
    source = source * nd_dims[k] + position;
  }
  source = source * inner + f % inner;
#else
  int outer = f / outer_stride;
  int rest = f % outer_stride;
  int batch = outer / outer_per_batch;  // batch_dims: batch item b of params reads item b of indices
  int position = index_at(batch * rows_per_batch + rest / inner);
  if (outside(position, axis_size)) return 0.0;
  int source = (outer * axis_size + position) * inner + rest % inner;
#endif
  return stored_at(in_offset, in_size, in_channels, source, SOURCE_CONST == 1);
}
#endif

#include "per_element.glsl"
