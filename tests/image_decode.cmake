# qvl decode against Pillow: every picture in tests/fixtures/images/expected.txt decodes to the
# size and the exact RGB bytes Pillow gave (scripts/make_image_fixtures.py wrote both), and bad
# input is a one-line error.
add_test(NAME image_decode_parity COMMAND ${CMAKE_CURRENT_LIST_DIR}/image_decode_parity.sh
  $<TARGET_FILE:qvl> ${CMAKE_CURRENT_LIST_DIR}/fixtures/images)
set_tests_properties(image_decode_parity PROPERTIES TIMEOUT 120)

# Encoders for tests that make pictures on the fly (tests/support/test_image_write.c).
pkg_check_modules(IMG_TEST_JPEG REQUIRED IMPORTED_TARGET libjpeg)
pkg_check_modules(IMG_TEST_PNG REQUIRED IMPORTED_TARGET libpng)
add_library(qvl-test-image-write STATIC ${CMAKE_CURRENT_LIST_DIR}/support/test_image_write.c)
target_include_directories(qvl-test-image-write PUBLIC ${CMAKE_CURRENT_LIST_DIR}/support)
target_link_libraries(qvl-test-image-write PUBLIC PkgConfig::IMG_TEST_JPEG PkgConfig::IMG_TEST_PNG)

# Decoder regressions (16-bit PGM, undefined Huffman tables), GIF without frames,
# the pixel limit before WebP, qvl_image_probe = decoded size on every fixture.
qvl_add_test(test_image_hostile SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_image_hostile.c
  LIBS qvl-runtime qvl-test-image-write)

# Amplification made in memory: PNG text chunks past Pillow's limits (refused) and within them
# (decoded in bounded memory), progressive JPEG scans past the work budget.
pkg_check_modules(IMG_TEST_ZLIB REQUIRED IMPORTED_TARGET zlib)
qvl_add_test(test_image_bombs SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_image_bombs.c
  LIBS qvl-runtime PkgConfig::IMG_TEST_ZLIB)

# The stop callback of qvl_image_decode_stoppable is asked during decoding (every fixture,
# large PNG/JPEG/PGM), and stopping at any call ends the decode there.
qvl_add_test(test_image_stop SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_image_stop.c
  LIBS qvl-runtime qvl-test-image-write)
