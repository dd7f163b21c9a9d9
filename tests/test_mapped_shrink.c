/* A model file truncated under a running qvl (cp over it, an interrupted download): the next
 * read of a weight page past the new end raises SIGBUS. qvl must end with one line naming the
 * file and status 1, not "Bus error"; a SIGBUS that is not about a mapped file keeps its
 * default action. Each case runs in a child process, which the handler ends. */
#define _DEFAULT_SOURCE
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "qvl/safetensors.h"

enum { ELEMS = 1 << 16 }; /* 256 KiB of f32: many pages past the header */

/* Writes a one-tensor safetensors file at path. */
static void write_model(const char *path) {
    float *v = calloc(ELEMS, sizeof *v);
    assert_non_null(v);
    qvl_st_write_tensor t = {.name = "w", .dtype = QVL_F32, .ndim = 1, .shape = {ELEMS}, .data = v};
    static const char *const meta[] = {"format", "pt"};
    qvl_error err = {0};
    assert_int_equal(qvl_safetensors_write(path, &t, 1, meta, 1, &err), QVL_OK);
    free(v);
}

/* Runs case_fn(path) in a child with stderr captured into msg; returns the wait status. */
static int run_child(void (*case_fn)(const char *), const char *path, char *msg, size_t cap) {
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], STDERR_FILENO);
        case_fn(path);
        _exit(0); /* reached only when nothing was raised */
    }
    close(fds[1]);
    size_t got = 0;
    ssize_t r;
    while (got + 1 < cap && (r = read(fds[0], msg + got, cap - 1 - got)) > 0) got += (size_t)r;
    msg[got] = '\0';
    close(fds[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return status;
}

static void read_after_truncate(const char *path) {
    qvl_safetensors *st = NULL;
    qvl_error err = {0};
    if (qvl_safetensors_open(path, &st, &err) != QVL_OK) _exit(3);
    const qvl_st_tensor *t = qvl_safetensors_find(st, "w");
    if (!t || truncate(path, 4096) != 0) _exit(4);
    volatile const unsigned char *last = (const unsigned char *)t->data + t->nbytes - 1;
    (void)*last; /* past the new end of the file: SIGBUS */
    _exit(5);
}

static void unrelated_sigbus(const char *path) {
    qvl_safetensors *st = NULL;
    qvl_error err = {0};
    if (qvl_safetensors_open(path, &st, &err) != QVL_OK) _exit(3);
    raise(SIGBUS); /* no address in any mapping */
    _exit(5);
}

static void shrunk_model_file(void **state) {
    (void)state;
    char dir[] = "/tmp/qvl-test-shrink-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[128], msg[2048];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);

    write_model(path);
    int status = run_child(read_after_truncate, path, msg, sizeof msg);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 1)
        fail_msg("child ended with status %#x, stderr: %s", status, msg);
    assert_non_null(strstr(msg, path));
    assert_non_null(strstr(msg, "changed on disk"));
    assert_int_equal(strchr(msg, '\n') - msg + 1, (long)strlen(msg)); /* one line */

    write_model(path);
    status = run_child(unrelated_sigbus, path, msg, sizeof msg);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGBUS);

    unlink(path);
    rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(shrunk_model_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
