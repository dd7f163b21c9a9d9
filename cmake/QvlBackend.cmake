# A backend plugin in one call. Included by the root CMakeLists.txt before any backend.
#
#   qvl_add_backend(NAME SOURCES file... [LIBS lib...] [PRIORITY N] [OPTIONS "{ key: value }"]
#                   [NO_CONFORMANCE] [TEST_ONLY])
#
# builds the plugin target qvl-NAME: a MODULE library libqvl-NAME.so written to
# build/backends/NAME/ (where the registry looks for a backend whose plugins.yaml entry has no
# `library:`, wherever the backend's folder is), linking qvl-core and LIBS, exporting only what
# QVL_EXPORT marks (qvl_backend_entry: every other symbol hidden). Unless TEST_ONLY it is
# installed into <prefix>/<libdir>/qvl and listed in the generated plugins.yaml with PRIORITY
# (default 0, higher is tried first) and OPTIONS (a YAML flow map, written as given after
# `options: `; a trailing `# comment` is kept). Unless NO_CONFORMANCE (or tests are off) it
# registers the ctest conformance_NAME in the calling folder: qvl-backend-ops runs every op on
# the plugin against the reference.
# TEST_ONLY: a plugin for tests: built and conformance-tested, neither listed nor installed
# (tests write plugins files of their own naming it by $<TARGET_FILE:qvl-NAME>).
# Flags of one backend only (-mavx2, -ffp-contract=off, include folders) go on target
# qvl-NAME after the call.
#
#   qvl_list_backend(NAME [PRIORITY N] [OPTIONS "{ ... }"])
#
# lists a backend whose build is not qvl_add_backend's (cuda_sm61: nvcc or clang), built here or
# not: an entry that cannot load is skipped at run time.
#
#   qvl_add_conformance(NAME TARGET)
#
# the conformance test alone, for a plugin target built another way. Callable from any folder.
#
#   qvl_backends_finalize()
#
# once, at the end of the root CMakeLists.txt: writes build/plugins.yaml from
# cmake/plugins.yaml.in with the listed backends sorted by priority, highest first (ties in the
# order of the calls), installs it as <prefix>/share/qvl/plugins.yaml, and makes qvl-backend-ops
# depend on every conformance-tested plugin.

set(QVL_BACKEND_CMAKE_DIR ${CMAKE_CURRENT_LIST_DIR})

# The registry's rule for names (core/src/registry.c): they become file names.
function(_qvl_backend_check_name name)
  if(NOT name MATCHES "^[A-Za-z0-9_-]+$")
    message(FATAL_ERROR "qvl: backend name '${name}' may contain only letters, digits, '_' and '-'")
  endif()
endfunction()

function(qvl_list_backend name)
  cmake_parse_arguments(PARSE_ARGV 1 L "" "PRIORITY;OPTIONS" "")
  if(L_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "qvl_list_backend(${name}): unexpected arguments: ${L_UNPARSED_ARGUMENTS}")
  endif()
  _qvl_backend_check_name("${name}")
  if(NOT DEFINED L_PRIORITY)
    set(L_PRIORITY 0)
  elseif(NOT L_PRIORITY MATCHES "^-?[0-9]+$")
    message(FATAL_ERROR "qvl_list_backend(${name}): PRIORITY '${L_PRIORITY}' is not an integer")
  endif()
  # One line, a flow map: anything else would break the YAML of every program's default file.
  if(DEFINED L_OPTIONS AND NOT L_OPTIONS MATCHES "^{[^\n]*}( *#[^\n]*)?$")
    message(FATAL_ERROR "qvl_list_backend(${name}): OPTIONS '${L_OPTIONS}' is not a one-line "
                        "YAML flow map like \"{ threads: 0 }\"")
  endif()
  get_property(listed GLOBAL PROPERTY QVL_LISTED_BACKENDS)
  if(name IN_LIST listed)
    message(FATAL_ERROR "qvl_list_backend(${name}): '${name}' is listed twice")
  endif()
  set_property(GLOBAL APPEND PROPERTY QVL_LISTED_BACKENDS "${name}")
  set_property(GLOBAL PROPERTY QVL_BACKEND_PRIORITY_${name} "${L_PRIORITY}")
  set_property(GLOBAL PROPERTY QVL_BACKEND_OPTIONS_${name} "${L_OPTIONS}")
endfunction()

# qvl_add_conformance(name target [OP op] [ENVIRONMENT VAR=VALUE...]): the suite (or one op of
# it) against the reference, as test conformance_<name>; a backend adds more runs under other
# names with the environment of a variant its default does not take.
function(qvl_add_conformance name target)
  if(NOT QVL_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(PARSE_ARGV 2 C "" "OP" "ENVIRONMENT")
  set(only)
  if(C_OP)
    set(only --op ${C_OP})
  endif()
  # qvl-backend-ops is defined later, in tests/conformance.cmake: add_test resolves the target
  # name and the generator expressions when the build system is generated, after all folders.
  add_test(NAME conformance_${name}
    COMMAND qvl-backend-ops --unavailable-exit 77 ${only}
            $<TARGET_FILE:qvl-reference> $<TARGET_FILE:${target}>)
  set_tests_properties(conformance_${name} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 900)
  if(C_ENVIRONMENT)
    set_tests_properties(conformance_${name} PROPERTIES ENVIRONMENT "${C_ENVIRONMENT}")
  endif()
  set_property(GLOBAL APPEND PROPERTY QVL_CONFORMANCE_TARGETS ${target})
endfunction()

function(qvl_add_backend name)
  cmake_parse_arguments(PARSE_ARGV 1 B "NO_CONFORMANCE;TEST_ONLY" "PRIORITY;OPTIONS" "SOURCES;LIBS")
  if(B_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "qvl_add_backend(${name}): unexpected arguments: ${B_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT B_SOURCES)
    message(FATAL_ERROR "qvl_add_backend(${name}): no SOURCES")
  endif()
  if(B_TEST_ONLY AND (DEFINED B_PRIORITY OR DEFINED B_OPTIONS))
    message(FATAL_ERROR "qvl_add_backend(${name}): PRIORITY and OPTIONS are for plugins.yaml, "
                        "which a TEST_ONLY backend is not in")
  endif()
  _qvl_backend_check_name("${name}")
  set(target qvl-${name})
  add_library(${target} MODULE ${B_SOURCES})
  target_link_libraries(${target} PRIVATE qvl-core ${B_LIBS})
  set_target_properties(${target} PROPERTIES
    OUTPUT_NAME qvl-${name}
    PREFIX lib
    LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/backends/${name}
    C_VISIBILITY_PRESET hidden
    CXX_VISIBILITY_PRESET hidden
    QVL_BACKEND_NAME ${name})
  if(NOT B_TEST_ONLY)
    install(TARGETS ${target} LIBRARY DESTINATION ${QVL_INSTALL_PLUGIN_SUBDIR})
    set(list_args)
    if(DEFINED B_PRIORITY)
      list(APPEND list_args PRIORITY "${B_PRIORITY}")
    endif()
    if(DEFINED B_OPTIONS)
      list(APPEND list_args OPTIONS "${B_OPTIONS}")
    endif()
    qvl_list_backend(${name} ${list_args})
  endif()
  if(NOT B_NO_CONFORMANCE)
    qvl_add_conformance(${name} ${target})
  endif()
endfunction()

# The listed backends as the lines under `backends:`, highest priority first, into out_var.
function(qvl_backends_yaml out_var)
  get_property(left GLOBAL PROPERTY QVL_LISTED_BACKENDS)
  set(text "")
  list(LENGTH left n_left)
  while(n_left GREATER 0)
    # The first of the highest priority left: a stable selection sort (priorities may be
    # negative, which list(SORT) would not order numerically).
    list(GET left 0 best)
    get_property(best_p GLOBAL PROPERTY QVL_BACKEND_PRIORITY_${best})
    foreach(name IN LISTS left)
      get_property(p GLOBAL PROPERTY QVL_BACKEND_PRIORITY_${name})
      if(p GREATER best_p)
        set(best ${name})
        set(best_p ${p})
      endif()
    endforeach()
    list(REMOVE_ITEM left ${best})
    math(EXPR n_left "${n_left} - 1")
    get_property(options GLOBAL PROPERTY QVL_BACKEND_OPTIONS_${best})
    string(APPEND text "  - name: ${best}\n    priority: ${best_p}\n")
    if(NOT options STREQUAL "")
      string(APPEND text "    options: ${options}\n")
    endif()
  endwhile()
  set(${out_var} "${text}" PARENT_SCOPE)
endfunction()

function(qvl_backends_finalize)
  get_property(done GLOBAL PROPERTY QVL_BACKENDS_FINALIZED)
  if(done)
    message(FATAL_ERROR "qvl_backends_finalize() is called once, at the end of the root CMakeLists.txt")
  endif()
  set_property(GLOBAL PROPERTY QVL_BACKENDS_FINALIZED TRUE)
  qvl_backends_yaml(QVL_PLUGINS_YAML_BACKENDS)
  if(QVL_PLUGINS_YAML_BACKENDS STREQUAL "")
    message(FATAL_ERROR "qvl: no backend is listed for plugins.yaml")
  endif()
  string(REGEX REPLACE "\n$" "" QVL_PLUGINS_YAML_BACKENDS "${QVL_PLUGINS_YAML_BACKENDS}")
  configure_file(${QVL_BACKEND_CMAKE_DIR}/plugins.yaml.in ${CMAKE_BINARY_DIR}/plugins.yaml @ONLY)
  install(FILES ${CMAKE_BINARY_DIR}/plugins.yaml DESTINATION ${CMAKE_INSTALL_DATADIR}/qvl)
  get_property(targets GLOBAL PROPERTY QVL_CONFORMANCE_TARGETS)
  list(REMOVE_DUPLICATES targets) # a backend may register several runs
  if(targets AND TARGET qvl-backend-ops)
    add_dependencies(qvl-backend-ops ${targets})
  endif()
endfunction()
