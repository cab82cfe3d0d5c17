#include <algorithm>

#include "core/error.h"
#include "core/parallel_for.h"
#include "model/cuda/lora_svd_realigner.h"

namespace fp4::cuda {

void LoraSvdRealigner::realign(int64_t step, DeviceParams& params) const {
  FP4_CHECK(due(step), "LoRA-SVD: step ", step, " is not a realignment step (every ",
            registry_.config().realign_every, " steps)");
  const int64_t index = step / registry_.config().realign_every;
  const std::vector<LoraSvd::Layer>& layers = registry_.layers();
  struct HostCopy {
    std::vector<float> w, l1, l2;
  };
  std::vector<HostCopy> host(layers.size());
  auto download = [&](int i, std::vector<float>& v) {
    v.resize(static_cast<size_t>(params.at(i).info.numel()));
    params.read_value(i, v);
  };
  for (size_t k = 0; k < layers.size(); ++k) {
    download(layers[k].w_res, host[k].w);
    download(layers[k].l1, host[k].l1);
    download(layers[k].l2, host[k].l2);
  }
  // The layers are independent and each one's result depends only on its own inputs and stream, so
  // realigning them on several host threads gives the same bits as the CPU engine's loop.
  parallel_for(layers.size(), host_threads(), [&](size_t k) {
    registry_.realign_layer(layers[k], host[k].w.data(), host[k].l1.data(), host[k].l2.data(), seed_, index);
  });
  for (size_t k = 0; k < layers.size(); ++k) {
    params.write_value(layers[k].w_res, host[k].w);
    params.write_value(layers[k].l1, host[k].l1);
    params.write_value(layers[k].l2, host[k].l2);
  }
}

std::vector<IndexRange> LoraSvdRealigner::factor_ranges(const DeviceParams& params) const {
  std::vector<IndexRange> out;
  for (const LoraSvd::Layer& l : registry_.layers())
    for (int i : {l.l1, l.l2})
      out.push_back({params.at(i).offset, params.at(i).offset + params.at(i).info.numel()});
  return out;
}

}  // namespace fp4::cuda
