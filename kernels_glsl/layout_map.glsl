// Gather: every op that only moves values (reshape, transpose, slice, strided slice, split,
// pad, mirror pad, tile, concatenation, depth/space, space/batch, gather, reverse) as one map
// from an output coordinate to the source element it copies. Each invocation writes one vec4
// (4 channels) of a box of the output; a node whose output comes from several sources
// (concatenation) or maps (space-to-batch) runs one dispatch per source or map, each on its own box.
//
// The map, for an output coordinate o = (b, h, w, c), every ivec4 below in that BHWC order:
//   1. p = o - lead, then the edge rule (EDGE): none; constant (p outside [0, edge_extent)
//      reads pad_value); wrap (p mod edge_extent: tile); mirror (reflect, or symmetric when
//      mirror_shift is 1).
//   2. With SPLIT, each axis of p is split into digits (outer, mid, inner) by the radices
//      radix_mid and radix_inner (depth-to-space splits h into (h / block, h % block)).
//   3. index = base + sum(digit * stride): the source's row-major index, as if the source
//      were a dense BHWC array (a reshape is the identity here; a transpose or a slice is a
//      choice of strides and base).
//   4. The source's (b, h, w, c) is that index unravelled by the source's own shape.
// With VEC4 the map keeps runs of 4 channels together and 4-aligned (Python checks it), so one
// map per invocation moves a whole vec4; otherwise each of the 4 channels is mapped on its own.
//
// The values then take the node's fused activation and epilogue steps (EP_*, epilogue.glsl: an
// elementwise op fused into a remap), at the output position they are stored to.
//
// The box starts at box_origin (b, h, w) and covers channels [channel_begin, channel_end).
// Channels past it are written as zero (a
// later source's dispatch fills those of them below the output's channel count); channels below
// it exist only when the box starts mid-slice (MERGE), and keep what earlier dispatches wrote.

#define EDGE_NONE 0
#define EDGE_CONSTANT 1
#define EDGE_WRAP 2
#define EDGE_MIRROR 3

#if EDGE == EDGE_CONSTANT
#define PAD_VALUE pad_value
#else
#define PAD_VALUE 0.0  // unused: only a constant edge reads padding
#endif

#if EDGE == EDGE_MIRROR
// Reflect p into [0, n): reflect (shift 0) does not repeat the edge, symmetric (shift 1) does.
// One reflection is enough: MIRROR_PAD pads at most n - 1 (reflect) or n (symmetric).
int mirror(int p, int n) {
  if (p < 0) return -p - mirror_shift;
  if (p >= n) return 2 * n - 2 + mirror_shift - p;
  return p;
}
#endif

// Steps 1-3: the source's row-major index of output coordinate o; false when o reads padding.
bool source_index(ivec4 o, out int index) {
  ivec4 p = o - lead;
#if EDGE == EDGE_CONSTANT
  if (any(lessThan(p, ivec4(0))) || any(greaterThanEqual(p, edge_extent))) return false;
#elif EDGE == EDGE_WRAP
  p = p % edge_extent;  // p >= 0: a tile starts at the origin
#elif EDGE == EDGE_MIRROR
  p = ivec4(mirror(p.x, edge_extent.x), mirror(p.y, edge_extent.y), mirror(p.z, edge_extent.z),
            mirror(p.w, edge_extent.w));
#endif
#if SPLIT
  ivec4 inner = p % radix_inner;
  p /= radix_inner;
  ivec4 terms = (p / radix_mid) * stride_outer + (p % radix_mid) * stride_mid + inner * stride_inner;
#else
  ivec4 terms = p * stride_outer;
#endif
  index = base + terms.x + terms.y + terms.z + terms.w;
  return true;
}

// Step 4: the PHWC4 element holding the source value of row-major index `index`, and that
// value's channel.
int source_element(int index, out int channel) {
  channel = index % in_channels;
  index /= in_channels;
  int w = index % in_size.x;
  index /= in_size.x;
  int h = index % in_size.y;
  int b = index / in_size.y;
  return in_offset + phwc4_index(in_size, w, h, b * in_size.z + channel / 4);
}

vec4 fetch(int element) {
#if SOURCE_CONST
  return weight(element);
#else
  return load(element);
#endif
}

#if VEC4
// Channels o.w .. o.w + 3 (o.w a multiple of 4) map to one source vec4.
vec4 read_slice(ivec4 o) {
  int index, channel;
  if (!source_index(o, index)) return vec4(PAD_VALUE);
  return fetch(source_element(index, channel));
}
#else
float read_channel(ivec4 o) {
  int index, channel;
  if (!source_index(o, index)) return PAD_VALUE;
  return fetch(source_element(index, channel))[channel % 4];
}
#endif

void main() {
  ivec3 gid = ivec3(gl_GlobalInvocationID);
  if (any(greaterThanEqual(gid, grid))) return;
  int first_slice = channel_begin / 4;
  int box_slices = (channel_end + 3) / 4 - first_slice;
  int s = first_slice + gid.z % box_slices;
  int b = box_origin.x + gid.z / box_slices;
  ivec4 o = ivec4(b, box_origin.y + gid.y, box_origin.z + gid.x, 4 * s);
#if VEC4
  vec4 v = read_slice(o);
#else
  vec4 v = vec4(0.0);
  for (int i = 0; i < 4; ++i) {
    int c = o.w + i;
    if (c >= channel_begin && c < channel_end) v[i] = read_channel(ivec4(o.xyz, c));
  }
#endif
  int element = out_offset + phwc4_index(out_size, o.z, o.y, b * out_size.z + s);
  ivec4 channel = ivec4(o.w) + ivec4(0, 1, 2, 3);
  // A remap's epilogue (an elementwise op fused into it) applies to the values it moved.
  vec4 result = mix(vec4(0.0), epilogue(activate(v), ivec4(o.z, o.y, s, b)), lessThan(channel, ivec4(channel_end)));
#if MERGE
  // The channels below the box belong to earlier sources, whose dispatches ran before this one.
  result = mix(result, load(element), lessThan(channel, ivec4(channel_begin)));
#endif
  store(element, result);
}
