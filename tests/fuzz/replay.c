/*
 * replay -- main() for fuzz targets in builds without libFuzzer (gcc):
 * runs every file named on the command line, or every regular file in a
 * directory named there, through LLVMFuzzerTestOneInput once.  A crash
 * or failed invariant aborts, which fails the `fuzz` suite test.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static unsigned n_run;

static int
run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf;
    long len;

    if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0 ||
        fseek(f, 0, SEEK_SET) != 0) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        if (f != NULL)
            fclose(f);
        return -1;
    }
    /* An exact-size copy, as libFuzzer gives, so overreads are caught by ASan. */
    buf = malloc(len > 0 ? (size_t)len : 1);
    if (buf == NULL || fread(buf, 1, (size_t)len, f) != (size_t)len) {
        fprintf(stderr, "replay: %s: short read\n", path);
        free(buf);
        fclose(f);
        return -1;
    }
    fclose(f);
    (void)LLVMFuzzerTestOneInput(buf, (size_t)len);
    free(buf);
    n_run++;
    return 0;
}

static int
cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int
run_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;

    if (d == NULL) {
        fprintf(stderr, "replay: %s: %s\n", dir, strerror(errno));
        return -1;
    }
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            names = realloc(names, cap * sizeof *names);
            if (names == NULL)
                abort();
        }
        if (asprintf(&names[n], "%s/%s", dir, de->d_name) < 0)
            abort();
        n++;
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp); /* the same order every run */
    for (size_t i = 0; i < n; i++) {
        struct stat st;

        if (stat(names[i], &st) == 0 && S_ISREG(st.st_mode) && run_file(names[i]) != 0)
            rc = -1;
        free(names[i]);
    }
    free(names);
    return rc;
}

int
main(int argc, char **argv)
{
    int rc = 0;

    for (int i = 1; i < argc; i++) {
        struct stat st;

        if (argv[i][0] == '-')
            continue; /* libFuzzer flags, for a shared command line */
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
            rc = 1;
        } else if (S_ISDIR(st.st_mode) ? run_dir(argv[i]) != 0 : run_file(argv[i]) != 0) {
            rc = 1;
        }
    }
    printf("replay: %u inputs\n", n_run);
    return rc;
}
