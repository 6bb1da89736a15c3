# Trains one job alone and under mpirun on NP ranks at ZeRO STAGE, and passes when every step's
# loss in the two JSONL logs agrees within a relative 1e-5 (and the loss fell, so the runs
# learned something). HOIST is the binary, MPIEXEC the launcher, ARGS the job's --set list,
# WORK a scratch directory. MANY_ARGS, when set, are added to the multi-rank run only (e.g. an
# offload setting; "%WORK%" in them becomes WORK), and then the directory WORK/nvme, which they may
# point nvme_path at, must be empty again when the run has ended.
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
file(MAKE_DIRECTORY "${WORK}/nvme")
separate_arguments(job UNIX_COMMAND "${ARGS}")
set(many_extra "")
if(DEFINED MANY_ARGS)
  string(REPLACE "%WORK%" "${WORK}" many_args "${MANY_ARGS}")
  separate_arguments(many_extra UNIX_COMMAND "${many_args}")
endif()

execute_process(COMMAND "${HOIST}" train ${job} --set monitor.jsonl.path=one.jsonl
                WORKING_DIRECTORY "${WORK}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the single-rank run failed (${rc}):\n${out}")
endif()
execute_process(COMMAND "${MPIEXEC}" -np ${NP} "${HOIST}" train ${job}
                        --set zero_optimization.stage=${STAGE} --set monitor.jsonl.path=many.jsonl
                        ${many_extra}
                WORKING_DIRECTORY "${WORK}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the ${NP}-rank run failed (${rc}):\n${out}")
endif()

function(read_losses file out_var)
  file(STRINGS "${WORK}/${file}" lines)
  set(losses "")
  foreach(line IN LISTS lines)
    string(JSON event ERROR_VARIABLE no_event GET "${line}" event)
    if(no_event)
      string(JSON loss GET "${line}" loss)
      list(APPEND losses "${loss}")
    endif()
  endforeach()
  set(${out_var} "${losses}" PARENT_SCOPE)
endfunction()

file(GLOB left "${WORK}/nvme/*")
if(left)
  message(FATAL_ERROR "scratch files left behind after the run: ${left}")
endif()

read_losses(one.jsonl one)
read_losses(many.jsonl many)
list(LENGTH one steps)
list(LENGTH many steps_many)
if(steps EQUAL 0 OR NOT steps EQUAL steps_many)
  message(FATAL_ERROR "the logs have ${steps} and ${steps_many} steps")
endif()
math(EXPR last "${steps} - 1")
foreach(i RANGE ${last})
  list(GET one ${i} a)
  list(GET many ${i} b)
  # CMake has no floating point: compare in millionths of the loss through a tiny program.
  execute_process(COMMAND awk "BEGIN { d = (${a}) - (${b}); if (d < 0) d = -d; exit !(d <= 1e-5 * (${a})) }"
                  RESULT_VARIABLE close)
  if(NOT close EQUAL 0)
    message(FATAL_ERROR "step ${i}: loss ${b} on ${NP} ranks (stage ${STAGE}) vs ${a} on one rank")
  endif()
endforeach()
list(GET one 0 first)
list(GET one ${last} final)
execute_process(COMMAND awk "BEGIN { exit !((${final}) < (${first}) - 0.3) }" RESULT_VARIABLE fell)
if(NOT fell EQUAL 0)
  message(FATAL_ERROR "the loss did not fall (${first} -> ${final}); the comparison proves nothing")
endif()
message("${steps} steps: ${NP} ranks at stage ${STAGE} ${MANY_ARGS} match one rank (final loss ${final})")
