# Driven by CTest (see tests/CMakeLists.txt): install, then build examples/ against the
# installed tree twice (CMake package and pkg-config) and run the programs; then compile every
# installed header on its own.
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

# 3. Every installed header compiles on its own (includes what it uses) without a warning under
# -Wall -Wextra, and none needs a build-only dependency (nlohmann/json stays private).
execute_process(COMMAND pkg-config --cflags attnkit OUTPUT_VARIABLE cflags OUTPUT_STRIP_TRAILING_WHITESPACE)
separate_arguments(cflags UNIX_COMMAND "${cflags}")
file(GLOB_RECURSE headers RELATIVE ${prefix}/include ${prefix}/include/attnkit/*.h)
list(LENGTH headers header_count)
if(header_count LESS 20)
  message(FATAL_ERROR "only ${header_count} headers installed under ${prefix}/include/attnkit")
endif()
foreach(h ${headers})
  file(STRINGS ${prefix}/include/${h} private_includes REGEX "#include [<\"]nlohmann/")
  if(private_includes)
    message(FATAL_ERROR "installed header ${h} includes a build-only dependency: ${private_includes}")
  endif()
  file(WRITE ${WORK_DIR}/header_check.cc "#include <${h}>\n")
  run(${CONSUMER_CXX} -std=c++17 -Wall -Wextra -Werror -fsyntax-only ${consumer_flags} ${cflags}
      ${WORK_DIR}/header_check.cc)
endforeach()
message(STATUS "${header_count} installed headers compile on their own")

# 4. The installed program finds its MPI module (installed under <libdir>/attnkit/) when built
# with MPI, and runs.
if(EXISTS ${prefix}/bin/attnkit)
  execute_process(COMMAND ${prefix}/bin/attnkit --version OUTPUT_VARIABLE version RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "installed attnkit --version failed (${rc}): ${version}")
  endif()
  file(GLOB_RECURSE installed_module ${prefix}/*/attnkit_mpi.so)
  if(EXPECT_MPI_MODULE AND NOT installed_module)
    message(FATAL_ERROR "attnkit was built with MPI but no attnkit_mpi.so was installed under ${prefix}")
  endif()
  if(EXPECT_MPI_MODULE AND NOT version MATCHES "\nMPI: Open MPI")
    message(FATAL_ERROR "the installed attnkit does not find its MPI module ${installed_module}:\n${version}")
  endif()
  message(STATUS "installed attnkit runs; MPI module: ${installed_module}")
endif()
