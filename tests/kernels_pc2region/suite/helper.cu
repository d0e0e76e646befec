// Class 1: markers in a __noinline__ helper (the Profiler passed by reference lives in local memory).
// names: 1=OUTER 2=STEP 3=INNER
// Ground truth: the `// @ path` annotation of each source line ("-" = outside every region).
#include "ikp.cuh"
enum { OUTER = 1, STEP = 2, INNER = 3 };
__device__ __noinline__ float step(ikp::Profiler<>& prof, const float* in, float x, int n) {
  prof.begin(STEP);
  for (int i = 0; i < n; ++i) x = x * 1.01f + in[i];  // @ OUTER/STEP
  prof.begin(INNER);
  x = sqrtf(fabsf(x)) + in[n];  // @ OUTER/STEP/INNER
  prof.end(INNER);
  prof.end(STEP);
  return x;
}
extern "C" __global__ void helper_kernel(float* out, const float* in, void* pbuf, int n, int ws, int rpl) {
  ikp::Profiler<> prof(pbuf, 1, 0, threadIdx.x == 0, ws, rpl);
  float acc = in[threadIdx.x];
  prof.begin(OUTER);
  acc = step(prof, in, acc, n);
  acc = step(prof, in, acc * 2.0f, n + 1);
  prof.end(OUTER);
  out[threadIdx.x] = acc;  // @ -
  prof.finalize();
}
