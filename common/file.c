#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int file_read_all(const char *path, uint8_t **data, size_t *size, struct err *e) {
    *data = NULL;
    *size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return err_sys(e, errno, "%s", path);
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0) rc = err_sys(e, errno, "%s", path);
    else if (!S_ISREG(st.st_mode)) rc = err_set(e, "%s: not a regular file", path);
    else if (!(*data = malloc(st.st_size ? (size_t)st.st_size : 1)))
        rc = err_set(e, "%s: out of memory reading %lld bytes", path, (long long)st.st_size);
    size_t got = 0, want = rc ? 0 : (size_t)st.st_size;
    while (!rc && got < want) {
        ssize_t r = read(fd, *data + got, want - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) rc = err_sys(e, errno, "%s", path);
        else if (r == 0) rc = err_set(e, "%s: file shrank while reading (%zu of %zu bytes)", path, got, want);
        else got += (size_t)r;
    }
    close(fd);
    if (rc) {
        free(*data);
        *data = NULL;
        return rc;
    }
    *size = want;
    return 0;
}

int file_write_atomic(const char *path, const void *data, size_t size, struct err *e) {
    size_t n = strlen(path) + 32;
    char *tmp = XALLOC(n), *dir = strdup(path);
    CHECK(dir);
    snprintf(tmp, n, "%s.tmp.%ld", path, (long)getpid());
    int rc = 0, fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) rc = err_sys(e, errno, "%s: cannot create temporary file %s", path, tmp);
    for (size_t done = 0; !rc && done < size;) {
        ssize_t w = write(fd, (const char *)data + done, size - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) rc = err_sys(e, errno, "%s: write failed", tmp);
        else done += (size_t)w;
    }
    if (!rc && fsync(fd) != 0) rc = err_sys(e, errno, "%s: fsync failed", tmp);
    if (fd >= 0 && close(fd) != 0 && !rc) rc = err_sys(e, errno, "%s: close failed", tmp);
    if (!rc && rename(tmp, path) != 0) rc = err_sys(e, errno, "%s: cannot rename %s over it", path, tmp);
    if (rc && fd >= 0) unlink(tmp);
    int dfd = rc ? -1 : open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) fsync(dfd), close(dfd);
    free(tmp), free(dir);
    return rc;
}
