# Flags for the twin build. No FMA contraction: fp32 results must follow the written operation order, as the
# numerics contract (docs/numerics.md) and the goldens assume.
add_compile_options(-ffp-contract=off -Wall -Wextra -Wno-unused-parameter)

include(${CMAKE_CURRENT_LIST_DIR}/CamSanitize.cmake)
if(CAM_SANITIZE_FLAGS)
  add_compile_options(${CAM_SANITIZE_FLAGS} -O1 -g)
  add_link_options(${CAM_SANITIZE_FLAGS})
endif()
