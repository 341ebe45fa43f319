# Builds the Rust library with cargo and stages it as a versioned shared library.
#
# The cdylib's SONAME, libsluice.so.<MAJOR>, comes from cdylib/build.rs, so a
# plain `cargo build` and this build give the same library the same name. Cargo
# runs on every build and decides itself whether anything changed; its target
# directory is private to this CMake build by default.
#
# The staged directory ${SLUICE_STAGE_DIR} holds what gets installed:
#   libsluice.so.X.Y.Z   (the real file, SONAME libsluice.so.X)
#   libsluice.so.X -> libsluice.so.X.Y.Z
#   libsluice.so   -> libsluice.so.X
#   libsluice.a
#
# Defines the imported GLOBAL targets sluice_shared and sluice_static and the
# custom target sluice_cargo that produces them.

find_program(SLUICE_CARGO_EXECUTABLE cargo
  HINTS "$ENV{CARGO_HOME}/bin" "$ENV{HOME}/.cargo/bin"
  DOC "cargo, used to build the Rust library")
if(NOT SLUICE_CARGO_EXECUTABLE)
  message(FATAL_ERROR "sluice: cargo not found; install Rust (https://rustup.rs) or set SLUICE_CARGO_EXECUTABLE")
endif()

set(SLUICE_CARGO_TARGET_DIR "${CMAKE_CURRENT_BINARY_DIR}/cargo" CACHE PATH
  "cargo target directory for the sluice build (private to this build tree by default)")
set(SLUICE_CARGO_ARGS "" CACHE STRING
  "extra cargo arguments, a ;-list (for example --locked;--offline)")

if(NOT CMAKE_SYSTEM_NAME STREQUAL "Linux")
  message(WARNING "sluice: only Linux is built and tested; the library naming below assumes ELF")
endif()

set(SLUICE_STAGE_DIR "${CMAKE_CURRENT_BINARY_DIR}/sluice-lib")
set(SLUICE_SONAME "libsluice.so.${PROJECT_VERSION_MAJOR}")
set(SLUICE_SHARED_REAL "libsluice.so.${PROJECT_VERSION}")
set(_cargo_out "${SLUICE_CARGO_TARGET_DIR}/release")

add_custom_target(sluice_cargo ALL
  COMMAND ${CMAKE_COMMAND} -E env "CARGO_TARGET_DIR=${SLUICE_CARGO_TARGET_DIR}"
          "${SLUICE_CARGO_EXECUTABLE}" build --release --lib
          --manifest-path "${PROJECT_SOURCE_DIR}/Cargo.toml" ${SLUICE_CARGO_ARGS}
  COMMAND ${CMAKE_COMMAND} -E make_directory "${SLUICE_STAGE_DIR}"
  COMMAND ${CMAKE_COMMAND} -E copy_if_different "${_cargo_out}/libsluice.so"
          "${SLUICE_STAGE_DIR}/${SLUICE_SHARED_REAL}"
  COMMAND ${CMAKE_COMMAND} -E create_symlink "${SLUICE_SHARED_REAL}"
          "${SLUICE_STAGE_DIR}/${SLUICE_SONAME}"
  COMMAND ${CMAKE_COMMAND} -E create_symlink "${SLUICE_SONAME}"
          "${SLUICE_STAGE_DIR}/libsluice.so"
  COMMAND ${CMAKE_COMMAND} -E copy_if_different "${_cargo_out}/libsluice.a"
          "${SLUICE_STAGE_DIR}/libsluice.a"
  BYPRODUCTS
    "${SLUICE_STAGE_DIR}/${SLUICE_SHARED_REAL}"
    "${SLUICE_STAGE_DIR}/${SLUICE_SONAME}"
    "${SLUICE_STAGE_DIR}/libsluice.so"
    "${SLUICE_STAGE_DIR}/libsluice.a"
  WORKING_DIRECTORY "${PROJECT_SOURCE_DIR}"
  COMMENT "cargo build --release (sluice, SONAME ${SLUICE_SONAME} from cdylib/build.rs)"
  USES_TERMINAL
  VERBATIM)

# What a static link of the Rust staticlib needs besides libc
# (`cargo rustc -- --print native-static-libs`).
set(SLUICE_STATIC_DEPS Threads::Threads ${CMAKE_DL_LIBS} gcc_s util rt m)
find_package(Threads REQUIRED)

add_library(sluice_shared SHARED IMPORTED GLOBAL)
set_target_properties(sluice_shared PROPERTIES
  IMPORTED_LOCATION "${SLUICE_STAGE_DIR}/${SLUICE_SHARED_REAL}"
  IMPORTED_SONAME "${SLUICE_SONAME}"
  INTERFACE_INCLUDE_DIRECTORIES "${PROJECT_SOURCE_DIR}/include")
add_dependencies(sluice_shared sluice_cargo)

add_library(sluice_static STATIC IMPORTED GLOBAL)
set_target_properties(sluice_static PROPERTIES
  IMPORTED_LOCATION "${SLUICE_STAGE_DIR}/libsluice.a"
  INTERFACE_INCLUDE_DIRECTORIES "${PROJECT_SOURCE_DIR}/include"
  INTERFACE_LINK_LIBRARIES "${SLUICE_STATIC_DEPS}")
add_dependencies(sluice_static sluice_cargo)

unset(_cargo_out)
