# CUDA 13: sm_90a (Hopper, wgmma) by default, plus a compile-only Blackwell target (sm_100a) so the
# native FP4 path keeps compiling. Override with -DCMAKE_CUDA_ARCHITECTURES=...
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 90a 100a)
endif()
enable_language(CUDA)
# nvcc compiles the project as C++20. CMake 3.25 (Debian 12) knows nvcc's standard flags only up to C++17
# and would otherwise carry CXX_STANDARD 20 over to CUDA and refuse to configure: ask for "17" and map it to
# nvcc's -std=c++20.
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
set(CMAKE_CUDA17_STANDARD_COMPILE_OPTION "-std=c++20")
set(CMAKE_CUDA17_EXTENSION_COMPILE_OPTION "-std=c++20")
find_package(CUDAToolkit REQUIRED)

file(GLOB cuda_srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/*/cuda/*.cu ${CMAKE_SOURCE_DIR}/src/*/*/cuda/*.cu
                                      ${CMAKE_SOURCE_DIR}/src/ops/cuda/*.cu
                                      ${CMAKE_SOURCE_DIR}/src/ops/cuda/*/*.cu)
list(REMOVE_DUPLICATES cuda_srcs)
add_library(fp4_cuda STATIC ${cuda_srcs})
target_include_directories(fp4_cuda PUBLIC ${CMAKE_SOURCE_DIR}/src)
target_link_libraries(fp4_cuda PUBLIC fp4_numerics fp4_model CUDA::cudart CUDA::cublasLt CUDA::cublas)
target_compile_definitions(fp4_cuda PUBLIC FP4_HAVE_CUDA=1)
# Bit-exact with the CPU reference: IEEE division and square root. FMA contraction stays on for speed;
# the shared numerics use __fmul_rn/__fadd_rn where a contraction could change a bit (src/numerics/hd.h).
target_compile_options(fp4_cuda PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-prec-div=true -prec-sqrt=true --expt-relaxed-constexpr -lineinfo>)
set_target_properties(fp4_cuda PROPERTIES CUDA_SEPARABLE_COMPILATION OFF POSITION_INDEPENDENT_CODE ON)
