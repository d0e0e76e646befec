// Class 2: a dense switch compiled to a jump table (BRX with BRANCH_TARGETS).
// names: 1=OUTER 2=CASE_A 3=CASE_B 4=CASE_C
// moved: switch_kernel 0x1080 OUTER the cursor constant (IMAD.MOV R16, 0x5) scheduled after END CASE_B's timer read
// moved: switch_kernel 0x13c0 OUTER the cursor constant (IMAD.MOV R16, 0x5) scheduled after END CASE_C's timer read
// moved: switch_kernel 0x10c0 OUTER the case's `break` (BRA), after END CASE_B
// moved: switch_kernel 0x13f0 OUTER the case's `break` (BRA), after END CASE_C
#include "ikp.cuh"
enum { OUTER = 1, CASE_A = 2, CASE_B = 3, CASE_C = 4 };
extern "C" __global__ void switch_kernel(float* out, const float* in, const int* sel, void* pbuf, int ws, int rpl) {
  ikp::Profiler<> prof(pbuf, 1, 0, threadIdx.x == 0, ws, rpl);
  float acc = in[threadIdx.x];
  prof.begin(OUTER);
  switch (sel[threadIdx.x]) {
    case 0: prof.begin(CASE_A); acc = acc * 3.0f + in[7]; prof.end(CASE_A); break;  // @ OUTER/CASE_A
    case 1: acc = sinf(acc); break;  // @ OUTER
    case 2: prof.begin(CASE_B); acc = acc / in[9]; prof.end(CASE_B); break;  // @ OUTER/CASE_B
    case 3: acc = expf(acc) + in[3]; break;  // @ OUTER
    case 4: prof.begin(CASE_C); acc = acc * acc - in[4]; prof.end(CASE_C); break;  // @ OUTER/CASE_C
    case 5: acc = logf(fabsf(acc) + 1.0f); break;  // @ OUTER
    case 6: acc = acc + in[6] * in[5]; break;  // @ OUTER
    case 7: acc = rsqrtf(fabsf(acc) + 2.0f); break;  // @ OUTER
    default: acc = -acc; break;  // @ OUTER
  }
  prof.end(OUTER);
  out[threadIdx.x] = acc;  // @ -
  prof.finalize();
}
