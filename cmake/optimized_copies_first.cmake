# Under the sanitizers the control code and the test programs are compiled at -O0, the modules that move and
# convert bytes at -O1 (CMakeLists.txt, tests/CMakeLists.txt). A template both instantiate out of line
# (std::string's and std::vector's members, nlohmann's lexer and serializer, std::map's tree) is emitted as a
# COMDAT copy in each object, and the linker keeps the first one it meets: a program's own objects come before
# the archives on the link line, so the -O1 modules ran the -O0 copies of every such template in every program
# (perf of tests/tiny/real_configs_test.cc: std::string::_M_data, vector<char>::emplace_back and nlohmann's
# lexer at the top, all from -O0 objects). Linking a program's -O1 modules whole, ahead of its own objects, makes
# theirs the copies kept: TinyRealConfigs.DeepSeekV32AddsAReplicatedIndexerToEveryLayer took 26 s, 14 s after.

# The targets compiled as control code (-O0 under the sanitizers), recorded by shardload_control_code.
define_property(GLOBAL PROPERTY SHARDLOAD_CONTROL_TARGETS BRIEF_DOCS "targets compiled at -O0 under the sanitizers"
                FULL_DOCS "see cmake/optimized_copies_first.cmake")

# The shardload_* static libraries TARGET links, directly or through others.
function(shardload_linked_modules target out)
  set(seen "")
  set(queue ${target})
  while(queue)
    list(POP_FRONT queue current)
    foreach(property LINK_LIBRARIES INTERFACE_LINK_LIBRARIES)
      get_target_property(items ${current} ${property})
      if(NOT items)
        continue()
      endif()
      foreach(item IN LISTS items)
        string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" item "${item}")
        if(item MATCHES "^shardload_" AND TARGET ${item} AND NOT item IN_LIST seen)
          list(APPEND seen ${item})
          list(APPEND queue ${item})
        endif()
      endforeach()
    endforeach()
  endwhile()
  set(${out} ${seen} PARENT_SCOPE)
endfunction()

# Puts TARGET's -O1 modules, whole, ahead of its own objects on its link line (sanitized builds only: elsewhere
# every object is compiled at one level).
function(shardload_link_optimized_copies_first target)
  if(NOT SHARDLOAD_SANITIZE)
    return()
  endif()
  get_property(control GLOBAL PROPERTY SHARDLOAD_CONTROL_TARGETS)
  shardload_linked_modules(${target} modules)
  set(archives "")
  foreach(module IN LISTS modules)
    get_target_property(type ${module} TYPE)
    if(type STREQUAL "STATIC_LIBRARY" AND NOT module IN_LIST control)
      string(APPEND archives " $<TARGET_FILE:${module}>")
    endif()
  endforeach()
  if(archives)
    # LINK_OPTIONS precede the objects on the link line; SHELL: keeps the group as one unit.
    target_link_options(${target} PRIVATE "SHELL:-Wl,--whole-archive${archives} -Wl,--no-whole-archive")
  endif()
endfunction()
