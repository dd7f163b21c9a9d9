# qvl serve: the HTTP server subcommand of the qvl program (tools/serve/). Its sources join the
# qvl target defined in qvl.cmake (included before this file: the list is sorted).
# libmicrohttpd comes through pkg-config; its .pc names gnutls as a private requirement, so where
# gnutls' .pc is missing (the GPU machine's unpacked packages) the header and library are looked
# up directly instead.
pkg_check_modules(QVL_MHD QUIET IMPORTED_TARGET libmicrohttpd)
if(QVL_MHD_FOUND)
  set(QVL_MHD_TARGET PkgConfig::QVL_MHD)
else()
  pkg_get_variable(QVL_MHD_PC_INCLUDEDIR libmicrohttpd includedir)
  pkg_get_variable(QVL_MHD_PC_LIBDIR libmicrohttpd libdir)
  find_path(QVL_MHD_INCLUDE_DIR microhttpd.h HINTS ${QVL_MHD_PC_INCLUDEDIR})
  find_library(QVL_MHD_LIBRARY microhttpd HINTS ${QVL_MHD_PC_LIBDIR})
  if(NOT QVL_MHD_INCLUDE_DIR OR NOT QVL_MHD_LIBRARY)
    message(FATAL_ERROR "qvl serve needs libmicrohttpd (Debian: libmicrohttpd-dev; scripts/install-deps.sh)")
  endif()
  add_library(qvl_mhd INTERFACE)
  target_include_directories(qvl_mhd INTERFACE ${QVL_MHD_INCLUDE_DIR})
  target_link_libraries(qvl_mhd INTERFACE ${QVL_MHD_LIBRARY})
  set(QVL_MHD_TARGET qvl_mhd)
endif()
pkg_check_modules(QVL_SERVE_CJSON REQUIRED IMPORTED_TARGET libcjson)

set(QVL_SERVE_DIR ${CMAKE_CURRENT_LIST_DIR}/serve)
target_sources(qvl PRIVATE
  ${QVL_SERVE_DIR}/serve_main.c
  ${QVL_SERVE_DIR}/serve_http.c
  ${QVL_SERVE_DIR}/serve_guard.c
  ${QVL_SERVE_DIR}/serve_host.c
  ${QVL_SERVE_DIR}/serve_chat.c
  ${QVL_SERVE_DIR}/serve_sse.c
  ${QVL_SERVE_DIR}/serve_oai.c
  ${QVL_SERVE_DIR}/serve_request.c
  ${QVL_SERVE_DIR}/serve_structured.c
  ${QVL_SERVE_DIR}/serve_logprobs.c
  ${QVL_SERVE_DIR}/serve_tools.c
  ${QVL_SERVE_DIR}/serve_toolcalls.c
  ${QVL_SERVE_DIR}/serve_pyjson.c
  ${QVL_SERVE_DIR}/serve_json.c
  ${QVL_SERVE_DIR}/serve_image.c
  ${QVL_SERVE_DIR}/serve_video.c
  ${QVL_SERVE_DIR}/serve_metrics.c
  ${QVL_SERVE_DIR}/serve_auth.c
  ${QVL_SERVE_DIR}/serve_budget.c
  ${QVL_SERVE_DIR}/serve_webui.c
  ${QVL_SERVE_DIR}/serve_fields.c
  ${QVL_SERVE_DIR}/serve_cors.c
  ${QVL_SERVE_DIR}/serve_props.c
  ${QVL_SERVE_DIR}/serve_tokenize.c)

# The chat page at GET / (tools/serve/webui/index.html) becomes a C array at build time, so the
# binary serves it with no file beside it.
set(QVL_WEBUI_HTML ${QVL_SERVE_DIR}/webui/index.html)
set(QVL_WEBUI_C ${CMAKE_CURRENT_BINARY_DIR}/serve_webui_page.c)
add_custom_command(OUTPUT ${QVL_WEBUI_C}
  COMMAND ${CMAKE_COMMAND} -DIN=${QVL_WEBUI_HTML} -DOUT=${QVL_WEBUI_C} -DNAME=serve_webui_page
          -P ${QVL_SERVE_DIR}/webui/embed.cmake
  DEPENDS ${QVL_WEBUI_HTML} ${QVL_SERVE_DIR}/webui/embed.cmake
  COMMENT "Embedding the web chat page (tools/serve/webui/index.html)"
  VERBATIM)
target_sources(qvl PRIVATE ${QVL_WEBUI_C})
target_include_directories(qvl PRIVATE ${QVL_SERVE_DIR} ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(qvl PRIVATE ${QVL_MHD_TARGET} PkgConfig::QVL_SERVE_CJSON Threads::Threads)
