#include "dist/nccl_api.h"

#include <dlfcn.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

#include "core/error.h"

namespace fp4::nccl {
namespace {

// The directory of the nvidia-nccl wheel as python3 sees it ("" when it is not installed).
std::string wheel_directory() {
  const char* cmd = "python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen(cmd, "r"), &::pclose);
  if (!pipe) return "";
  std::array<char, 4096> buf{};
  std::string out;
  while (std::fgets(buf.data(), static_cast<int>(buf.size()), pipe.get())) out += buf.data();
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

template <typename Fn>
void bind(void* lib, const char* name, Fn& fn, const std::string& path) {
  fn = reinterpret_cast<Fn>(::dlsym(lib, name));
  FP4_CHECK(fn != nullptr, "NCCL library ", path, " has no symbol ", name);
}

Api load() {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("FP4_NCCL_LIBRARY"); env && *env) candidates.push_back(env);
  candidates.push_back("libnccl.so.2");
  std::string tried, path;
  void* lib = nullptr;
  const auto attempt = [&](const std::string& p) {
    lib = ::dlopen(p.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (lib)
      path = p;
    else
      tried += "\n  " + p + ": " + ::dlerror();
    return lib != nullptr;
  };
  for (const auto& c : candidates)
    if (attempt(c)) break;
  if (!lib) {
    const std::string dir = wheel_directory();
    if (dir.empty())
      tried += "\n  python3's nvidia.nccl package: not installed";
    else
      attempt(dir + "/lib/libnccl.so.2");
  }
  FP4_CHECK(lib != nullptr, "cannot load NCCL (needed for multi-GPU training); tried:", tried,
            "\nset FP4_NCCL_LIBRARY to the path of libnccl.so.2 (pip's nvidia-nccl-cu* wheel has one under "
            "site-packages/nvidia/nccl/lib)");
  Api api;  // the library stays loaded for the life of the process
  api.library = path;
  bind(lib, "ncclGetVersion", api.get_version, path);
  bind(lib, "ncclGetUniqueId", api.get_unique_id, path);
  bind(lib, "ncclCommInitRank", api.comm_init_rank, path);
  bind(lib, "ncclCommDestroy", api.comm_destroy, path);
  bind(lib, "ncclGetErrorString", api.get_error_string, path);
  bind(lib, "ncclAllReduce", api.all_reduce, path);
  bind(lib, "ncclReduce", api.reduce, path);
  bind(lib, "ncclBroadcast", api.broadcast, path);
  bind(lib, "ncclGroupStart", api.group_start, path);
  bind(lib, "ncclGroupEnd", api.group_end, path);
  FP4_CHECK(api.get_version(&api.version) == 0, "NCCL library ", path, ": ncclGetVersion failed");
  return api;
}

}  // namespace

const Api& load_api() {
  static std::once_flag once;
  static std::unique_ptr<Api> api;
  std::call_once(once, [] { api = std::make_unique<Api>(load()); });
  return *api;
}

}  // namespace fp4::nccl
