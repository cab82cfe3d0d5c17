# `cmake --install` of the fp4train libraries, headers and program, with a find_package(fp4train) config:
#   find_package(fp4train REQUIRED)
#   target_link_libraries(my_program PRIVATE fp4train::fp4_train)
# The targets installed are those of FP4_INSTALL_TARGETS that exist in this build (the list to update when
# a library is added); a build target named fp4_* that the list misses is reported at configure time.
# ctest's `install_examples` (label cpu) installs into a temporary prefix and builds examples/ against it.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(FP4_INSTALL_TARGETS
    fp4_core fp4_numerics fp4_data fp4_tensor fp4_ops fp4_nn fp4_model fp4_recipe fp4_optim fp4_train fp4_dist
    fp4_report fp4_blas fp4_pcre2 fp4_cuda)
set(FP4_INSTALL_INCLUDEDIR ${CMAKE_INSTALL_INCLUDEDIR}/fp4train)
set(FP4_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/fp4train)

set(fp4_installed)
foreach(t IN LISTS FP4_INSTALL_TARGETS)
  if(TARGET ${t})
    list(APPEND fp4_installed ${t})
  endif()
endforeach()
get_property(fp4_all_targets DIRECTORY ${CMAKE_SOURCE_DIR} PROPERTY BUILDSYSTEM_TARGETS)
foreach(t IN LISTS fp4_all_targets)
  get_target_property(type ${t} TYPE)
  if(t MATCHES "^fp4_" AND type MATCHES "LIBRARY$" AND NOT t IN_LIST FP4_INSTALL_TARGETS)
    message(WARNING "fp4train install: library ${t} is not in FP4_INSTALL_TARGETS (cmake/Install.cmake)")
  endif()
endforeach()

# Consumers in the build tree keep including src/; installed ones include <prefix>/include/fp4train.
foreach(t IN LISTS fp4_installed)
  get_target_property(dirs ${t} INTERFACE_INCLUDE_DIRECTORIES)
  if(NOT dirs)
    continue()
  endif()
  set(mapped)
  foreach(d IN LISTS dirs)
    # src/ itself, or a layer view of it (cmake/Areas.cmake: <build>/layers/<folder>): both become the
    # installed header tree, which holds every folder (the layers are a build-time check).
    string(FIND "${d}" "${CMAKE_BINARY_DIR}/layers/" in_layers)
    if(d STREQUAL "${CMAKE_SOURCE_DIR}/src" OR in_layers EQUAL 0)
      list(APPEND mapped "$<BUILD_INTERFACE:${d}>" "$<INSTALL_INTERFACE:${FP4_INSTALL_INCLUDEDIR}>")
    elseif(d MATCHES "^${CMAKE_SOURCE_DIR}/" OR d MATCHES "^${CMAKE_BINARY_DIR}/")
      list(APPEND mapped "$<BUILD_INTERFACE:${d}>")  # e.g. .carry/include on the GPU machine
    else()
      list(APPEND mapped "${d}")
    endif()
  endforeach()
  set_target_properties(${t} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${mapped}")
endforeach()

install(TARGETS ${fp4_installed} EXPORT fp4trainTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
if(TARGET fp4train)
  install(TARGETS fp4train RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
install(DIRECTORY ${CMAKE_SOURCE_DIR}/src/ DESTINATION ${FP4_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h" PATTERN "*.cuh")
install(DIRECTORY ${CMAKE_SOURCE_DIR}/configs/ DESTINATION ${CMAKE_INSTALL_DATADIR}/fp4train/configs)
install(EXPORT fp4trainTargets NAMESPACE fp4train:: DESTINATION ${FP4_INSTALL_CMAKEDIR})

# The config finds what the static libraries link against the way cmake/Dependencies.cmake did here
# (header-only libraries without a CMake package of their own become imported targets again).
set(FP4_CONFIG_NEEDS_CUDA OFF)
if(TARGET fp4_cuda)
  set(FP4_CONFIG_NEEDS_CUDA ON)
endif()
file(CONFIGURE OUTPUT ${CMAKE_BINARY_DIR}/fp4trainConfig.cmake @ONLY CONTENT [=[
# fp4train @PROJECT_VERSION@: targets fp4train::<library> (fp4train::fp4_train pulls in the others).
include(CMakeFindDependencyMacro)
find_dependency(Threads)
find_package(nlohmann_json 3.10 QUIET)
if(NOT TARGET nlohmann_json::nlohmann_json)
  add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
  target_include_directories(nlohmann_json::nlohmann_json INTERFACE "@FP4_NLOHMANN_INCLUDE@")
endif()
find_package(tomlplusplus QUIET)
if(NOT TARGET tomlplusplus::tomlplusplus)
  add_library(tomlplusplus::tomlplusplus INTERFACE IMPORTED)
  target_include_directories(tomlplusplus::tomlplusplus INTERFACE "@FP4_TOMLPP_INCLUDE@")
  target_compile_definitions(tomlplusplus::tomlplusplus INTERFACE TOML_HEADER_ONLY=1)
endif()
if(@FP4_CONFIG_NEEDS_CUDA@)
  find_dependency(CUDAToolkit)
endif()
include("${CMAKE_CURRENT_LIST_DIR}/fp4trainTargets.cmake")
]=])
write_basic_package_version_file(${CMAKE_BINARY_DIR}/fp4trainConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/fp4trainConfig.cmake ${CMAKE_BINARY_DIR}/fp4trainConfigVersion.cmake
        DESTINATION ${FP4_INSTALL_CMAKEDIR})

if(FP4_BUILD_TESTS)
  add_test(NAME install_examples
           COMMAND ${CMAKE_COMMAND} -DFP4_BUILD_DIR=${CMAKE_BINARY_DIR} -DFP4_SOURCE_DIR=${CMAKE_SOURCE_DIR}
                   -DFP4_GENERATOR=${CMAKE_GENERATOR} -DFP4_CXX=${CMAKE_CXX_COMPILER}
                   -DFP4_LAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER} -P ${CMAKE_SOURCE_DIR}/cmake/InstallCheck.cmake)
  set_tests_properties(install_examples PROPERTIES LABELS cpu TIMEOUT 600)
endif()
