/* The subcommands of the qvl tool; each returns the process exit status
 * (0 ok, 1 failure, 2 usage error). */
#ifndef QVL_COMMANDS_H
#define QVL_COMMANDS_H

#include <stdbool.h>

int qvl_cmd_run(int argc, char **argv, bool chat);
int qvl_cmd_tokenize(int argc, char **argv);
int qvl_cmd_mkmodel(int argc, char **argv);
int qvl_cmd_quantize(int argc, char **argv);
int qvl_cmd_decode(int argc, char **argv);
int qvl_cmd_serve(int argc, char **argv);
/* plugins_path: --plugins FILE, or NULL for the default search. */
int qvl_cmd_version(const char *plugins_path);

#endif
