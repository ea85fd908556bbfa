# Installs the build tree into a private prefix, moves the prefix elsewhere
# and runs the installed sparse-decode from outside the build tree: the
# program must find libsparse_decode.so in the prefix through its own run
# path. Usage:
#   cmake -DBINARY_DIR=<build> -DBINDIR=<bin> -P run_installed.cmake
foreach(variable BINARY_DIR BINDIR)
  if(NOT DEFINED ${variable} OR "${${variable}}" STREQUAL "")
    message(FATAL_ERROR "run_installed.cmake: -D${variable}=... is required")
  endif()
endforeach()

set(prefix "${BINARY_DIR}/cli-install")
set(moved "${BINARY_DIR}/cli-install-moved")
file(REMOVE_RECURSE "${prefix}" "${moved}")
if(DEFINED ENV{TMPDIR} AND IS_DIRECTORY "$ENV{TMPDIR}")
  set(outside "$ENV{TMPDIR}")
else()
  set(outside "/tmp")
endif()

function(run_step name)
  execute_process(COMMAND ${ARGN} WORKING_DIRECTORY "${outside}" RESULT_VARIABLE result OUTPUT_VARIABLE output
                  ERROR_VARIABLE output)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "installed program: ${name} failed (${result}):\n${output}")
  endif()
  message(STATUS "installed program: ${name}: ok")
  set(output "${output}" PARENT_SCOPE)
endfunction()

run_step(install "${CMAKE_COMMAND}" --install "${BINARY_DIR}" --prefix "${prefix}")
file(RENAME "${prefix}" "${moved}")
set(program "${moved}/${BINDIR}/sparse-decode")
# No library path from the environment: only the program's run path counts.
set(run "${CMAKE_COMMAND}" -E env --unset=LD_LIBRARY_PATH "${program}")

run_step(help ${run} --help)
if(NOT output MATCHES "usage: sparse-decode")
  message(FATAL_ERROR "installed program: --help printed no usage:\n${output}")
endif()
run_step(demo ${run} demo --cpu --tokens 6 --width 128)

file(GET_RUNTIME_DEPENDENCIES EXECUTABLES "${program}" RESOLVED_DEPENDENCIES_VAR resolved
     UNRESOLVED_DEPENDENCIES_VAR unresolved PRE_INCLUDE_REGEXES "sparse_decode" PRE_EXCLUDE_REGEXES ".*")
list(FILTER resolved INCLUDE REGEX "libsparse_decode")
string(FIND "${resolved}" "${moved}/" at)
if(NOT at EQUAL 0)
  message(FATAL_ERROR "installed program: libsparse_decode resolves to '${resolved}', not inside ${moved} "
                      "(unresolved: ${unresolved})")
endif()
message(STATUS "installed program: libsparse_decode from ${resolved}")
