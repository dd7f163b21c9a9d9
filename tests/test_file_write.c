/* The rule for every file qvl writes (qvl/file_write.h), the link rule for files copied out of
 * a model directory (qvl/model_copy.h) and directories replaced whole (qvl/dir_write.h).
 * FIFOs are read by this process itself (opened O_RDONLY | O_NONBLOCK before the writer), so
 * nothing waits on another process. /dev/null is written only after a private FIFO has shown
 * that the helper writes into special files in place, so a build without that rule fails the
 * FIFO check first and never gets to replace the machine's /dev/null. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qvl/dir_write.h"
#include "qvl/file_write.h"
#include "qvl/model_copy.h"
#include "test_scratch_dir.h"

static int setup_dir(void **state) {
    (void)state;
    umask(022);
    return scratch_dir_make("qvl-fw");
}

static int teardown_dir(void **state) {
    (void)state;
    return scratch_dir_remove();
}

/* A path in the scratch directory, in one of 4 rotating buffers: copy one kept longer. */
static char *path_of(const char *name) {
    static char bufs[4][512];
    static int next;
    char *b = bufs[next++ % 4];
    scratch_path(b, 512, name);
    return b;
}

static void write_text(const char *path, const char *text, mode_t mode) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    assert_int_equal(fchmod(fd, mode), 0);
    close(fd);
}

static void assert_content(const char *path, const char *want) {
    char buf[256] = {0};
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    assert_true(n >= 0);
    assert_string_equal(buf, want);
}

static qvl_status write_all(const char *path, const char *text, qvl_error *err) {
    qvl_new_file f;
    qvl_status s = qvl_new_file_open(path, &f, err);
    if (s != QVL_OK) return s;
    if ((s = qvl_new_file_write(&f, text, strlen(text), err)) == QVL_OK)
        return qvl_new_file_commit(&f, err);
    qvl_new_file_abandon(&f);
    return s;
}

/* No temporary file left beside anything in the scratch directory. */
static void assert_no_temp_left(void) {
    DIR *d = opendir(scratch_dir);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d));)
        if (strstr(e->d_name, ".qvl-")) fail_msg("left behind: %s", e->d_name);
    closedir(d);
}

/* Writes "through" via `name` (the FIFO itself or a link to it) and reads it back from the
 * FIFO, which must still be a FIFO. */
static void fifo_round_trip(const char *fifo, const char *name) {
    int rfd = open(fifo, O_RDONLY | O_NONBLOCK);
    assert_true(rfd >= 0);
    qvl_error err = {0};
    assert_int_equal(write_all(name, "through", &err), QVL_OK);
    char buf[16] = {0};
    assert_int_equal(read(rfd, buf, sizeof buf - 1), 7);
    close(rfd);
    assert_string_equal(buf, "through");
    struct stat sb;
    assert_int_equal(lstat(fifo, &sb), 0);
    assert_true(S_ISFIFO(sb.st_mode));
}

static void test_fifo_and_link_to_fifo(void **state) {
    (void)state;
    char *fifo = path_of("fifo"), *link = path_of("fifo-link");
    assert_int_equal(mkfifo(fifo, 0600), 0);
    fifo_round_trip(fifo, fifo);
    assert_int_equal(symlink(fifo, link), 0);
    fifo_round_trip(fifo, link);
    struct stat sb;
    assert_int_equal(lstat(link, &sb), 0);
    assert_true(S_ISLNK(sb.st_mode)); /* the link stays a link */
    assert_no_temp_left();
}

static void test_dev_null_stays_a_device(void **state) {
    (void)state;
    /* the guard: the rule must hold on a private FIFO before /dev/null is touched */
    char *fifo = path_of("guard-fifo"), *link = path_of("null-link");
    assert_int_equal(mkfifo(fifo, 0600), 0);
    fifo_round_trip(fifo, fifo);
    struct stat before, after;
    assert_int_equal(stat("/dev/null", &before), 0);
    assert_true(S_ISCHR(before.st_mode));
    qvl_error err = {0};
    assert_int_equal(symlink("/dev/null", link), 0);
    assert_int_equal(write_all(link, "gone", &err), QVL_OK);
    assert_int_equal(write_all("/dev/null", "gone", &err), QVL_OK);
    assert_int_equal(stat("/dev/null", &after), 0);
    assert_true(S_ISCHR(after.st_mode));
    assert_true(after.st_rdev == before.st_rdev && after.st_ino == before.st_ino);
    assert_int_equal(lstat(link, &after), 0);
    assert_true(S_ISLNK(after.st_mode));
}

static void test_link_to_regular_file_written_through(void **state) {
    (void)state;
    char *real = path_of("real.txt"), *link = path_of("real-link");
    write_text(real, "old", 0600);
    assert_int_equal(symlink(real, link), 0);
    qvl_error err = {0};
    assert_int_equal(write_all(link, "new", &err), QVL_OK);
    struct stat sb;
    assert_int_equal(lstat(link, &sb), 0);
    assert_true(S_ISLNK(sb.st_mode));
    assert_content(real, "new");
    assert_int_equal(stat(real, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0600); /* never wider than the file it replaced */
    assert_no_temp_left();
}

static void test_refused_targets(void **state) {
    (void)state;
    qvl_error err = {0};
    char *dangling = path_of("dangling");
    assert_int_equal(symlink(path_of("nothing-here"), dangling), 0);
    assert_int_not_equal(write_all(dangling, "x", &err), QVL_OK);
    assert_non_null(strstr(err.msg, "a symbolic link to nothing"));
    assert_int_equal(access(path_of("nothing-here"), F_OK), -1);
    assert_int_not_equal(write_all(scratch_dir, "x", &err), QVL_OK);
    assert_non_null(strstr(err.msg, "a directory, not a regular file, FIFO or character device"));
    assert_null(strchr(err.msg, '\n'));
    assert_no_temp_left();
}

/* A FIFO made at the name while the file is being written is not renamed over. */
static void test_name_taken_while_writing(void **state) {
    (void)state;
    qvl_error err = {0};
    qvl_new_file f;
    char *p = path_of("taken");
    assert_int_equal(qvl_new_file_open(p, &f, &err), QVL_OK);
    assert_int_equal(qvl_new_file_write(&f, "x", 1, &err), QVL_OK);
    assert_int_equal(mkfifo(p, 0600), 0);
    assert_int_equal(qvl_new_file_commit(&f, &err), QVL_E_IO);
    assert_non_null(strstr(err.msg, "became a FIFO while being written"));
    struct stat sb;
    assert_int_equal(lstat(p, &sb), 0);
    assert_true(S_ISFIFO(sb.st_mode));
    assert_no_temp_left();
}

static void test_new_file_mode_and_umask(void **state) {
    (void)state;
    qvl_error err = {0};
    char *p = path_of("private.bin"), *copy = path_of("private-copy.bin");
    mode_t old = umask(077);
    assert_int_equal(write_all(p, "x", &err), QVL_OK);
    umask(old);
    struct stat sb;
    assert_int_equal(stat(p, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0600);
    /* a copy keeps its source's bits: 0600 stays 0600, 0640 stays 0640 */
    assert_int_equal(qvl_file_copy(p, copy, 1024, &err), QVL_OK);
    assert_int_equal(stat(copy, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0600);
    assert_int_equal(chmod(p, 0640), 0);
    assert_int_equal(unlink(copy), 0);
    assert_int_equal(qvl_file_copy(p, copy, 1024, &err), QVL_OK);
    assert_int_equal(stat(copy, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0640);
}

static void make_dir(const char *name) { assert_int_equal(mkdir(path_of(name), 0755), 0); }

static void test_model_copy_link_rule(void **state) {
    (void)state;
    qvl_error err = {0};
    bool copied = true;
    make_dir("model");
    make_dir("model/sub");
    write_text(path_of("model/sub/tok.json"), "inside", 0644);
    write_text(path_of("secret"), "private", 0600);
    assert_int_equal(symlink("sub/tok.json", path_of("model/tokenizer.json")), 0);
    assert_int_equal(symlink("../secret", path_of("model/merges.txt")), 0);
    assert_int_equal(mkfifo(path_of("model/vocab.json"), 0644), 0);
    char dir[512];
    snprintf(dir, sizeof dir, "%s", path_of("model"));
    /* a link that stays inside: copied */
    assert_int_equal(qvl_model_file_copy(dir, "tokenizer.json", path_of("tok-copy"), 1024,
                                         &copied, &err), QVL_OK);
    assert_true(copied);
    assert_content(path_of("tok-copy"), "inside");
    /* a link out of the directory: refused, naming the file and its target */
    assert_int_equal(qvl_model_file_copy(dir, "merges.txt", path_of("merges-copy"), 1024, &copied,
                                         &err), QVL_E_INVALID);
    assert_false(copied);
    assert_non_null(strstr(err.msg, "merges.txt leads to "));
    assert_non_null(strstr(err.msg, "/secret, outside the model directory"));
    assert_int_equal(access(path_of("merges-copy"), F_OK), -1);
    /* a FIFO: refused at once (never opened, so never waited on) */
    assert_int_not_equal(qvl_model_file_copy(dir, "vocab.json", path_of("vocab-copy"), 1024,
                                             &copied, &err), QVL_OK);
    assert_non_null(strstr(err.msg, "a FIFO, not a regular file"));
    /* absent: nothing to do */
    assert_int_equal(qvl_model_file_copy(dir, "chat_template.jinja", path_of("tmpl"), 1024,
                                         &copied, &err), QVL_OK);
    assert_false(copied);
    assert_no_temp_left();
}

static void test_model_copy_hf_cache_layout(void **state) {
    (void)state;
    qvl_error err = {0};
    bool copied = false;
    make_dir("models--org--m");
    make_dir("models--org--m/blobs");
    make_dir("models--org--m/snapshots");
    make_dir("models--org--m/snapshots/rev1");
    write_text(path_of("models--org--m/blobs/abc123"), "blob", 0644);
    write_text(path_of("models--org--m-private"), "no", 0644);
    assert_int_equal(symlink("../../blobs/abc123", path_of("models--org--m/snapshots/rev1/"
                                                           "config.json")), 0);
    /* a sibling whose name starts like blobs' parent is not inside it */
    assert_int_equal(symlink("../../../models--org--m-private",
                             path_of("models--org--m/snapshots/rev1/merges.txt")), 0);
    char snap[512];
    snprintf(snap, sizeof snap, "%s", path_of("models--org--m/snapshots/rev1"));
    assert_int_equal(qvl_model_file_copy(snap, "config.json", path_of("hf-config"), 1024, &copied,
                                         &err), QVL_OK);
    assert_true(copied);
    assert_content(path_of("hf-config"), "blob");
    assert_int_equal(qvl_model_file_copy(snap, "merges.txt", path_of("hf-merges"), 1024, &copied,
                                         &err), QVL_E_INVALID);
    /* the blobs of a directory not under snapshots/ are not the model's */
    make_dir("plain");
    assert_int_equal(symlink("../models--org--m/blobs/abc123", path_of("plain/config.json")), 0);
    assert_int_equal(qvl_model_file_copy(path_of("plain"), "config.json", path_of("plain-copy"),
                                         1024, &copied, &err), QVL_E_INVALID);
}

static void write_in(const char *dir, const char *name, const char *text) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    write_text(p, text, 0644);
}

static void test_new_dir_replaced_whole(void **state) {
    (void)state;
    qvl_error err = {0};
    qvl_new_dir d;
    char out[512], slash[520];
    snprintf(out, sizeof out, "%s", path_of("out"));
    /* a new name appears only when committed */
    assert_int_equal(qvl_new_dir_open(out, &d, &err), QVL_OK);
    write_in(d.tmp, "a", "first");
    assert_int_equal(access(out, F_OK), -1);
    assert_int_equal(qvl_new_dir_commit(&d, &err), QVL_OK);
    assert_content(path_of("out/a"), "first");
    /* over an existing one: its files go, the new ones come */
    assert_int_equal(qvl_new_dir_open(out, &d, &err), QVL_OK);
    write_in(d.tmp, "b", "second");
    assert_int_equal(qvl_new_dir_commit(&d, &err), QVL_OK);
    assert_int_equal(access(path_of("out/a"), F_OK), -1);
    assert_content(path_of("out/b"), "second");
    /* abandoned: the old one stays as it was, nothing is left beside it */
    assert_int_equal(qvl_new_dir_open(out, &d, &err), QVL_OK);
    write_in(d.tmp, "c", "third");
    qvl_new_dir_abandon(&d);
    assert_content(path_of("out/b"), "second");
    assert_int_equal(access(path_of("out/c"), F_OK), -1);
    assert_no_temp_left();
    /* trailing slashes name the same directory; ".", ".." and "/" name none to replace */
    snprintf(slash, sizeof slash, "%s//", out);
    assert_int_equal(qvl_new_dir_open(slash, &d, &err), QVL_OK);
    assert_string_equal(d.path, out);
    qvl_new_dir_abandon(&d);
    snprintf(slash, sizeof slash, "%s/.", out);
    assert_int_equal(qvl_new_dir_open(slash, &d, &err), QVL_E_INVALID);
    snprintf(slash, sizeof slash, "%s/..", out);
    assert_int_equal(qvl_new_dir_open(slash, &d, &err), QVL_E_INVALID);
    assert_int_equal(qvl_new_dir_open("/", &d, &err), QVL_E_INVALID);
    assert_no_temp_left();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fifo_and_link_to_fifo),
        cmocka_unit_test(test_dev_null_stays_a_device),
        cmocka_unit_test(test_link_to_regular_file_written_through),
        cmocka_unit_test(test_refused_targets),
        cmocka_unit_test(test_name_taken_while_writing),
        cmocka_unit_test(test_new_file_mode_and_umask),
        cmocka_unit_test(test_model_copy_link_rule),
        cmocka_unit_test(test_model_copy_hf_cache_layout),
        cmocka_unit_test(test_new_dir_replaced_whole),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
