# Sanitizer builds (-DCAM_SANITIZE=address|thread) of the library and of whatever this build compiles and links:
# "address" is ASan + UBSan (UBSan made fatal, so a report fails the program), "thread" is TSan. Checked by
# tests/test_sanitize.py over the SDK test programs (tests/sdk, tests/sdk_dataplane, tests/sdk_executor) and the
# graph timeout/teardown program (tests/sdk_graph_timeout). Included by CamCompilerFlags.cmake (the library, -O1 -g:
# symbolized reports at a usable speed) and by tests/sdk/Sanitize.cmake (the SDK test programs), so both take the
# same flags from this one place.
set(CAM_SANITIZE "" CACHE STRING "Sanitizer build: address (ASan+UBSan), thread (TSan), or empty for none")
set_property(CACHE CAM_SANITIZE PROPERTY STRINGS "" address thread)
if(CAM_SANITIZE STREQUAL "address")
  set(CAM_SANITIZE_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
elseif(CAM_SANITIZE STREQUAL "thread")
  set(CAM_SANITIZE_FLAGS -fsanitize=thread -fno-omit-frame-pointer)
elseif(NOT CAM_SANITIZE STREQUAL "")
  message(FATAL_ERROR "CAM_SANITIZE must be 'address', 'thread' or empty, got '${CAM_SANITIZE}'")
endif()
