# Video files (qvl/video_decode.h) on the committed clips of tests/fixtures/videos/files
# (scripts/make_video_clips.sh); in a build without FFmpeg, the line saying how to get it.
qvl_add_test(test_video_decode SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_video_decode.c
  LIBS qvl-runtime)
