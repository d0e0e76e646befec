// Predication, unrolling, early exits and overlapping (non-nested) regions.
// names: 1=OUTER 2=BODY 3=EARLY 4=A 5=B
#include "ikp.cuh"
enum { OUTER = 1, BODY = 2, EARLY = 3, A = 4, B = 5 };
extern "C" __global__ void mixed_kernel(float* out, const float* in, void* pbuf, int n, int ws, int rpl) {
  ikp::Profiler<> prof(pbuf, 1, 0, threadIdx.x == 0, ws, rpl);
  float acc = in[threadIdx.x];
  if (acc < -100.0f) {  // early exit before any region
    out[threadIdx.x] = 0.0f;  // @ -
    return;
  }
  prof.begin(OUTER);
#pragma unroll 4
  for (int i = 0; i < n; ++i) {
    prof.begin(BODY);
    acc = acc > 0.0f ? acc * in[i] : acc + in[i];  // @ OUTER/BODY
    prof.end(BODY);
  }
  if (acc > 1e6f) {
    prof.begin(EARLY);
    out[threadIdx.x] = acc;  // @ OUTER/EARLY
    prof.end(EARLY);
    prof.end(OUTER);
    prof.finalize();
    return;
  }
  prof.begin(A);
  acc = acc * in[n];  // @ OUTER/A
  prof.begin(B);
  acc = acc + in[n + 1];  // @ OUTER/A/B
  prof.end(A);  // A ends while B is still open: overlapping, not nested
  acc = acc * in[n + 2];  // @ OUTER/B
  prof.end(B);
  prof.end(OUTER);
  out[threadIdx.x] = acc;  // @ -
  prof.finalize();
}
