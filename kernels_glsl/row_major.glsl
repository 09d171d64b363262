// Reading a PHWC4 tensor by the row-major index of its elements (gather.glsl, scan.glsl,
// one_hot.glsl, update_slice.glsl).

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
