# Sanitizer flags for the SDK test programs: the library's own (cmake/CamSanitize.cmake), -DCAM_SANITIZE=address
# (ASan + UBSan, UBSan fatal) or thread (TSan).
include(${CMAKE_CURRENT_LIST_DIR}/../../cmake/CamSanitize.cmake)
find_package(Threads REQUIRED)
if(CAM_SANITIZE_FLAGS)
  add_compile_options(${CAM_SANITIZE_FLAGS} -g)
  add_link_options(${CAM_SANITIZE_FLAGS})
endif()
