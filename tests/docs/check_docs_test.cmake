# Builds a small repository whose README breaks each rule of scripts/check_docs.py once, and
# expects both checks to fail naming each broken line; then the same README, repaired, passes.
file(REMOVE_RECURSE ${WORK})
file(WRITE ${WORK}/src/core/real.cpp "int x;\n")
file(WRITE ${WORK}/examples/prog.cpp "int main() {}\n")
file(WRITE ${WORK}/docs/img/plot.png "")
# build/tools holds one program, so a missing one there is a broken path (a build directory with
# no program at all is one the build configured and built nothing in, e.g. with CUDA off).
file(WRITE ${WORK}/build/tools/real_tool "#!/bin/sh\n")
file(CHMOD ${WORK}/build/tools/real_tool PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE)
set(bad "# README
A real file `src/core/real.cpp`, a missing one `src/core/gone.cpp`, a missing program `build/tools/nothing`.
![plot](docs/img/missing.png) and a path out of the clone, `../shared/data/x.csv`.
Output with the writer's machine in it: /home/alice/edp/build/tools/real_tool.

<!-- file: examples/prog.cpp -->
```cpp
int main() { return 1; }
```

<!-- runnable -->
```sh
echo fine
```

<!-- runnable -->
```sh
ls src/core/gone.cpp
```
")
file(WRITE ${WORK}/README.md "${bad}")
function(check what want_rc)
  execute_process(COMMAND ${PYTHON} ${SCRIPT} ${what} --root ${WORK} --build ${WORK}/build
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${what}: exit ${rc}\n${out}${err}")
  if(NOT rc EQUAL want_rc)
    message(FATAL_ERROR "check_docs.py ${what}: exit ${rc}, expected ${want_rc}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()
# Every line given must be in the last check's output; all that are missing are named at once.
function(expect_reported what)
  set(missing "")
  foreach(want ${ARGN})
    string(FIND "${out}" "${want}" at)
    if(at EQUAL -1)
      list(APPEND missing "'${want}'")
    endif()
  endforeach()
  if(missing)
    message(FATAL_ERROR "${what}: missing from the report: ${missing}")
  endif()
endfunction()
check(paths 1)
expect_reported(paths "README.md:2: src/core/gone.cpp does not exist"
  "README.md:2: build/tools/nothing is not in the build"
  "README.md:3: link docs/img/missing.png: docs/img/missing.png does not exist"
  "README.md:3: climbs out of the repository (a clone has no ../shared/data/x.csv)"
  "README.md:4: a path of the machine that wrote it (/home/alice/edp/build/tools/real_tool.)"
  "README.md:8: the block is not examples/prog.cpp")
string(FIND "${out}" "real.cpp" at)
if(NOT at EQUAL -1)
  message(FATAL_ERROR "paths: an existing file was reported")
endif()
check(commands 1)
expect_reported(commands "README.md:12: exit 0" "README.md:17: the block failed (exit 2)" "gone.cpp")

# Repaired, both pass.
string(REPLACE "a missing one `src/core/gone.cpp`, a missing program `build/tools/nothing`" "nothing else" good "${bad}")
string(REPLACE "docs/img/missing.png) and a path out of the clone, `../shared/data/x.csv`." "docs/img/plot.png)." good "${good}")
string(REPLACE "int main() { return 1; }" "int main() {}" good "${good}")
string(REPLACE "/home/alice/edp/build/tools/real_tool" "build/tools/real_tool" good "${good}")
string(REPLACE "ls src/core/gone.cpp" "ls src/core/real.cpp" good "${good}")
file(WRITE ${WORK}/README.md "${good}")
check(paths 0)
check(commands 0)
