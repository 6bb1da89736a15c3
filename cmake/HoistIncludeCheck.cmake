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
  file(STRINGS ${source} includes REGEX "^[ \t]*#[ \t]*include[ \t]*\"runtime/")
  foreach(line IN LISTS includes)
    string(REGEX MATCH "\"runtime/([a-z_]+)/" found "${line}")
    if(found AND NOT CMAKE_MATCH_1 IN_LIST allowed)
      get_filename_component(file ${source} NAME)
      string(STRIP "${line}" line)
      string(APPEND wrong "\n  runtime/${NAME}/${file}: ${line}")
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
