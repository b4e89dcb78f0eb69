# Regenerates ted_git_revision.cpp on every build, touching it only when the revision changes,
# so every CSV row carries the revision of the code that produced it.
set(TED_GIT_REVISION_CPP "${CMAKE_BINARY_DIR}/generated/ted_git_revision.cpp")
add_custom_target(ted_git_revision ALL
  COMMAND ${CMAKE_COMMAND} -DSOURCE_DIR=${CMAKE_SOURCE_DIR} -DOUTPUT=${TED_GIT_REVISION_CPP}
          -P ${CMAKE_CURRENT_LIST_DIR}/WriteGitRevision.cmake
  BYPRODUCTS ${TED_GIT_REVISION_CPP}
  COMMENT "Checking git revision")
