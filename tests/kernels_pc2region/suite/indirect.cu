// Class 3: an indirect call through a function pointer inside a region.
// names: 1=OUTER 2=CALLED
#include "ikp.cuh"
enum { OUTER = 1, CALLED = 2 };
__device__ __noinline__ float op_add(float x, float y) { return x + y * 1.5f; }
__device__ __noinline__ float op_mul(float x, float y) { return x * y - 0.25f; }
__device__ float (*const ops[2])(float, float) = {op_add, op_mul};
extern "C" __global__ void indirect_kernel(float* out, const float* in, const int* sel, void* pbuf, int ws, int rpl) {
  ikp::Profiler<> prof(pbuf, 1, 0, threadIdx.x == 0, ws, rpl);
  float acc = in[threadIdx.x];
  prof.begin(OUTER);
  float (*f)(float, float) = ops[sel[threadIdx.x] & 1];  // @ OUTER
  prof.begin(CALLED);
  acc = f(acc, in[1]);  // @ OUTER/CALLED
  prof.end(CALLED);
  acc = acc * in[2];  // @ OUTER
  prof.end(OUTER);
  out[threadIdx.x] = acc;  // @ -
  prof.finalize();
}
