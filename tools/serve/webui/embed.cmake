# Writes a file's bytes as a C array (cmake -DIN=FILE -DOUT=FILE.c -DNAME=SYMBOL -P embed.cmake):
# `const unsigned char NAME[]` with a NUL after the bytes (so the page can be searched as a
# string) and `const size_t NAME_len`, the length without it. CMake's file(READ ... HEX) does
# the work, so the build needs no xxd or other tool.
foreach(var IN ITEMS IN OUT NAME)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "embed.cmake: -D${var}=... is required")
  endif()
endforeach()
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n_hex)
math(EXPR n_bytes "${n_hex} / 2")
# Sixteen bytes per line keeps the generated source readable in a diff or an error message.
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "((0x[0-9a-f][0-9a-f],){16})" "\\1\n" bytes "${bytes}")
file(WRITE "${OUT}"
  "/* Generated from ${IN} by tools/serve/webui/embed.cmake: edit that file, not this one. */\n"
  "#include <stddef.h>\n"
  "extern const unsigned char ${NAME}[];\n"
  "extern const size_t ${NAME}_len;\n"
  "const unsigned char ${NAME}[] = {\n${bytes}0x00};\n"
  "const size_t ${NAME}_len = ${n_bytes};\n")
