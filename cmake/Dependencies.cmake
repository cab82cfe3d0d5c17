# Every dependency is a Debian package installed by scripts/setup.sh. On the GPU machine (Ubuntu, no
# package registry) header-only libraries missing there are found in .carry/include, which
# scripts/device_carry.sh fills from this machine's packages.
find_package(Threads REQUIRED)
set(FP4_CARRY_INCLUDE ${CMAKE_SOURCE_DIR}/.carry/include)

# nlohmann-json and CLI11: header-only.
find_package(nlohmann_json 3.10 QUIET)
if(NOT TARGET nlohmann_json::nlohmann_json)
  find_path(FP4_NLOHMANN_INCLUDE nlohmann/json.hpp HINTS ${FP4_CARRY_INCLUDE} REQUIRED)
  add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
  target_include_directories(nlohmann_json::nlohmann_json INTERFACE ${FP4_NLOHMANN_INCLUDE})
endif()
find_package(CLI11 QUIET)
if(NOT TARGET CLI11::CLI11)
  find_path(FP4_CLI11_INCLUDE CLI/CLI.hpp HINTS ${FP4_CARRY_INCLUDE} REQUIRED)
  add_library(CLI11::CLI11 INTERFACE IMPORTED)
  target_include_directories(CLI11::CLI11 INTERFACE ${FP4_CLI11_INCLUDE})
endif()

# toml++: Debian ships it as a shared library; elsewhere its headers work header-only.
find_package(tomlplusplus QUIET)
if(NOT TARGET tomlplusplus::tomlplusplus)
  find_path(FP4_TOMLPP_INCLUDE toml++/toml.h HINTS ${FP4_CARRY_INCLUDE} REQUIRED)
  add_library(tomlplusplus::tomlplusplus INTERFACE IMPORTED)
  target_include_directories(tomlplusplus::tomlplusplus INTERFACE ${FP4_TOMLPP_INCLUDE})
  target_compile_definitions(tomlplusplus::tomlplusplus INTERFACE TOML_HEADER_ONLY=1)
endif()

# OpenBLAS (CPU GEMM through cblas).
find_library(FP4_OPENBLAS_LIB NAMES openblas REQUIRED)
find_path(FP4_CBLAS_INCLUDE cblas.h PATH_SUFFIXES x86_64-linux-gnu/openblas-pthread openblas x86_64-linux-gnu
          REQUIRED)
add_library(fp4_blas INTERFACE)
target_link_libraries(fp4_blas INTERFACE ${FP4_OPENBLAS_LIB})
target_include_directories(fp4_blas INTERFACE ${FP4_CBLAS_INCLUDE})
set(FP4_BLAS fp4_blas)

# PCRE2 (the GPT-2 pre-tokenizer regex).
find_path(FP4_PCRE2_INCLUDE pcre2.h HINTS ${FP4_CARRY_INCLUDE} REQUIRED)
find_library(FP4_PCRE2_LIB NAMES pcre2-8 libpcre2-8.so.0 REQUIRED)
add_library(fp4_pcre2 INTERFACE)
target_link_libraries(fp4_pcre2 INTERFACE ${FP4_PCRE2_LIB})
target_include_directories(fp4_pcre2 INTERFACE ${FP4_PCRE2_INCLUDE})
set(FP4_PCRE2 fp4_pcre2)

set(FP4_HAVE_CUDA OFF)
if(FP4_WITH_CUDA)
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(FP4_HAVE_CUDA ON)
  else()
    message(STATUS "fp4train: nvcc not found, building the CPU path only")
  endif()
endif()
