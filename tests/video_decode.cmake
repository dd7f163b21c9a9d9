# Video files (qvl/video_decode.h) on the committed clips of tests/fixtures/videos/files
# (scripts/make_video_clips.sh); in a build without FFmpeg, the line saying how to get it.
qvl_add_test(test_video_decode SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_video_decode.c
  LIBS qvl-runtime)
# qvl run --video FILE: each clip's answer equals its PNG frames' (--video-frames), the hostile
# files and the caps one line each.
add_test(NAME cli_qvl_video_file COMMAND ${CMAKE_CURRENT_LIST_DIR}/cli_qvl_video_file.sh
  $<TARGET_FILE:qvl> ${CMAKE_SOURCE_DIR})
set_tests_properties(cli_qvl_video_file PROPERTIES TIMEOUT 300)
