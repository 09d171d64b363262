// RESIZE_BILINEAR (BILINEAR 1) and RESIZE_NEAREST_NEIGHBOR (BILINEAR 0) on PHWC4, with TFLite's
// coordinate rules; each invocation writes one vec4 (channels and batches map one to one, and
// the input's zero padded channels interpolate to zero).
//
// Output pixel x samples the input at (x + half_pixel) * scale (- half_pixel when bilinear),
// where scale is in / out, or (in - 1) / (out - 1) with align_corners, and half_pixel is 0.5
// with half_pixel_centers, else 0. Python computes scale in float32 as TFLite does, so the
// nearest pixel picked here is the one TFLite picks; positions are highp even in FP16 mode
// (a mediump float has no exact integers past 2048). The epilogue (epilogue.glsl, EP_*) runs on
// each value before it is stored; channels past out_channels stay zero.

void main() {
  ivec3 gid = ivec3(gl_GlobalInvocationID);
  if (any(greaterThanEqual(gid, grid))) return;
  highp vec2 position = vec2(gid.xy);
  ivec2 last = in_size.xy - 1;
#if BILINEAR
  highp vec2 source = (position + half_pixel) * scale - half_pixel;
  // TFLite clamps the two neighbours into the image but weighs them by the unclamped position.
  ivec2 lo = max(ivec2(floor(source)), ivec2(0));
  ivec2 hi = min(ivec2(ceil(source)), last);
  vec2 t = vec2(source - vec2(lo));
  // TFLite's sum of the four corners by their weights, not two lerps: a lerp a + (b - a) t turns
  // a corner of -inf beside +inf (or beside any value, as inf - inf) into NaN where the sum gives
  // +-inf as LiteRT does.
  vec2 u = 1.0 - t;
  vec4 result = load(in_offset + phwc4_index(in_size, lo.x, lo.y, gid.z)) * (u.y * u.x)
              + load(in_offset + phwc4_index(in_size, hi.x, lo.y, gid.z)) * (u.y * t.x)
              + load(in_offset + phwc4_index(in_size, lo.x, hi.y, gid.z)) * (t.y * u.x)
              + load(in_offset + phwc4_index(in_size, hi.x, hi.y, gid.z)) * (t.y * t.x);
#else
  highp vec2 source = (position + half_pixel) * scale;
  // align_corners rounds half away from zero (TfLiteRound; source >= 0), otherwise floors.
  // Rounding tests the fraction: floor(source + 0.5) would round up 0.49999997.
  ivec2 nearest = ivec2(floor(source));
  if (align_corners == 1) nearest += ivec2(greaterThanEqual(fract(source), vec2(0.5)));
  nearest = min(nearest, last);
  vec4 result = load(in_offset + phwc4_index(in_size, nearest.x, nearest.y, gid.z));
#endif
  int s = gid.z % out_size.z;
  result = epilogue(result, ivec4(gid.xy, s, gid.z / out_size.z));
  store(out_offset + phwc4_index(out_size, gid.x, gid.y, gid.z), keep_channels(result, out_channels, s));
}
