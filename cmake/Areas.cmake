# fp4_area(NAME FOLDER f [DIRS d1 d2 ...] DEPS t1 t2 ...): the static library of one folder of src/, every
# .cpp in src/<f> (and in the extra DIRS; not the cuda/ subfolders). A folder with no .cpp gives an
# INTERFACE library.
#
# The layers are enforced at compile time: the library's sources see src/ only through
# <build>/layers/<f>/, which links the folder itself and the folders of the areas in DEPS (transitively),
# and nothing else. An include of a folder above (or beside) it is "file not found". Consumers of the
# library get the same view; programs on top (apps, tests, bench) add src/ itself.
# scripts/check_layers.py checks the same rules on every file (the CUDA sources too) and fails when the
# folders a library sees here differ from its table kAllowed.
function(fp4_area name)
  cmake_parse_arguments(A "" "FOLDER" "DIRS;DEPS" ${ARGN})
  set(srcs)
  foreach(d src/${A_FOLDER} ${A_DIRS})
    file(GLOB s CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/${d}/*.cpp)
    list(APPEND srcs ${s})
  endforeach()

  set(folders ${A_FOLDER})
  foreach(dep ${A_DEPS})
    get_property(dep_folders GLOBAL PROPERTY FP4_AREA_FOLDERS_${dep})
    list(APPEND folders ${dep_folders})
  endforeach()
  list(REMOVE_DUPLICATES folders)
  set_property(GLOBAL PROPERTY FP4_AREA_FOLDERS_${name} ${folders})

  set(root ${CMAKE_BINARY_DIR}/layers/${A_FOLDER})
  file(REMOVE_RECURSE ${root})
  file(MAKE_DIRECTORY ${root})
  foreach(f ${folders})
    file(CREATE_LINK ${CMAKE_SOURCE_DIR}/src/${f} ${root}/${f} SYMBOLIC)
  endforeach()

  if(srcs)
    add_library(${name} STATIC ${srcs})
    target_include_directories(${name} PUBLIC ${root})
    target_link_libraries(${name} PUBLIC ${A_DEPS})
  else()
    add_library(${name} INTERFACE)
    target_include_directories(${name} INTERFACE ${root})
    target_link_libraries(${name} INTERFACE ${A_DEPS})
  endif()
endfunction()
