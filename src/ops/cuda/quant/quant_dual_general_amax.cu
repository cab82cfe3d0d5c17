// The general dual kernel's instantiations for the amax pre-pass (quant_dual_general.cuh).
#include "ops/cuda/quant/quant_dual_general.cuh"

namespace fp4::dual {

void launch_general_amax(const DeviceInput& x, const DualArgs& a, cudaStream_t stream) {
  dual_general::launch_general<true>(x, a, stream);
}

}  // namespace fp4::dual
