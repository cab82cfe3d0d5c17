#include "core/error.h"
#include "model/cuda/lora_svd_realigner.h"

namespace fp4::cuda {

void LoraSvdRealigner::realign(int64_t step, DeviceParams& params) const {
  FP4_CHECK(due(step), "LoRA-SVD: step ", step, " is not a realignment step (every ",
            registry_.config().realign_every, " steps)");
  const int64_t index = step / registry_.config().realign_every;
  std::vector<float> w, l1, l2;
  for (const LoraSvd::Layer& l : registry_.layers()) {
    w.resize(static_cast<size_t>(params.at(l.w_res).info.numel()));
    l1.resize(static_cast<size_t>(params.at(l.l1).info.numel()));
    l2.resize(static_cast<size_t>(params.at(l.l2).info.numel()));
    params.read_value(l.w_res, w);
    params.read_value(l.l1, l1);
    params.read_value(l.l2, l2);
    registry_.realign_layer(l, w.data(), l1.data(), l2.data(), seed_, index);
    params.write_value(l.w_res, w);
    params.write_value(l.l1, l1);
    params.write_value(l.l2, l2);
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
