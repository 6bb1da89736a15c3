# Run by hoist_runtime_library (runtime/CMakeLists.txt) as a build step of each runtime library:
# every `#include "runtime/<folder>/..."` in FOLDER's sources must name FOLDER itself or one of
# ALLOWED (the folders of the libraries it depends on, comma-separated), so that an include
# against the direction of the layers fails the build, naming the file and the line.
#   cmake -DFOLDER=<abs dir> -DNAME=<folder> -DALLOWED=a,b -DSTAMP=<file> -P HoistIncludeCheck.cmake
cmake_minimum_required(VERSION 3.25)
string(REPLACE "," ";" allowed "${ALLOWED}")
list(APPEND allowed ${NAME})
file(GLOB sources ${FOLDER}/*.h ${FOLDER}/*.cc ${FOLDER}/*.inc)
set(wrong "")
foreach(source IN LISTS sources)
  get_filename_component(file ${source} NAME)
  # Every line, so that the error names the line. Brackets would join list elements (CMake reads
  # "[...]" as one) and semicolons would split them: neither is in an include line, so both go.
  file(READ ${source} text)
  string(REGEX REPLACE "[][;]" " " text "${text}")
  string(REPLACE "\n" ";" lines "${text}")
  set(number 0)
  foreach(line IN LISTS lines)
    math(EXPR number "${number} + 1")
    if(NOT line MATCHES "^[ \t]*#[ \t]*include[ \t]*[<\"]runtime/([a-z_]+)/")
      continue()
    endif()
    if(NOT CMAKE_MATCH_1 IN_LIST allowed)
      string(STRIP "${line}" line)
      string(APPEND wrong "\n  runtime/${NAME}/${file}:${number}: ${line}")
    endif()
  endforeach()
endforeach()
if(wrong)
  string(REPLACE ";" ", " allowed_text "${allowed}")
  message(FATAL_ERROR "runtime/${NAME} may include runtime/{${allowed_text}} only (the libraries "
                      "below it, runtime/CMakeLists.txt); these go against the layers:${wrong}\n"
                      "Move what both sides need down into the lower library, or move the file up.")
endif()
file(WRITE ${STAMP} "${ALLOWED}\n")
