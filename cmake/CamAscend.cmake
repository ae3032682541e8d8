# CAM_ASCEND=ON: the toolkit the kernels and the Ascend backend are built with.
#
# Kernels are compiled by CANN's bisheng, one command per kernel source, as Ascend C (-x asc) for the SoCs in scope
# (--npu-arch=dav-2201: Atlas A2 and A3). That is host and device compiled together, which registers each kernel
# under its host-side symbol: the function handle the data-plane kernels are launched by (aclrtGetFuncBySymbol, so
# the launch can carry batch scheduling mode; kernels/common/launch.h, docs/ascend.md §6) comes from this build. The Ascend C headers (kernel_operator.h) come first on the include path
# and the twin's include directory never appears: a kernel must not compile against the twin on this path.
# Where the toolkit ships its Ascend C CMake module (ascendc_kernel_cmake/ascendc.cmake, with ascendc_library), that
# module builds the kernels for SOC_VERSION; otherwise cam's own custom commands do, one bisheng call per kernel.
# Both paths are checked with stand-ins where no toolkit exists (tests/test_ascend_build.py).

set(CAM_ASCEND_HOME "$ENV{ASCEND_HOME_PATH}" CACHE PATH "CANN toolkit root (set_env.sh exports ASCEND_HOME_PATH)")
if(NOT CAM_ASCEND_HOME AND DEFINED ENV{ASCEND_TOOLKIT_HOME})
  set(CAM_ASCEND_HOME "$ENV{ASCEND_TOOLKIT_HOME}" CACHE PATH "" FORCE)
endif()
set(CAM_NPU_ARCH "dav-2201" CACHE STRING "bisheng --npu-arch (dav-2201: Atlas A2 / A3)")
# The kernels rely on bisheng's automatic sync between the scalar unit and MTE2 / MTE3 / V for UB (LocalTensor)
# dependencies; every other pipe pair is ordered in the source (flags, barriers, TQue hand-offs). Passed explicitly,
# never assumed from a project template's default (BiSheng compiler guide, "支持自动同步" / "Automatic
# Synchronization": option --cce-auto-sync). The twin's table of automatic syncs (kernels/twin/src/pipes.cpp,
# docs/twin.md "Pipe ordering") holds exactly what this option inserts; tests/test_ascend_build.py checks the
# option here against kAutoSyncCompilerOption in kernels/twin/include/twin/pipes.h.
set(CAM_BISHENG_AUTO_SYNC "--cce-auto-sync")
set(CAM_SOC_VERSION "Ascend910B1" CACHE STRING "SoC for CANN's ascendc module (any A2 Ascend910B* / A3 Ascend910_93*)")
set(CAM_ASCENDC_CMAKE_DIR "" CACHE PATH "CANN's ascendc_kernel_cmake directory (found under the toolkit if empty)")
if(NOT CAM_ASCENDC_CMAKE_DIR)
  foreach(dir ${CAM_ASCEND_HOME}/compiler/tikcpp/ascendc_kernel_cmake ${CAM_ASCEND_HOME}/tools/tikcpp/ascendc_kernel_cmake)
    if(EXISTS ${dir}/ascendc.cmake)
      set(CAM_ASCENDC_CMAKE_DIR ${dir})
      break()
    endif()
  endforeach()
endif()

find_program(CAM_BISHENG bisheng HINTS ${CAM_ASCEND_HOME}/compiler/ccec_compiler/bin ${CAM_ASCEND_HOME}/bin)
find_path(CAM_ASCENDC_INCLUDE_DIR kernel_operator.h NO_DEFAULT_PATH
  HINTS ${CAM_ASCEND_HOME}/compiler/tikcpp/tikcfw ${CAM_ASCEND_HOME}/include/ascendc)
if(NOT CAM_BISHENG OR NOT CAM_ASCEND_HOME OR NOT CAM_ASCENDC_INCLUDE_DIR)
  message(FATAL_ERROR "CAM_ASCEND=ON needs a CANN toolkit (bisheng and the Ascend C headers under "
                      "ASCEND_HOME_PATH='${CAM_ASCEND_HOME}'): source the toolkit's set_env.sh and reconfigure, "
                      "or configure without CAM_ASCEND for the default twin build.")
endif()

# The Ascend C header tree: kernel_operator.h's directory, then its impl/ and interface/ where the toolkit has them.
set(CAM_ASCENDC_INCLUDE_DIRS ${CAM_ASCENDC_INCLUDE_DIR})
foreach(sub impl interface)
  if(IS_DIRECTORY ${CAM_ASCENDC_INCLUDE_DIR}/${sub})
    list(APPEND CAM_ASCENDC_INCLUDE_DIRS ${CAM_ASCENDC_INCLUDE_DIR}/${sub})
  endif()
endforeach()
# Host side (backend_ascend.cpp, the aclnn accessors): acl/, aclnn/ and opdev/ under the toolkit's include/.
set(CAM_CANN_INCLUDE_DIRS ${CAM_ASCEND_HOME}/include ${CAM_ASCEND_HOME}/include/aclnn)

# The kernels as one static library `target`: through CANN's ascendc module where present, else one bisheng call
# per kernel source.
function(cam_add_bisheng_kernels target kernel_root)
  if(CAM_ASCENDC_CMAKE_DIR)
    message(STATUS "cam: kernels built by CANN's ascendc module (${CAM_ASCENDC_CMAKE_DIR}) for ${CAM_SOC_VERSION}")
    set(SOC_VERSION ${CAM_SOC_VERSION})
    set(ASCEND_CANN_PACKAGE_PATH ${CAM_ASCEND_HOME})
    include(${CAM_ASCENDC_CMAKE_DIR}/ascendc.cmake)
    ascendc_library(${target} STATIC ${ARGN})
    ascendc_compile_options(${target} PRIVATE ${CAM_BISHENG_AUTO_SYNC})
    if(CMAKE_BUILD_TYPE MATCHES "^(Release|RelWithDebInfo|MinSizeRel)$")
      ascendc_compile_definitions(${target} PRIVATE NDEBUG)
    endif()
    # Only the kernels' own root: the module supplies the Ascend C headers, and the twin's never appear.
    target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${kernel_root}>)
    return()
  endif()
  cam_add_bisheng_commands(${target} ${kernel_root} ${ARGN})
endfunction()

# One bisheng call per kernel source into an object of `target` (a static library of those objects).
function(cam_add_bisheng_commands target kernel_root)
  # Every kernel header, as a dependency of every kernel object (no depfile from bisheng assumed).
  file(GLOB_RECURSE kernel_headers CONFIGURE_DEPENDS ${kernel_root}/*.h)
  list(FILTER kernel_headers EXCLUDE REGEX "/twin/")
  set(objects)
  set(include_flags)
  foreach(dir ${CAM_ASCENDC_INCLUDE_DIRS} ${kernel_root})
    list(APPEND include_flags -I${dir})
  endforeach()
  set(defines)
  if(CMAKE_BUILD_TYPE MATCHES "^(Release|RelWithDebInfo|MinSizeRel)$")
    list(APPEND defines -DNDEBUG)
  endif()
  foreach(src ${ARGN})
    file(RELATIVE_PATH rel ${kernel_root} ${src})
    set(obj ${CMAKE_CURRENT_BINARY_DIR}/bisheng/${rel}.o)
    get_filename_component(obj_dir ${obj} DIRECTORY)
    add_custom_command(
      OUTPUT ${obj}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${obj_dir}
      COMMAND ${CAM_BISHENG} -x asc --npu-arch=${CAM_NPU_ARCH} ${CAM_BISHENG_AUTO_SYNC} -std=c++${CMAKE_CXX_STANDARD} -O2 -fPIC ${defines}
              ${include_flags} -c ${src} -o ${obj}
      DEPENDS ${src} ${kernel_headers}
      COMMENT "bisheng ${rel}"
      VERBATIM)
    list(APPEND objects ${obj})
  endforeach()
  set_source_files_properties(${objects} PROPERTIES EXTERNAL_OBJECT TRUE GENERATED TRUE)
  add_library(${target} STATIC ${objects})
  set_target_properties(${target} PROPERTIES LINKER_LANGUAGE CXX)
  target_include_directories(${target} INTERFACE $<BUILD_INTERFACE:${kernel_root}>)
endfunction()
