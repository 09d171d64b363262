// A tree fold in shared memory across the LANES invocations of each z-layer of a workgroup, for
// the parallel variants of reduce.glsl and softmax.glsl, which `#include "fold_lanes.glsl"`
// (gpu/shader.py inserts this text) after declaring LANES, the shared array `partial` (one slot
// per invocation) and `fold(a, b, op)`, the fold of two slots; `op` says what to fold by, for a
// kernel that folds more than one way.
//
// Barriers must stay outside control flow (GLSL ES 3.10), so fold_lanes unrolls the steps; the
// guard also covers a LANES that is not a power of 2.

// Fold slots [s, 2s) of this z-layer into [0, s).
void tree_step(int lane, int slot, int s, int op) {
  memoryBarrierShared();
  barrier();
  if (lane < s && lane + s < LANES) partial[slot] = fold(partial[slot], partial[slot + s], op);
}

// Leaves the fold of the z-layer's LANES slots in the slot of lane 0 (lane 0 wrote it last:
// other lanes need a barrier before they read it).
void fold_lanes(int lane, int slot, int op) {
#if LANES > 512
  tree_step(lane, slot, 512, op);
#endif
#if LANES > 256
  tree_step(lane, slot, 256, op);
#endif
#if LANES > 128
  tree_step(lane, slot, 128, op);
#endif
#if LANES > 64
  tree_step(lane, slot, 64, op);
#endif
#if LANES > 32
  tree_step(lane, slot, 32, op);
#endif
#if LANES > 16
  tree_step(lane, slot, 16, op);
#endif
#if LANES > 8
  tree_step(lane, slot, 8, op);
#endif
#if LANES > 4
  tree_step(lane, slot, 4, op);
#endif
#if LANES > 2
  tree_step(lane, slot, 2, op);
#endif
#if LANES > 1
  tree_step(lane, slot, 1, op);
#endif
}
