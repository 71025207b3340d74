# Driven by CTest (see tests/CMakeLists.txt): install, then build examples/ against the
# installed tree twice (CMake package and pkg-config) and run the programs.
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGV}")
  endif()
endfunction()
run(${CMAKE_COMMAND} --install ${ATTNKIT_BUILD_DIR} --prefix ${prefix} --config ${CONFIG})

# 1. CMake package: find_package(attnkit CONFIG) -> attnkit::attnkit
# CONSUMER_CXX / CONSUMER_FLAGS: the library's compiler, and its sanitizer flags in the
# sanitize preset (an instrumented library links only with the same sanitizer runtime).
separate_arguments(consumer_flags UNIX_COMMAND "${CONSUMER_FLAGS}")
run(${CMAKE_COMMAND} -S ${CONSUMER_SOURCE_DIR} -B ${WORK_DIR}/cmake_build
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=${CONSUMER_CXX}
    "-DCMAKE_CXX_FLAGS=${CONSUMER_FLAGS}" "-DCMAKE_EXE_LINKER_FLAGS=${CONSUMER_FLAGS}")
run(${CMAKE_COMMAND} --build ${WORK_DIR}/cmake_build)
run(${WORK_DIR}/cmake_build/train_neighbor_sum)
run(${WORK_DIR}/cmake_build/lesson003)
run(${WORK_DIR}/cmake_build/predict)

# 2. pkg-config: c++ main.cc $(pkg-config --cflags --libs attnkit)
file(GLOB_RECURSE pc_file ${prefix}/attnkit.pc)
get_filename_component(pc_dir "${pc_file}" DIRECTORY)
set(ENV{PKG_CONFIG_PATH} "${pc_dir}")
execute_process(COMMAND pkg-config --cflags --libs attnkit OUTPUT_VARIABLE flags
                RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "pkg-config cannot find attnkit in ${pc_dir}")
endif()
separate_arguments(flags UNIX_COMMAND "${flags}")
run(${CONSUMER_CXX} -std=c++17 -O2 ${consumer_flags} ${CONSUMER_SOURCE_DIR}/train_neighbor_sum.cc -o ${WORK_DIR}/consumer_pc ${flags})
run(${WORK_DIR}/consumer_pc)
