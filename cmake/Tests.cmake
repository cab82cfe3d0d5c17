find_package(GTest REQUIRED)
include(GoogleTest)
# One test program per area: tests/unit/<area>/*_test.cpp -> test_<area>, labelled cpu.
# tests/cuda/*_test.cpp -> test_cuda, labelled cuda (run on the GPU machine only).
file(GLOB areas LIST_DIRECTORIES true CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/unit/*)
foreach(dir ${areas})
  if(IS_DIRECTORY ${dir})
    get_filename_component(area ${dir} NAME)
    file(GLOB srcs CONFIGURE_DEPENDS ${dir}/*_test.cpp)
    if(srcs)
      add_executable(test_${area} ${srcs})
      target_link_libraries(test_${area} PRIVATE fp4_report GTest::gtest_main GTest::gmock)
      target_include_directories(test_${area} PRIVATE ${CMAKE_SOURCE_DIR}/src)
      target_compile_definitions(test_${area} PRIVATE FP4_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
      gtest_discover_tests(test_${area} PROPERTIES LABELS cpu DISCOVERY_TIMEOUT 60)
    endif()
  endif()
endforeach()

# Helper programs of the reference checks: tests/reference/*.cpp -> one executable each.
file(GLOB ref_tools CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/reference/*.cpp)
foreach(src ${ref_tools})
  get_filename_component(n ${src} NAME_WE)
  add_executable(${n} ${src})
  target_link_libraries(${n} PRIVATE fp4_report)
  target_include_directories(${n} PRIVATE ${CMAKE_SOURCE_DIR}/src)
endforeach()

# Reference checks against PyTorch (Debian python3-torch, CPU): tests/reference/*.py
find_program(FP4_SYSTEM_PYTHON NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH)

# The layers: no folder of src/ includes one above it (scripts/check_layers.py, docs/ARCHITECTURE.md).
add_test(NAME check_layers COMMAND ${FP4_SYSTEM_PYTHON} ${CMAKE_SOURCE_DIR}/scripts/check_layers.py --quiet)
set_tests_properties(check_layers PROPERTIES LABELS cpu TIMEOUT 60)
# docs/benchmarks/latest.json's merge script (scripts/bench_to_json.py) and the committed file's fields.
add_test(NAME bench_to_json COMMAND ${FP4_SYSTEM_PYTHON} ${CMAKE_SOURCE_DIR}/tests/scripts/bench_to_json_test.py)
set_tests_properties(bench_to_json PROPERTIES LABELS cpu TIMEOUT 60)
# Every C++/CUDA source formatted as .clang-format says (scripts/check_format.py), and the check itself.
add_test(NAME check_format COMMAND ${FP4_SYSTEM_PYTHON} ${CMAKE_SOURCE_DIR}/scripts/check_format.py)
set_tests_properties(check_format PROPERTIES LABELS cpu TIMEOUT 120)
add_test(NAME check_format_script COMMAND ${FP4_SYSTEM_PYTHON} ${CMAKE_SOURCE_DIR}/tests/scripts/check_format_test.py)
set_tests_properties(check_format_script PROPERTIES LABELS cpu TIMEOUT 60)
# The stable-phase read-out of stopped runs (scripts/experiments/gap_at_step.py).
add_test(NAME gap_at_step_script COMMAND ${FP4_SYSTEM_PYTHON} ${CMAKE_SOURCE_DIR}/tests/scripts/gap_at_step_test.py)
set_tests_properties(gap_at_step_script PROPERTIES LABELS cpu TIMEOUT 60)
# Time to the same loss from a scan of decays and latest.json (scripts/experiments/equal_loss_time.py).
add_test(NAME equal_loss_time_script COMMAND ${FP4_SYSTEM_PYTHON} ${CMAKE_SOURCE_DIR}/tests/scripts/equal_loss_time_test.py)
set_tests_properties(equal_loss_time_script PROPERTIES LABELS cpu TIMEOUT 60)
file(GLOB refs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/reference/check_*.py)
foreach(ref ${refs})
  get_filename_component(n ${ref} NAME_WE)
  add_test(NAME reference_${n}
           COMMAND ${FP4_SYSTEM_PYTHON} ${ref} --build-dir ${CMAKE_BINARY_DIR}
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(reference_${n} PROPERTIES LABELS "cpu;reference" TIMEOUT 900)
endforeach()
# Needs transformers, which the CPU machines lack: it exits 77 there (skipped), runs on the GPU machine.
if(TEST reference_check_export_transformers)
  set_tests_properties(reference_check_export_transformers PROPERTIES SKIP_RETURN_CODE 77)
endif()

if(FP4_HAVE_CUDA)
  file(GLOB cuda_tests CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/cuda/*_test.cpp
                                         ${CMAKE_SOURCE_DIR}/tests/cuda/*_test.cu)
  if(cuda_tests)
    add_executable(test_cuda ${cuda_tests})
    target_link_libraries(test_cuda PRIVATE fp4_cuda fp4_report GTest::gtest_main)
    target_compile_definitions(test_cuda PRIVATE FP4_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
    # Registered without discovery: listing the tests needs no GPU, but running them does.
    add_test(NAME cuda_all COMMAND test_cuda)
    set_tests_properties(cuda_all PROPERTIES LABELS cuda)
  endif()
endif()

# The fuzz test of the fp4train binary (tests/fuzz/fuzz_cli.py, docs/RELIABILITY.md): a seeded corpus of
# mutated inputs per family, labelled cpu so the CPU suite runs it.
if(FP4_SYSTEM_PYTHON)
  add_test(NAME fuzz_cli
           COMMAND ${FP4_SYSTEM_PYTHON} ${CMAKE_SOURCE_DIR}/tests/fuzz/fuzz_cli.py --binary $<TARGET_FILE:fp4train>
                   --per-family 200 --jobs 2)
  set_tests_properties(fuzz_cli PROPERTIES LABELS cpu TIMEOUT 600)
  # Kill trials (tests/fuzz/kill_trials.py): SIGKILL at random moments and during saves, resume, compare bit
  # for bit with the uninterrupted run; FP4_KILL_TRIALS raises the number of trials.
  add_test(NAME kill_trials
           COMMAND ${FP4_SYSTEM_PYTHON} ${CMAKE_SOURCE_DIR}/tests/fuzz/kill_trials.py --binary $<TARGET_FILE:fp4train>)
  set_tests_properties(kill_trials PROPERTIES LABELS cpu TIMEOUT 300)
endif()
