# cmake -DEXE=<program> -DARGS=<arg> -DEXPECT=<regex> -P expect_abort.cmake
# Passes when the program exits abnormally (abort) and its stderr matches EXPECT.
execute_process(COMMAND "${EXE}" ${ARGS}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0 OR out MATCHES "NOT ABORTED")
  message(FATAL_ERROR "expected an abort, got rc=${rc}\nstdout: ${out}\nstderr: ${err}")
endif()
if(NOT err MATCHES "${EXPECT}")
  message(FATAL_ERROR "stderr does not match '${EXPECT}':\n${err}")
endif()
message(STATUS "aborted as expected (${rc}): ${err}")
