// A parallel loop over independent host tasks (per-layer host work of the CUDA engine's LoRA-SVD: bases,
// realignment), with the first exception carried back to the caller.
#pragma once

#include <cstddef>
#include <functional>

namespace fp4 {

// The host's hardware threads (at least 1).
size_t host_threads();

// Calls task(i) once for every i in [0, n), on up to `threads` threads (the calling one included; at most n),
// in no fixed order, and returns when every call has returned. When calls throw, the remaining indices are
// still run and the first exception caught is rethrown here. Tasks must not depend on each other's order.
void parallel_for(size_t n, size_t threads, const std::function<void(size_t)>& task);

}  // namespace fp4
