#include "train/engine_factory.h"

#include "core/error.h"
#include "model/cpu_engine.h"

namespace fp4 {
namespace {
CudaEngineFactory g_cuda_factory = nullptr;
}  // namespace

void register_cuda_engine(CudaEngineFactory factory) {
  g_cuda_factory = factory;
}

std::unique_ptr<TrainingEngine> make_engine(const RunConfig& cfg, const Recipe& recipe, int cuda_device) {
  const std::string& device = cfg.train.device;
  if (device == "cpu") return make_cpu_engine(cfg.model, recipe, cfg.train.seed);
  if (device == "cuda" && g_cuda_factory)
    return g_cuda_factory(cfg.model, recipe, cfg.train.seed, cuda_device);
  if (device == "cuda")
    FP4_THROW(
        "train.device = \"cuda\": this fp4train was built without the CUDA engine (build on a machine with "
        "nvcc and -DFP4_WITH_CUDA=ON), or use train.device = \"cpu\"");
  FP4_THROW("train.device must be cpu or cuda, got '", device, "'");
}

}  // namespace fp4
