# Writes build/generated/di_build_info.cpp at every build with the checkout's commit and dirty flag.
set(DI_GENERATED_DIR ${CMAKE_BINARY_DIR}/generated)
file(MAKE_DIRECTORY ${DI_GENERATED_DIR})
add_custom_target(di_build_info_gen
  BYPRODUCTS ${DI_GENERATED_DIR}/di_build_info.cpp
  COMMAND ${CMAKE_COMMAND}
    -DSOURCE_DIR=${CMAKE_SOURCE_DIR}
    -DOUT=${DI_GENERATED_DIR}/di_build_info.cpp
    -DCUDA_ENABLED=${DI_HAVE_CUDA}
    -DCUDA_ARCHS=${CMAKE_CUDA_ARCHITECTURES}
    -DNVCC_VERSION=${CMAKE_CUDA_COMPILER_VERSION}
    -DCXX_ID=${CMAKE_CXX_COMPILER_ID}-${CMAKE_CXX_COMPILER_VERSION}
    -P ${CMAKE_SOURCE_DIR}/cmake/WriteBuildInfo.cmake
  VERBATIM)
