# Script mode: records git commit and dirty state; rewrites the file only when it changes.
execute_process(COMMAND git -C ${SOURCE_DIR} rev-parse HEAD
  OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  set(commit "unknown")
endif()
execute_process(COMMAND git -C ${SOURCE_DIR} status --porcelain --untracked-files=no
  OUTPUT_VARIABLE status OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(status STREQUAL "")
  set(dirty "false")
else()
  set(dirty "true")
endif()
# A tree copied to another machine without its history (the GPU machine gets the working tree and a
# stale .git) says where it came from: DI_SOURCE_COMMIT and DI_SOURCE_DIRTY, read on the machine
# that sent it, override what git reports here.
if(DEFINED ENV{DI_SOURCE_COMMIT} AND NOT "$ENV{DI_SOURCE_COMMIT}" STREQUAL "")
  set(commit "$ENV{DI_SOURCE_COMMIT}")
  if("$ENV{DI_SOURCE_DIRTY}" STREQUAL "true")
    set(dirty "true")
  else()
    set(dirty "false")
  endif()
endif()
set(content "// Generated at build time; do not edit.
#include \"core/provenance.h\"
namespace di {
const BuildInfo& build_info() {
  static const BuildInfo info{\"${commit}\", ${dirty}, ${CUDA_ENABLED}, \"${CUDA_ARCHS}\", \"${NVCC_VERSION}\", \"${CXX_ID}\"};
  return info;
}
}  // namespace di
")
string(REPLACE "ON," "true," content "${content}")
string(REPLACE "OFF," "false," content "${content}")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
else()
  set(old "")
endif()
if(NOT old STREQUAL content)
  file(WRITE ${OUT} "${content}")
endif()
