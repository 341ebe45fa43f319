# sluice_strict_warnings(<target>...): the warning set every sluice C/C++ test is
# built with; warnings are errors, in sluice.h and the C++ headers as well.
function(sluice_strict_warnings)
  foreach(_t IN LISTS ARGN)
    # Check sluice.h itself too: its include directory comes from an imported
    # target, which CMake would otherwise pass with -isystem (silencing it).
    set_target_properties(${_t} PROPERTIES NO_SYSTEM_FROM_IMPORTED ON)
    if(MSVC)
      target_compile_options(${_t} PRIVATE /W4 /WX)
    else()
      target_compile_options(${_t} PRIVATE -Wall -Wextra -Werror -pedantic
        -Wshadow -Wconversion -Wsign-conversion)
    endif()
  endforeach()
endfunction()
