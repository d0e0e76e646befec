// Class 4: an unbalanced region (END only on one path); class 5 lives in warpspec.cu.
// names: 1=OPEN 2=TAIL
// moved: unbalanced_kernel 0x0440 ? the BSYNC where the paths with and without END OPEN meet
#include "ikp.cuh"
enum { OPEN = 1, TAIL = 2 };
extern "C" __global__ void unbalanced_kernel(float* out, const float* in, void* pbuf, int ws, int rpl) {
  ikp::Profiler<> prof(pbuf, 1, 0, threadIdx.x == 0, ws, rpl);
  float v = in[threadIdx.x];
  prof.begin(OPEN);
  v = v * in[1] + in[2];  // @ OPEN
  if (v > 10.0f) {
    prof.end(OPEN);
    v = v - in[3];  // @ -
  }
  prof.begin(TAIL);
  out[threadIdx.x] = v;  // @ ?
  prof.end(TAIL);
  prof.finalize();
}
// A bare conditional END (nothing else in the branch): ptxas may if-convert it into predicated code.
extern "C" __global__ void bare_end_kernel(float* out, const float* in, void* pbuf, int ws, int rpl) {
  ikp::Profiler<> prof(pbuf, 1, 0, threadIdx.x == 0, ws, rpl);
  float v = in[threadIdx.x];
  prof.begin(OPEN);
  v = v * in[1] + in[2];  // @ OPEN
  if (v > 10.0f) prof.end(OPEN);
  prof.begin(TAIL);
  out[threadIdx.x] = v;  // @ ?
  prof.end(TAIL);
  prof.finalize();
}
