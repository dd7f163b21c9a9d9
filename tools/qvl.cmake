# qvl: run, chat, tokenize, mkmodel, quantize. The version line (qvl --version) carries the git commit
# seen at configure time and the compiler.
find_package(Threads REQUIRED)
# Line editing and history in qvl chat: libedit (BSD-licensed, unlike GNU readline's GPL).
pkg_check_modules(QVL_LIBEDIT QUIET IMPORTED_TARGET libedit)
if(NOT QVL_LIBEDIT_FOUND)
  message(FATAL_ERROR "qvl chat needs libedit (Debian: libedit-dev; scripts/install-deps.sh)")
endif()
find_package(Git QUIET)
set(QVL_GIT_COMMIT "unknown")
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} -C ${CMAKE_SOURCE_DIR} rev-parse --short=12 HEAD
    OUTPUT_VARIABLE _qvl_commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _qvl_git_rc)
  if(_qvl_git_rc EQUAL 0 AND _qvl_commit)
    set(QVL_GIT_COMMIT "${_qvl_commit}")
  endif()
endif()
add_executable(qvl
  ${CMAKE_CURRENT_LIST_DIR}/qvl_main.c
  ${CMAKE_CURRENT_LIST_DIR}/qvl_run.c
  ${CMAKE_CURRENT_LIST_DIR}/backend_args.c
  ${CMAKE_CURRENT_LIST_DIR}/memory_report.c
  ${CMAKE_CURRENT_LIST_DIR}/run_answer.c
  ${CMAKE_CURRENT_LIST_DIR}/run_grammar.c
  ${CMAKE_CURRENT_LIST_DIR}/run_sampling.c
  ${CMAKE_CURRENT_LIST_DIR}/run_context.c
  ${CMAKE_CURRENT_LIST_DIR}/run_interrupt.c
  ${CMAKE_CURRENT_LIST_DIR}/run_load.c
  ${CMAKE_CURRENT_LIST_DIR}/run_chat.c
  ${CMAKE_CURRENT_LIST_DIR}/chat_answer.c
  ${CMAKE_CURRENT_LIST_DIR}/engine_answer.c
  ${CMAKE_CURRENT_LIST_DIR}/chat_pictures.c
  ${CMAKE_CURRENT_LIST_DIR}/chat_input.c
  ${CMAKE_CURRENT_LIST_DIR}/run_images.c
  ${CMAKE_CURRENT_LIST_DIR}/image_bounds.c
  ${CMAKE_CURRENT_LIST_DIR}/run_videos.c
  ${CMAKE_CURRENT_LIST_DIR}/chat_videos.c
  ${CMAKE_CURRENT_LIST_DIR}/video_files.c
  ${CMAKE_CURRENT_LIST_DIR}/video_frames.c
  ${CMAKE_CURRENT_LIST_DIR}/run_progress.c
  ${CMAKE_CURRENT_LIST_DIR}/progress_eta.c
  ${CMAKE_CURRENT_LIST_DIR}/run_prompt.c
  ${CMAKE_CURRENT_LIST_DIR}/qvl_version.c
  ${CMAKE_CURRENT_LIST_DIR}/qvl_tokenize.c
  ${CMAKE_CURRENT_LIST_DIR}/qvl_mkmodel.c
  ${CMAKE_CURRENT_LIST_DIR}/qvl_quantize.c
  ${CMAKE_CURRENT_LIST_DIR}/qvl_quantize_gguf.c
  ${CMAKE_CURRENT_LIST_DIR}/qvl_decode.c
  ${CMAKE_CURRENT_LIST_DIR}/cli.c)
target_compile_definitions(qvl PRIVATE QVL_VERSION="${PROJECT_VERSION}"
  QVL_GIT_COMMIT="${QVL_GIT_COMMIT}" QVL_COMPILER="${CMAKE_C_COMPILER_ID} ${CMAKE_C_COMPILER_VERSION}")
target_link_libraries(qvl PRIVATE qvl-engine qvl-qwen3vl PkgConfig::QVL_LIBEDIT Threads::Threads m)
install(TARGETS qvl RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
