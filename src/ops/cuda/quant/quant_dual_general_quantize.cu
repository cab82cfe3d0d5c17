// The general dual kernel's instantiations for the quantizer (quant_dual_general.cuh).
#include "ops/cuda/quant/quant_dual_general.cuh"

namespace fp4::dual {

void launch_general_quantize(const DeviceInput& x, const DualArgs& a, cudaStream_t stream) {
  dual_general::launch_general<false>(x, a, stream);
}

}  // namespace fp4::dual
