// Entry points of the general dual kernel (quant_dual_general.cuh), one translation unit each.
#pragma once

#include <cuda_runtime.h>

#include "ops/cuda/quant/quant_dual_args.cuh"
#include "ops/cuda/quant/quantize_cuda.h"

namespace fp4::dual {

// quantize_dual_cuda for the modes the specialized kernel does not take (no dequantized column output).
void launch_general_quantize(const DeviceInput& x, const DualArgs& a, cudaStream_t stream);
// The column operand's tensor amax into a.amax_c_out (zeroed by the caller), after its RHT.
void launch_general_amax(const DeviceInput& x, const DualArgs& a, cudaStream_t stream);

}  // namespace fp4::dual
