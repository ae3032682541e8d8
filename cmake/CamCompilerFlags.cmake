# Flags for the twin build. No FMA contraction: fp32 results must follow the written operation order, as the
# numerics contract (docs/numerics.md) and the goldens assume.
add_compile_options(-ffp-contract=off -Wall -Wextra -Wno-unused-parameter)

# Sanitizer builds (-DCAM_SANITIZE=address|thread) of the library and of whatever this build compiles and links:
# "address" is ASan + UBSan (UBSan made fatal, so a report fails the program), "thread" is TSan. Checked by
# tests/test_sanitize.py over the SDK test programs (tests/sdk, tests/sdk_dataplane, tests/sdk_executor) and the
# graph timeout/teardown program (tests/sdk_graph_timeout). -O1 -g: symbolized reports at a usable speed.
set(CAM_SANITIZE "" CACHE STRING "Sanitizer build: address (ASan+UBSan), thread (TSan), or empty for none")
set_property(CACHE CAM_SANITIZE PROPERTY STRINGS "" address thread)
if(CAM_SANITIZE STREQUAL "address")
  set(CAM_SANITIZE_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
elseif(CAM_SANITIZE STREQUAL "thread")
  set(CAM_SANITIZE_FLAGS -fsanitize=thread -fno-omit-frame-pointer)
elseif(NOT CAM_SANITIZE STREQUAL "")
  message(FATAL_ERROR "CAM_SANITIZE must be 'address', 'thread' or empty, got '${CAM_SANITIZE}'")
endif()
if(CAM_SANITIZE_FLAGS)
  add_compile_options(${CAM_SANITIZE_FLAGS} -O1 -g)
  add_link_options(${CAM_SANITIZE_FLAGS})
endif()
