# Writes the git revision into generated/git_revision.cpp on every build (a script target, so a
# binary built after a commit reports that commit, not the one its build folder was configured
# at). "+dirty" when tracked files differ from HEAD. configure_file leaves the file untouched when
# the revision did not change, so nothing recompiles then.
#   cmake -DSRC=<git_revision.cpp.in> -DDST=<generated file> -DROOT=<source dir> -P git_revision.cmake
execute_process(COMMAND git rev-parse --short=12 HEAD
                WORKING_DIRECTORY ${ROOT}
                OUTPUT_VARIABLE SPARROW_GIT_REVISION OUTPUT_STRIP_TRAILING_WHITESPACE
                ERROR_QUIET)
if(NOT SPARROW_GIT_REVISION)
  set(SPARROW_GIT_REVISION "unknown")
else()
  execute_process(COMMAND git diff --quiet HEAD --
                  WORKING_DIRECTORY ${ROOT}
                  RESULT_VARIABLE dirty ERROR_QUIET)
  if(dirty EQUAL 1)
    set(SPARROW_GIT_REVISION "${SPARROW_GIT_REVISION}+dirty")
  endif()
endif()
configure_file(${SRC} ${DST} @ONLY)
