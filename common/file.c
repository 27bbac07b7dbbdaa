#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
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
