# Per-feature probe of the CANN headers an Ascend build compiles against (CANN's API grows between releases: the
# torch-npu 2.8.0 headers lack the launch configuration, 2.6.0.post5's lack device-memory IPC; docs/ascend.md §2).
# Each cmake/cann_features/<NAME>.cpp is compiled (never linked: no CANN library is needed to configure) against
# the given include directories; cam_cann_features_header() writes <NAME> = 1 or 0 for every probe into a header
# from cam_cann_features.h.in. tests/test_ascend_headers.py runs the same probe sources against each header set.
set(CAM_CANN_FEATURES_DIR ${CMAKE_CURRENT_LIST_DIR}/cann_features)

function(cam_cann_features_header out_header)
  set(include_dirs ${ARGN})
  file(GLOB probes CONFIGURE_DEPENDS ${CAM_CANN_FEATURES_DIR}/*.cpp)
  file(STRINGS ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/cam_cann_features.h.in listed REGEX "^#cmakedefine01 ")
  list(LENGTH probes nprobes)
  list(LENGTH listed nlisted)
  if(NOT nprobes EQUAL nlisted)
    message(FATAL_ERROR "cam: cmake/cann_features/ has ${nprobes} probes, cam_cann_features.h.in lists ${nlisted}")
  endif()
  set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)
  foreach(probe ${probes})
    get_filename_component(name ${probe} NAME_WE)
    try_compile(found ${CMAKE_BINARY_DIR}/cam_cann_features/${name}
      SOURCES ${probe}
      CMAKE_FLAGS "-DINCLUDE_DIRECTORIES=${include_dirs}"
      CXX_STANDARD 17
      OUTPUT_VARIABLE log)
    if(found)
      set(${name} 1)
    else()
      set(${name} 0)
    endif()
    message(STATUS "cam: CANN headers: ${name} = ${${name}}")
  endforeach()
  configure_file(${CMAKE_CURRENT_FUNCTION_LIST_DIR}/cam_cann_features.h.in ${out_header} @ONLY)
endfunction()
