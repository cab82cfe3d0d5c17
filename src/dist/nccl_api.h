// The few entry points of NCCL's public C API that fp4train calls, declared here and resolved at run
// time with dlopen: no NCCL headers or library are needed to build, only to run on GPUs. Types and
// enum values follow NCCL's documented API (ncclUniqueId is 128 opaque bytes, ncclComm_t an opaque
// pointer, cudaStream_t is passed as a pointer).
#pragma once

#include <cstddef>
#include <string>

namespace fp4::nccl {

struct UniqueId {
  char internal[128];
};
using Comm = void*;
using Result = int;  // ncclResult_t: 0 = ncclSuccess
enum DataType : int { kInt64 = 4, kFloat32 = 7, kFloat64 = 8, kBfloat16 = 9 };
enum RedOp : int { kSum = 0 };

// Function pointers into a loaded libnccl.
struct Api {
  Result (*get_version)(int* version) = nullptr;
  Result (*get_unique_id)(UniqueId* id) = nullptr;
  Result (*comm_init_rank)(Comm* comm, int nranks, UniqueId id, int rank) = nullptr;
  Result (*comm_destroy)(Comm comm) = nullptr;
  const char* (*get_error_string)(Result r) = nullptr;
  Result (*all_reduce)(const void* send, void* recv, size_t count, int type, int op, Comm comm,
                       void* stream) = nullptr;
  Result (*reduce)(const void* send, void* recv, size_t count, int type, int op, int root, Comm comm,
                   void* stream) = nullptr;
  Result (*broadcast)(const void* send, void* recv, size_t count, int type, int root, Comm comm,
                      void* stream) = nullptr;
  Result (*group_start)() = nullptr;
  Result (*group_end)() = nullptr;
  std::string library;  // the path or name that was loaded
  int version = 0;
};

// Loads NCCL once per process: $FP4_NCCL_LIBRARY, else "libnccl.so.2" on the loader's path, else
// <site-packages>/nvidia/nccl/lib/libnccl.so.2 of `python3` (PyTorch's nvidia-nccl-cu* wheel).
// Throws fp4::Error listing what was tried.
const Api& load_api();

}  // namespace fp4::nccl
