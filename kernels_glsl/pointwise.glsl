// A pointwise DAG (gpu/kernels/pointwise.py): a connected group of elementwise nodes, made one
// node by rule fuse_pointwise_dag (the gates and state update of a recurrent cell), computed in
// one dispatch, one vec4 (4 channels) of output position p = (x, y, slice, batch) per invocation,
// storing every tensor of the group that is read outside it.
//
// The program is a list of slots, each one epilogue step (ep_step of epilogue.glsl: the same op
// codes and the same math as the kernels that ran the nodes apart):
//   r[k] = ep_step(PWk_OP, PWk_SWAP, a, b)
// where a and b are each (PWk_A_KIND, PWk_B_KIND):
//   PW_REG    register PWk_A / PWk_B, an earlier slot's value; with PWk_A_STORED / _B_STORED it
//             is rounded to half first in half storage (ep_stored), as the store and load of the
//             tensor that held it in the unfused graph did, so fusion changes no result;
//   PW_INPUT  program input PWk_A / PWk_B (pw_input) read at p;
//   PW_SCALAR the param pwk_value (b only; a unary op's b is unused but for the slope of
//             LEAKY_RELU / PRELU).
// Program input j: INj_SRC, INj_SCALAR_C, INj_PLANE (epilogue.py's Source: a tensor broadcast
// over the output, from the constants or the arena), INj_ZERO_C (fewer slices than the output,
// zero past them), INj_SHIFT: vec4 elements added to its offset (a channel slice of a larger
// tensor that is one contiguous block of it: phwc4.block_offset); params inj_offset, inj_size.
// Output j (PW_OUTPUTS of them, each of the output's shape) is stored from register PW_OUTj at
// outj_offset. Params: out_size, out_channels.
// PW_PLACED stores (rule concat_stored_by_producers): store k puts register PW_PLACEDk into its
// box of a concatenation's output too, at placedk_offset, that tensor's size placedk_size and
// the box's origin placedk_origin (x, y, slice, batch).
//
// PW_LAYER (rule fuse_dense_into_dag): one workgroup of LAYER_LANES invocations, one output vec4
// each, first computes a FULLY_CONNECTED of one row into layer_out, as fully_connected.glsl does:
// LAYER_SPLIT lanes per output slice sum input chunks t, t + LAYER_SPLIT, ... of LAYER_CHUNKS,
// their partial sums are added in order, then the bias, activate() (ACTIVATION), the epilogue
// (EP_*, at the layer output's position) and the half rounding of its store. A program input
// with INj_LAYER reads layer_out at the output's own index plus INj_SHIFT. Params:
// layer_in_offset (arena: its input, one pixel), layer_weights_offset, layer_bias_offset
// (constants, packed as fully_connected.py packs them), layer_units.

#define PW_REG 0
#define PW_INPUT 1
#define PW_SCALAR 2

#if PW_LAYER
shared vec4 layer_partial[LAYER_SLICES * LAYER_SPLIT];
shared vec4 layer_out[LAYER_SLICES];

// Lane t's share of output slice o: input chunks t, t + LAYER_SPLIT, ...
vec4 layer_share(int o, int t) {
  vec4 acc = vec4(0.0);
  int w = layer_weights_offset + (o * LAYER_CHUNKS + t) * 4;
  for (int k4 = t; k4 < LAYER_CHUNKS; k4 += LAYER_SPLIT) {
    vec4 x = load(layer_in_offset + k4);
    acc += x.x * weight(w) + x.y * weight(w + 1) + x.z * weight(w + 2) + x.w * weight(w + 3);
    w += 4 * LAYER_SPLIT;
  }
  return acc;
}

// Output slice o of the layer as its store left it.
vec4 layer_total(int o) {
  vec4 acc = layer_partial[o * LAYER_SPLIT];
  for (int t = 1; t < LAYER_SPLIT; ++t) acc += layer_partial[o * LAYER_SPLIT + t];
  vec4 v = epilogue(activate(acc + weight(layer_bias_offset + o)), ivec4(0, 0, o, 0));
  return ep_stored(keep_channels(v, layer_units, o));
}

vec4 layer_read(ivec4 p, int shift) {
  return layer_out[phwc4_index(out_size, p.x, p.y, p.w * out_size.z + p.z) + shift];
}
#else
vec4 layer_read(ivec4 p, int shift) { return vec4(0.0); }
#endif
// Element of position q = (x, y, slice, batch) in a PHWC4 tensor of size (w, h, slices, batch).
int placed_index(ivec4 size, ivec4 q) { return phwc4_index(size, q.x, q.y, q.w * size.z + q.z); }

#define PW_READ(LAYER, SHIFT, OPERAND) (LAYER == 1 ? layer_read(p, SHIFT) : OPERAND)

vec4 pw_input(int j, ivec4 p) {
#if PW_INPUTS > 0
  if (j == 0) return PW_READ(IN0_LAYER, IN0_SHIFT, ep_operand(IN0_SRC, IN0_SCALAR_C == 1, IN0_ZERO_C == 1, in0_offset + IN0_SHIFT, in0_size, IN0_PLANE, 0.0, p));
#endif
#if PW_INPUTS > 1
  if (j == 1) return PW_READ(IN1_LAYER, IN1_SHIFT, ep_operand(IN1_SRC, IN1_SCALAR_C == 1, IN1_ZERO_C == 1, in1_offset + IN1_SHIFT, in1_size, IN1_PLANE, 0.0, p));
#endif
#if PW_INPUTS > 2
  if (j == 2) return PW_READ(IN2_LAYER, IN2_SHIFT, ep_operand(IN2_SRC, IN2_SCALAR_C == 1, IN2_ZERO_C == 1, in2_offset + IN2_SHIFT, in2_size, IN2_PLANE, 0.0, p));
#endif
#if PW_INPUTS > 3
  if (j == 3) return PW_READ(IN3_LAYER, IN3_SHIFT, ep_operand(IN3_SRC, IN3_SCALAR_C == 1, IN3_ZERO_C == 1, in3_offset + IN3_SHIFT, in3_size, IN3_PLANE, 0.0, p));
#endif
#if PW_INPUTS > 4
  if (j == 4) return PW_READ(IN4_LAYER, IN4_SHIFT, ep_operand(IN4_SRC, IN4_SCALAR_C == 1, IN4_ZERO_C == 1, in4_offset + IN4_SHIFT, in4_size, IN4_PLANE, 0.0, p));
#endif
#if PW_INPUTS > 5
  if (j == 5) return PW_READ(IN5_LAYER, IN5_SHIFT, ep_operand(IN5_SRC, IN5_SCALAR_C == 1, IN5_ZERO_C == 1, in5_offset + IN5_SHIFT, in5_size, IN5_PLANE, 0.0, p));
#endif
#if PW_INPUTS > 6
  if (j == 6) return PW_READ(IN6_LAYER, IN6_SHIFT, ep_operand(IN6_SRC, IN6_SCALAR_C == 1, IN6_ZERO_C == 1, in6_offset + IN6_SHIFT, in6_size, IN6_PLANE, 0.0, p));
#endif
#if PW_INPUTS > 7
  if (j == 7) return PW_READ(IN7_LAYER, IN7_SHIFT, ep_operand(IN7_SRC, IN7_SCALAR_C == 1, IN7_ZERO_C == 1, in7_offset + IN7_SHIFT, in7_size, IN7_PLANE, 0.0, p));
#endif
  return vec4(0.0);
}

// Every define is a compile-time constant: each slot folds to its one op on its two values.
// I is an input's index where KIND is PW_INPUT: the register branch, compiled though never
// taken, reads r[0] then (a constant index past the registers does not compile).
#define PW_REG_AT(KIND, I) r[KIND == PW_REG ? I : 0]
#define PW_ARG(KIND, I, STORED, value) (KIND == PW_REG ? (STORED == 1 ? ep_stored(PW_REG_AT(KIND, I)) : PW_REG_AT(KIND, I)) : KIND == PW_INPUT ? pw_input(I, p) : vec4(value))
#define PW_SLOT(OP, SWAP, A_KIND, A, A_STORED, B_KIND, B, B_STORED, value) ep_step(OP, SWAP == 1, PW_ARG(A_KIND, A, A_STORED, 0.0), PW_ARG(B_KIND, B, B_STORED, value))

void main() {
#if PW_LAYER
  // Every invocation reaches both barriers: none returns before them.
  int lane = int(gl_LocalInvocationIndex);
  for (int i = lane; i < LAYER_SLICES * LAYER_SPLIT; i += LAYER_LANES) {
    layer_partial[i] = layer_share(i / LAYER_SPLIT, i % LAYER_SPLIT);
  }
  memoryBarrierShared();
  barrier();
  for (int o = lane; o < LAYER_SLICES; o += LAYER_LANES) layer_out[o] = layer_total(o);
  memoryBarrierShared();
  barrier();
  int plane = out_size.x * out_size.y;
  if (lane >= plane * out_size.z * out_size.w) return;
  ivec3 gid = ivec3(lane % out_size.x, (lane % plane) / out_size.x, lane / plane);
#else
  ivec3 gid = ivec3(gl_GlobalInvocationID);
  if (any(greaterThanEqual(gid, grid))) return;
#endif
  int s = gid.z % out_size.z;
  ivec4 p = ivec4(gid.x, gid.y, s, gid.z / out_size.z);
  vec4 r[PW_COUNT];
#if PW_COUNT > 0
  r[0] = PW_SLOT(PW0_OP, PW0_SWAP, PW0_A_KIND, PW0_A, PW0_A_STORED, PW0_B_KIND, PW0_B, PW0_B_STORED, pw0_value);
#endif
#if PW_COUNT > 1
  r[1] = PW_SLOT(PW1_OP, PW1_SWAP, PW1_A_KIND, PW1_A, PW1_A_STORED, PW1_B_KIND, PW1_B, PW1_B_STORED, pw1_value);
#endif
#if PW_COUNT > 2
  r[2] = PW_SLOT(PW2_OP, PW2_SWAP, PW2_A_KIND, PW2_A, PW2_A_STORED, PW2_B_KIND, PW2_B, PW2_B_STORED, pw2_value);
#endif
#if PW_COUNT > 3
  r[3] = PW_SLOT(PW3_OP, PW3_SWAP, PW3_A_KIND, PW3_A, PW3_A_STORED, PW3_B_KIND, PW3_B, PW3_B_STORED, pw3_value);
#endif
#if PW_COUNT > 4
  r[4] = PW_SLOT(PW4_OP, PW4_SWAP, PW4_A_KIND, PW4_A, PW4_A_STORED, PW4_B_KIND, PW4_B, PW4_B_STORED, pw4_value);
#endif
#if PW_COUNT > 5
  r[5] = PW_SLOT(PW5_OP, PW5_SWAP, PW5_A_KIND, PW5_A, PW5_A_STORED, PW5_B_KIND, PW5_B, PW5_B_STORED, pw5_value);
#endif
#if PW_COUNT > 6
  r[6] = PW_SLOT(PW6_OP, PW6_SWAP, PW6_A_KIND, PW6_A, PW6_A_STORED, PW6_B_KIND, PW6_B, PW6_B_STORED, pw6_value);
#endif
#if PW_COUNT > 7
  r[7] = PW_SLOT(PW7_OP, PW7_SWAP, PW7_A_KIND, PW7_A, PW7_A_STORED, PW7_B_KIND, PW7_B, PW7_B_STORED, pw7_value);
#endif
#if PW_COUNT > 8
  r[8] = PW_SLOT(PW8_OP, PW8_SWAP, PW8_A_KIND, PW8_A, PW8_A_STORED, PW8_B_KIND, PW8_B, PW8_B_STORED, pw8_value);
#endif
#if PW_COUNT > 9
  r[9] = PW_SLOT(PW9_OP, PW9_SWAP, PW9_A_KIND, PW9_A, PW9_A_STORED, PW9_B_KIND, PW9_B, PW9_B_STORED, pw9_value);
#endif
#if PW_COUNT > 10
  r[10] = PW_SLOT(PW10_OP, PW10_SWAP, PW10_A_KIND, PW10_A, PW10_A_STORED, PW10_B_KIND, PW10_B, PW10_B_STORED, pw10_value);
#endif
#if PW_COUNT > 11
  r[11] = PW_SLOT(PW11_OP, PW11_SWAP, PW11_A_KIND, PW11_A, PW11_A_STORED, PW11_B_KIND, PW11_B, PW11_B_STORED, pw11_value);
#endif
#if PW_COUNT > 12
  r[12] = PW_SLOT(PW12_OP, PW12_SWAP, PW12_A_KIND, PW12_A, PW12_A_STORED, PW12_B_KIND, PW12_B, PW12_B_STORED, pw12_value);
#endif
#if PW_COUNT > 13
  r[13] = PW_SLOT(PW13_OP, PW13_SWAP, PW13_A_KIND, PW13_A, PW13_A_STORED, PW13_B_KIND, PW13_B, PW13_B_STORED, pw13_value);
#endif
#if PW_COUNT > 14
  r[14] = PW_SLOT(PW14_OP, PW14_SWAP, PW14_A_KIND, PW14_A, PW14_A_STORED, PW14_B_KIND, PW14_B, PW14_B_STORED, pw14_value);
#endif
#if PW_COUNT > 15
  r[15] = PW_SLOT(PW15_OP, PW15_SWAP, PW15_A_KIND, PW15_A, PW15_A_STORED, PW15_B_KIND, PW15_B, PW15_B_STORED, pw15_value);
#endif
  int i = phwc4_index(out_size, gid.x, gid.y, gid.z);
  // Padded channels hold 0 (logistic(0) is not 0), as the unfused kernels stored them.
#if PW_OUTPUTS > 0
  store(out0_offset + i, keep_channels(r[PW_OUT0], out_channels, s));
#endif
#if PW_OUTPUTS > 1
  store(out1_offset + i, keep_channels(r[PW_OUT1], out_channels, s));
#endif
#if PW_OUTPUTS > 2
  store(out2_offset + i, keep_channels(r[PW_OUT2], out_channels, s));
#endif
#if PW_OUTPUTS > 3
  store(out3_offset + i, keep_channels(r[PW_OUT3], out_channels, s));
#endif
#if PW_PLACED > 0
  store(placed0_offset + placed_index(placed0_size, p + placed0_origin), keep_channels(r[PW_PLACED0], out_channels, s));
#endif
#if PW_PLACED > 1
  store(placed1_offset + placed_index(placed1_size, p + placed1_origin), keep_channels(r[PW_PLACED1], out_channels, s));
#endif
}
