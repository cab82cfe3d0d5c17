// Owning device storage of one NVFP4 operand and its copy back to the host form.
#include "ops/cuda/quant/quant_launch.cuh"

namespace fp4 {

int64_t nvfp4_outer_count(int64_t rows, int64_t cols, OuterScale outer) {
  return outer == OuterScale::kTensor ? 1 : rows * cols / 128;
}

Nvfp4DeviceTensor::Nvfp4DeviceTensor(int64_t rows, int64_t cols, BlockShape block, OuterScale outer)
    : rows_(rows), cols_(cols), block_(block), outer_(outer) {
  FP4_CHECK(rows > 0 && cols > 0 && cols % 16 == 0, "Nvfp4DeviceTensor: [", rows, " x ", cols,
            "] is not an NVFP4 shape (cols must be a positive multiple of 16)");
  FP4_CHECK(outer != OuterScale::kBlock128 || cols % 128 == 0, "Nvfp4DeviceTensor: block128 operand [", rows,
            " x ", cols, "] needs cols to be a multiple of 128");
  codes_ = DeviceBuffer<uint8_t>(static_cast<size_t>(rows * cols / 2));
  scales_ = DeviceBuffer<uint8_t>(static_cast<size_t>(rows * cols / 16));
  outer_scales_ = DeviceBuffer<float>(static_cast<size_t>(nvfp4_outer_count(rows, cols, outer)));
}

Nvfp4DeviceView Nvfp4DeviceTensor::view() {
  Nvfp4DeviceView v;
  v.codes = codes_.data();
  v.scales = scales_.data();
  v.outer = outer_scales_.data();
  v.rows = rows_;
  v.cols = cols_;
  v.block = block_;
  v.outer_mode = outer_;
  return v;
}

Nvfp4Tensor Nvfp4DeviceTensor::download() const {
  Nvfp4Tensor q;
  q.rows = rows_;
  q.cols = cols_;
  q.block = block_;
  q.outer = outer_;
  q.codes.resize(codes_.size());
  q.scales.resize(scales_.size());
  q.outer_scales.resize(outer_scales_.size());
  codes_.download(q.codes.data(), q.codes.size());
  scales_.download(q.scales.data(), q.scales.size());
  outer_scales_.download(q.outer_scales.data(), q.outer_scales.size());
  return q;
}

}  // namespace fp4
