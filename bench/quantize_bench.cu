// Bandwidth of the quantization kernels against a device-to-device copy of the same input, on 64 MiB and
// 256 MiB inputs (BF16 and FP32). Each kernel runs 3 warm-up times, then 20 timed runs (CUDA events
// around each launch; the median is reported), alternating between two input buffers so the input is
// never served from L2. Bytes moved = bytes read + bytes written by the kernel. Nothing is asserted.
//
// --json FILE also writes one JSON object a row (bench/bench_json.h): kernel, dtype (bf16 or fp32), size,
// shape, bytes moved and median us, the copy row included; scripts/bench_to_json.py takes the ratios from
// them.
//
// usage: quantize_bench [--sizes-mib 64,256] [--dtypes bf16,f32] [--runs 20] [--json FILE]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench_json.h"
#include "numerics/hadamard.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/quant/quantize_cuda.h"

namespace fp4 {
namespace {

struct Options {
  std::vector<int64_t> sizes_mib = {64, 256};
  std::vector<QuantIoType> dtypes = {QuantIoType::kBF16, QuantIoType::kF32};
  int runs = 20;
  std::string json;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = s.find(',', start);
    out.push_back(s.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    FP4_CHECK(i + 1 < argc, "quantize_bench: ", a, " needs a value");
    const std::string v = argv[++i];
    if (a == "--sizes-mib") {
      o.sizes_mib.clear();
      for (const auto& s : split(v)) o.sizes_mib.push_back(std::stoll(s));
    } else if (a == "--dtypes") {
      o.dtypes.clear();
      for (const auto& s : split(v)) {
        FP4_CHECK(s == "bf16" || s == "f32", "quantize_bench: unknown dtype ", s, " (bf16, f32)");
        o.dtypes.push_back(s == "bf16" ? QuantIoType::kBF16 : QuantIoType::kF32);
      }
    } else if (a == "--runs") {
      o.runs = std::stoi(v);
      FP4_CHECK(o.runs > 0, "quantize_bench: --runs must be positive");
    } else if (a == "--json") {
      o.json = v;
    } else {
      FP4_THROW("quantize_bench: unknown option ", a, " (--sizes-mib, --dtypes, --runs, --json)");
    }
  }
  return o;
}

// Median time in microseconds of `runs` launches of f(buffer index), after 3 warm-up launches.
double median_us(const std::function<void(int)>& f, int runs, cudaStream_t stream) {
  cudaEvent_t start, stop;
  FP4_CUDA_CHECK(cudaEventCreate(&start));
  FP4_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) f(i % 2);
  std::vector<float> ms(runs);
  for (int i = 0; i < runs; ++i) {
    FP4_CUDA_CHECK(cudaEventRecord(start, stream));
    f(i % 2);
    FP4_CUDA_CHECK(cudaEventRecord(stop, stream));
    FP4_CUDA_CHECK(cudaEventSynchronize(stop));
    FP4_CUDA_CHECK(cudaEventElapsedTime(&ms[i], start, stop));
  }
  FP4_CUDA_CHECK(cudaEventDestroy(start));
  FP4_CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(ms.begin(), ms.end());
  return 1000.0 * ms[runs / 2];
}

// Fills a buffer with a deterministic spread of values (bits of a hash, exponents in a normal range).
__global__ void fill_kernel(void* data, int64_t n, bool bf16) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    const uint32_t bits = (h & 0x807FFFFFu) | ((112u + (h >> 27)) << 23);  // |x| in [2^-15, 2^16)
    if (bf16)
      static_cast<uint16_t*>(data)[i] = static_cast<uint16_t>(bits >> 16);
    else
      static_cast<uint32_t*>(data)[i] = bits;
  }
}

struct Row {
  std::string kernel;
  double bytes, us;
};

void run_size(int64_t mib, QuantIoType dtype, int runs, cudaStream_t stream, bench::JsonRows& json) {
  const int64_t elem = dtype == QuantIoType::kBF16 ? 2 : 4;
  const int64_t n = mib * 1024 * 1024 / elem;
  const int64_t cols = n >= (int64_t{1} << 27) ? 8192 : 4096, rows = n / cols;
  const double in_bytes = static_cast<double>(n * elem);
  const double nvfp4_tensor_out = n / 2.0 + n / 16.0 + 4.0, nvfp4_b128_out = n / 2.0 + n / 16.0 + n / 32.0;

  DeviceBuffer<uint8_t> in[2] = {DeviceBuffer<uint8_t>(n * elem), DeviceBuffer<uint8_t>(n * elem)};
  DeviceBuffer<uint8_t> copy_dst(n * elem);
  for (auto& b : in) fill_kernel<<<1024, 256, 0, stream>>>(b.data(), n, dtype == QuantIoType::kBF16);
  FP4_CUDA_CHECK_LAUNCH("fill_kernel");
  auto input = [&](int i) { return DeviceInput{in[i].data(), dtype, rows, cols}; };

  Nvfp4DeviceTensor q_tensor(rows, cols, BlockShape::k1x16, OuterScale::kTensor);
  Nvfp4DeviceTensor q_tile(rows, cols, BlockShape::k16x16, OuterScale::kTensor);
  Nvfp4DeviceTensor q_b128(rows, cols, BlockShape::k1x16, OuterScale::kBlock128);
  Nvfp4DeviceTensor q_cols(cols, rows, BlockShape::k1x16, OuterScale::kBlock128);
  DeviceBuffer<uint8_t> mx_codes(n), mx_scales(n / 32);
  DeviceBuffer<uint16_t> deq(n);
  DeviceBuffer<float> amax(1);

  QuantSpec tensor_rtn;
  tensor_rtn.format = QuantFormat::kNvfp4;
  QuantSpec tile = tensor_rtn;
  tile.block = BlockShape::k16x16;
  QuantSpec fos = tensor_rtn;
  fos.four_over_six = FourOverSix::kMse;
  QuantSpec b128_rtn = tensor_rtn;
  b128_rtn.outer = OuterScale::kBlock128;
  QuantSpec b128_sr_rht = b128_rtn;
  b128_sr_rht.rounding = Rounding::kSr;
  b128_sr_rht.rht_n = 16;
  QuantSpec b128_sr = b128_rtn;
  b128_sr.rounding = Rounding::kSr;
  QuantSpec tensor_sr_rows = tensor_rtn;
  tensor_sr_rows.rounding = Rounding::kSr;
  QuantSpec aligned = b128_sr_rht;
  aligned.source = QuantSource::kAligned;
  QuantRandomness rnd;
  rnd.sr = RngStream{0x1234567887654321ull, 7};
  rnd.signs = rht_signs_from_seed(RngStream{42, 1}, 16);
  const DequantOutput none;

  std::vector<Row> rows_out;
  auto time = [&](const std::string& name, double bytes, const std::function<void(int)>& f) {
    rows_out.push_back({name, bytes, median_us(f, runs, stream)});
  };
  time("copy (cudaMemcpy D2D)", 2 * in_bytes, [&](int i) {
    FP4_CUDA_CHECK(
        cudaMemcpyAsync(copy_dst.data(), in[i].data(), n * elem, cudaMemcpyDeviceToDevice, stream));
  });
  time("amax pre-pass", in_bytes,
       [&](int i) { amax_nvfp4_cuda(input(i), tensor_rtn, rnd, amax.data(), stream); });
  time("nvfp4 1x16 tensor rtn (quantize)", in_bytes + nvfp4_tensor_out, [&](int i) {
    quantize_nvfp4_cuda(input(i), tensor_rtn, rnd, q_tensor.view(), amax.data(), nullptr, none, stream);
  });
  time("nvfp4 1x16 tensor rtn (amax+quantize)", 2 * in_bytes + nvfp4_tensor_out, [&](int i) {
    amax_nvfp4_cuda(input(i), tensor_rtn, rnd, amax.data(), stream);
    quantize_nvfp4_cuda(input(i), tensor_rtn, rnd, q_tensor.view(), amax.data(), nullptr, none, stream);
  });
  time("nvfp4 1x16 block128 rtn", in_bytes + nvfp4_b128_out, [&](int i) {
    quantize_nvfp4_cuda(input(i), b128_rtn, rnd, q_b128.view(), nullptr, nullptr, none, stream);
  });
  time("nvfp4 1x16 tensor sr (quantize)", in_bytes + nvfp4_tensor_out, [&](int i) {
    quantize_nvfp4_cuda(input(i), tensor_sr_rows, rnd, q_tensor.view(), amax.data(), nullptr, none, stream);
  });
  time("nvfp4 1x16 block128 sr", in_bytes + nvfp4_b128_out, [&](int i) {
    quantize_nvfp4_cuda(input(i), b128_sr, rnd, q_b128.view(), nullptr, nullptr, none, stream);
  });
  time("nvfp4 1x16 block128 sr rht16", in_bytes + nvfp4_b128_out, [&](int i) {
    quantize_nvfp4_cuda(input(i), b128_sr_rht, rnd, q_b128.view(), nullptr, nullptr, none, stream);
  });
  time("nvfp4 16x16 tensor rtn (quantize)", in_bytes + nvfp4_tensor_out, [&](int i) {
    quantize_nvfp4_cuda(input(i), tile, rnd, q_tile.view(), amax.data(), nullptr, none, stream);
  });
  time("nvfp4 1x16 tensor 4o6 (quantize)", in_bytes + nvfp4_tensor_out, [&](int i) {
    quantize_nvfp4_cuda(input(i), fos, rnd, q_tensor.view(), amax.data(), nullptr, none, stream);
  });
  time("dual b128 rtn + aligned^T b128 sr rht16", in_bytes + 2 * nvfp4_b128_out, [&](int i) {
    const DualOperand r{b128_rtn, rnd, q_b128.view(), nullptr, nullptr};
    const DualOperand c{aligned, rnd, q_cols.view(), nullptr, nullptr};
    quantize_dual_cuda(input(i), r, c, none, stream);
  });
  if (dtype ==
      QuantIoType::kBF16) {  // the gradient pairs (a BF16 dY, original source: the fast kernel's forms)
    DeviceBuffer<uint16_t> deq_cols(n);
    DequantOutput rows_bf16, cols_bf16;
    rows_bf16.data = deq.data();
    cols_bf16.data = deq_cols.data();
    // TetraJet-v2's dY / dY^T, without and with the BF16 values of both (the backward GEMMs' operands).
    const DualOperand r{b128_sr_rht, rnd, q_b128.view(), nullptr, nullptr};
    const DualOperand c{b128_sr_rht, rnd, q_cols.view(), nullptr, nullptr};
    time("dual dY b128 sr rht16 + ^T (codes only)", in_bytes + 2 * nvfp4_b128_out,
         [&](int i) { quantize_dual_cuda(input(i), r, c, none, stream); });
    time("dual dY b128 sr rht16 + ^T (+ bf16 both)", in_bytes + 2 * nvfp4_b128_out + 4.0 * n,
         [&](int i) { quantize_dual_cuda(input(i), r, c, rows_bf16, cols_bf16, stream); });
    // NVIDIA's dY / dY^T (tensor scales from amax values computed once, outside the timing).
    QuantSpec tensor_sr = tensor_rtn;
    tensor_sr.rounding = Rounding::kSr;
    QuantSpec tensor_sr_rht = tensor_sr;
    tensor_sr_rht.rht_n = 16;
    Nvfp4DeviceTensor q_cols_tensor(cols, rows, BlockShape::k1x16, OuterScale::kTensor);
    DeviceBuffer<float> amax2(2);
    const DualOperand rn{tensor_sr, rnd, q_tensor.view(), amax2.data(), nullptr};
    const DualOperand cn{tensor_sr_rht, rnd, q_cols_tensor.view(), amax2.data() + 1, nullptr};
    // NVIDIA's tensor-scale pre-pass: amax of dY's rows and of its RHT16-transformed columns.
    time("amax pre-pass dY tensor + ^T rht16 (both)", in_bytes,
         [&](int i) { amax_dual_cuda(input(i), rn, cn, amax2.data(), amax2.data() + 1, stream); });
    amax_dual_cuda(input(0), rn, cn, amax2.data(), amax2.data() + 1, stream);
    time("dual dY tensor sr + ^T rht16 (+ bf16 both)", in_bytes + 2 * nvfp4_tensor_out + 4.0 * n,
         [&](int i) { quantize_dual_cuda(input(i), rn, cn, rows_bf16, cols_bf16, stream); });
    FP4_CUDA_CHECK(cudaStreamSynchronize(stream));  // the buffers above leave scope
  }
  time("mxfp8", in_bytes + n + n / 32.0, [&](int i) {
    quantize_mxfp8_cuda(input(i), Mxfp8DeviceView{mx_codes.data(), mx_scales.data(), rows, cols}, nullptr,
                        stream);
  });
  time("dequantize nvfp4 block128 -> bf16", nvfp4_b128_out + 2.0 * n, [&](int) {
    DequantOutput d;
    d.data = deq.data();
    d.dtype = QuantIoType::kBF16;
    dequantize_nvfp4_cuda(q_b128.view(), d, stream);
  });
  FP4_CUDA_CHECK(cudaStreamSynchronize(stream));

  const double copy_gbs = rows_out[0].bytes / rows_out[0].us / 1e3;
  const char* dt = dtype == QuantIoType::kBF16 ? "bf16" : "f32";
  for (const Row& r : rows_out) {
    const double gbs = r.bytes / r.us / 1e3;
    std::printf("| %-40s | %-4s | %5lld x %-5lld | %8.1f MB | %9.1f us | %7.0f GB/s | %5.2f |\n",
                r.kernel.c_str(), dt, static_cast<long long>(rows), static_cast<long long>(cols),
                r.bytes / 1e6, r.us, gbs, gbs / copy_gbs);
    json.write({{"kernel", r.kernel},
                {"dtype", dtype == QuantIoType::kBF16 ? "bf16" : "fp32"},
                {"mib", mib},
                {"rows", rows},
                {"cols", cols},
                {"bytes", r.bytes},
                {"median_us", r.us},
                {"runs", runs}});
  }
  std::fflush(stdout);
}

}  // namespace
}  // namespace fp4

int main(int argc, char** argv) {
  try {
    const fp4::Options o = fp4::parse(argc, argv);
    cudaDeviceProp prop{};
    FP4_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("quantize_bench on %s (%d SMs, L2 %d MiB); median of %d runs, 2 rotating inputs\n", prop.name,
                prop.multiProcessorCount, prop.l2CacheSize >> 20, o.runs);
    std::printf("| %-40s | %-4s | %-13s | %-11s | %-12s | %-12s | %-5s |\n", "kernel", "in", "shape",
                "bytes moved", "median", "bandwidth", "/copy");
    fp4::bench::JsonRows json(o.json, "quantize_bench", prop.name, argc, argv);
    cudaStream_t stream = nullptr;
    FP4_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    for (const auto dtype : o.dtypes)
      for (const int64_t mib : o.sizes_mib) fp4::run_size(mib, dtype, o.runs, stream, json);
    FP4_CUDA_CHECK(cudaStreamDestroy(stream));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "quantize_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
