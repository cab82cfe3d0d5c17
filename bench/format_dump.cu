// format_dump IN OUT: reads little-endian float32 values from IN, encodes each ON THE GPU with the
// library's E2M1 round-to-nearest encoder (e2m1_encode_rtn) and E4M3 encoder (e4m3_encode), and writes
// two bytes per value to OUT: the E2M1 code (sign 0x8 | magnitude index) and the E4M3 code.
// scripts/check_formats.py compares them with ml_dtypes and PyTorch.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "numerics/formats.h"
#include "ops/cuda/cuda_check.h"

namespace {

__global__ void encode_kernel(const float* x, int64_t n, uint8_t* out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[2 * i] = fp4::e2m1_encode_rtn(x[i]);
    out[2 * i + 1] = fp4::e4m3_encode(x[i]);
  }
}

std::vector<float> read_floats(const char* path) {
  std::ifstream f(path, std::ios::binary);
  FP4_CHECK(f.good(), "format_dump: cannot open ", path);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  FP4_CHECK(bytes.size() % 4 == 0, "format_dump: ", path, " holds ", bytes.size(),
            " bytes, not whole float32 values");
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), bytes.size());
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: format_dump IN.f32 OUT.codes\n");
    return 2;
  }
  try {
    const std::vector<float> x = read_floats(argv[1]);
    const int64_t n = static_cast<int64_t>(x.size());
    FP4_CHECK(n > 0, "format_dump: ", argv[1], " is empty");
    fp4::DeviceBuffer<float> dx(x.size());
    fp4::DeviceBuffer<uint8_t> dout(2 * x.size());
    dx.upload(x.data(), x.size());
    encode_kernel<<<1024, 256>>>(dx.data(), n, dout.data());
    FP4_CUDA_CHECK_LAUNCH("encode_kernel");
    std::vector<uint8_t> out(2 * x.size());
    dout.download(out.data(), out.size());
    std::ofstream f(argv[2], std::ios::binary);
    f.write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.size()));
    FP4_CHECK(f.good(), "format_dump: cannot write ", argv[2]);
    std::printf("format_dump: encoded %lld values on the GPU\n", static_cast<long long>(n));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
