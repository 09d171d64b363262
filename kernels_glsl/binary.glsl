// Broadcasting binary ops on PHWC4. Each operand is an arena tensor or a constant; a dimension
// of size 1 broadcasts (min(index, size - 1) picks element 0), and an operand with one channel
// broadcasts it over all channels (A_SCALAR_C / B_SCALAR_C).
// OP: 0 add, 1 sub, 2 mul, 3 div, 4 maximum, 5 minimum, 6 squared difference, 7 pow.

vec4 fetch(int offset, ivec4 size, ivec4 p, bool from_consts, bool scalar_c) {
  p = min(p, size - 1);
  int i = offset + ((p.w * size.z + p.z) * size.y + p.y) * size.x + p.x;
  vec4 v = from_consts ? weight(i) : load(i);
  return scalar_c ? vec4(v.x) : v;
}

vec4 combine(vec4 a, vec4 b) {
#if OP == 0
  return a + b;
#elif OP == 1
  return a - b;
#elif OP == 2
  return a * b;
#elif OP == 3
  return a / b;
#elif OP == 4
  return max(a, b);
#elif OP == 5
  return min(a, b);
#elif OP == 6
  return (a - b) * (a - b);
#else
  return pow(a, b);
#endif
}

void main() {
  ivec3 gid = ivec3(gl_GlobalInvocationID);
  if (any(greaterThanEqual(gid, grid))) return;
  int s = gid.z % out_size.z;
  ivec4 p = ivec4(gid.x, gid.y, s, gid.z / out_size.z);
  vec4 a = fetch(a_offset, a_size, p, A_CONST == 1, A_SCALAR_C == 1);
  vec4 b = fetch(b_offset, b_size, p, B_CONST == 1, B_SCALAR_C == 1);
  vec4 r = keep_channels(activate(combine(a, b)), out_channels, s);
  store(out_offset + phwc4_index(out_size, gid.x, gid.y, gid.z), r);
}
