// Reading a PHWC4 tensor by the row-major index of its elements (gather.glsl, scan.glsl,
// one_hot.glsl, update_slice.glsl, reduce_window.glsl, int_reduce.glsl).

// The PHWC4 element of row-major index `index` of a tensor of `size` and `channels`, and the
// channel's component in it.
int element_of(int index, ivec4 size, int channels, out int component) {
  int c = index % channels;
  index /= channels;
  int w = index % size.x;
  index /= size.x;
  int h = index % size.y;
  int b = index / size.y;
  component = c % 4;
  return phwc4_index(size, w, h, b * size.z + c / 4);
}

// The stored value (a float, a bool's 0.0 / 1.0, an int32's bits: base.py's views) at row-major
// index `index` of a tensor at `offset` of the arena, or of the constants where `constant`.
float stored_at(int offset, ivec4 size, int channels, int index, bool constant) {
  int component;
  int element = offset + element_of(index, size, channels, component);
  return (constant ? weight(element) : load(element))[component];
}

// The int32 there (its bits: the int view).
int int_at(int offset, ivec4 size, int channels, int index, bool constant) {
  return floatBitsToInt(stored_at(offset, size, channels, index, constant));
}

// The coordinates of row-major index `index` in a tensor of `dims` (x the first dimension).
ivec4 coordinates(int index, ivec4 dims) {
  ivec4 c;
  c.w = index % dims.w;
  index /= dims.w;
  c.z = index % dims.z;
  index /= dims.z;
  c.y = index % dims.y;
  c.x = index / dims.y;
  return c;
}

// The row-major index of coordinates `c` in a tensor of `dims`.
int row_major_index(ivec4 c, ivec4 dims) { return ((c.x * dims.y + c.y) * dims.z + c.z) * dims.w + c.w; }
