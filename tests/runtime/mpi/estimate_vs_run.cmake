# Predicts a job's memory with `hoist estimate -n NP --json`, trains it under mpirun on NP ranks,
# and passes when every rank's peak_total in the JSONL end record equals the predicted
# peak_total, place by place. HOIST is the binary, MPIEXEC the launcher, ARGS the job's --set list,
# WORK a scratch directory.
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
separate_arguments(job UNIX_COMMAND "${ARGS}")

execute_process(COMMAND "${HOIST}" estimate -n ${NP} --json ${job}
                WORKING_DIRECTORY "${WORK}" RESULT_VARIABLE rc OUTPUT_VARIABLE estimate
                ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "hoist estimate failed (${rc}):\n${estimate}${err}")
endif()
execute_process(COMMAND "${MPIEXEC}" -np ${NP} "${HOIST}" train ${job}
                        --set "monitor.jsonl.path=log_{rank}.jsonl"
                WORKING_DIRECTORY "${WORK}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the ${NP}-rank run failed (${rc}):\n${out}")
endif()

math(EXPR last "${NP} - 1")
foreach(rank RANGE 0 ${last})
  file(STRINGS "${WORK}/log_${rank}.jsonl" lines)
  list(GET lines -1 record)
  string(JSON event GET "${record}" event)
  if(NOT "${event}" STREQUAL "end")
    message(FATAL_ERROR "rank ${rank}: the log's last line is not the end record: ${record}")
  endif()
  foreach(place device host_pinned host nvme)
    string(JSON measured GET "${record}" peak_total ${place})
    string(JSON predicted GET "${estimate}" peak_total ${place})
    # Every allocation is deterministic, so the estimate is held to the byte (the requirement is
    # 10%): a missing buffer, however small, fails here.
    if(NOT predicted EQUAL measured)
      message(FATAL_ERROR "rank ${rank}, ${place}: predicted ${predicted} bytes, measured "
                          "${measured}")
    endif()
    message(STATUS "rank ${rank} ${place}: predicted ${predicted}, measured ${measured}")
  endforeach()
endforeach()
