# Installs the build tree into a private prefix, then configures, builds and
# runs tests/consumer against that prefix only (find_package via
# CMAKE_PREFIX_PATH). Usage:
#   cmake -DSOURCE_DIR=<repo> -DBINARY_DIR=<build> -DGENERATOR=<generator> -P run_consumer_test.cmake
foreach(variable SOURCE_DIR BINARY_DIR GENERATOR)
  if(NOT DEFINED ${variable} OR "${${variable}}" STREQUAL "")
    message(FATAL_ERROR "run_consumer_test.cmake: -D${variable}=... is required")
  endif()
endforeach()

set(prefix "${BINARY_DIR}/consumer-install")
set(consumer_build "${BINARY_DIR}/consumer-build")
# Start clean so that a stale install or cache cannot hide a broken one.
file(REMOVE_RECURSE "${prefix}" "${consumer_build}")

function(run_step name)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "consumer test: ${name} failed (${result}):\n${output}")
  endif()
  message(STATUS "consumer test: ${name}: ok")
endfunction()

run_step(install "${CMAKE_COMMAND}" --install "${BINARY_DIR}" --prefix "${prefix}")
run_step(configure "${CMAKE_COMMAND}" -S "${SOURCE_DIR}/tests/consumer" -B "${consumer_build}" -G "${GENERATOR}"
         -DCMAKE_BUILD_TYPE=Release "-DCMAKE_PREFIX_PATH=${prefix}")
run_step(build "${CMAKE_COMMAND}" --build "${consumer_build}" --config Release)
# Single-config generators put the program in the build folder, multi-config ones in Release/.
find_program(consumer NAMES sparse_decode_consumer PATHS "${consumer_build}" "${consumer_build}/Release"
             NO_DEFAULT_PATH NO_CACHE REQUIRED)
run_step(run "${consumer}")
